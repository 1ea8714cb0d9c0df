"""A third kernel family that only registers itself (one entry in `FAMILIES`) is verified
against its own default config and imported as its own family's file, with no product file
aware of it."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli.app import app
from tuner.compare.verify import PointResult, Verdict, timed_points, verify_shape
from tuner.files.format import dump_config_file
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.family import DENSE
from tuner.kernels.family import KernelFamily, Shape
from tuner.kernels.registry import FAMILIES, family_of_file
from tuner.measure.trial import TrialResult, TrialStatus

SMALL = KernelConfig(16, 128, 128, 1, 4, 2)  # the toy's default up to M = 16
LARGE = KernelConfig(64, 128, 128, 1, 4, 2)  # and above
ODD = KernelConfig(32, 64, 128, 1, 4, 2)  # BLOCK_SIZE_N 64: the toy refuses it


def _default(shape: Shape, M: int) -> KernelConfig:
    return SMALL if M <= 16 else LARGE


def _why_invalid(config: KernelConfig, shape: Shape) -> str | None:
    return None if config.BLOCK_SIZE_N == 128 else "the toy runs BLOCK_SIZE_N=128 only"


_NAME = re.compile(r"trio,N=(\d+),K=(\d+),device_name=([A-Za-z0-9_]+)\.json")


def _parse(name: str) -> tuple[Shape, str, str]:
    match = _NAME.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a trio file name")
    N, K, device = match.groups()
    return Shape(int(N), int(K)), device, "fp8_w8a8"


TRIO = dataclasses.replace(
    DENSE,
    name="trio",
    title="a third family",
    default_config=_default,
    why_invalid=_why_invalid,
    parse_file_name=_parse,
    file_name_start="trio,",
    file_name=lambda shape, device, engine: (
        f"trio,N={shape.N},K={shape.K},device_name={device}.json"
    ),
    respell_file_name=None,
    sweep_key_has_family=True,
)
TRIO_FILE = "trio,N=256,K=384,device_name=NVIDIA_L20.json"


@pytest.fixture
def trio(monkeypatch: pytest.MonkeyPatch) -> KernelFamily:
    monkeypatch.setitem(FAMILIES, "trio", TRIO)
    return TRIO


class Runner:
    """Checks pass; `sample_us` answers a fixed time per config."""

    def __init__(self, times: dict[KernelConfig, float]) -> None:
        self.times = times

    def check(self, config: KernelConfig) -> TrialResult:
        return TrialResult(TrialStatus.OK, rel_error=1e-3)

    def sample_us(self, config: KernelConfig) -> float:
        return self.times[config]


def test_a_registered_family_is_verified_against_its_own_default(trio) -> None:
    faster = KernelConfig(32, 128, 128, 1, 4, 2)
    configs = {1: SMALL.as_dict(), 32: faster.as_dict(), 4096: ODD.as_dict()}
    made = []

    def make_runner(N: int, K: int, M: int) -> Runner:
        made.append((N, K, M))
        return Runner({faster: 10.0, SMALL: 20.0, LARGE: 5.0})

    # M=1 runs the toy's own default (nothing timed); M=24 picks key 32 (faster), timed
    # against the toy's default at M=24 (LARGE, not the dense GEMM's), so slower; M=4096's
    # entry breaks the toy's rule.
    assert timed_points(configs, [1, 8, 24, 4096], (128, 128), family="trio") == [24, 4096]
    result = verify_shape(
        N=256,
        K=384,
        block_shape=(128, 128),
        configs=configs,
        m_points=[1, 8, 24, 4096],
        make_runner=make_runner,
        rounds=4,
        family="trio",
    )
    assert result.points == (
        PointResult(1, 1, SMALL, Verdict.OK, False),
        PointResult(8, 1, SMALL, Verdict.OK, False),
        PointResult(24, 32, faster, Verdict.SLOWER, True, 10.0, 5.0, 0.0),
        PointResult(
            4096,
            4096,
            ODD,
            Verdict.FAILED,
            False,
            error="invalid config: the toy runs BLOCK_SIZE_N=128 only",
        ),
    )
    assert made == [(256, 384, 24)]
    # The same file as the dense GEMM's: its default (64x128x128 g32) is timed at M=1 too.
    assert timed_points(configs, [1, 8, 24, 4096], (128, 128)) == [1, 8, 24, 4096]


def test_a_registered_family_is_imported_as_its_own_family(tmp_path: Path, trio) -> None:
    from db import repo
    from db.connection import open_store, session_scope

    assert family_of_file(TRIO_FILE) is TRIO
    (tmp_path / TRIO_FILE).write_text(dump_config_file({1: SMALL.as_dict()}))
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    result = CliRunner().invoke(
        app,
        [
            "import",
            str(tmp_path / TRIO_FILE),
            "--label",
            "mine",
            "--db",
            db,
            "--no-check",
            "--no-publish",
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].startswith(
        f"imported {TRIO_FILE} for NVIDIA_L20 as 'mine': "
    )
    engine = open_store(db)
    try:
        with session_scope(engine) as session:
            (stored,) = repo.list_imports(session)
            dense = repo.imported_configs(session, device_name="NVIDIA_L20", family="dense")
            own = repo.imported_configs(session, device_name="NVIDIA_L20", family="trio")
    finally:
        engine.dispose()
    assert (stored.family, stored.N, stored.K, stored.file_name, stored.configs) == (
        "trio",
        256,
        384,
        TRIO_FILE,
        {1: SMALL.as_dict()},
    )
    assert dense == {}  # never taken for the dense GEMM's file of (256, 384)
    assert own[(256, 384, (128, 128))].configs == {1: SMALL.as_dict()}


def advise(out, asked, answer) -> None:
    """The trio's doctor advice (`VllmServing.advice`): one line, and vLLM reads its files."""
    out.lines.append(f"trio on {asked.arch} ({asked.table_arch}): {answer.kernel or 'table'}")
    out.helps.append("trio")


def test_doctor_says_what_a_registered_family_says_of_itself(monkeypatch) -> None:
    from tuner.compare.doctor import diagnose
    from tuner.kernels.family import VllmServing

    hook = f"{__name__}:advise"
    monkeypatch.setitem(
        FAMILIES, "trio", dataclasses.replace(TRIO, serving=VllmServing(label="trio", advice=hook))
    )
    monkeypatch.setattr("tuner.compare.doctor.vllm_version", lambda: None)
    out = diagnose(
        arch="sm90",
        device_name=None,
        gpus=[],
        versions={"triton": ""},
        linear_backend_triton=False,
        compare=False,
    )
    assert out.lines[-1] == "trio on sm90 (sm90): table"
    assert out.helps == ["moe", "trio"]  # sm90: vLLM runs the Triton MoE kernel by default
    assert any(line.startswith("fused-MoE block-FP8: vLLM runs Triton") for line in out.lines)
