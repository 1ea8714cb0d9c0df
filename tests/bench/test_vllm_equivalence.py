"""bench/vllm_equivalence.py: vLLM's dense kernel cut out of its file, compiled beside ours; a
faithful copy compiles to the same code, a changed one does not."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul_kernel
from tuner.kernels.source import function_source

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "vllm_equivalence", REPO / "bench" / "vllm_equivalence.py"
)
ve = importlib.util.module_from_spec(SPEC)
sys.modules["vllm_equivalence"] = ve
SPEC.loader.exec_module(ve)


def _fp8_utils(root: Path, change: tuple[str, str] | None = None) -> Path:
    """A file at vLLM's path whose `_w8a8_triton_block_scaled_mm` is our kernel's text under
    vLLM's name (with one change when asked), beside an import that must never run."""
    text = function_source(
        Path(w8a8_block_fp8_matmul_kernel.fn.__code__.co_filename).read_text(),
        "w8a8_block_fp8_matmul_kernel",
    )
    text = text.replace("def w8a8_block_fp8_matmul_kernel(", f"def {ve.DENSE_KERNEL}(")
    if change is not None:
        assert change[0] in text
        text = text.replace(*change)
    path = root / ve.DENSE_FILE
    path.parent.mkdir(parents=True)
    path.write_text("import vllm.envs as envs  # never imported by the bench\n\n" + text)
    return path


def _bench(root: Path, out: Path) -> subprocess.Popen:
    """The bench, run as a user runs it (no TRITON_INTERPRET: it compiles), started in a child
    whose first output line is its summary."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    script, options = REPO / "bench" / "vllm_equivalence.py", "--arch 90 --configs 1 --no-moe"
    command = [sys.executable, str(script), "--vllm-root", str(root), *options.split()]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    return subprocess.Popen([*command, "--out-dir", str(out)], env=env, **pipes)


def _summary(child: subprocess.Popen) -> str:
    stdout, stderr = child.communicate(timeout=900)
    assert child.returncode == 0, stderr
    return stdout.splitlines()[0]


def test_a_faithful_copy_compiles_to_the_same_code_and_a_changed_one_does_not(tmp_path) -> None:
    _fp8_utils(tmp_path / "a")
    # Masking one K element more of A's load changes the code of every specialization.
    _fp8_utils(
        tmp_path / "b", ("mask=offs_k[None, :] < k_left,", "mask=offs_k[None, :] < k_left - 1,")
    )
    faithful, changed = (_bench(tmp_path / name, tmp_path / "out") for name in "ab")  # side by side
    assert _summary(faithful) == (
        "unknown: dense same code 3/3, interpreter 3/3 bitwise; MoE same PTX mix 0/0"
    )
    assert _summary(changed).startswith("unknown: dense same code 0/3,")


def test_a_file_without_the_kernel_is_refused(tmp_path) -> None:
    path = tmp_path / "fp8_utils.py"
    path.write_text("def other():\n    pass\n")
    with pytest.raises(ValueError, match="has no _w8a8_triton_block_scaled_mm"):
        ve.load_dense_kernel(path)
