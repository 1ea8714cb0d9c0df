"""A third kernel family that only registers itself (one entry in `FAMILIES`) is verified
against its own default config and imported as its own family's file, with no product file
aware of it. Both test families here have no block scales (per-tensor): block_shape None from
the file name to the store (0/0 there) and back."""

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
from tuner.kernels.family import KernelFamily
from tuner.kernels.registry import FAMILIES, family_of_file
from tuner.kernels.shape import Shape
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
    return Shape(int(N), int(K), None), device, "fp8_w8a8"


TRIO = dataclasses.replace(
    DENSE,
    name="trio",
    title="a third family",
    default_config=_default,
    why_invalid=_why_invalid,
    files=dataclasses.replace(
        DENSE.files,
        parse_file_name=_parse,
        file_name_start="trio,",
        file_name=lambda shape, device, engine: (
            f"trio,N={shape.N},K={shape.K},device_name={device}.json"
        ),
        respell_file_name=None,
    ),
    shapes=dataclasses.replace(
        DENSE.shapes,
        sweep_key_has_family=True,
    ),
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
    assert timed_points(configs, [1, 8, 24, 4096], Shape(256, 384, None), "trio") == [24, 4096]
    result = verify_shape(
        Shape(256, 384, None), configs, [1, 8, 24, 4096], make_runner, rounds=4, family="trio"
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
    assert result.block_shape is None
    # The same file as the dense GEMM's: its default (64x128x128 g32) is timed at M=1 too.
    assert timed_points(configs, [1, 8, 24, 4096], Shape(256, 384, (128, 128))) == [1, 8, 24, 4096]


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
            imported = repo.imported_configs(session, device_name="NVIDIA_L20")
    finally:
        engine.dispose()
    assert (stored.family, stored.N, stored.K, stored.file_name, stored.configs) == (
        "trio",
        256,
        384,
        TRIO_FILE,
        {1: SMALL.as_dict()},
    )
    # Keyed by its own family: never taken for the dense GEMM's file of (256, 384).
    assert list(imported) == [("trio", "", 256, 384, None)]
    assert stored.block_shape is None
    assert imported[("trio", "", 256, 384, None)].configs == {1: SMALL.as_dict()}


def test_a_per_tensor_import_is_stored_as_0_0_and_replaced_by_its_label(
    tmp_path: Path, trio
) -> None:
    from sqlalchemy import select

    from db import repo
    from db.connection import open_store, session_scope
    from db.models import ImportedFile

    (tmp_path / TRIO_FILE).write_text(dump_config_file({1: SMALL.as_dict()}))
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    args = ["import", str(tmp_path / TRIO_FILE), "--db", db, "--no-check", "--no-publish"]
    for _ in range(2):  # the same label twice: one row (0/0 collides in the unique key)
        result = CliRunner().invoke(app, [*args, "--label", "mine"])
        assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, [*args, "--label", "theirs"])
    assert result.exit_code == 0, result.output
    engine = open_store(db)
    try:
        with session_scope(engine) as session:
            rows = session.execute(
                select(ImportedFile.label, ImportedFile.block_n, ImportedFile.block_k)
            ).all()
            listed = repo.list_imports(session, device_name="NVIDIA_L20")
    finally:
        engine.dispose()
    assert sorted(tuple(row) for row in rows) == [("mine", 0, 0), ("theirs", 0, 0)]
    assert [(i.label, i.block_shape) for i in listed] == [("mine", None), ("theirs", None)]


def test_the_toys_file_is_imported_with_its_g_and_exported_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import select

    from db.connection import open_store, session_scope
    from db.models import ImportedFile
    from tests.toyfamily.family import TOY3

    monkeypatch.setitem(FAMILIES, TOY3.name, TOY3)
    name = TOY3.files.file_name(Shape(128, 256, None, (("G", 2),)), "NVIDIA_L20", "vllm")
    assert name == "toy3,G=2,N=128,K=256,device_name=NVIDIA_L20.json"
    configs = {1: SMALL.as_dict(), 64: LARGE.as_dict()}
    data = dump_config_file(configs).encode()
    (tmp_path / name).write_bytes(data)
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    args = ["import", str(tmp_path / name), "--label", "mine", "--db", db]
    for _ in range(2):  # again: the same row, replaced
        result = CliRunner().invoke(app, [*args, "--no-check", "--no-publish"])
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[0].startswith(
            f"imported {name} for NVIDIA_L20 as 'mine': "
        )
    engine = open_store(db)
    try:
        with session_scope(engine) as session:
            rows = session.execute(
                select(
                    ImportedFile.family,
                    ImportedFile.shape_params,
                    ImportedFile.N,
                    ImportedFile.K,
                    ImportedFile.block_n,
                    ImportedFile.block_k,
                    ImportedFile.label,
                    ImportedFile.configs,
                )
            ).all()
    finally:
        engine.dispose()
    assert [tuple(row) for row in rows] == [
        ("toy3", "G=2", 128, 256, 0, 0, "mine", {"1": SMALL.as_dict(), "64": LARGE.as_dict()})
    ]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["export", "--device", "NVIDIA_L20", "--out", str(out), "--db", db]
    )
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in out.iterdir()) == [name]
    assert (out / name).read_bytes() == data  # the toy's own file, as imported


