"""The engines' own code for the real-engine lane: vLLM's and SGLang's wheels as downloaded by
tests/engines/fetch_engines.sh, the text of a file inside one, and single top-level functions of
a module cut out with `ast` and run here.

The engines' modules import their whole package (CUDA extensions, hundreds of dependencies), so
they are never imported. `load` (bench/engine_source.py's, failing the test in one line)
compiles the named functions, the module-level constants they read and the standard-library
imports they use, unchanged and at their own line numbers; every other name a module imports is
what the test gives in its place (`envs`, `logger`, `current_platform`, ...). Nothing of the
engines is kept in this repository.
"""

from __future__ import annotations

import functools
import importlib.util
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

# The loader itself lives with the benches that run the engines' code too.
_SPEC = importlib.util.spec_from_file_location(
    "engine_source", Path(__file__).resolve().parents[2] / "bench" / "engine_source.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_engine_source = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_engine_source)


def wheels_folder() -> Path | None:
    """The folder `TUNER_ENGINE_WHEELS` names, or None when it is unset or empty."""
    value = os.environ.get(WHEELS_ENV, "")
    return Path(value) if value else None


def engine_wheel(folder: Path, engine: str) -> Path:
    """The wheel of `RELEASES[engine]` in `folder`; fails the test (one line) when absent."""
    version = RELEASES[engine]
    found = sorted(folder.glob(f"{engine}-{version}-*.whl")) if folder.is_dir() else []
    if not found:
        pytest.fail(
            f"no {engine}-{version} wheel in {folder} ({WHEELS_ENV}): run {FETCH}", pytrace=False
        )
    return found[0]


@functools.lru_cache(maxsize=8)
def _members(wheel: Path) -> frozenset[str]:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return frozenset(archive.namelist())
    except (OSError, zipfile.BadZipFile) as exc:
        pytest.fail(
            f"{wheel} is not a readable wheel ({exc}): delete it and run {FETCH}", pytrace=False
        )


def wheel_text(wheel: Path, member: str) -> str:
    """One file of a wheel as text, e.g. `vllm/model_executor/layers/fused_moe/fused_moe.py`;
    fails the test (one line) when the wheel has no such file."""
    if member not in _members(wheel):
        pytest.fail(f"{wheel.name} has no {member}", pytrace=False)
    with zipfile.ZipFile(wheel) as archive:
        return archive.read(member).decode("utf-8")


def wheel_folder(
    wheel: Path, folder: str, suffix: str = ".json", *, recursive: bool = False
) -> dict[str, bytes]:
    """The files in one folder of a wheel whose names end in `suffix` (those in its subfolders
    too when `recursive`): path below the folder -> bytes, sorted; fails the test (one line)
    when there are none."""
    prefix = folder.rstrip("/") + "/"
    names = sorted(
        m
        for m in _members(wheel)
        if m.startswith(prefix)
        and m.endswith(suffix)
        and not m.endswith("/")
        and (recursive or "/" not in m[len(prefix) :])
    )
    if not names:
        pytest.fail(f"{wheel.name} has no {prefix}*{suffix}", pytrace=False)
    with zipfile.ZipFile(wheel) as archive:
        return {name[len(prefix) :]: archive.read(name) for name in names}


def load(
    text: str,
    names: Iterable[str],
    given: Mapping[str, object] | None = None,
    *,
    filename: str,
    module: str = "engine_code",
    module_file: str | None = None,
) -> ModuleType:
    """`bench/engine_source.py`'s `load` (named top-level functions of an engine module's
    text, run here with `given` in place of its imports; see there), failing the test in one
    line where that raises."""
    try:
        return _engine_source.load(
            text, names, given, filename=filename, module=module, module_file=module_file
        )
    except (LookupError, RuntimeError) as exc:
        pytest.fail(str(exc), pytrace=False)


def load_member(wheel: Path, member: str, names: list[str], given: dict, container=None):
    """`load` of the named functions of one module of a wheel (e.g. "vllm/.../fp8_utils.py"),
    with `__file__` at its place in a `tests.engines.container.Container` when given."""
    return load(
        wheel_text(wheel, member),
        names,
        given,
        filename=f"{wheel.name}/{member}",
        module=member.removesuffix(".py").replace("/", "."),
        module_file=container.module_file(member) if container else None,
    )


def install_module(
    monkeypatch: pytest.MonkeyPatch, dotted: str, attributes: Mapping[str, object]
) -> ModuleType:
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
