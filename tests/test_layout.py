"""The layout is the architecture: imports run one way between packages, no module is in an
import circle, no function outside the kernels is over 50 lines from `def`, and each package
says what lives in it."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tuner", "db", "api")

# Layers, lowest first: a package may import its own modules and those of lower layers only
# (so two packages of one layer never import each other). `tuner` itself (the version) is
# below all, with `tuner.core` (the shared facts, standard library only). db stands apart: of
# tuner and api it imports `tuner.core` only.
LAYERS: dict[str, int] = {
    "tuner": -1,
    "tuner.core": -1,
    "tuner.kernels": 0,
    "tuner.measure": 1,
    "tuner.inputs": 1,
    "tuner.search": 2,
    "tuner.files": 3,
    "tuner.compare": 4,
    "tuner.run": 4,
    "tuner.ab": 4,
    "api": 5,
    "tuner.cli": 6,
}
# Who may touch the store, and who may speak HTTP or SQL: the kernel, measurement, search,
# inputs and comparisons know nothing of either (the layering docs/architecture.md describes).
MAY_IMPORT_DB = ("tuner.files", "tuner.run", "tuner.cli", "api", "db")
STORE_AND_WEB = ("db", "api", "sqlalchemy", "alembic", "fastapi", "starlette", "uvicorn")
# The HTTP service and what it imports never load torch or triton, not even lazily.
NO_TORCH = (
    "tuner.files",
    "tuner.inputs",
    "tuner.kernels.family",
    "tuner.kernels.shape",
    "tuner.kernels.config",
    "tuner.kernels.registry",
    "tuner.core",
    "api",
    "db",
)
MAX_FUNCTION_LINES = 50


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module this one imports, at the top or inside a function (a lazy import still
    makes a dependency): our modules resolved to the module, others to their top package."""
    result: set[str] = set()
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*parent, base] if base else parent)
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target != name:
                result.add(target)
    return result


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _package(module: str) -> str:
    """The layer-table entry a module belongs to (the longest matching prefix)."""
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return prefix
    return module.split(".")[0]


def _within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_every_tuner_module_is_in_a_layer() -> None:
    loose = [m for m in MODULES if m.startswith("tuner.") and _package(m) == "tuner"]
    assert loose == [], "modules dropped flat into tuner/: put them in a subpackage"


def test_imports_run_one_way_between_packages() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        source = _package(module)
        for target in targets:
            dest = _package(target)
            if dest == source or target not in MODULES:
                continue
            if source == "db":
                if dest == "tuner.core":
                    continue
                wrong.append(f"{module} -> {target} (db imports only tuner.core of tuner and api)")
            elif dest != "db" and LAYERS.get(dest, 99) >= LAYERS.get(source, -1):
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_only_the_store_side_imports_db_sqlalchemy_or_fastapi() -> None:
    wrong = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if not _within(module, MAY_IMPORT_DB)
        for target in targets
        if _within(target, STORE_AND_WEB)
    ]
    assert wrong == []


def test_the_service_side_never_imports_torch_or_triton() -> None:
    wrong = [
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if _within(module, NO_TORCH)
        for target in targets
        if target in ("torch", "triton")
    ]
    assert wrong == []


def test_the_core_imports_only_the_standard_library_and_packaging() -> None:
    import sys

    core = {
        module: targets for module, targets in GRAPH.items() if _within(module, ("tuner.core",))
    }
    assert "tuner.core" in core
    wrong = [
        f"{module} -> {target}"
        for module, targets in core.items()
        for target in targets
        if not _within(target, ("tuner.core",))
        and target.split(".")[0] not in sys.stdlib_module_names | {"__future__", "packaging"}
    ]
    assert wrong == []


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of the graph (the modules in order, the first again last), or []."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as error:
        return error.args[1]
    return []


def test_no_import_circle() -> None:
    assert _cycle(GRAPH) == []


def test_the_cycle_check_finds_a_circle() -> None:
    assert sorted(set(_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}))) == ["a", "b", "c"]


def _long_functions(tree: ast.AST) -> dict[str, int]:
    """name -> lines, counting from `def` to its last line, of each function over
    MAX_FUNCTION_LINES in a module's tree."""
    return {
        node.name: length
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (length := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES
    }


def test_no_function_over_50_lines_outside_the_kernels() -> None:
    """Files are split by concept, not by a line count; what must stay short is a function.
    The Triton kernels (tuner/kernels/*/kernel.py) and migrations are exempt."""
    long = {
        f"{name}.{function}": lines
        for name, path in MODULES.items()
        if path.name != "kernel.py"
        for function, lines in _long_functions(ast.parse(path.read_text())).items()
    }
    assert long == {}


def test_the_function_length_check_finds_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 3))
    source = f"def long(\n    a,\n    b,\n):\n{body}\n\ndef short():\n    pass\n"
    assert _long_functions(ast.parse(source)) == {"long": MAX_FUNCTION_LINES + 1}


