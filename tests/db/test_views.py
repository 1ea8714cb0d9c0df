"""What the store's rows say: the winner per (N, K, block_shape, M) over sweeps (decided configs
first, else the newest task's fastest ok trial), the provenance filter, M-grid coverage, sweep
progress, the warm starts and related trials of a search, a device's trials, overviews."""

from __future__ import annotations

from dataclasses import fields

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from bench.store_trials import device_trials
from db import repo
from db.connection import open_store, session_scope
from db.views import matching_environments
from tests.db.conftest import (
    C0,
    C1,
    C2,
    C3,
    C4,
    ENV,
    claim_all,
    decide,
    decision,
    environment,
    retime,
    sweep,
    trials,
)
from tests.storefill import DEFAULT, FAST, SLOW, TRITON, fill

L20 = "NVIDIA_L20"
WARM = {"device_name": L20, "block_shape": (128, 128), "out_dtype": "bfloat16", "family": "dense"}
CURRENT = {"kernel_hash": "k1", "triton_minor": "3.6"}


@pytest.fixture
def store(engine: Engine) -> dict[str, int]:
    """Two bfloat16 sweeps and one float16 sweep on NVIDIA_L20, one on the interpreter."""
    with session_scope(engine) as session:
        env = environment(session)
        a = sweep(session, model="ModelA", shapes=[(256, 512), (512, 256)])
        b = sweep(session, model="ModelB", strategy="optuna", m_values=[16, 32])
        c = sweep(session, model="ModelA", m_values=[1], out_dtype="float16")
        other = sweep(session, device_name="TRITON_INTERPRETER", m_values=[1])
        in_a, in_b = claim_all(session, a), claim_all(session, b)
        a1, a16, b16, b32 = in_a[(256, 512, 1)], in_a[(256, 512, 16)], in_b[16], in_b[32]
        failed = [(C2, False, 1.0, "wrong_result"), (C3, False, None, "compile_error")]
        trials(session, a1, env, [(C0, True, 10.0), (C1, False, 8.0), *failed])
        trials(session, a1, env, [(C4, False, 8.0)])  # ties C1, recorded later: C1 wins
        trials(session, a16, env, [(C0, True, 20.0), (C1, False, 15.0)])
        trials(session, b16, env, [(C0, True, 18.0), (C2, False, 12.0)])
        trials(session, b32, env, [(C1, False, 30.0)])  # no default trial in this task
        trials(session, claim_all(session, c)[1], env, [(C3, False, 5.0)])  # float16 sweep
        trials(session, claim_all(session, other)[1], env, [(C3, False, 0.5)])  # other device
        for done in (a1, b32):  # finish one of a and of b, give the rest back
            repo.finish_task(session, task_id=done, worker_id="w")
        repo.release_tasks(session, worker_id="w")
    return {"a": a, "b": b, "env": env, "a1": a1, "a16": a16, "b16": b16, "b32": b32}


def test_the_winner_per_m_is_the_newest_tasks_fastest_ok_trial(engine: Engine, store: dict) -> None:
    with session_scope(engine) as session:
        rows = repo.winners(session, device_name=L20, out_dtype="bfloat16")
    a1, b16, b32 = store["a1"], store["b16"], store["b32"]
    assert [
        (r.N, r.K, r.block_shape, r.M, r.config, r.latency_us, r.default_latency_us)
        + (r.is_default, r.task_id, r.decided, r.spread_us)
        for r in rows
    ] == [
        (256, 512, (128, 128), 1, C1, 8.0, 10.0, False, a1, False, None),
        (256, 512, (128, 128), 16, C2, 12.0, 18.0, False, b16, False, None),
        (256, 512, (128, 128), 32, C1, 30.0, None, False, b32, False, None),
    ]
    # M=16: sweep a's 15.0 us is not compared: b is newer.
    a, b = store["a"], store["b"]
    assert [(r.sweep_id, r.other_sweeps) for r in rows] == [(a, ()), (b, (a,)), (b, ())]
    assert {r.device_name for r in rows} == {L20} and list(rows[0].config) == list(C0)
    with session_scope(engine) as session:
        every = repo.winners(session, device_name=L20)
        cpu = repo.winners(session, device_name="TRITON_INTERPRETER")
        assert repo.winners(session, device_name="NVIDIA_H200") == []
        # A default config alone is the winner and the default.
        new = sweep(session, model="ModelC", m_values=[64])
        trials(session, claim_all(session, new)[64], store["env"], [(C0, True, 40.0)])
        last = repo.winners(session, device_name=L20, out_dtype="bfloat16")[-1]
    # Without a dtype filter the float16 sweep's 5 us trial wins M=1 (its task is newer).
    got = [(r.M, r.latency_us, r.default_latency_us) for r in every]
    assert got == [(1, 5.0, None), (16, 12.0, 18.0), (32, 30.0, None)]
    assert [(r.M, r.latency_us) for r in cpu] == [(1, 0.5)]
    assert (last.M, last.is_default, last.latency_us, last.default_latency_us) == (64, True, 40, 40)


