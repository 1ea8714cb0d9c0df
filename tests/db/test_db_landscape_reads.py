"""Reads for landscapes and warm starts: every trial of a device, winners of done tasks."""

from __future__ import annotations

from sqlalchemy import Engine

from db import repo
from db.connection import session_scope
from tests.storefill import DENSE_SWEEP

DEFAULT = {
    "BLOCK_SIZE_M": 64,
    "BLOCK_SIZE_N": 128,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 32,
    "num_warps": 4,
    "num_stages": 2,
}
FAST = {**DEFAULT, "BLOCK_SIZE_M": 16}
OTHER = {**DEFAULT, "num_stages": 3}
ENV = {
    "gpu_name": "NVIDIA L20",
    "compute_capability": "8.9",
    "driver": "570",
    "cuda": "12.8",
    "torch": "2.11.0",
    "triton": "3.6.0",
    "tuner": "0.1.0",
    "kernel_hash": "k1",
}


def _setup(engine: Engine) -> dict[str, int]:
    """One L20 sweep over (256, 512) x M 1, 16 with trials; M=1 done, M=16 still running; and
    an interpreter sweep that must not show up."""
    with session_scope(engine) as session:
        env = repo.get_or_create_environment(session, device_name="NVIDIA_L20", **ENV)
        other_env = repo.get_or_create_environment(
            session, device_name="TRITON_INTERPRETER", **{**ENV, "gpu_name": "TRITON_INTERPRETER"}
        )
        ids = {"env": env}
        for device, key in (("NVIDIA_L20", "l20"), ("TRITON_INTERPRETER", "cpu")):
            info, _ = repo.create_sweep(
                session,
                device_name=device,
                model="m",
                tp=1,
                strategy="grid",
                budget=3,
                space="vllm",
                seed=0,
                m_values=[1, 16],
                out_dtype="bfloat16",
                block_shape=(128, 128),
                shapes=[(256, 512)],
                **DENSE_SWEEP,
            )
            ids[key] = info.sweep_id
    with session_scope(engine) as session:
        tasks = {}
        while (
            task := repo.claim_task(session, sweep_id=ids["l20"], worker_id="w", lease_s=60)
        ) is not None:
            tasks[task.M] = task.task_id
        cpu_task = repo.claim_task(session, sweep_id=ids["cpu"], worker_id="w", lease_s=60)
        rows = [
            (tasks[1], DEFAULT, "ok", 10.0, True),
            (tasks[1], FAST, "ok", 6.0, False),
            (tasks[1], OTHER, "out_of_resources", None, False),
            (tasks[16], DEFAULT, "ok", 12.0, True),
            (tasks[16], OTHER, "ok", 7.0, False),
        ]
        for task_id, config, status, latency, is_default in rows:
            repo.record_trial(
                session,
                task_id=task_id,
                environment_id=env,
                config=config,
                is_default=is_default,
                status=status,
                latency_us=latency,
                p20_us=latency,
                p80_us=latency,
            )
        repo.record_trial(
            session,
            task_id=cpu_task.task_id,
            environment_id=other_env,
            config=FAST,
            is_default=False,
            status="ok",
            latency_us=1.0,
        )
        repo.finish_task(session, task_id=tasks[1], worker_id="w")
    return ids


def test_device_trials_are_every_trial_of_the_device_with_its_environment(engine: Engine):
    ids = _setup(engine)
    with session_scope(engine) as session:
        rows = repo.device_trials(session, device_name="NVIDIA_L20")
        assert repo.device_trials(session, device_name="NVIDIA_L20", out_dtype="float16") == []
    assert [(r.M, r.config, r.status, r.latency_us) for r in rows] == [
        (1, DEFAULT, "ok", 10.0),
        (1, FAST, "ok", 6.0),
        (1, OTHER, "out_of_resources", None),
        (16, DEFAULT, "ok", 12.0),
        (16, OTHER, "ok", 7.0),
    ]
    assert {(r.N, r.K, r.block_shape, r.out_dtype, r.space) for r in rows} == {
        (256, 512, (128, 128), "bfloat16", "vllm")
    }
    assert {r.environment_id for r in rows} == {ids["env"]}
    assert rows[0].environment == ENV
    assert [r.trial_id for r in rows] == sorted(r.trial_id for r in rows)


