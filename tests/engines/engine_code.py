"""The engines' own code for the real-engine lane: vLLM's and SGLang's wheels as downloaded by
tests/engines/fetch_engines.sh, the text of a file inside one, and single top-level functions of
a module cut out with `ast` and run here.

The engines' modules import their whole package (CUDA extensions, hundreds of dependencies), so
they are never imported. `load` compiles the named functions, the module-level constants they
read and the standard-library imports they use, unchanged and at their own line numbers; every
other name a module imports is what the test gives in its place (`envs`, `logger`,
`current_platform`, ...). Nothing of the engines is kept in this repository.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import functools
import linecache
import os
import sys
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType

import pytest

# The variable naming the folder of downloaded wheels; unset, the lane is skipped.
WHEELS_ENV = "TUNER_ENGINE_WHEELS"
# The releases the lane checks against (fetch_engines.sh downloads the same two).
RELEASES: dict[str, str] = {"vllm": "0.33.0", "sglang": "0.5.23"}
FETCH = "bash tests/engines/fetch_engines.sh"
_BUILTINS = frozenset(dir(builtins))


def wheels_folder() -> Path | None:
    """The folder `TUNER_ENGINE_WHEELS` names, or None when it is unset or empty."""
    value = os.environ.get(WHEELS_ENV, "")
    return Path(value) if value else None


def engine_wheel(folder: Path, engine: str) -> Path:
    """The wheel of `RELEASES[engine]` in `folder`; fails the test (one line) when absent."""
    version = RELEASES[engine]
    found = sorted(folder.glob(f"{engine}-{version}-*.whl")) if folder.is_dir() else []
    if not found:
        pytest.fail(f"no {engine}-{version} wheel in {folder} ({WHEELS_ENV}): run {FETCH}",
                    pytrace=False)
    return found[0]


@functools.lru_cache(maxsize=8)
def _members(wheel: Path) -> frozenset[str]:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return frozenset(archive.namelist())
    except (OSError, zipfile.BadZipFile) as exc:
        pytest.fail(f"{wheel} is not a readable wheel ({exc}): delete it and run {FETCH}",
                    pytrace=False)


def wheel_bytes(wheel: Path, member: str) -> bytes:
    """One file of a wheel, e.g. `vllm/model_executor/layers/fused_moe/fused_moe.py`; fails the
    test (one line) when the wheel has no such file."""
    if member not in _members(wheel):
        pytest.fail(f"{wheel.name} has no {member}", pytrace=False)
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(member)


def wheel_text(wheel: Path, member: str) -> str:
    """One file of a wheel as UTF-8 text (`wheel_bytes`)."""
    return wheel_bytes(wheel, member).decode("utf-8")


def wheel_folder(wheel: Path, folder: str, suffix: str = ".json", *,
                 recursive: bool = False) -> dict[str, bytes]:
    """The files in one folder of a wheel whose names end in `suffix` (those in its subfolders
    too when `recursive`): path below the folder -> bytes, sorted; fails the test (one line)
    when there are none."""
    prefix = folder.rstrip("/") + "/"
    names = sorted(m for m in _members(wheel) if m.startswith(prefix) and m.endswith(suffix)
                   and not m.endswith("/") and (recursive or "/" not in m[len(prefix):]))
    if not names:
        pytest.fail(f"{wheel.name} has no {prefix}*{suffix}", pytrace=False)
    with zipfile.ZipFile(wheel) as archive:
        return {name[len(prefix):]: archive.read(name) for name in names}


def _bound_names(node: ast.AST) -> set[str]:
    """Names a definition binds inside itself (arguments, assignments, inner definitions,
    imports, exception names), the node's own name left out."""
    bound: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and not isinstance(inner.ctx, ast.Load):
            bound.add(inner.id)
        elif isinstance(inner, ast.arg):
            bound.add(inner.arg)
        elif (isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
              and inner is not node):
            bound.add(inner.name)
        elif isinstance(inner, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in inner.names)
        elif isinstance(inner, ast.ExceptHandler) and inner.name:
            bound.add(inner.name)
    return bound


