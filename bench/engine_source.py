"""An engine's own functions, cut out of one of its module files with `ast` and run here as a
module of their own: vLLM's (or SGLang's) kernels and host code from a downloaded wheel or an
installed package, with the names its module imports (which need the engine's dependencies:
CUDA extensions, hundreds of packages) given by the caller.

Used by the fidelity benches (bench/moe_fidelity.py, bench/vllm_equivalence.py) and the
real-engine tests (tests/engines, which wrap `load` so that a failure fails the test in one
line). Their code runs unchanged, at its own line numbers; nothing of the engines is kept in
this project.
"""

from __future__ import annotations
import __future__

import ast
import builtins
import linecache
import sys
from collections.abc import Iterable, Mapping
from types import ModuleType

_BUILTINS = frozenset(dir(builtins))


def _bound_names(node: ast.AST) -> set[str]:
    """Names a definition binds inside itself (arguments, assignments, inner definitions,
    imports, exception names), the node's own name left out."""
    bound: set[str] = set()
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and not isinstance(inner.ctx, ast.Load):
            bound.add(inner.id)
        elif isinstance(inner, ast.arg):
            bound.add(inner.arg)
        elif (
            isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and inner is not node
        ):
            bound.add(inner.name)
        elif isinstance(inner, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in inner.names)
        elif isinstance(inner, ast.ExceptHandler) and inner.name:
            bound.add(inner.name)
    return bound


def _free_names(node: ast.AST) -> set[str]:
    """Module-level names a top-level statement reads (builtins left out)."""
    loads = {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
    }
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
    return (
        isinstance(node, ast.ImportFrom)
        and node.level == 0
        and node.module is not None
        and node.module != "__future__"
        and node.module.split(".")[0] in sys.stdlib_module_names
    )


def load(
    text: str,
    names: Iterable[str],
    given: Mapping[str, object] | None = None,
    *,
    filename: str,
    module: str = "engine_code",
    module_file: str | None = None,
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

    Raises:
        LookupError: a name is not a top-level function or class of the text.
        RuntimeError: running the kept module-level code raised (a name it needs is missing
            from `given`); the message is one line.
    """
    given = dict(given or {})
    tree = ast.parse(text, filename=filename)
    top: dict[str, ast.stmt] = {}
    for node in tree.body:
        for name in _defined(node):
            top.setdefault(name, node)
    wanted = list(names)
    missing = [
        name
        for name in wanted
        if name not in top or isinstance(top[name], ast.Assign | ast.AnnAssign)
    ]
    if missing:
        raise LookupError(f"{filename} defines no top-level {', '.join(missing)}")
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
        queue += [
            top[name]
            for name in free
            if name in top and isinstance(top[name], ast.Assign | ast.AnnAssign)
        ]
    imports = [
        node
        for node in tree.body
        if _stdlib_import(node)
        and any((a.asname or a.name).split(".")[0] in reads for a in node.names)
    ]
    body = [node for node in tree.body if id(node) in keep or node in imports]
    code = compile(
        ast.Module(body=body, type_ignores=[]),
        filename,
        "exec",
        flags=__future__.annotations.compiler_flag,
        dont_inherit=True,
    )
    lines = text.splitlines(keepends=True)
    linecache.cache[filename] = (len(text), None, lines, filename)
    result = ModuleType(module)
    result.__dict__.update(given, __file__=module_file or filename)
    try:
        exec(code, result.__dict__)  # noqa: S102 - the engine's own definitions
    except Exception as exc:  # noqa: BLE001 - a module-level line of theirs needs a stub
        raise RuntimeError(
            f"{filename}: loading {', '.join(wanted)} raised {type(exc).__name__}: {exc}"
        ) from exc
    return result
