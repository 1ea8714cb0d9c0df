"""Store fixtures: a fresh store per test on a temporary SQLite file, and on PostgreSQL too; and
the rows most store tests start from (configs, an environment, a sweep, claimed tasks, trials).

PostgreSQL runs only when TUNER_TEST_PG_URL names a scratch database (for example
`postgresql+psycopg://postgres@127.0.0.1:5432/tuner_test`): every tuner table in it is dropped
before each test, the tables of older schemas too.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from db import repo
from db.connection import open_store, session_scope
from tests import storefill
from tuner.core import CONFIG_KEYS

BACKENDS = ["sqlite"] + (["postgresql"] if os.environ.get("TUNER_TEST_PG_URL") else [])

C0 = dict(zip(CONFIG_KEYS, (64, 128, 128, 32, 4, 2), strict=True))  # these tests' default
C1, C2 = {**C0, "BLOCK_SIZE_M": 16}, {**C0, "BLOCK_SIZE_M": 32}
C3, C4 = {**C0, "num_stages": 3}, {**C0, "num_warps": 8}
ENV = {"device_name": "NVIDIA_L20", "gpu_name": "NVIDIA L20", "compute_capability": "8.9"}
ENV |= {"driver": "580", "cuda": "12.9", "torch": "2.11.0", "triton": "3.6.0", "tuner": "0.1.0"}
ENV |= {"kernel_hash": "k1"}
SPEC = dataclasses.replace(storefill.SPEC, model="m", tp=1, budget=4, m_values=(1, 16))
SPEC = dataclasses.replace(SPEC, shapes=((256, 512),))


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database: a new SQLite file, or the reset PostgreSQL scratch db."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store' / 'tuner.db'}"
    storefill.reset_postgresql(os.environ["TUNER_TEST_PG_URL"])
    return os.environ["TUNER_TEST_PG_URL"]


@pytest.fixture
def engine(store_url: str) -> Iterator[Engine]:
    """An opened store (schema at head)."""
    opened = open_store(store_url)
    yield opened
    opened.dispose()


def environment(session: Session, **changes: str) -> int:
    """The environment ENV with `changes`."""
    return repo.get_or_create_environment(session, **{**ENV, **changes})


def sweep(session: Session, **changes: Any) -> int:
    """The sweep SPEC with `changes`: its id."""
    return repo.create_sweep(session, dataclasses.replace(SPEC, **changes))[0].sweep_id


def claim_all(session: Session, sweep_id: int | None, worker_id: str = "w") -> dict[Any, int]:
    """Claim every claimable task (of a sweep): M -> task_id, and (N, K, M) -> task_id."""
    tasks: dict[Any, int] = {}
    while task := repo.claim_task(session, sweep_id=sweep_id, worker_id=worker_id, lease_s=600):
        tasks[task.M] = tasks[(task.N, task.K, task.M)] = task.task_id
    return tasks


def trials(session: Session, task_id: int, env: int, rows: list[tuple]) -> None:
    """Record (config, is_default, latency_us[, status]) rows as trials of a task."""
    for config, is_default, latency_us, *status in rows:
        trial = {"config": config, "is_default": is_default, "latency_us": latency_us}
        status = status[0] if status else "ok"
        assert repo.record_trial(
            session, task_id=task_id, environment_id=env, status=status, **trial
        )


def retime(config: dict, latency_us: float, *, is_default: bool = False) -> dict:
    """One re-timed config, 0.5 us either side."""
    times = {"latency_us": latency_us, "p20_us": latency_us - 0.5, "p80_us": latency_us + 0.5}
    return {"config": config, "is_default": is_default, "rounds": 5, **times}


def decision(config: dict, us: float, default_us: float | None = 10.0, **given: Any) -> dict:
    """A decision keeping `config` ("fastest" unless `kept` is given)."""
    kept = given.pop("kept", "fastest")
    made = {"config": config, "latency_us": us, "default_latency_us": default_us}
    made |= {"runner_up": None, "spread_us": 0.4, "kept": kept, "note": f"{kept} kept"}
    return made | given


def decide(session: Session, task_id: int, env: int, retimes: list, made: dict, worker="w"):
    """record_decision of a task `worker` holds; whether it was stored."""
    return repo.record_decision(
        session,
        task_id=task_id,
        worker_id=worker,
        environment_id=env,
        retimes=retimes,
        decision=made,
    )


@pytest.fixture
def held(engine: Engine) -> dict[str, int]:
    """One sweep over M = 1, 16 whose tasks worker "w" holds, with trials of environment k1."""
    with session_scope(engine) as session:
        env = environment(session)
        first = sweep(session)
        tasks = claim_all(session, first)
        trials(session, tasks[1], env, [(C0, True, 10.0), (C1, False, 7.0), (C2, False, 7.2)])
        trials(session, tasks[16], env, [(C0, True, 20.0), (C3, False, 15.0)])
    return {"env": env, "t1": tasks[1], "t16": tasks[16], "first": first}