def test_the_toys_merged_file_is_verified_on_the_interpreter(monkeypatch) -> None:
    from tests.toyfamily.family import TOY3
    from tuner.measure.runner import Problem
    from tuner.measure.runners import InterpreterRunner

    monkeypatch.setitem(FAMILIES, TOY3.name, TOY3)
    params = (("G", 2),)
    runner = InterpreterRunner("TRITON_INTERPRETER", reps=1)

    def make_runner(N: int, K: int, M: int):
        problem = Problem(M, N, K, None, "bfloat16", family="toy3", params=params)
        return runner.problem_runner(problem, seed=0, warmup_s=0.0, rep_s=0.0)

    # A file of the toy's: M=1 runs ODD, checked against the float64 reference and timed
    # against the toy's default; M=4096's BLOCK_SIZE_K=256 breaks the toy's rule for K=128
    # (one scale block of the whole weight: group_k = K).
    wide = KernelConfig(64, 128, 256, 1, 4, 2)
    result = verify_shape(
        Shape(128, 128, None, params),
        {1: ODD.as_dict(), 4096: wide.as_dict()},
        [1, 4096],
        make_runner,
        rounds=2,
        family="toy3",
    )
    first, last = result.points
    assert (first.M, first.config, first.timed, first.error) == (1, ODD, True, None)
    assert first.verdict in (Verdict.OK, Verdict.SLOWER)  # it ran and matched the reference
    assert last == PointResult(
        4096,
        4096,
        wide,
        Verdict.FAILED,
        False,
        error="invalid config: BLOCK_SIZE_K=256 does not divide group_k=128",
    )
    assert result.block_shape is None


def advise(out, asked, answer) -> None:
    """The trio's doctor advice (`VllmServing.advice`): one line, and vLLM reads its files."""
    out.lines.append(f"trio on {asked.arch} ({asked.table_arch}): {answer.kernel or 'table'}")
    out.helps.append("trio")


def test_doctor_says_what_a_registered_family_says_of_itself(monkeypatch) -> None:
    from tuner.compare.doctor import Question, diagnose
    from tuner.kernels.family import VllmServing

    hook = f"{__name__}:advise"
    monkeypatch.setitem(
        FAMILIES, "trio", dataclasses.replace(TRIO, serving=VllmServing(label="trio", advice=hook))
    )
    monkeypatch.setattr("tuner.compare.doctor.vllm_version", lambda: None)
    out = diagnose(Question("sm90", compare=False), [], {"triton": ""})
    assert out.lines[-1] == "trio on sm90 (sm90): table"
    assert out.helps == ["moe", "trio"]  # sm90: vLLM runs the Triton MoE kernel by default
    assert any(line.startswith("fused-MoE block-FP8: vLLM runs Triton") for line in out.lines)
