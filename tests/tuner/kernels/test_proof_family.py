"""The proof family (tests/toyfamily: its own kernel, file names, shapes key and engine folder)
registers itself with one monkeypatched registry entry and goes the whole way with no product
file aware of it: read from a model's shapes file, planned, swept on the interpreter against
its float64 reference, stored (no block shape: 0/0 in the store, null over HTTP, "per-tensor"
in text), reported, exported, served, mounted, pulled, verified, imported and doctored."""

from __future__ import annotations

import dataclasses
import io
import os
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from db import repo
from db.connection import open_store, session_scope
from db.models import ImportedFile, ReleaseFile, Sweep
from tests.toyfamily.family import ENV, TOY, toy_shape
from tests.tuner.compare.test_verify import FakeRunner
from tuner.cli.app import app
from tuner.compare.versus import PlannedShape, PointResult, Verdict, verify_shape
from tuner.files.format import dump_config_file
from tuner.files.mounts import MountRequest, release_request, render_mounts
from tuner.inputs.shapes import ShapesFileError, load_shapes, render_shapes_file
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import FAMILIES, family_of_file, respell_file_name
from tuner.kernels.shape import Shape
from tuner.measure.runner import InterpreterRunner, KernelRunner, Problem
from tuner.measure.trial import TrialStatus
from tuner.run.plan import model_requests
from tuner.run.worker import TaskRun, WorkerSpec

DEVICE = "TRITON_INTERPRETER"
# The dense GEMM's key as before, and the toy's own: two shapes of one G (one sweep), one of
# another G (a sweep of its own: a sweep tunes one set of a family's params).
TOML = (
    'model = "toymodel"\ndescription = "d"\nblock_shape = [128, 128]\n\n'
    '[tp.1]\nsource = "s"\nshapes = [\n    [256, 128],\n]\n'
    "toy = [\n    [64, 64, 2],\n    [96, 64, 2],\n    [64, 128, 5],\n]\n"
)
SPACE = (KernelConfig(32, 64, 32, 1, 4, 2), KernelConfig(16, 32, 64, 1, 4, 2))
FILES = [f"toy,G=2,N={N},K=64,device_name={DEVICE}.json" for N in (64, 96)]
SMALL, LARGE = KernelConfig(16, 64, 32, 1, 4, 2), KernelConfig(32, 64, 32, 1, 4, 2)
WIDE = KernelConfig(64, 64, 256, 1, 4, 2)  # BLOCK_SIZE_K 256 > K: the toy refuses it


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toy registered, and the model's shapes file written; its path."""
    monkeypatch.setitem(FAMILIES, TOY.name, TOY)
    path = Path(os.environ["TUNER_SHAPES_DIR"]) / "toymodel.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TOML)
    return path


def test_a_shapes_key_belongs_to_its_registered_family(toy: Path, monkeypatch) -> None:
    model = load_shapes("toymodel", 1)
    assert model.pairs() == ((256, 128),)
    assert model.of("toy") == (toy_shape(64, 64, 2), toy_shape(96, 64, 2), toy_shape(64, 128, 5))
    assert model.of("dense")[0].block_shape == (128, 128)  # the model's, not the toy's
    # The family writes its rows back as they were read, after the families before it.
    assert render_shapes_file([model]) == TOML
    toy.write_text(TOML.replace("[64, 128, 5]", "[64, 128]"))
    with pytest.raises(ShapesFileError, match=r"TP 1: toy \[64, 128\] is not \[N, K, G\]$"):
        load_shapes("toymodel", 1)
    monkeypatch.delitem(FAMILIES, TOY.name)  # not registered: nobody reads `toy`
    with pytest.raises(ShapesFileError, match=r"unknown key\(s\) 'toy'; allowed: source, shapes"):
        load_shapes("toymodel", 1)


def _sweep(url: str, request) -> int:
    """Plan the toy's sweep in the store at `url` and run its tasks on the interpreter."""
    engine = open_store(url)
    with session_scope(engine) as session:
        info, _ = repo.create_sweep(session, request.sweep_spec())
    with session_scope(engine) as session:
        environment_id = repo.get_or_create_environment(
            session,
            **{"device_name": DEVICE, "gpu_name": DEVICE, "compute_capability": ""},
            **{"driver": "", "cuda": "", "torch": "t", "triton": "t", "tuner": "t"},
            kernel_hash="h",
        )
    runner, sweep_id = InterpreterRunner(DEVICE, reps=1), info.sweep_id
    spec = WorkerSpec(db_url=url, sweep_id=sweep_id, worker_id="w", runner=runner)
    while True:
        with session_scope(engine) as session:
            task = repo.claim_task(session, sweep_id=sweep_id, worker_id="w", lease_s=600)
        if task is None:
            break
        TaskRun(engine, spec, task, environment_id, request.space).run()
    engine.dispose()
    return sweep_id