def _free_names(node: ast.AST) -> set[str]:
    """Module-level names a top-level statement reads (builtins left out)."""
    loads = {n.id for n in ast.walk(node)
             if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    local = _bound_names(node) if not isinstance(node, ast.Assign | ast.AnnAssign) else set()
    return loads - local - _BUILTINS


def _defined(node: ast.stmt) -> list[str]:
    """The names a top-level def, class or plain assignment defines."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _stdlib_import(node: ast.stmt) -> bool:
    if isinstance(node, ast.Import):
        return all(a.name.split(".")[0] in sys.stdlib_module_names for a in node.names)
    return (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None
            and node.module != "__future__"
            and node.module.split(".")[0] in sys.stdlib_module_names)


def load(text: str, names: Iterable[str], given: Mapping[str, object] | None = None, *,
         filename: str, module: str = "engine_code", module_file: str | None = None
         ) -> ModuleType:
    """Named top-level functions (or classes) of a module's text, run here as a module of
    their own.

    Kept with them, unchanged: their decorators, the module-level assignments they read that
    `given` does not replace (and, in turn, those the assignments read), and the module's
    standard-library imports of the names any of these use. Every other imported name must be
    in `given`; one that is not stays unbound, so code that reaches it raises NameError.
    Annotations are not evaluated. The code keeps its file's line numbers and `filename` is
    registered in `linecache`, so tracebacks and `inspect.getsource` (Triton's `@jit`) show it.

    Args:
        text: the module's source, e.g. `wheel_text(wheel, ".../fused_moe.py")`.
        names: the top-level functions or classes to keep.
        given: globals in place of the module's imports (stubs, or real modules such as torch).
        filename: how tracebacks name the file, e.g. "vllm-0.33.0.whl/vllm/.../fused_moe.py".
        module: the module's `__name__`.
        module_file: its `__file__` (engines find their config folders next to it), e.g. a
            path in a temporary folder laid out as site-packages; `filename` when None.

    Returns:
        The module; its functions read their globals from it, so a test can replace one.

    Fails the test (one line) when a name is not a top-level definition of the text, or when
    running the kept module-level code raises.
    """
    given = dict(given or {})
    tree = ast.parse(text, filename=filename)
    top: dict[str, ast.stmt] = {}
    for node in tree.body:
        for name in _defined(node):
            top.setdefault(name, node)
    wanted = list(names)
    missing = [name for name in wanted if name not in top
               or isinstance(top[name], ast.Assign | ast.AnnAssign)]
    if missing:
        pytest.fail(f"{filename} defines no top-level {', '.join(missing)}", pytrace=False)
    keep: set[int] = set()
    queue = [top[name] for name in wanted]
    reads: set[str] = set()
    while queue:
        node = queue.pop()
        if id(node) in keep:
            continue
        keep.add(id(node))
        free = _free_names(node) - set(given)
        reads |= free
        queue += [top[name] for name in free
                  if name in top and isinstance(top[name], ast.Assign | ast.AnnAssign)]
    imports = [node for node in tree.body if _stdlib_import(node) and any(
        (a.asname or a.name).split(".")[0] in reads for a in node.names)]
    body = [node for node in tree.body if id(node) in keep or node in imports]
    code = compile(ast.Module(body=body, type_ignores=[]), filename, "exec",
                   flags=__future__.annotations.compiler_flag, dont_inherit=True)
    lines = text.splitlines(keepends=True)
    linecache.cache[filename] = (len(text), None, lines, filename)
    result = ModuleType(module)
    result.__dict__.update(given, __file__=module_file or filename)
    try:
        exec(code, result.__dict__)  # noqa: S102 - the engine's own definitions
    except Exception as exc:  # noqa: BLE001 - a module-level line of theirs needs a stub
        pytest.fail(f"{filename}: loading {', '.join(wanted)} raised "
                    f"{type(exc).__name__}: {exc}", pytrace=False)
    return result


def install_module(monkeypatch: pytest.MonkeyPatch, dotted: str,
                   attributes: Mapping[str, object]) -> ModuleType:
    """Put a module named `dotted` (and empty parent packages that are missing) into
    sys.modules for the test, for the imports an engine function makes when it runs (e.g.
    `from vllm.model_executor.layers.fused_moe import get_config`)."""
    parts = dotted.split(".")
    for depth in range(1, len(parts)):
        parent = ".".join(parts[:depth])
        if parent not in sys.modules:
            monkeypatch.setitem(sys.modules, parent, ModuleType(parent))
    made = ModuleType(dotted)
    made.__dict__.update(attributes)
    monkeypatch.setitem(sys.modules, dotted, made)
    return made