def test_task_winners_are_the_fastest_ok_trial_of_done_tasks(engine: Engine):
    _setup(engine)
    with session_scope(engine) as session:
        winners = repo.task_winners(
            session,
            device_name="NVIDIA_L20",
            block_shape=(128, 128),
            out_dtype="bfloat16",
            family="dense",
        )
        assert (
            repo.task_winners(
                session,
                device_name="NVIDIA_L20",
                block_shape=(128, 64),
                out_dtype="bfloat16",
                family="dense",
            )
            == []
        )
        assert (
            repo.task_winners(
                session,
                device_name="NVIDIA_L20",
                block_shape=(128, 128),
                out_dtype="bfloat16",
                kernel_hash="other",
                family="dense",
            )
            == []
        )
    # M=16 is still running: its 7.0 us trial is not a winner yet.
    assert [(w.N, w.K, w.M, w.config, w.latency_us) for w in winners] == [(256, 512, 1, FAST, 6.0)]


def test_related_trials_are_the_ok_trials_of_done_tasks_at_the_same_nk_or_the_same_m(
    engine: Engine,
):
    """(256, 512) and (512, 256) at M 1 and 16, three tasks done: the trials a search of
    (256, 512, 16) learns from are those of (256, 512, 1) and (512, 256, 16), not of
    (512, 256, 1) (another shape at another M) nor of its own task."""
    with session_scope(engine) as session:
        env = repo.get_or_create_environment(session, device_name="NVIDIA_L20", **ENV)
        info, _ = repo.create_sweep(
            session,
            device_name="NVIDIA_L20",
            model="m",
            tp=1,
            strategy="guided",
            budget=3,
            space="vllm",
            seed=0,
            m_values=[1, 16],
            out_dtype="bfloat16",
            block_shape=(128, 128),
            shapes=[(256, 512), (512, 256)],
            **DENSE_SWEEP,
        )
    with session_scope(engine) as session:
        tasks = {}
        while (
            task := repo.claim_task(session, sweep_id=info.sweep_id, worker_id="w", lease_s=60)
        ) is not None:
            tasks[(task.N, task.K, task.M)] = task.task_id
        for (n, k, m), task_id in sorted(tasks.items()):
            scale = n / 256 + m
            for config, status, latency in (
                (DEFAULT, "ok", 10.0 * scale),
                (FAST, "ok", 6.0 * scale),
                (OTHER, "out_of_resources", None),
            ):
                repo.record_trial(
                    session,
                    task_id=task_id,
                    environment_id=env,
                    config=config,
                    is_default=config == DEFAULT,
                    status=status,
                    latency_us=latency,
                )
            if (n, k, m) != (256, 512, 16):
                repo.finish_task(session, task_id=task_id, worker_id="w")
    with session_scope(engine) as session:
        rows = repo.related_trials(
            session,
            device_name="NVIDIA_L20",
            block_shape=(128, 128),
            out_dtype="bfloat16",
            N=256,
            K=512,
            M=16,
            family="dense",
        )
        first = min(t.created_at for t in repo.task_trials(session, task_id=tasks[(256, 512, 16)]))
        before = repo.related_trials(
            session,
            device_name="NVIDIA_L20",
            block_shape=(128, 128),
            out_dtype="bfloat16",
            N=256,
            K=512,
            M=16,
            finished_before=first,
            family="dense",
        )
        assert (
            repo.related_trials(
                session,
                device_name="NVIDIA_L20",
                block_shape=(128, 64),
                out_dtype="bfloat16",
                N=256,
                K=512,
                M=16,
                family="dense",
            )
            == []
        )
    assert [(r.N, r.K, r.M, r.config, r.latency_us) for r in rows] == [
        (256, 512, 1, DEFAULT, 20.0),
        (256, 512, 1, FAST, 12.0),
        (512, 256, 16, DEFAULT, 180.0),
        (512, 256, 16, FAST, 108.0),
    ]
    # Its first trial was stored after (256, 512, 1) finished and before (512, 256, 16) did: a
    # resumption learns from what the first run learnt from.
    assert before == rows[:2]
