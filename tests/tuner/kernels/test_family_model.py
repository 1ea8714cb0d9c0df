"""A kernel family that a test registers (tests/toyfamily, one monkeypatched registry entry) is
read from a model's shapes file under its own key, planned into sweeps as it says, swept on the
interpreter, checked against the float64 reference, shown in the HTML report and merged into
its own files: no product module names it. It has no block scales (per-tensor): its block shape
is None from the shapes file to the store (0/0 there) and back, `null` over HTTP, "per-tensor"
in text."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from api.app import create_app
from api.settings import Settings
from db import repo
from db.connection import open_store, session_scope
from db.models import ReleaseFile, Sweep, Task
from tests.toyfamily.family import TOY3
from tuner.files.device import device_files
from tuner.files.release import publish
from tuner.inputs.shapes import ShapesFileError, load_shapes, render_shapes_file
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import FAMILIES
from tuner.kernels.shape import Shape
from tuner.measure.runner import KernelRunner, Problem
from tuner.measure.runners import InterpreterRunner
from tuner.measure.trial import TrialStatus
from tuner.run.plan import model_requests, plan
from tuner.run.task import run_task
from tuner.run.worker_spec import WorkerSpec

# The dense GEMM's key as before, and the toy family's own: two shapes of one G (one sweep),
# one of another G (a sweep of its own: a sweep tunes one set of a family's params).
TOML = (
    'model = "toymodel"\ndescription = "d"\nblock_shape = [128, 128]\n\n'
    '[tp.1]\nsource = "s"\nshapes = [\n    [256, 128],\n]\n'
    "toy = [\n    [128, 128, 2],\n    [256, 128, 2],\n    [128, 256, 5],\n]\n"
)
SPACE = (KernelConfig(32, 64, 128, 1, 4, 2), KernelConfig(16, 128, 64, 1, 4, 2))


def _write_model() -> Path:
    path = Path(os.environ["TUNER_SHAPES_DIR"]) / "toymodel.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(TOML)
    return path


def test_a_shapes_key_belongs_to_its_registered_family(monkeypatch) -> None:
    path = _write_model()
    with pytest.raises(ShapesFileError) as unknown:  # not registered: nobody reads `toy`
        load_shapes("toymodel", 1)
    assert str(unknown.value) == (
        f"{path}, TP 1: unknown key(s) 'toy'; allowed: source, shapes, moe"
    )
    monkeypatch.setitem(FAMILIES, TOY3.name, TOY3)
    model = load_shapes("toymodel", 1)
    assert model.pairs() == ((256, 128),)
    assert model.of("toy3") == (  # the model's block_shape is the dense GEMM's, not the toy's
        Shape(128, 128, None, (("G", 2),)),
        Shape(256, 128, None, (("G", 2),)),
        Shape(128, 256, None, (("G", 5),)),
    )
    assert model.of("dense") == (Shape(256, 128, (128, 128)),)
    # The family writes its rows back as they were read, after the families before it.
    assert render_shapes_file("toymodel", "d", (128, 128), {1: ("s", model.groups)}) == TOML
    path.write_text(TOML.replace("[128, 256, 5]", "[128, 256]"))
    with pytest.raises(ShapesFileError, match=r"TP 1: toy \[128, 256\] is not \[N, K, G\]$"):
        load_shapes("toymodel", 1)


def test_the_toy_quantizes_per_tensor_and_matches_the_float64_reference(monkeypatch) -> None:
    monkeypatch.setitem(FAMILIES, TOY3.name, TOY3)
    shape = Shape(128, 256, None, (("G", 2),))
    workload = TOY3.workload(shape, 3, seed=0, device="cpu")
    # One weight scale for the whole weight, one activation scale per row of A.
    assert tuple(workload.inputs.Bs.shape) == (1, 1)
    assert tuple(workload.inputs.As.shape) == (3, 1)
    assert TOY3.why_invalid(KernelConfig(16, 64, 128, 1, 4, 2), shape) is None
    assert TOY3.why_invalid(KernelConfig(16, 64, 512, 1, 4, 2), shape) == (
        "BLOCK_SIZE_K=512 does not divide group_k=256"
    )
    problem = Problem(3, 128, 256, None, "bfloat16", family="toy3", params=shape.params)
    checked = KernelRunner(problem, device="cpu").check(SPACE[0])
    assert checked.status is TrialStatus.OK and checked.rel_error < 1e-2, checked


def _sweep_toy(url: str, request) -> tuple[int, list]:
    """Open the toy's sweep in the store at `url` and run its tasks on the interpreter; the
    sweep's id and the claimed tasks."""
    engine = open_store(url)
    opened = plan(engine, request)
    assert opened.info.block_shape is None
    with session_scope(engine) as session:
        environment_id = repo.get_or_create_environment(
            session,
            device_name="TRITON_INTERPRETER",
            gpu_name="TRITON_INTERPRETER",
            compute_capability="",
            driver="",
            cuda="",
            torch="t",
            triton="t",
            tuner="t",
            kernel_hash="h",
        )
    spec = WorkerSpec(
        db_url=url,
        sweep_id=opened.info.sweep_id,
        worker_id="w",
        runner=InterpreterRunner("TRITON_INTERPRETER", reps=1),
    )
    tasks = []
    while True:
        with session_scope(engine) as session:
            task = repo.claim_task(
                session, sweep_id=opened.info.sweep_id, worker_id="w", lease_s=600
            )
        if task is None:
            break
        tasks.append(task)
        run_task(engine, spec, task, environment_id, request.space)
    engine.dispose()
    return opened.info.sweep_id, tasks


