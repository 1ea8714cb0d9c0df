"""Every `tuner ...` command that README.md and docs/ show exists, with every option it shows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer.main

from tuner.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# A command line in a code block, or an inline code span, that starts with `tuner`.
_INLINE = re.compile(r"`(tuner [^`]+)`")
_FENCE = re.compile(r"```[a-z]*\n(.*?)```", re.S)


def _snippets(text: str) -> list[str]:
    """The `tuner ...` command lines of a page: inline spans, and lines of fenced blocks (a
    line may hold several commands joined by `&&`, `;` or `|`)."""
    found = [m.group(1) for m in _INLINE.finditer(_FENCE.sub("", text))]
    for block in _FENCE.finditer(text):
        joined = block.group(1).replace("\\\n", " ")
        for line in joined.splitlines():
            for part in re.split(r"&&|;|\||\{|\}|\(|\)", line.split("  #")[0]):
                part = part.strip()
                if part.startswith("tuner "):
                    found.append(part)
    return found


def _resolve(root: Any, words: list[str]) -> tuple[Any, list[str], list[str]]:
    """The deepest command the words name, its path, and the words after it."""
    command = root
    path: list[str] = []
    rest = list(words)
    while _is_group(command) and rest and rest[0] in command.commands:
        path.append(rest[0])
        command = command.commands[rest.pop(0)]
    return command, path, rest


def _is_group(command: Any) -> bool:
    # Typer ships its own copy of click: a group is a command with subcommands.
    return hasattr(command, "commands")


def _options(command: Any) -> set[str]:
    names = {"--help"}
    for param in command.params:
        names.update(getattr(param, "opts", ()))
        names.update(getattr(param, "secondary_opts", ()))
    return names


def _cases() -> list[tuple[str, str]]:
    cases = []
    for page in PAGES:
        for snippet in _snippets(page.read_text()):
            cases.append((page.relative_to(ROOT).as_posix(), snippet))
    return cases


CASES = _cases()


def test_pages_show_commands():
    # The collection itself must find the commands, or every case below would vacuously pass.
    pages = {page for page, _ in CASES}
    assert "README.md" in pages and "docs/sweeps.md" in pages
    assert len(CASES) > 40


@pytest.mark.parametrize(("page", "snippet"), CASES, ids=[f"{p}:{s[:40]}" for p, s in CASES])
def test_shown_command_exists(page: str, snippet: str):
    root = typer.main.get_command(app)
    assert _is_group(root)
    words = snippet.split()[1:]
    command, path, rest = _resolve(root, words)
    if not path:
        # `tuner --help` or `tuner` alone is the app itself; anything else must be a command.
        assert not rest or rest[0].startswith("-"), f"{page}: no command {rest[0]!r} in {snippet!r}"
    assert not _is_group(command) or not rest or rest[0].startswith("-"), (
        f"{page}: {' '.join(['tuner', *path])} has no subcommand {rest[0]!r} ({snippet!r})"
    )
    known = _options(command)
    for word in rest:
        for token in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", word):
            assert token in known, (
                f"{page}: `tuner {' '.join(path)}` has no option {token} ({snippet!r}); "
                f"it has {sorted(known)}"
            )


_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_links_stay_in_the_repository(page: Path):
    text = page.read_text()
    for target in _LINK.findall(text):
        if "://" in target:
            continue
        resolved = (page.parent / target).resolve()
        assert resolved.is_relative_to(ROOT), f"{page.name}: {target} is outside the repository"
        assert resolved.exists(), f"{page.name}: {target} does not exist"


def _leaf_paths(command: Any, path: tuple[str, ...] = ()) -> list[str]:
    """Every runnable command under `command`, as `tuner a b` strings (hidden ones left out)."""
    if not _is_group(command):
        return [" ".join(("tuner", *path))]
    return [
        leaf
        for name, sub in sorted(command.commands.items())
        if not sub.hidden
        for leaf in _leaf_paths(sub, (*path, name))
    ]


def test_readme_table_lists_every_command():
    text = (ROOT / "README.md").read_text()
    start = text.index("| command | what |")
    table = text[start : text.index("\n\n", start)]
    shown = {" ".join(snippet.split()[:3]) for snippet in _INLINE.findall(table)}
    shown |= {" ".join(snippet.split()[:2]) for snippet in _INLINE.findall(table)}
    missing = [leaf for leaf in _leaf_paths(typer.main.get_command(app)) if leaf not in shown]
    assert missing == []
