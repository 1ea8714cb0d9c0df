"""A worker's task loop when things go wrong: a crashed trial on CUDA ends the process (after
recording it), a task taken from the worker stops it without recording anything."""

import dataclasses
from dataclasses import replace

import pytest

from db import repo
from db.connection import open_store, session_scope
from tests.tuner.run.test_worker import ENV, SPEC, claim
from tuner.core import TrialStatus
from tuner.kernels.dense.space import vllm_space
from tuner.measure import runners
from tuner.measure.runners import make_runner
from tuner.measure.trial import TrialResult
from tuner.run.worker import ContextLost, TaskLost, WorkerSpec, run_task

CRASHING_BLOCK_SIZE_N = 256


class StubRunner:
    """Deterministic latencies; configs with BLOCK_SIZE_N 256 crash like a broken kernel."""

    measured: list = []

    def __init__(self, problem, *, device, seed, interpreter_reps=3, warmup_s, rep_s):
        self.problem = problem
        StubRunner.budgets = (warmup_s, rep_s)

    def evaluate(self, config):
        StubRunner.measured.append(config)
        if config.BLOCK_SIZE_N == CRASHING_BLOCK_SIZE_N:
            return TrialResult(TrialStatus.CRASHED, error="RuntimeError: illegal memory access")
        latency = 100.0 - config.BLOCK_SIZE_M / 8 + config.num_stages
        return TrialResult(TrialStatus.OK, latency, latency - 1, latency + 1, 1e-3, None, 0.01)

    def sample_us(self, config):
        """Re-timing of the finalists: the trial's latency."""
        return 100.0 - config.BLOCK_SIZE_M / 8 + config.num_stages


@pytest.fixture(autouse=True)
def stub_runner(monkeypatch):
    monkeypatch.setattr(runners, "KernelRunner", StubRunner)
    StubRunner.measured = []


def make_store(folder, backend):
    url = f"sqlite:///{folder}/tuner.db"
    engine = open_store(url)
    spec = replace(SPEC, device_name="NVIDIA_L20", strategy="grid", space="custom")
    env = dict(ENV, device_name="NVIDIA_L20", gpu_name="NVIDIA L20", compute_capability="8.9")
    with session_scope(engine) as session:
        sweep, _ = repo.create_sweep(session, spec)
        environment_id = repo.get_or_create_environment(session, **env)
    runner = make_runner(backend, device_name="NVIDIA_L20")
    return engine, WorkerSpec(url, sweep.sweep_id, "w1", runner), environment_id


def stored(engine, task_id):
    with session_scope(engine) as session:
        return [
            (t.config["BLOCK_SIZE_N"], t.status) for t in repo.task_trials(session, task_id=task_id)
        ]


# vLLM's default first (BLOCK_SIZE_N 128), then the grid in order: its 4th config crashes.
SPACE = [
    c
    for c in vllm_space()
    if c.BLOCK_SIZE_K == 128
    and c.GROUP_SIZE_M == 1
    and c.num_warps == 4
    and c.num_stages == 2
    and c.BLOCK_SIZE_M in (16, 32)
][:6]


def test_a_crash_on_cuda_restarts_the_process_and_the_task_goes_on(tmp_path):
    assert [c.BLOCK_SIZE_N for c in SPACE] == [32, 64, 128, 256, 32, 64]
    (tmp_path / "interpreter").mkdir()
    engine, spec, environment_id = make_store(tmp_path / "interpreter", "interpreter")
    task = claim(engine, spec)
    run_task(engine, spec, task, environment_id, SPACE)  # records the crash and goes on
    uninterrupted = stored(engine, task.task_id)
    assert uninterrupted[:5] == [(128, "ok"), (32, "ok"), (64, "ok"), (128, "ok"), (256, "crashed")]
    assert len(uninterrupted) > 5

    engine, spec, environment_id = make_store(tmp_path, "cuda")
    task = claim(engine, spec)
    StubRunner.measured = []
    with pytest.raises(ContextLost, match="illegal memory access"):
        run_task(engine, spec, task, environment_id, SPACE)
    assert stored(engine, task.task_id) == uninterrupted[:5]  # the crash is recorded first
    # the next process: the crash is answered from the store, not measured again
    with session_scope(engine) as session:
        repo.release_tasks(session, worker_id="w1")
    spec = dataclasses.replace(spec, worker_id="w2")
    task = claim(engine, spec)
    StubRunner.measured = []
    run_task(engine, spec, task, environment_id, SPACE)
    assert [c.BLOCK_SIZE_N for c in StubRunner.measured] == [n for n, _ in uninterrupted[5:]]
    assert stored(engine, task.task_id) == uninterrupted


def test_a_task_taken_from_the_worker_records_nothing(tmp_path):
    engine, spec, environment_id = make_store(tmp_path, "cuda")
    task = claim(engine, spec)
    with session_scope(engine) as session:
        repo.release_tasks(session, worker_id=spec.worker_id)
    with pytest.raises(TaskLost, match=f"task {task.task_id} is no longer held by w1"):
        run_task(engine, spec, task, environment_id, SPACE)
    assert stored(engine, task.task_id) == []
    assert StubRunner.measured == []  # not even the default config was measured


@pytest.mark.parametrize("usable", [True, False])
def test_a_task_that_fails_on_a_broken_cuda_context_restarts_the_process(
    tmp_path, monkeypatch, usable
):
    """An error outside a trial (here: in re-timing) fails its task; if it left the CUDA context
    unusable, the process exits for a fresh one instead of failing every later task at once."""
    from sqlalchemy import select

    from db.models import Task
    from tuner.run import worker

    engine, spec, _ = make_store(tmp_path, "cuda")
    env = dict(ENV, device_name="NVIDIA_L20", gpu_name="NVIDIA L20", compute_capability="8.9")
    calls = []

    def failing_task(*args, **kwargs):
        calls.append(args[2].task_id)
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(runners.GpuRunner, "environment", lambda self, kernel, family: env)
    monkeypatch.setattr(worker, "_record_ceilings", lambda store, environment_id, device: None)
    monkeypatch.setattr(worker, "run_task", failing_task)
    monkeypatch.setattr(worker, "_cuda_usable", lambda: usable)
    if usable:
        worker.worker_main(spec)  # the task fails; nothing else to claim, the worker returns
    else:
        with pytest.raises(SystemExit) as exit_:
            worker.worker_main(spec)
        assert exit_.value.code == worker.EXIT_RESTART
    with session_scope(engine) as session:
        assert session.scalars(select(Task.state)).all() == ["failed"]
    assert len(calls) == 1
