"""Noise control in the store: retimes and decisions (held tasks only, replaced on a re-timing),
winners that follow decisions, and the ceilings of a device."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, delete, func, select, update
from sqlalchemy.orm import Session

from db import repo
from db.connection import session_scope
from db.models import Ceiling, Decision, Retime, Sweep, Task
from tests.storefill import DENSE_SWEEP

DEFAULT = {
    "BLOCK_SIZE_M": 64,
    "BLOCK_SIZE_N": 128,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 32,
    "num_warps": 4,
    "num_stages": 2,
}
C1 = {**DEFAULT, "BLOCK_SIZE_M": 16}
C2 = {**DEFAULT, "BLOCK_SIZE_M": 32}
C3 = {**DEFAULT, "num_stages": 3}


def _environment(
    session: Session,
    *,
    kernel_hash: str = "k1",
    triton: str = "3.6.0",
    device_name: str = "NVIDIA_L20",
) -> int:
    return repo.get_or_create_environment(
        session,
        device_name=device_name,
        gpu_name="NVIDIA L20",
        compute_capability="8.9",
        driver="580",
        cuda="12.9",
        torch="2.11.0",
        triton=triton,
        tuner="0.1.0",
        kernel_hash=kernel_hash,
    )


def _sweep(session: Session, model: str, m_values: list[int]) -> int:
    info, _ = repo.create_sweep(
        session,
        device_name="NVIDIA_L20",
        model=model,
        tp=1,
        strategy="grid",
        budget=4,
        space="vllm",
        seed=0,
        m_values=m_values,
        out_dtype="bfloat16",
        block_shape=(128, 128),
        shapes=[(256, 512)],
        **DENSE_SWEEP,
    )
    return info.sweep_id


def _claim_all(session: Session, sweep_id: int, worker_id: str = "w") -> dict[int, int]:
    """Claim every task of a sweep: M -> task_id."""
    tasks = {}
    while (
        task := repo.claim_task(session, sweep_id=sweep_id, worker_id=worker_id, lease_s=600)
    ) is not None:
        tasks[task.M] = task.task_id
    return tasks


def _retime(config: dict, latency_us: float, *, is_default: bool = False) -> dict:
    return {
        "config": config,
        "is_default": is_default,
        "rounds": 5,
        "latency_us": latency_us,
        "p20_us": latency_us - 0.5,
        "p80_us": latency_us + 0.5,
    }


def _decision(
    config: dict,
    latency_us: float,
    default_latency_us: float | None = 10.0,
    *,
    kept: str = "fastest",
    spread_us: float = 0.4,
    runner_up: dict | None = None,
) -> dict:
    return {
        "config": config,
        "latency_us": latency_us,
        "default_latency_us": default_latency_us,
        "runner_up": runner_up,
        "spread_us": spread_us,
        "kept": kept,
        "note": f"{kept} kept",
    }


def _trials(session: Session, task_id: int, env: int, trials: list[tuple[dict, bool, float]]):
    for config, is_default, latency_us in trials:
        assert repo.record_trial(
            session,
            task_id=task_id,
            environment_id=env,
            config=config,
            is_default=is_default,
            status="ok",
            latency_us=latency_us,
        )


@pytest.fixture
def held(engine: Engine) -> dict[str, int]:
    """One sweep over M = 1, 16 whose tasks worker "w" holds, with trials of environment k1."""
    with session_scope(engine) as session:
        env = _environment(session)
        tasks = _claim_all(session, _sweep(session, "ModelA", [1, 16]))
        _trials(session, tasks[1], env, [(DEFAULT, True, 10.0), (C1, False, 7.0), (C2, False, 7.2)])
        _trials(session, tasks[16], env, [(DEFAULT, True, 20.0), (C3, False, 15.0)])
    return {"env": env, "t1": tasks[1], "t16": tasks[16]}


def _counts(engine: Engine) -> tuple[int, int]:
    with session_scope(engine) as session:
        return (
            session.scalar(select(func.count()).select_from(Retime)),
            session.scalar(select(func.count()).select_from(Decision)),
        )


def test_record_decision_stores_retimes_and_decision(engine: Engine, held: dict) -> None:
    retimes = [_retime(C1, 7.1), _retime(C2, 7.3), _retime(DEFAULT, 10.2, is_default=True)]
    with session_scope(engine) as session:
        assert repo.record_decision(
            session,
            task_id=held["t1"],
            worker_id="w",
            environment_id=held["env"],
            retimes=retimes,
            decision=_decision(C1, 7.1, 10.2, runner_up=C2),
        )
        info = repo.task_decision(session, task_id=held["t1"])
        assert repo.task_decision(session, task_id=held["t16"]) is None
    assert info is not None
    assert (
        info.task_id,
        info.environment_id,
        info.config,
        info.latency_us,
        info.default_latency_us,
        info.runner_up,
        info.spread_us,
        info.kept,
        info.note,
    ) == (held["t1"], held["env"], C1, 7.1, 10.2, C2, 0.4, "fastest", "fastest kept")
    assert [
        (r.config, r.is_default, r.rounds, r.latency_us, r.p20_us, r.p80_us) for r in info.retimes
    ] == [
        (C1, False, 5, 7.1, 6.6, 7.6),
        (C2, False, 5, 7.3, 6.8, 7.8),
        (DEFAULT, True, 5, 10.2, 9.7, 10.7),
    ]
    assert info.created_at.utcoffset() is not None


def test_recording_again_replaces_the_retimes_and_the_decision(engine: Engine, held: dict) -> None:
    first = [_retime(C1, 7.1), _retime(DEFAULT, 10.2, is_default=True)]
    second = [_retime(C2, 6.9), _retime(C1, 7.0), _retime(DEFAULT, 10.1, is_default=True)]
    with session_scope(engine) as session:
        assert repo.record_decision(
            session,
            task_id=held["t1"],
            worker_id="w",
            environment_id=held["env"],
            retimes=first,
            decision=_decision(C1, 7.1, 10.2),
        )
    with session_scope(engine) as session:  # a resumed task re-times
        assert repo.record_decision(
            session,
            task_id=held["t1"],
            worker_id="w",
            environment_id=held["env"],
            retimes=second,
            decision=_decision(C2, 6.9, 10.1, runner_up=C1),
        )
        info = repo.task_decision(session, task_id=held["t1"])
    assert _counts(engine) == (3, 1)
    assert info is not None and (info.config, info.latency_us, info.runner_up) == (C2, 6.9, C1)
    assert [(r.config, r.latency_us) for r in info.retimes] == [
        (C2, 6.9),
        (C1, 7.0),
        (DEFAULT, 10.1),
    ]


def test_a_task_not_held_gets_nothing_written(engine: Engine, held: dict) -> None:
    retimes = [_retime(C1, 7.1)]
    with session_scope(engine) as session:
        assert not repo.record_decision(
            session,
            task_id=held["t1"],
            worker_id="other",
            environment_id=held["env"],
            retimes=retimes,
            decision=_decision(C1, 7.1, None),
        )
        assert repo.finish_task(session, task_id=held["t16"], worker_id="w")
        assert not repo.record_decision(
            session,
            task_id=held["t16"],
            worker_id="w",
            environment_id=held["env"],
            retimes=retimes,
            decision=_decision(C1, 7.1, None),
        )
    assert _counts(engine) == (0, 0)


def test_record_decision_clears_the_config_in_flight(engine: Engine, held: dict) -> None:
    marked = update(Task).where(Task.task_id == held["t1"])
    flight = select(Task.in_flight_config, Task.in_flight_since).where(Task.task_id == held["t1"])
    with session_scope(engine) as session:
        session.execute(
            marked.values(in_flight_config=C1, in_flight_since=datetime(2026, 1, 1, tzinfo=UTC))
        )
        assert session.execute(flight).one()[0] == C1
        assert repo.record_decision(
            session,
            task_id=held["t1"],
            worker_id="w",
            environment_id=held["env"],
            retimes=[_retime(C1, 7.1)],
            decision=_decision(C1, 7.1, None),
        )
        assert tuple(session.execute(flight).one()) == (None, None)


@pytest.mark.parametrize(
    ("retimes", "decision", "message"),
    [
        ([], _decision(C1, 7.0), "at least one re-timed config"),
        ([_retime(C1, 7.0)], _decision(C2, 7.0), "not one of the re-timed configs"),
        ([_retime(C1, 7.0), _retime(C1, 7.5)], _decision(C1, 7.0), "re-timed twice"),
        (
            [_retime(C1, 7.0, is_default=True), _retime(C2, 7.5, is_default=True)],
            _decision(C1, 7.0),
            "more than one config marked is_default",
        ),
        ([_retime(C1, 7.0)], _decision(C1, 7.0, kept="lucky"), "kept 'lucky' is not one of"),
        ([{**_retime(C1, 7.0), "p20_us": 7.2}], _decision(C1, 7.0), "p20_us <= latency_us"),
        ([{**_retime(C1, 7.0), "rounds": 0}], _decision(C1, 7.0), "rounds must be a positive"),
        ([_retime({**C1, "kpack": 2}, 7.0)], _decision(C1, 7.0), r"retimes\[0\]\.config: keys"),
        ([_retime(C1, 7.0)], {**_decision(C1, 7.0), "spread_us": float("nan")}, "spread_us must"),
        (
            [_retime(C1, 7.0)],
            {**_decision(C1, 7.0), "runner_up": {"BLOCK_SIZE_M": 16}},
            "decision.runner_up: keys",
        ),
        ([_retime(C1, 7.0)], {"config": C1}, "decision: keys"),
    ],
)
def test_bad_decisions_raise_and_write_nothing(
    engine: Engine, held: dict, retimes: list, decision: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message), session_scope(engine) as session:
        repo.record_decision(
            session,
            task_id=held["t1"],
            worker_id="w",
            environment_id=held["env"],
            retimes=retimes,
            decision=decision,
        )
    assert _counts(engine) == (0, 0)


def test_a_decision_overrides_a_faster_undecided_trial(engine: Engine, held: dict) -> None:
    with session_scope(engine) as session:
        # M=1: C1 (7.0 us) is the fastest trial, but the re-timing kept C2: the gap was noise.
        assert repo.record_decision(
            session,
            task_id=held["t1"],
            worker_id="w",
            environment_id=held["env"],
            retimes=[_retime(C1, 7.25), _retime(C2, 7.5), _retime(DEFAULT, 10.0, is_default=True)],
            decision=_decision(C2, 7.5, 10.0, kept="simpler", spread_us=0.6, runner_up=C1),
        )
        # Another sweep's undecided task of the same key has an even faster trial: still C2.
        other = _claim_all(session, _sweep(session, "ModelB", [1, 32]), worker_id="v")
        _trials(session, other[1], held["env"], [(C3, False, 5.0)])
        _trials(session, other[32], held["env"], [(C3, False, 30.0)])
        c2_trial = next(
            t.trial_id for t in repo.task_trials(session, task_id=held["t1"]) if t.config == C2
        )
        rows = repo.winners(session, device_name="NVIDIA_L20")
    assert [
        (
            r.M,
            r.config,
            r.latency_us,
            r.default_latency_us,
            r.default_config,
            r.is_default,
            r.trial_id,
            r.task_id,
            r.spread_us,
            r.decided,
        )
        for r in rows
    ] == [
        (1, C2, 7.5, 10.0, DEFAULT, False, c2_trial, held["t1"], 0.6, True),
        (16, C3, 15.0, 20.0, DEFAULT, False, rows[1].trial_id, held["t16"], None, False),
        (32, C3, 30.0, None, None, False, rows[2].trial_id, other[32], None, False),
    ]


def _decided(
    session: Session,
    task_id: int,
    worker_id: str,
    env: int,
    config: dict,
    latency_us: float,
    default_us: float | None = None,
) -> None:
    is_default = config == DEFAULT
    assert repo.record_decision(
        session,
        task_id=task_id,
        worker_id=worker_id,
        environment_id=env,
        retimes=[_retime(config, latency_us, is_default=is_default)],
        decision=_decision(
            config,
            latency_us,
            default_us,
            kept="default" if is_default else "fastest",
            spread_us=0.5,
        ),
    )


def _standing(session: Session) -> list[tuple]:
    return [
        (
            r.M,
            r.config,
            r.latency_us,
            r.default_config,
            r.is_default,
            r.task_id,
            r.sweep_id,
            r.other_sweeps,
            r.decided,
        )
        for r in repo.winners(session, device_name="NVIDIA_L20")
    ]


def test_several_sweeps_the_decision_made_last_stands_not_the_lowest_latency(
    engine: Engine, held: dict
) -> None:
    with session_scope(engine) as session:
        first = session.scalar(select(Task.sweep_id).where(Task.task_id == held["t1"]))
        _decided(session, held["t1"], "w", held["env"], DEFAULT, 10.0, 10.0)
        _decided(session, held["t16"], "w", held["env"], C3, 16.0)
        second = _sweep(session, "ModelB", [1, 16])
        other = _claim_all(session, second, worker_id="v")
        # Sweep 2 decides later: it stands, slower at M=1 (12.0 us against 10.0) and faster at
        # M=16; the latencies of the two runs are not compared.
        _decided(session, other[1], "v", held["env"], C2, 12.0)
        _decided(session, other[16], "v", held["env"], C2, 15.5)
        assert _standing(session) == [
            (1, C2, 12.0, None, False, other[1], second, (first,), True),
            (16, C2, 15.5, None, False, other[16], second, (first,), True),
        ]
        # Sweep 1's M=1 decides again (extended, new finalists): its decision stands now, the
        # default kept after re-timing.
        _decided(session, held["t1"], "w", held["env"], DEFAULT, 9.0, 9.0)
        assert _standing(session) == [
            (1, DEFAULT, 9.0, DEFAULT, True, held["t1"], first, (second,), True),
            (16, C2, 15.5, None, False, other[16], second, (first,), True),
        ]


def test_several_sweeps_without_decisions_the_newest_task_stands(
    engine: Engine, held: dict
) -> None:
    with session_scope(engine) as session:
        first = session.scalar(select(Task.sweep_id).where(Task.task_id == held["t1"]))
        second = _sweep(session, "ModelB", [16, 32])
        other = _claim_all(session, second, worker_id="v")
        _trials(session, other[16], held["env"], [(DEFAULT, True, 25.0), (C2, False, 18.0)])
        rows = [
            (
                r.M,
                r.config,
                r.latency_us,
                r.default_latency_us,
                r.task_id,
                r.sweep_id,
                r.other_sweeps,
                r.decided,
            )
            for r in repo.winners(session, device_name="NVIDIA_L20")
        ]
    # M=16: sweep 1's C3 (15.0 us) is faster than sweep 2's C2 (18.0 us), but sweep 2 is newer.
    assert rows == [
        (1, C1, 7.0, 10.0, held["t1"], first, (), False),
        (16, C2, 18.0, 25.0, other[16], second, (first,), False),
    ]


def test_deleting_a_sweep_deletes_its_decisions(engine: Engine, held: dict) -> None:
    with session_scope(engine) as session:
        assert repo.record_decision(
            session,
            task_id=held["t1"],
            worker_id="w",
            environment_id=held["env"],
            retimes=[_retime(C1, 7.0)],
            decision=_decision(C1, 7.0, None),
        )
    with session_scope(engine) as session:
        session.execute(delete(Sweep))
        assert session.scalar(select(func.count()).select_from(Task)) == 0
    assert _counts(engine) == (0, 0)


def test_ceilings_latest_per_name_over_the_device(engine: Engine) -> None:
    with session_scope(engine) as session:
        first = _environment(session, triton="3.5.0")
        second = _environment(session, triton="3.6.0")
        other = _environment(session, device_name="NVIDIA_H200")
        repo.record_ceilings(
            session,
            environment_id=first,
            ceilings={"copy_gbps": 800.0, "fp8_mm_tflops": 300.0},
            details={"copy_gbps": "1 GiB copy, median of 20"},
        )
        repo.record_ceilings(session, environment_id=other, ceilings={"copy_gbps": 4300.0})
    with session_scope(engine) as session:
        repo.record_ceilings(session, environment_id=second, ceilings={"copy_gbps": 850.5})
        repo.record_ceilings(session, environment_id=second, ceilings={})
        assert repo.device_ceilings(session, device_name="NVIDIA_L20") == {
            "copy_gbps": 850.5,
            "fp8_mm_tflops": 300.0,
        }
        assert repo.device_ceilings(session, device_name="NVIDIA_H200") == {"copy_gbps": 4300.0}
        assert repo.device_ceilings(session, device_name="NVIDIA_B200") == {}
        details = session.execute(
            select(Ceiling.name, Ceiling.detail).order_by(Ceiling.ceiling_id)
        ).all()
    assert details == [
        ("copy_gbps", "1 GiB copy, median of 20"),
        ("fp8_mm_tflops", None),
        ("copy_gbps", None),
        ("copy_gbps", None),
    ]


@pytest.mark.parametrize(
    ("ceilings", "details", "message"),
    [
        ({"Copy GB/s": 1.0}, None, "lowercase snake_case"),
        ({"copy_gbps": 0.0}, None, "finite positive"),
        ({"copy_gbps": float("inf")}, None, "finite positive"),
        ({"copy_gbps": True}, None, "finite positive"),
        ({"copy_gbps": 1.0}, {"fp8_mm_tflops": "x"}, "not in ceilings"),
    ],
)
def test_bad_ceilings_raise(
    engine: Engine, ceilings: dict, details: dict | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message), session_scope(engine) as session:
        env = _environment(session)
        repo.record_ceilings(session, environment_id=env, ceilings=ceilings, details=details)