def test_every_package_says_what_lives_in_it() -> None:
    silent = [
        name
        for name, path in MODULES.items()
        if path.name == "__init__.py" and not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert silent == []


# What a file outside the repository would be cited as: its design card by section, or the
# folder beside the checkout. Spelled in two parts so this file does not match itself.
OUTSIDE = ("DESIGN" + " §", "../" + "shared")


def test_no_file_cites_a_document_outside_the_repository() -> None:
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    citing = []
    for name in tracked:
        if Path(name).suffix not in (".py", ".md", ".sh", ".toml", ".yml", ".yaml", ".html", ""):
            continue
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue
        citing += [f"{name}: {cited}" for cited in OUTSIDE if cited in text]
    assert citing == []


# A kernel family is one folder of tuner/kernels plus one registry line: outside tuner.kernels
# no module imports a family's subpackage, spells a family's name, or compares a family with a
# particular one.


def _names_a_family(node: ast.expr) -> bool:
    """`family`, `row.family`, `family_name`: an operand holding some family's name."""
    name = node.id if isinstance(node, ast.Name) else getattr(node, "attr", None)
    return name in ("family", "family_name")


def _a_particular_family(node: ast.expr) -> bool:
    """A string, `DEFAULT_FAMILY`-like constant or `DENSE.name`: one family picked out."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(map(_a_particular_family, node.elts))
    if isinstance(node, ast.Name):
        return node.id.isupper() and node.id.endswith("FAMILY")
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "name"
        and isinstance(node.value, ast.Name)
        and node.value.id.isupper()
    )


def _family_specific(imports: set[str], source: str, families: set[str]) -> list[str]:
    """What a module (its `imports` and `source` text) says of particular `families`."""
    found = [
        f"imports {target}"
        for target in sorted(imports)
        if any(_within(target, (f"tuner.kernels.{name}",)) for name in families)
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in families:
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if (
                any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops)
                and any(map(_names_a_family, operands))
                and any(map(_a_particular_family, operands))
            ):
                found.append(f"line {node.lineno}: compares a family with a particular one")
    return found


def test_no_family_is_named_outside_tuner_kernels() -> None:
    from tuner.kernels.registry import FAMILIES

    families = set(FAMILIES)
    named = {
        module: found
        for module, path in MODULES.items()
        if not _within(module, ("tuner.kernels",))
        and (found := _family_specific(GRAPH[module], path.read_text(encoding="utf-8"), families))
    }
    assert named == {}


def test_the_family_check_finds_names_imports_and_comparisons() -> None:
    source = (
        "if task.family == 'dense':\n    pass\n"
        "if family != DEFAULT_FAMILY or row.family in (MOE.name,):\n    pass\n"
        "same = row.family == family.name\nlabel = 'dense GEMM'\n"
    )
    assert _family_specific(
        {"tuner.kernels.moe.family", "tuner.kernels.registry"}, source, {"dense", "moe"}
    ) == [
        "imports tuner.kernels.moe.family",
        "line 1: compares a family with a particular one",
        "line 1: 'dense'",
        "line 3: compares a family with a particular one",
        "line 3: compares a family with a particular one",
    ]


def test_outside_db_modules_import_only_the_store_facade() -> None:
    """tuner and api reach the store through `db.repo` only (connecting, faults, repository
    functions); the tables, the connection module and the repository modules are db's own."""
    facade = "db.repo"

    def past_the_facade(graph: dict[str, set[str]]) -> list[str]:
        return sorted(
            f"{module} -> {target}"
            for module, targets in graph.items()
            if not _within(module, ("db",))
            for target in targets
            if _within(target, ("db",)) and target != facade
        )

    assert past_the_facade(
        {"api.x": {"db.repo", "db.models"}, "db.repo": {"db.models"}, "tuner.y": {"db"}}
    ) == ["api.x -> db.models", "tuner.y -> db"]
    assert any(facade in targets for module, targets in GRAPH.items() if module.startswith("api."))
    assert past_the_facade(GRAPH) == []
