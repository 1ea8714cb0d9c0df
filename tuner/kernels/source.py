"""Where a kernel family's Triton kernel comes from: the project's own copy ("builtin") or the
installed vLLM's ("vllm"), and the hash of the kernel text a trial timed.

Finding vLLM imports nothing of it: the package is located with `importlib.util.find_spec`
(which does not run a top-level package's `__init__`) and its version read from its metadata.
Only a vLLM source's workload imports vLLM's modules, inside a worker.

Whether vLLM's kernels can run here is asked of the installed vLLM in a child process: vLLM
0.33.0 replaces `triton` by a placeholder module, whose `jit` returns the plain function, when
it does not find exactly one active GPU driver, unless CUDA_VISIBLE_DEVICES is set and empty
(`vllm/triton_utils/importing.py`, `HAS_TRITON`); every launch of its kernels then fails
("'function' object is not subscriptable"). The child imports `vllm.triton_utils` under this
process's environment, which a worker inherits, and reports `HAS_TRITON`.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import importlib.util
import inspect
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.core.hashing import kernel_source_hash

BUILTIN = "builtin"
VLLM = "vllm"
# What `--kernel` takes; "auto" is vLLM's kernel where vLLM is importable, else the builtin.
KERNEL_CHOICES = ("auto", VLLM, BUILTIN)


def function_source(text: str, name: str) -> str:
    """The dedented source of a top-level function of a module's text, decorators included,
    cut as `inspect.getsource` cuts it (its first decorator line to the end of its block).

    Args:
        text: the module's source text.
        name: the function's name.

    Returns:
        The function's source, ending with a newline.

    Raises:
        LookupError: the module has no top-level function of that name.
    """
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            lines = text.splitlines(keepends=True)[first - 1 :]
            # inspect.getsource ends the block with inspect.getblock; use it for the same cut.
            return textwrap.dedent("".join(inspect.getblock(lines)))
    raise LookupError(f"no top-level function {name} in the kernel source")


def source_hash(path: Path, function: str) -> str:
    """sha256 hex digest of one top-level function's source in a module file (`function_source`).

    Raises:
        OSError: the file cannot be read.
        LookupError: it has no such function.
    """
    text = Path(path).read_text(encoding="utf-8")
    return kernel_source_hash(function_source(text, function))


def vllm_package_dir() -> Path | None:
    """The folder of the importable `vllm` package, found without importing it; None when
    there is none."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def vllm_version() -> str | None:
    """The importable vLLM's version from its distribution metadata (not imported): "0.33.0";
    "unknown" for a package without metadata; None when vLLM is not importable."""
    if vllm_package_dir() is None:
        return None
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# The child that asks the installed vLLM whether it keeps the real Triton (module doc).
_TRITON_PROBE = """\
import json
from vllm.triton_utils import HAS_TRITON
print(json.dumps(bool(HAS_TRITON)))
"""
PROBE_TIMEOUT_S = 180
# What makes vLLM keep the real Triton, said with every refusal (vLLM 0.33.0,
# vllm/triton_utils/importing.py: one active driver, or CUDA_VISIBLE_DEVICES set and empty).
PLACEHOLDER_FIX = (
    "run where a GPU driver is active (inside the serving image, on its GPU), "
    "or, on the CPU interpreter (--device interpreter), with "
    'CUDA_VISIBLE_DEVICES="" set, under which vLLM keeps the real Triton'
)


def vllm_triton_problem() -> str:
    """Why the importable vLLM's Triton kernels cannot run in this environment, one line; ""
    when they can (or when vLLM is not importable: nothing of vLLM runs then).

    Asked of vLLM itself in a child process with this process's environment (module doc);
    the answer is kept per environment and vLLM location for the life of this process.

    Returns:
        "" when vLLM keeps the real Triton; else e.g. "vLLM 0.33.0 replaces triton with a
        placeholder here (vllm/triton_utils/importing.py finds no single active GPU driver),
        so its kernels cannot run", or why asking failed.
    """
    root = vllm_package_dir()
    if root is None:
        return ""
    return _ask_triton(str(root.parent), tuple(sorted(os.environ.items())))


@functools.cache
def _ask_triton(site: str, environment: tuple[tuple[str, str], ...]) -> str:
    """`vllm_triton_problem` for vLLM under `site` and one environment (cached)."""
    env = dict(environment)
    env["PYTHONPATH"] = os.pathsep.join([site, *filter(None, [env.get("PYTHONPATH")])])
    env["VLLM_CONFIGURE_LOGGING"] = "0"  # vLLM's INFO lines would go to stdout
    version, timeout = vllm_version(), PROBE_TIMEOUT_S
    try:
        command = [sys.executable, "-c", _TRITON_PROBE]
        run = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"importing vLLM {version}'s triton_utils took over {PROBE_TIMEOUT_S} s"
    lines = run.stdout.strip().splitlines()
    if run.returncode == 0 and lines and lines[-1] in ("true", "false"):
        if lines[-1] == "true":
            return ""
        return (
            f"vLLM {version} replaces triton with a placeholder here "
            "(vllm/triton_utils/importing.py finds no single active GPU driver), so its "
            "kernels cannot run"
        )
    tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
    return f"importing vLLM {version}'s triton_utils failed (exit {run.returncode}: {tail[:200]})"