def test_coverage_progress_and_devices(engine: Engine, store: dict) -> None:
    with session_scope(engine) as session:
        coverage = repo.shape_coverage(session, device_name=L20, out_dtype="bfloat16")
        all_dtypes = repo.shape_coverage(session, device_name=L20)
        (progress,) = repo.list_sweeps(session, sweep_id=store["a"])
        names = repo.known_device_names(session, swept=True)
        repo.get_or_create_device(session, device_name="NVIDIA_H200")  # no sweep: not listed
        assert repo.known_device_names(session, swept=True) == names == [L20, "TRITON_INTERPRETER"]
        assert repo.list_sweeps(session, sweep_id=999) == []
    assert [(c.N, c.K, c.block_shape, c.m_requested, c.m_done, c.models) for c in coverage] == [
        (256, 512, (128, 128), (1, 16, 32), (1, 32), ("ModelA", "ModelB")),
        (512, 256, (128, 128), (1, 16), (), ("ModelA",)),
    ]
    assert [(c.N, c.m_requested) for c in all_dtypes] == [(256, (1, 16, 32)), (512, (1, 16))]
    counts = [getattr(progress, f.name) for f in fields(repo.SweepInfo)][-7:]
    assert counts == [4, 3, 0, 1, 0, 7, 5]


def _decided(session: Session, task_id: int, worker: str, env: int, config: dict, us: float):
    is_default = config == C0
    kept = "default" if is_default else "fastest"
    made = decision(config, us, us if is_default else None, kept=kept, spread_us=0.5)
    assert decide(session, task_id, env, [retime(config, us, is_default=is_default)], made, worker)


def _standing(session: Session) -> list[tuple]:
    return [
        (r.M, r.config, r.latency_us, r.default_latency_us, r.is_default, r.task_id)
        + (r.sweep_id, r.other_sweeps, r.decided)
        for r in repo.winners(session, device_name=L20)
    ]


def test_a_decision_stands_over_faster_trials_and_the_last_one_made_wins(
    engine: Engine, held: dict
) -> None:
    env, first, t1, t16 = held["env"], held["first"], held["t1"], held["t16"]
    with session_scope(engine) as session:
        # M=1: C1 (7.0 us) is the fastest trial, but the re-timing kept C2: the gap was noise.
        retimes = [retime(C1, 7.25), retime(C2, 7.5), retime(C0, 10.0, is_default=True)]
        made = decision(C2, 7.5, 10.0, kept="simpler", spread_us=0.6, runner_up=C1)
        assert decide(session, t1, env, retimes, made)
        # Another sweep's undecided task of the same key has an even faster trial: still C2.
        second = sweep(session, model="ModelB", m_values=[1, 32])
        other = claim_all(session, second, worker_id="v")
        trials(session, other[1], env, [(C3, False, 5.0)])
        trials(session, other[32], env, [(C3, False, 30.0)])
        rows = repo.winners(session, device_name=L20)
    assert [
        (r.M, r.config, r.latency_us, r.default_latency_us, r.is_default)
        + (r.task_id, r.spread_us, r.decided, r.environment_id)
        for r in rows
    ] == [
        (1, C2, 7.5, 10.0, False, t1, 0.6, True, env),
        (16, C3, 15.0, 20.0, False, t16, None, False, env),
        (32, C3, 30.0, None, False, other[32], None, False, env),
    ]
    assert rows[0].other_sweeps == (second,)
    with session_scope(engine) as session:
        _decided(session, t16, "w", env, C3, 16.0)
        # Sweep 2 decides later: it stands, slower at M=1 (12.0 us against 7.5) and faster at
        # M=16; the latencies of the two runs are not compared.
        third = sweep(session, model="ModelC")
        later = claim_all(session, third, worker_id="u")
        _decided(session, later[1], "u", env, C2, 12.0)
        _decided(session, later[16], "u", env, C2, 15.5)
        assert _standing(session)[:2] == [
            (1, C2, 12.0, None, False, later[1], third, (first, second), True),
            (16, C2, 15.5, None, False, later[16], third, (first,), True),
        ]
        # Sweep 1's M=1 decides again (extended, new finalists): its decision stands now, the
        # default kept after re-timing.
        _decided(session, t1, "w", env, C0, 9.0)
        assert _standing(session)[0] == (1, C0, 9.0, 9.0, True, t1, first, (second, third), True)


