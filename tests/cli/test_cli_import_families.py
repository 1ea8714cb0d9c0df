"""`tuner import` of fused-MoE files: stored as the MoE family's shape with its E (the name's
dimensions beyond N), never taken for a dense GEMM file or a file of another E, and merged
into the MoE file vLLM reads under the same name."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from typer.testing import CliRunner

from db.connection import open_store, session_scope
from db.models import ImportedFile
from tests.storefill import DEFAULT, FAST, SLOW
from tuner.cli.app import app
from tuner.files.format import dump_config_file
from tuner.files.merge import build_device_files, dense_key, import_targets
from tuner.kernels.moe.family import MOE, expert_shape
from tuner.kernels.shape import FamilyShape, Shape

DEVICE = "NVIDIA_L20"


def moe_file_key(E: int, N: int) -> FamilyShape:
    """The key of an imported MoE file: its name has E and N (K = 0, no top_k)."""
    return FamilyShape("moe", Shape(N, 0, (128, 128), (("E", E),)))


MOE_NAME = MOE.files.file_name(moe_file_key(4, 64).shape, DEVICE, "vllm")


def stored_rows(db: str) -> list[tuple]:
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
                    ImportedFile.file_name,
                    ImportedFile.configs,
                ).order_by(ImportedFile.import_id)
            ).all()
    finally:
        engine.dispose()
    return [tuple(row) for row in rows]


def test_an_moe_file_is_imported_with_its_e_once_and_exported_as_it_was(tmp_path: Path) -> None:
    assert MOE_NAME == "E=4,N=64,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
    data = dump_config_file({1: SLOW, 64: FAST}).encode()
    (tmp_path / MOE_NAME).write_bytes(data)
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    for _ in range(2):  # importing the same file again replaces its row
        result = CliRunner().invoke(
            app, ["import", str(tmp_path / MOE_NAME), "--label", "vllm", "--db", db, "--no-check"]
        )
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines()[0] == (
            f"imported {MOE_NAME} for {DEVICE} as 'vllm': 2 of vLLM's 18 M values: 1, 64; "
            "missing 2, 4, 8, 16, 24, 32, 48, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096; "
            "M=4096 runs the M=64 entry"
        )
    assert stored_rows(db) == [
        ("moe", "E=4", 64, 0, 128, 128, "vllm", MOE_NAME, {"1": SLOW, "64": FAST})
    ]
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["export", "--device", DEVICE, "--out", str(out), "--db", db])
    assert result.exit_code == 0, result.output
    assert sorted(path.name for path in out.iterdir()) == [MOE_NAME]
    assert (out / MOE_NAME).read_bytes() == data


@dataclass
class MoeWinner:
    """A measured winner of the MoE shape E=4, N=64, K=128, top_k=2 (`db.repo.WinnerRow`)."""

    M: int
    config: dict[str, int]
    latency_us: float = 1.0
    default_latency_us: float | None = 10.0
    is_default: bool = False
    device_name: str = DEVICE
    N: int = 64
    K: int = 128
    block_shape: tuple[int, int] = (128, 128)
    spread_us: float | None = None
    decided: bool = False
    family: str = "moe"
    shape_params: str = "E=4,top_k=2"


@dataclass
class Imported:
    configs: dict[int, dict[str, int]]
    labels: dict[int, str]


def test_an_imported_moe_file_fills_the_swept_file_of_its_name_only() -> None:
    swept = FamilyShape("moe", expert_shape(4, 64, 128, 2))
    e4 = Imported({1: SLOW, 3: SLOW}, {1: "vllm", 3: "vllm"})
    e8 = Imported({1: FAST}, {1: "vllm"})
    dense = Imported({1: DEFAULT}, {1: "vllm"})
    imported = {
        moe_file_key(4, 64): e4,
        moe_file_key(8, 64): e8,
        dense_key(64, 128, (128, 128)): dense,
    }
    assert import_targets([swept], imported, DEVICE) == {
        swept: e4,
        moe_file_key(8, 64): e8,
        dense_key(64, 128, (128, 128)): dense,
    }
    files = build_device_files([MoeWinner(3, FAST)], [], imported=imported, device_name=DEVICE)
    assert files.skipped == []
    by_name = {f.file_name: (f.key, f.merged.configs) for f in files.files}
    assert by_name == {
        # The measured winner at M=3 beats the import; M=1 comes from the E=4 file only.
        MOE_NAME: (swept, {1: SLOW, 3: FAST}),
        MOE.files.file_name(moe_file_key(8, 64).shape, DEVICE, "vllm"): (
            moe_file_key(8, 64),
            {1: FAST},
        ),
        "N=64,K=128,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json": (
            dense_key(64, 128, (128, 128)),
            {1: DEFAULT},
        ),
    }