def choose_kernel(choice: str) -> tuple[str, str]:
    """A `--kernel` choice made concrete on this machine, with the reason when "auto" cannot
    take vLLM's kernels although vLLM is importable (`vllm_triton_problem`).

    Args:
        choice: "auto" (vLLM's where vLLM is importable and its Triton is real, else the
            builtin), "vllm" or "builtin".

    Returns:
        (source, note): "vllm" or "builtin", and one line saying why "auto" took the builtin
        although vLLM is importable (its Triton is a placeholder here), else "".

    Raises:
        ValueError: an unknown choice; "vllm" where vLLM is not importable, or where its Triton
            is a placeholder (the message, one line, says how to run it).
    """
    source = resolve_kernel(choice)
    problem = "" if source == BUILTIN else vllm_triton_problem()
    if not problem:
        return source, ""
    if choice == VLLM:
        raise ValueError(f"--kernel vllm: {problem}: {PLACEHOLDER_FIX}")
    return BUILTIN, (
        f"--kernel auto times the builtin kernels: {problem} (for --kernel vllm: {PLACEHOLDER_FIX})"
    )


def resolve_kernel(choice: str) -> str:
    """A `--kernel` choice made concrete from what is importable, without asking whether vLLM's
    Triton is real (`choose_kernel` asks; a command line's choice goes through it first, so a
    worker or a file read here only finds the package).

    Args:
        choice: "auto" (vLLM's where vLLM is importable, else the builtin), "vllm" or "builtin".

    Returns:
        "vllm" or "builtin".

    Raises:
        ValueError: an unknown choice, or "vllm" where vLLM is not importable.
    """
    if choice not in KERNEL_CHOICES:
        raise ValueError(f"--kernel must be one of {', '.join(KERNEL_CHOICES)}, got {choice!r}")
    installed = vllm_package_dir() is not None
    if choice == "auto":
        return VLLM if installed else BUILTIN
    if choice == VLLM and not installed:
        raise ValueError(
            "--kernel vllm: vLLM is not importable here (run inside the serving "
            "image, or use --kernel builtin)"
        )
    return choice


def kernel_label(source: str) -> str:
    """How a sweep's config space names the kernel source: "" for the builtin (the space
    carries no source name), "vllm-<version>" for the installed vLLM's (`vllm_version`)."""
    return "" if source == BUILTIN else f"{VLLM}-{vllm_version()}"


@dataclass(frozen=True)
class VllmKernel:
    """Where vLLM keeps a family's Triton kernel, and the family's workload that launches it
    as vLLM's host function (named where the family makes it) does.

    Attributes:
        module: dotted module of the kernel in vLLM, e.g.
            "vllm.model_executor.layers.quantization.utils.fp8_utils".
        function: the @triton.jit kernel's name there (its text is hashed).
        workload: (shape, M, *, seed, device) -> a `tuner.kernels.family.Workload` whose
            launch runs vLLM's kernel (imports vLLM).
    """

    module: str
    function: str
    workload: Callable[..., Any]

    def kernel(self) -> Any:
        """The kernel (a JITFunction) in the installed vLLM, imported.

        Raises:
            ImportError, AttributeError: vLLM, the module or the kernel cannot be imported.
        """
        return getattr(importlib.import_module(self.module), self.function)

    def path(self) -> Path:
        """The kernel module's file in the importable vLLM, found without importing it.

        Raises:
            LookupError: vLLM is not importable, or lacks the module.
        """
        root = vllm_package_dir()
        if root is None:
            raise LookupError("vLLM is not importable here")
        path = root.joinpath(*self.module.split(".")[1:]).with_suffix(".py")
        if not path.is_file():
            raise LookupError(f"the installed vLLM has no {self.module} ({path})")
        return path


@dataclass(frozen=True)
class KernelSource:
    """The kernel one family's trials time, as a worker records it with each trial.

    Attributes:
        family: the kernel family's name.
        name: "builtin" or "vllm".
        version: vLLM's version for the vllm source, "" for the builtin.
        kernel_hash: sha256 of the timed kernel function's source text.
        module_path: the file the kernel's text was read from.
        workload: (shape, M, *, seed, device) -> the family's `Workload` with this kernel.
    """

    family: str
    name: str
    version: str
    kernel_hash: str
    module_path: Path
    workload: Callable[..., Any]