@pytest.fixture
def versions(engine: Engine) -> dict[str, int]:
    """M = 1, 16, 32, 64 of one shape; environments of the current kernel on 3.6.1+git (and
    3.6), the current kernel on 3.60 and 3.5, an older kernel on 3.6.0.
    M=1: a stale (old kernel) trial is faster than the current ones.
    M=16: only trials of triton 3.60 and 3.5: no current winner.
    M=32: current trials only, in the 3.6 environment (no patch version).
    M=64: task left pending with a stale decision and a current trial.
    """
    with session_scope(engine) as session:
        env = {
            "current": environment(session, triton="3.6.1+git3f2a"),
            "plain": environment(session, triton="3.6"),
            "sixty": environment(session, triton="3.60.0"),
            "older_triton": environment(session, triton="3.5.0"),
            "old_kernel": environment(session, kernel_hash="k0"),
        }
        tasks = claim_all(session, sweep(session, m_values=[1, 16, 32, 64]))
        trials(session, tasks[1], env["current"], [(C0, True, 10.0), (C1, False, 8.0)])
        old = [(C2, False, 5.0), (C3, False, None, "wrong_result")]
        trials(session, tasks[1], env["old_kernel"], old)
        trials(session, tasks[16], env["sixty"], [(C1, False, 9.0)])
        trials(session, tasks[16], env["older_triton"], [(C0, True, 12.0)])
        trials(session, tasks[32], env["plain"], [(C0, True, 30.0), (C3, False, 25.0)])
        trials(session, tasks[64], env["current"], [(C4, False, 40.0)])
        made = decision(C1, 35.0, None, spread_us=1.0)
        assert decide(session, tasks[64], env["old_kernel"], [retime(C1, 35.0)], made)
        for M in (1, 16, 32):
            repo.finish_task(session, task_id=tasks[M], worker_id="w")
        repo.release_tasks(session, worker_id="w")
    return env


def _summary(rows: list[repo.WinnerRow]) -> list[tuple]:
    return [(r.M, r.config, r.latency_us, r.decided) for r in rows]


def test_only_current_trials_and_decisions_win(engine: Engine, versions: dict) -> None:
    with session_scope(engine) as session:
        current = repo.winners(session, device_name=L20, **CURRENT)
        stale = repo.winners(session, device_name=L20)
        kernel_only = repo.winners(session, device_name=L20, kernel_hash="k1")
        triton_only = repo.winners(session, device_name=L20, triton_minor="3.6")
        sixty = repo.winners(session, device_name=L20, triton_minor="3.60")
        assert repo.winners(session, device_name=L20, kernel_hash="k9") == []
        assert matching_environments(session, kernel_hash=None, triton_minor=None) is None
        wanted = sorted([versions["current"], versions["plain"]])
        assert matching_environments(session, **CURRENT) == wanted
        for bad in ("3", "3.6.0", "three.six", ""):
            with pytest.raises(ValueError, match="is not major.minor"):
                repo.winners(session, device_name=L20, triton_minor=bad)
        stale_trials = [
            repo.stale_trials(session, device_name=device, kernel_hash=kernel, triton_minor=minor)
            for device, kernel, minor in [
                (L20, "k1", "3.6"),
                (L20, "k1", None),
                (L20, None, None),
                ("NVIDIA_H200", "k1", "3.6"),
            ]
        ]
        assert stale_trials == [3, 1, 0, 0]
    assert _summary(current) == [(1, C1, 8.0, False), (32, C3, 25.0, False), (64, C4, 40.0, False)]
    got = [(r.default_latency_us, r.environment_id) for r in current]
    assert got == [
        (10.0, versions["current"]),
        (30.0, versions["plain"]),
        (None, versions["current"]),
    ]
    assert _summary(stale) == [
        (1, C2, 5.0, False),
        (16, C1, 9.0, False),
        (32, C3, 25.0, False),
        (64, C1, 35.0, True),
    ]
    names = ["old_kernel", "sixty", "plain", "old_kernel"]
    assert [r.environment_id for r in stale] == [versions[name] for name in names]
    assert _summary(kernel_only) == [
        (1, C1, 8.0, False),
        (16, C1, 9.0, False),
        (32, C3, 25.0, False),
        (64, C4, 40.0, False),
    ]
    assert _summary(triton_only) == [
        (1, C2, 5.0, False),
        (32, C3, 25.0, False),
        (64, C1, 35.0, True),
    ]
    assert _summary(sixty) == [(16, C1, 9.0, False)]


