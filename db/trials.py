"""Trials of the store: record one config's outcome for a task (idempotently), read them back.

Re-exported by `db.repo`; like the repository functions these take a Session and never commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from db.connection import dialect_insert
from db.models import Task, Trial, utcnow
from tuner.core import CONFIG_KEYS, TRIAL_STATUSES

# Trial columns a record writes, in order (the statements below bind them by name).
_RECORD_COLUMNS = (
    "task_id",
    "environment_id",
    *CONFIG_KEYS,
    "is_default",
    "status",
    "latency_us",
    "p20_us",
    "p80_us",
    "rel_error",
    "error",
    "measure_s",
    "created_at",
)


@dataclass(frozen=True)
class TrialInfo:
    """One stored trial; `config` has vLLM's six keys in vLLM's order."""

    trial_id: int
    task_id: int
    config: dict[str, int]
    is_default: bool
    status: str
    latency_us: float | None
    p20_us: float | None
    p80_us: float | None
    rel_error: float | None
    error: str | None
    measure_s: float | None
    created_at: datetime | None = None


def record_trial(
    session: Session,
    *,
    task_id: int,
    environment_id: int,
    config: Mapping[str, int],
    is_default: bool,
    status: str,
    latency_us: float | None = None,
    p20_us: float | None = None,
    p80_us: float | None = None,
    rel_error: float | None = None,
    error: str | None = None,
    measure_s: float | None = None,
) -> bool:
    """Store one trial, once: a second record of the same (task, config) is ignored.

    Args:
        session: the open session.
        task_id: the task the config was tried for.
        environment_id: from `get_or_create_environment`.
        config: vLLM's six keys (BLOCK_SIZE_M, ..., num_stages), positive integers.
        is_default: this config is vLLM's default config.
        status: ok / invalid / compile_error / out_of_resources / wrong_result / timeout / crashed.
        latency_us: median latency in microseconds.
        p20_us: 20th percentile latency in microseconds.
        p80_us: 80th percentile latency in microseconds.
        rel_error: relative Frobenius error against the float64 reference.
        error: one-line reason of a failure.
        measure_s: wall seconds spent on the trial.

    Returns:
        True when the trial was inserted, False when it was already stored.

    Raises:
        ValueError: the config's keys are not exactly vLLM's six, or the status is unknown.
    """
    values = _checked(config, status)
    inserted = session.execute(
        dialect_insert(session, Trial)
        .values(
            task_id=task_id,
            environment_id=environment_id,
            **values,
            is_default=bool(is_default),
            status=str(status),
            latency_us=latency_us,
            p20_us=p20_us,
            p80_us=p80_us,
            rel_error=rel_error,
            error=error,
            measure_s=measure_s,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["task_id", *CONFIG_KEYS])
        .returning(Trial.trial_id)
    ).scalar_one_or_none()
    return inserted is not None


def _checked(config: Mapping[str, int], status: str) -> dict[str, int]:
    """The config as six ints; ValueError for other keys, a non-positive value, a bad status."""
    if set(config) != set(CONFIG_KEYS):
        raise ValueError(f"config keys {sorted(config)} are not {', '.join(CONFIG_KEYS)}")
    for name in CONFIG_KEYS:
        value = config[name]
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"config key {name} must be a positive integer, got {value!r}")
    if str(status) not in TRIAL_STATUSES:
        raise ValueError(f"trial status {status!r} is not one of {', '.join(TRIAL_STATUSES)}")
    return {name: int(config[name]) for name in CONFIG_KEYS}


# Core statements of `record_held_trial`, built once per dialect (building and caching an ORM
# statement per trial cost more CPU than the transaction itself).
# A mapped class's __table__ is its Table; SQLAlchemy annotates it as the wider FromClause.
_TASKS = cast(Table, Task.__table__)
_HOLD = (
    update(_TASKS)
    .where(
        _TASKS.c.task_id == bindparam("held_task_id"),
        _TASKS.c.worker_id == bindparam("held_worker_id"),
        _TASKS.c.state == "running",
    )
    .values(in_flight_config=None, in_flight_since=None)
)
_INSERTS: dict[str, Any] = {}


def _insert_trial(dialect: str) -> Any:
    if dialect not in _INSERTS:
        module = {"sqlite": sqlite, "postgresql": postgresql}.get(dialect)
        if module is None:
            raise NotImplementedError(
                f"store backend {dialect!r} is not supported: use SQLite or PostgreSQL"
            )
        _INSERTS[dialect] = (
            module.insert(Trial.__table__)
            .values({name: bindparam(name) for name in _RECORD_COLUMNS})
            .on_conflict_do_nothing(index_elements=["task_id", *CONFIG_KEYS])
        )
    return _INSERTS[dialect]


def record_held_trial(
    connection: Connection,
    *,
    task_id: int,
    worker_id: str,
    environment_id: int,
    config: Mapping[str, int],
    is_default: bool,
    status: str,
    latency_us: float | None = None,
    p20_us: float | None = None,
    p80_us: float | None = None,
    rel_error: float | None = None,
    error: str | None = None,
    measure_s: float | None = None,
) -> bool:
    """A worker's trial: check that it still holds the task (and clear the task's config in
    flight, as `end_trial`), then store the trial once, as `record_trial`. Two prepared Core
    statements on a Connection (`store.begin()`), the whole per-trial cost of a worker's store.

    Args:
        connection: an open transaction; commit it to publish the trial.
        task_id: the task.
        worker_id: the worker that claimed it.
        environment_id, config, is_default, status, latency_us, p20_us, p80_us, rel_error,
        error, measure_s: as `record_trial`.

    Returns:
        True when the worker holds the task (the trial is stored, or was already); False when
        the task was taken from it: nothing was written, roll back.

    Raises:
        ValueError: the config's keys are not exactly vLLM's six, or the status is unknown.
        NotImplementedError: the store is neither SQLite nor PostgreSQL.
    """
    values = _checked(config, status)
    held = connection.execute(_HOLD, {"held_task_id": task_id, "held_worker_id": worker_id})
    if held.rowcount != 1:
        return False
    connection.execute(
        _insert_trial(connection.dialect.name),
        {
            "task_id": task_id,
            "environment_id": environment_id,
            **values,
            "is_default": bool(is_default),
            "status": str(status),
            "latency_us": latency_us,
            "p20_us": p20_us,
            "p80_us": p80_us,
            "rel_error": rel_error,
            "error": error,
            "measure_s": measure_s,
            "created_at": utcnow(),
        },
    )
    return True


def task_trials(session: Session, *, task_id: int) -> list[TrialInfo]:
    """Every stored trial of a task, oldest first (to rebuild a resumed task's study).

    Returns:
        The trials in trial_id order.
    """
    trials = session.scalars(
        select(Trial).where(Trial.task_id == task_id).order_by(Trial.trial_id)
    ).all()
    return [
        TrialInfo(
            trial_id=trial.trial_id,
            task_id=trial.task_id,
            config={name: getattr(trial, name) for name in CONFIG_KEYS},
            is_default=trial.is_default,
            status=trial.status,
            latency_us=trial.latency_us,
            p20_us=trial.p20_us,
            p80_us=trial.p80_us,
            rel_error=trial.rel_error,
            error=trial.error,
            measure_s=trial.measure_s,
            created_at=trial.created_at,
        )
        for trial in trials
    ]
