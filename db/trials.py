"""Trials of the store: record one config's outcome for a task (idempotently), read them back.

Re-exported by `db.repo`; like the repository functions these take a Session and never commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.engine import dialect_insert
from db.models import CONFIG_COLUMNS, TRIAL_STATUSES, Trial, utcnow


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
    if set(config) != set(CONFIG_COLUMNS):
        raise ValueError(f"config keys {sorted(config)} are not {', '.join(CONFIG_COLUMNS)}")
    for name in CONFIG_COLUMNS:
        value = config[name]
        if isinstance(value, bool) or int(value) != value or value < 1:
            raise ValueError(f"config key {name} must be a positive integer, got {value!r}")
    if str(status) not in TRIAL_STATUSES:
        raise ValueError(f"trial status {status!r} is not one of {', '.join(TRIAL_STATUSES)}")
    inserted = session.execute(
        dialect_insert(session, Trial)
        .values(
            task_id=task_id,
            environment_id=environment_id,
            **{name: int(config[name]) for name in CONFIG_COLUMNS},
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
        .on_conflict_do_nothing(index_elements=["task_id", *CONFIG_COLUMNS])
        .returning(Trial.trial_id)
    ).scalar_one_or_none()
    return inserted is not None


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
            config={name: getattr(trial, name) for name in CONFIG_COLUMNS},
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
