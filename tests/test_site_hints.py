"""Every place that tells the user how to find the engine's folders prints the right one: the
README's `SITE=` line, `tuner mounts` (and its HTTP route) and the archive's README, each run
against a fake site-packages."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.files.archive import where_lines
from tuner.files.mounts import MountRequest, render_mounts

README = Path(__file__).resolve().parents[1] / "README.md"
MOUNTS = r'^# .+ in yours: (python3 -c ".+")$'
A = "N=5120,K=3072,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages folder holding empty vllm and sglang packages."""
    for package in ("vllm", "sglang"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    return tmp_path


def run_hint(command: str, site: Path) -> str:
    """Run a printed `python3 -c "..."` hint with the fake site-packages importable."""
    found = re.fullmatch(r'python3? -c "(.+)"', command.strip())
    assert found, command
    done = subprocess.run(
        [sys.executable, "-c", found[1]],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site)},
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def _mounts(engine: str) -> str:
    return render_mounts(MountRequest("NVIDIA_L20", engine, "docker", {A: ""}))


# (where the hint is printed, the pattern around its command, the folder it names in the site)
HINTS = {
    "README": (README.read_text, r'^SITE=.*#\s*(python3? -c ".+") in the image', ()),
    "mounts-vllm": (lambda: _mounts("vllm"), MOUNTS, ()),
    "mounts-sglang": (lambda: _mounts("sglang"), MOUNTS, ()),
    "archive": (lambda: "\n".join(where_lines("vllm")), MOUNTS[3:], ()),
}


@pytest.mark.parametrize("where", HINTS)
def test_the_hint_prints_the_folder(site: Path, where: str) -> None:
    text, pattern, folder = HINTS[where]
    command = re.search(pattern, text(), re.M)
    assert command, where
    assert run_hint(command[1], site) == str(site.joinpath(*folder))