def _requests():
    model = load_shapes("toymodel", 1)
    search = {"strategy": "grid", "trials": 3, "seed": 0, "configs": SPACE}
    options = {"device_name": DEVICE, "m_values": (2,), "out_dtype": "bfloat16"}
    return model_requests(model, **search, **options)


def _check_the_store_and_publish(url: str, sweep_id: int) -> None:
    """Every config and the family's own default at M=2 ran and matched the float64
    reference; no block shape is 0/0 in the store (never NULL), in the sweep and a release."""
    engine = open_store(url)
    with session_scope(engine) as session:
        stored = session.get(Sweep, sweep_id)
        assert stored is not None and (stored.block_n, stored.block_k) == (0, 0)
        trials = [
            t
            for task in repo.sweep_tasks(session, sweep_id=sweep_id)
            for t in repo.task_trials(session, task_id=task.task_id)
        ]
        coverage = repo.shape_coverage(session, device_name=DEVICE)
    args = ["publish", "--device", "interpreter", "--allow-stale", "--db", url]
    published = CliRunner().invoke(app, args)
    assert published.exit_code == 0, published.output
    with session_scope(engine) as session:
        release_rows = session.execute(select(ReleaseFile.block_n, ReleaseFile.block_k)).all()
    engine.dispose()
    defaults = {KernelConfig.from_dict(t.config) for t in trials if t.is_default}
    assert defaults == {TOY.default_config(toy_shape(64, 64, 2), 2)}
    assert len(trials) == 6 and all(t.status == "ok" and t.rel_error < 1e-2 for t in trials)
    assert [(c.N, c.K, c.block_shape) for c in coverage] == [(64, 64, None), (96, 64, None)]
    assert [tuple(row) for row in release_rows] == [(0, 0), (0, 0)]


def test_the_family_is_planned_swept_stored_reported_and_exported(tmp_path, toy) -> None:
    requests = _requests()
    assert [(r.family, r.params, r.shapes, r.block_shape, words) for r, words in requests] == [
        ("dense", (), ((256, 128),), (128, 128), "1 shapes"),
        ("toy", (("G", 2),), ((64, 64), (96, 64)), None, "2 toy shape(s)"),
        ("toy", (("G", 5),), ((64, 128),), None, "1 toy shape(s)"),
    ]
    url = f"sqlite:///{tmp_path}/tuner.db"
    sweep_id = _sweep(url, requests[1][0])
    _check_the_store_and_publish(url, sweep_id)
    out = tmp_path / "out"
    exported = CliRunner().invoke(
        app, ["export", "--device", "interpreter", "--out", str(out), "--allow-stale", "--db", url]
    )
    assert exported.exit_code == 0, exported.output
    assert sorted(p.name for p in out.iterdir()) == FILES  # the family's own names
    with TestClient(create_app(Settings(db_url=url))) as client:
        stale = {"allow_stale": True}
        html = client.get(f"/devices/{DEVICE}/report", params=stale).text
        base = f"/devices/{DEVICE}/preview/configs"
        configs = client.get(base, params=stale).json()
        served = client.get(f"{base}/{FILES[0]}", params=stale)
        missing = client.get(f"{base}/{FILES[0].replace('G=2', 'G=3')}", params=stale)
        archive = client.get(f"{base}.zip", params=stale)
        sweep = client.get(f"/sweeps/{sweep_id}").json()
        release = client.get(f"/devices/{DEVICE}/configs").json()
    for N in (64, 96):  # the family's generic label and anchor: its name, params, N, K
        assert (
            f'<section class="shape" id="shape-toy-G2-{N}x64"><h2>toy G=2, N={N}, '
            "K=64, per-tensor (toymodel)</h2>"
        ) in html
    assert [(f["file_name"], f["block_shape"]) for f in configs["files"]] == [
        (name, None) for name in FILES
    ]
    assert served.text == (out / FILES[0]).read_text()
    assert missing.status_code == 404 and missing.json()["detail"].endswith(
        f"for {DEVICE}; files: {', '.join(FILES)}"
    )
    with zipfile.ZipFile(io.BytesIO(archive.content)) as zipped:
        assert zipped.read(FILES[1]).decode() == (out / FILES[1]).read_text()
    assert sweep["block_shape"] is None and release["files"] == configs["files"]


