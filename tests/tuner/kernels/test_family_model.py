"""A kernel family that a test registers (tests/toyfamily, one monkeypatched registry entry) is
read from a model's shapes file under its own key, planned into sweeps as it says, swept on the
interpreter and shown in the HTML report: no product module names it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from db import repo
from db.connection import open_store, session_scope
from tests.toyfamily.family import TOY3
from tuner.inputs.shapes import ShapesFileError, load_shapes, render_shapes_file
from tuner.kernels.config import KernelConfig
from tuner.kernels.family import Shape
from tuner.kernels.registry import FAMILIES
from tuner.measure.runners import InterpreterRunner
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
    assert model.of("toy3") == (
        Shape(128, 128, (128, 128), (("G", 2),)),
        Shape(256, 128, (128, 128), (("G", 2),)),
        Shape(128, 256, (128, 128), (("G", 5),)),
    )
    # The family writes its rows back as they were read, after the families before it.
    assert render_shapes_file("toymodel", "d", (128, 128), {1: ("s", model.groups)}) == TOML
    path.write_text(TOML.replace("[128, 256, 5]", "[128, 256]"))
    with pytest.raises(ShapesFileError, match=r"TP 1: toy \[128, 256\] is not \[N, K, G\]$"):
        load_shapes("toymodel", 1)


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
    url = f"sqlite:///{tmp_path}/tuner.db"
    engine = open_store(url)
    request = requests[1][0]
    opened = plan(engine, request)
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
        tasks.append((task.family, task.shape_params, task.N, task.K))
        run_task(engine, spec, task, environment_id, request.space)
    engine.dispose()
    assert sorted(tasks) == [("toy3", "G=2", 128, 128), ("toy3", "G=2", 256, 128)]
    with TestClient(create_app(Settings(db_url=url))) as client:
        page = client.get("/devices/TRITON_INTERPRETER/report", params={"allow_stale": True})
    assert page.status_code == 200, page.text
    html = page.text
    for N in (128, 256):  # the family's generic label and anchor: its name, params, N, K
        assert (
            f'<section class="shape" id="shape-toy3-G2-{N}x128"><h2>toy3 G=2, N={N}, '
            f"K=128, block_shape [128, 128] (toymodel)</h2>"
        ) in html
        assert f'<a href="#shape-toy3-G2-{N}x128">toy3 G=2, N={N}, K=128</a>' in html