def test_a_registered_family_is_planned_swept_and_reported(tmp_path, monkeypatch) -> None:
    _write_model()
    monkeypatch.setitem(FAMILIES, TOY3.name, TOY3)
    model = load_shapes("toymodel", 1)
    requests = model_requests(
        model,
        device_name="TRITON_INTERPRETER",
        model=model.model,
        tp=model.tp,
        block_shape=model.block_shape,
        m_values=(2,),
        strategy="grid",
        trials=3,
        seed=0,
        out_dtype="bfloat16",
        configs=SPACE,
    )
    assert [(r.family, r.params, r.shapes, words) for r, words in requests] == [
        ("dense", (), ((256, 128),), "1 shapes"),
        ("toy3", (("G", 2),), ((128, 128), (256, 128)), "2 toy shape(s)"),
        ("toy3", (("G", 5),), ((128, 256),), "1 toy shape(s)"),
    ]
    assert [r.block_shape for r, _ in requests] == [(128, 128), None, None]
    url = f"sqlite:///{tmp_path}/tuner.db"
    sweep_id, tasks = _sweep_toy(url, requests[1][0])
    assert sorted((t.family, t.shape_params, t.N, t.K, t.block_shape) for t in tasks) == [
        ("toy3", "G=2", 128, 128, None),
        ("toy3", "G=2", 256, 128, None),
    ]
    engine = open_store(url)
    with session_scope(engine) as session:
        # The store's encoding of no block shape: 0/0, never NULL.
        stored = session.get(Sweep, sweep_id)
        assert stored is not None and (stored.block_n, stored.block_k) == (0, 0)
        assert repo.get_sweep(session, sweep_id=sweep_id).block_shape is None
        task_ids = session.scalars(select(Task.task_id).where(Task.sweep_id == sweep_id)).all()
        trials = [t for i in task_ids for t in repo.task_trials(session, task_id=i)]
        winners = repo.winners(session, device_name="TRITON_INTERPRETER")
        coverage = repo.shape_coverage(session, device_name="TRITON_INTERPRETER")
        read = device_files(
            session, "TRITON_INTERPRETER", out_dtype=None, allow_stale=True, allow_partial=False
        )
        publish(session, "TRITON_INTERPRETER", reason="test", allow_stale=True)
    with session_scope(engine) as session:
        released = repo.get_release(session, device_name="TRITON_INTERPRETER")
        release_rows = session.execute(select(ReleaseFile.block_n, ReleaseFile.block_k)).all()
    engine.dispose()
    assert released is not None and {f.block_shape for f in released.files} == {None}
    assert [tuple(row) for row in release_rows] == [(0, 0), (0, 0)]
    # Every config ran and matched the float64 reference (the runner's check).
    assert len(trials) == 6 and all(t.status == "ok" and t.rel_error < 1e-2 for t in trials)
    assert {(w.N, w.K, w.block_shape) for w in winners} == {(128, 128, None), (256, 128, None)}
    assert [(c.N, c.K, c.block_shape) for c in coverage] == [(128, 128, None), (256, 128, None)]
    # Merged into the family's own files, named without a block shape.
    assert [f.file_name for f in read.files.files] == [
        "toy3,G=2,N=128,K=128,device_name=TRITON_INTERPRETER.json",
        "toy3,G=2,N=256,K=128,device_name=TRITON_INTERPRETER.json",
    ]
    assert {f.key.shape.block_shape for f in read.files.files} == {None}
    with TestClient(create_app(Settings(db_url=url))) as client:
        page = client.get("/devices/TRITON_INTERPRETER/report", params={"allow_stale": True})
        configs = client.get(
            "/devices/TRITON_INTERPRETER/preview/configs", params={"allow_stale": True}
        )
        sweep = client.get(f"/sweeps/{sweep_id}")
        release = client.get("/devices/TRITON_INTERPRETER/configs")
    assert page.status_code == 200, page.text
    html = page.text
    for N in (128, 256):  # the family's generic label and anchor: its name, params, N, K
        assert (
            f'<section class="shape" id="shape-toy3-G2-{N}x128"><h2>toy3 G=2, N={N}, '
            f"K=128, per-tensor (toymodel)</h2>"
        ) in html
        assert f'<a href="#shape-toy3-G2-{N}x128">toy3 G=2, N={N}, K=128</a>' in html
    assert configs.status_code == 200, configs.text
    assert [(f["file_name"], f["block_shape"]) for f in configs.json()["files"]] == [
        ("toy3,G=2,N=128,K=128,device_name=TRITON_INTERPRETER.json", None),
        ("toy3,G=2,N=256,K=128,device_name=TRITON_INTERPRETER.json", None),
    ]
    assert sweep.status_code == 200, sweep.text
    assert sweep.json()["block_shape"] is None
    assert release.status_code == 200, release.text
    assert release.json()["files"] == configs.json()["files"]