def test_the_familys_files_are_mounted_and_pulled_into_its_own_folder(toy) -> None:
    assert family_of_file(FILES[0]) is TOY and respell_file_name(FILES[0], "sglang") == FILES[0]
    request = MountRequest(DEVICE, "vllm", "docker", {FILES[0]: ""}, "/srv/configs")
    docker = render_mounts(request).splitlines()
    # Read from the folder its variable names, as vLLM's fused-MoE files are.
    assert '  -v "/srv/configs:/opt/blockfp8-tuner/toy-configs:ro" \\' in docker
    assert f"  -e {ENV}=/opt/blockfp8-tuner/toy-configs \\" in docker
    assert not any("VLLM_TUNED_CONFIG_FOLDER" in line for line in docker)
    release = {
        "device_name": DEVICE,
        "number": 1,
        "content_sha256": "ab" * 32,
        "files": [{"file_name": FILES[0], "sha256": "1" * 64}],
    }
    pulled = render_mounts(release_request(release, "k8s-pull", "vllm", "http://tuner:8000"))
    pulled = pulled.splitlines()
    assert f"- name: {ENV}" in pulled


def test_a_file_is_verified_against_the_familys_own_default(toy) -> None:
    checked = KernelRunner(
        Problem(3, 96, 80, None, "bfloat16", family="toy", params=(("G", 2),)), device="cpu"
    ).check(SPACE[0])  # the toy's kernel against its float64 reference
    assert checked.status is TrialStatus.OK and checked.rel_error < 1e-2, checked
    faster = KernelConfig(32, 32, 32, 1, 4, 2)
    configs = {1: SMALL.as_dict(), 32: faster.as_dict(), 4096: WIDE.as_dict()}
    made = []

    def make_runner(N: int, K: int, M: int) -> FakeRunner:
        made.append((N, K, M))
        return FakeRunner({faster: [10.0] * 4, LARGE: [5.0] * 4})

    # M=1 and 8 run the toy's own default (nothing timed); M=24 picks key 32, timed against
    # the toy's default at M=24 (LARGE, not the dense GEMM's), so slower; M=4096's
    # BLOCK_SIZE_K=256 breaks the toy's rule for K=64.
    m_points = [1, 8, 24, 4096]
    shape = Shape(64, 64, None, (("G", 2),))
    planned = PlannedShape(shape, configs, tuple(m_points))
    result = verify_shape(planned, make_runner, rounds=4, family="toy")
    error = "invalid config: BLOCK_SIZE_K=256 is more than K=64"
    assert result.points == (
        PointResult(1, 1, SMALL, Verdict.OK, False),
        PointResult(8, 1, SMALL, Verdict.OK, False),
        PointResult(24, 32, faster, Verdict.SLOWER, True, 10.0, 5.0, 0.0),
        PointResult(4096, 4096, WIDE, Verdict.FAILED, False, error=error),
    )
    assert made == [(64, 64, 24)]


def test_a_file_is_imported_as_its_own_familys_and_exported_as_it_was(tmp_path, toy) -> None:
    name = TOY.files.file_name(toy_shape(128, 256, 2), "NVIDIA_L20", "vllm")
    assert name == "toy,G=2,N=128,K=256,device_name=NVIDIA_L20.json"
    data = dump_config_file({1: SMALL.as_dict(), 64: LARGE.as_dict()}).encode()
    (tmp_path / name).write_bytes(data)
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    args = ["import", str(tmp_path / name), "--db", db, "--no-check", "--no-publish"]
    result = CliRunner().invoke(app, [*args, "--label", "mine"])  # replacing: tests/db/test_files
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"imported {name} for NVIDIA_L20 as 'mine': ")
    engine = open_store(db)
    with session_scope(engine) as session:
        columns = (ImportedFile.family, ImportedFile.shape_params, ImportedFile.N)
        rows = session.execute(
            select(*columns, ImportedFile.block_n, ImportedFile.block_k, ImportedFile.label)
        ).all()
        imported = repo.imported_configs(session, device_name="NVIDIA_L20")
    engine.dispose()
    assert [tuple(row) for row in rows] == [("toy", "G=2", 128, 0, 0, "mine")]
    # Keyed by its own family: never taken for the dense GEMM's file of (128, 256).
    assert list(imported) == [("toy", "G=2", 128, 256, None)]
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["export", "--device", "NVIDIA_L20", "--out", str(out), "--db", db]
    )
    assert result.exit_code == 0, result.output
    assert [p.name for p in out.iterdir()] == [name] and (out / name).read_bytes() == data


def advise(out, asked) -> None:
    """The toy's doctor advice (`KernelFamily.advice`): one line, and vLLM reads its files."""
    out.lines.append(f"toy on {asked.arch} ({asked.table_arch})")
    out.helps.append("toy")


def test_doctor_says_what_a_registered_family_says_of_itself(monkeypatch) -> None:
    from tuner.cli import doctor
    from tuner.kernels.serving import Diagnosis

    monkeypatch.setitem(FAMILIES, "toy", dataclasses.replace(TOY, advice=advise))
    out = Diagnosis()
    doctor.advise(out, "sm90")
    assert out.lines[-1] == "toy on sm90 (sm90)"
    assert out.helps == ["moe", "toy"]  # sm90: vLLM runs the Triton MoE kernel by default