def test_coverage_and_warm_starts_count_current_trials_only(engine: Engine, versions: dict) -> None:
    with session_scope(engine) as session:
        (current,) = repo.shape_coverage(session, device_name=L20, **CURRENT)
        (every,) = repo.shape_coverage(session, device_name=L20)
        (old,) = repo.shape_coverage(session, device_name=L20, kernel_hash="k0")
        warm = repo.task_winners(session, **WARM, **CURRENT)
        every_warm = repo.task_winners(session, **WARM)
    grid = (1, 16, 32, 64)
    assert (current.m_requested, current.m_done, current.m_stale) == (grid, (1, 32), (16,))
    assert (every.m_requested, every.m_done, every.m_stale) == (grid, (1, 16, 32), ())
    # Old kernel: M=1 has an old trial (done); M=64 has only an old decision (task pending);
    # M=16 and M=32 have only trials of the current kernel.
    assert (old.m_done, old.m_stale) == ((1,), (16, 32))
    assert [(r.M, r.config, r.latency_us) for r in warm] == [(1, C1, 8.0), (32, C3, 25.0)]
    assert [(r.M, r.latency_us) for r in every_warm] == [(1, 5.0), (16, 9.0), (32, 25.0)]


def test_warm_starts_related_trials_and_device_trials(engine: Engine) -> None:
    """(256, 512) and (512, 256) at M 1 and 16, all but (256, 512, 16) done: the warm starts
    are the fastest ok trial of done tasks; the trials a search of (256, 512, 16) learns from
    are those of (256, 512, 1) and (512, 256, 16), not of (512, 256, 1) nor of its own task."""
    with session_scope(engine) as session:
        env = environment(session)
        tasks = claim_all(session, sweep(session, shapes=[(256, 512), (512, 256)]))
        cpu_env = environment(session, device_name="TRITON_INTERPRETER")
        cpu = claim_all(session, sweep(session, device_name="TRITON_INTERPRETER", m_values=[1]))
        trials(session, cpu[1], cpu_env, [(C1, False, 1.0)])  # another device: never shown
    with session_scope(engine) as session:
        for (n, k, m), task_id in sorted((k, t) for k, t in tasks.items() if isinstance(k, tuple)):
            scale = n / 256 + m
            rows = [(C0, True, 10.0 * scale), (C1, False, 6.0 * scale)]
            trials(session, task_id, env, rows + [(C3, False, None, "out_of_resources")])
            if (n, k, m) != (256, 512, 16):
                repo.finish_task(session, task_id=task_id, worker_id="w")
    nkm, other_block = {"N": 256, "K": 512, "M": 16}, {**WARM, "block_shape": (128, 64)}
    with session_scope(engine) as session:
        warm = repo.task_winners(session, **WARM)
        assert repo.task_winners(session, **other_block) == []
        related = repo.related_trials(session, **WARM, **nkm)
        first = min(t.created_at for t in repo.task_trials(session, task_id=tasks[(256, 512, 16)]))
        before = repo.related_trials(session, **WARM, **nkm, finished_before=first)
        assert repo.related_trials(session, **other_block, **nkm) == []
        device = device_trials(session, device_name=L20)
        assert device_trials(session, device_name=L20, out_dtype="float16") == []
    # (256, 512, 16) is still running: its 102 us trial is not a warm start yet.
    got = [(w.N, w.K, w.M, w.config, w.latency_us) for w in warm]
    assert got == [(256, 512, 1, C1, 12.0), (512, 256, 1, C1, 18.0), (512, 256, 16, C1, 108.0)]
    assert [(r.N, r.K, r.M, r.config, r.latency_us) for r in related] == [
        (256, 512, 1, C0, 20.0),
        (256, 512, 1, C1, 12.0),
        (512, 256, 16, C0, 180.0),
        (512, 256, 16, C1, 108.0),
    ]
    # Its first trial was stored after (256, 512, 1) finished and before (512, 256, 16) did: a
    # resumption learns from what the first run learnt from.
    assert before == related[:2]
    got = [(r.N, r.M, r.config, r.status, r.latency_us) for r in device[:3]]
    assert got == [
        (256, 1, C0, "ok", 20.0),
        (256, 1, C1, "ok", 12.0),
        (256, 1, C3, "out_of_resources", None),
    ]
    assert len(device) == 12 and [r.trial_id for r in device] == sorted(r.trial_id for r in device)
    got = {(r.block_shape, r.out_dtype, r.space, r.environment_id) for r in device}
    assert got == {((128, 128), "bfloat16", "vllm", env)}
    assert device[0].environment == {k: v for k, v in ENV.items() if k != "device_name"}


