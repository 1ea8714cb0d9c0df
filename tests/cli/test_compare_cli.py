"""`tuner compare` on the interpreter: every kernel's row is printed and stored, with the
verdict lines; bad input is one line, exit 2."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console

from db import repo
from tests.cli.common import invoke, ok, query, session_on
from tests.standin_vllm import CAPABILITY_VARIABLE, VERSION, build_standin, importable
from tests.storefill import DEFAULT, FAST, SLOW, fill
from tuner.cli import compare as compare_cli
from tuner.cli import output
from tuner.compare.versus import BACKENDS, BackendTime, ComparePoint
from tuner.compare.versus import TORCH_CPU as CPU
from tuner.core import ComparisonStatus

DEVICE = "TRITON_INTERPRETER"
FAST_AT_1 = {(256, 384, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 5.0)]}
TINY = {"device_name": DEVICE, "model": "tiny", "m_values": (1,)}
COMPARE = "compare --device interpreter --model tiny --m 1 --rounds 2".split()


def _stored(db: str):
    """The one comparison stored for DEVICE."""
    with session_on(db) as session:
        (stored,) = repo.list_comparisons(session, device_name=DEVICE)
    return stored


def test_compare_tiny_on_the_interpreter_and_its_bad_input(db) -> None:
    # N=256,K=384 has a file whose M=1 winner is FAST; N=576,K=256 has no trials.
    fill(db, FAST_AT_1, **TINY)
    result = ok(*COMPARE, "--db", db)
    lines = result.stdout.splitlines()
    assert "triton-tuned: M=1 16x64x128 g1 w4 s3" in lines
    assert "not timed: vllm-cutlass: CPU run: the GPU kernels are not timed" in lines
    assert any(line.startswith("not timed: vllm-marlin: MarlinFP8ScaledMMLinear") for line in lines)
    assert lines[-1] == f"stored as comparison 1 of {DEVICE}"
    stored = _stored(db)
    assert (stored.model, stored.tp, stored.gpu_name) == ("tiny", 1, DEVICE)
    assert stored.verdicts == ("vLLM's default kernel (not known here) was not timed here",)
    status = {(p.N, p.backend): p.status for p in stored.points}
    ran = {(256, "triton-tuned"), *((N, n) for N in (256, 576) for n in ("triton-default", CPU))}
    assert status == {
        (N, n): "ok" if (N, n) in ran else "unavailable" for N in (256, 576) for n in BACKENDS
    }
    tuned = next(p for p in stored.points if (p.N, p.backend) == (256, "triton-tuned"))
    assert tuned.note == "16x64x128 g1 w4 s3" and tuned.p20_us <= tuned.latency_us <= tuned.p80_us
    missing = next(p for p in stored.points if (p.N, p.backend) == (576, "triton-tuned"))
    assert missing.note == "no file for this shape in the store"
    for args, message in [  # bad input: one line, exit 2
        (["--model", "nope"], "unknown model 'nope'"),
        (["--model", "tiny", "--m", "0"], "--m: '0' is not a positive integer"),
    ]:
        result = invoke("compare", "--device", "interpreter", *args, "--db", db, code=2)
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("error: ") and message in line, line


def test_from_log_says_the_server_does_not_read_the_files(tmp_path: Path) -> None:
    marlin = tmp_path / "marlin.log"
    marlin.write_text(
        "INFO non-default args: {'model': 'Qwen/Qwen3.8-27B-FP8', 'tensor_parallel_size': 2}\n"
        "(VllmWorker rank=0 pid=4101) INFO 12-01 10:00:30 [__init__.py:640] Selected "
        "MarlinFP8ScaledMMLinearKernel for Fp8LinearMethod\n"
    )
    result = invoke("shapes", "from-log", str(marlin), code=1)
    assert "the tuned files are NOT read with this server's settings" in result.stdout
    assert "the Triton kernel did not run" in result.stderr


def test_compare_inside_vllm_times_marlin_against_tuned_triton(tmp_path: Path, db, monkeypatch):
    # The stand-in vLLM, seeing an sm89 GPU (its Marlin runs only there), vLLM's selection
    # answering Marlin; its modules dropped from sys.modules afterwards.
    monkeypatch.setenv(CAPABILITY_VARIABLE, "8.9")
    marlin = "MarlinFP8ScaledMMLinearKernel"
    # vLLM's default by the table (its rules: tests/tuner/inputs/test_backends.py): Marlin
    monkeypatch.setattr("tuner.cli.compare.table_dense_kernel", lambda *args: marlin)
    with importable(build_standin(tmp_path / "site"), monkeypatch):
        # The builtin kernel's trials pick SLOW at M=1, vLLM's kernel's pick FAST: with vLLM
        # importable, compare reads vLLM's files and times vLLM's kernel with them.
        for winner, kernel in ((SLOW, "builtin"), (FAST, "vllm")):
            trials = {(256, 384, 1): [(DEFAULT, True, "ok", 10.0), (winner, False, "ok", 5.0)]}
            fill(db, trials, **TINY, kernel=kernel)
        result = ok(*COMPARE, "--db", db)
    lines = result.stdout.splitlines()
    assert "triton-tuned: M=1 16x64x128 g1 w4 s3" in lines  # FAST: vLLM's kernel's files
    marked = "* vLLM's default kernel here: MarlinFP8ScaledMMLinearKernel (from the tuner's "
    assert lines.count(marked + "table of vLLM 0.33.0)") == 2
    assert sum("marlin*" in line for line in lines) == 2  # one table header per shape
    assert not any(line.startswith("not timed: vllm-marlin") for line in lines)
    stored = _stored(db)
    rows = {(p.N, p.backend): p for p in stored.points}
    assert rows[(256, "vllm-marlin")].status == rows[(576, "vllm-marlin")].status == "ok"
    assert min(rows[(256, "vllm-marlin")].latency_us, rows[(576, "vllm-marlin")].latency_us) > 0
    # The verdicts' rules and words: tests/tuner/compare/test_versus.py
    # (test_the_flag_against_vllms_default_per_m_and_for_decode_and_prefill).
    assert any(line.startswith("--linear-backend triton, decode (M <= 32): ") for line in lines)
    recorded = query(
        tmp_path / "tuner.db",
        "SELECT kernel_source, vllm FROM environments JOIN comparisons USING (environment_id)",
    )
    assert recorded == [("vllm", VERSION)]


def _gpu_table(monkeypatch, width: int) -> list[str]:
    """`_print_shape` of one GPU point where all six GPU kernels ran, at `width` columns."""
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    monkeypatch.setattr(compare_cli, "console", console)
    monkeypatch.setattr(output, "console", console)
    times = tuple(
        BackendTime(n, ComparisonStatus.OK, 10.0 + i, 10.0 + i, 10.0 + i)
        for i, n in enumerate(n for n in BACKENDS if n != CPU)
    )
    marlin = "MarlinFP8ScaledMMLinearKernel"
    compare_cli._print_shape(256, 384, [ComparePoint(256, 384, 1, times)], "GPU timings", marlin)
    return out.getvalue().splitlines()


def test_the_table_heads_each_kernel_with_its_one_name(monkeypatch) -> None:
    wide = _gpu_table(monkeypatch, 140)
    assert (
        wide[1].split()
        == (
            "M triton-tuned triton-default torch-scaled_mm vllm-deepgemm vllm-cutlass vllm-marlin*"
        ).split()
    )
    assert wide[3].split() == "1 10.0 11.0 12.0 13.0 14.0 15.0".split()
    assert wide[4] == (
        "* vLLM's default kernel here: MarlinFP8ScaledMMLinearKernel (from the tuner's table of "
        "vLLM 0.33.0)"
    )