def test_families_never_mix_in_winners_coverage_or_warm_starts(engine: Engine) -> None:
    moe = {"family": "moe", "shape_params": "E=8,top_k=2", "family_in_key": True}
    with session_scope(engine) as session:
        env = environment(session)
        for family, latency in (({}, 10.0), (moe, 7.0)):
            task = claim_all(session, sweep(session, m_values=[16], **family))[16]
            trials(session, task, env, [(C0, True, 2 * latency), (C1, False, latency)])
            repo.finish_task(session, task_id=task, worker_id="w")
        winners = repo.winners(session, device_name=L20)
        coverage = repo.shape_coverage(session, device_name=L20)
        warm_dense = repo.task_winners(session, **WARM)
        warm_moe = repo.task_winners(
            session, **{**WARM, "family": "moe"}, shape_params="E=8,top_k=2"
        )
    got = [(w.family, w.shape_params, w.N, w.K, w.M, w.latency_us) for w in winners]
    assert got == [("dense", "", 256, 512, 16, 10.0), ("moe", "E=8,top_k=2", 256, 512, 16, 7.0)]
    got = [(c.family, c.shape_params, c.m_done) for c in coverage]
    assert got == [("dense", "", (16,)), ("moe", "E=8,top_k=2", (16,))]
    assert ([w.latency_us for w in warm_dense], [w.latency_us for w in warm_moe]) == ([10.0], [7.0])


def test_overviews_and_counts(store_url: str) -> None:
    plan = {(576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 5.0)]}
    plan[(576, 7168, 1)].append((SLOW, False, "wrong_result", None))
    sweep_id = fill(store_url, plan, m_values=(1, 16))
    engine = open_store(store_url)
    with session_scope(engine) as session:
        (summary,) = repo.list_sweeps(session)
        tasks = repo.sweep_tasks(session, sweep_id=sweep_id)
        envs = repo.device_environments(session, device_name=L20)
        times = repo.trial_times(session, device_name=L20)
    engine.dispose()
    states = (summary.tasks_pending, summary.tasks_done, summary.tasks_total)
    assert (summary.sweep_id, summary.model, states) == (sweep_id, "test-model", (1, 1, 2))
    assert (summary.trials_ok, summary.trials_total, summary.m_values) == (2, 3, (1, 16))
    got = [
        (t.M, t.state, t.trials_ok, t.trials_total, t.best_latency_us, t.default_latency_us)
        for t in tasks
    ]
    assert got == [(1, "done", 2, 3, 5.0, 10.0), (16, "pending", 0, 0, None, None)]
    assert [(e.gpu_name, e.torch, e.triton, e.trials) for e in envs] == [
        ("NVIDIA L20", "2.11.0", TRITON, 3)
    ]
    assert times == []  # no trial timed its measuring
