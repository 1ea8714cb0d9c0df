"""The task queue of the store: claim a task with a lease, heartbeat, finish, release.

Re-exported by `db.repo`. A claim is one `UPDATE ... RETURNING` statement, safe with several
processes on one SQLite file (its single write lock) and on PostgreSQL (`FOR UPDATE SKIP
LOCKED`); like the repository functions these take a Session and never commit.

A trial's record checks that its worker still holds the task (`end_trial`, or in one
transaction `db.trials.record_held_trial`), so a worker whose task was taken (lease expired,
released by its sweep) cannot store a trial another worker measures too. The config a worker
is measuring is kept in memory shared with its supervisor
(`tuner.run.worker_spec.WorkerShared`), not in the store; the tasks' `in_flight_*` columns are
only ever cleared.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, Update, and_, func, literal, or_, select, update
from sqlalchemy.orm import Session, aliased

from db.models import Device, Sweep, Task, UTCDateTime, block_shape_of, utcnow

# A claim that loses a race on PostgreSQL (all candidates locked by other claimers) retries.
_CLAIM_TRIES = 5


@dataclass(frozen=True)
class TaskInfo:
    """A claimed task with what a worker needs from its sweep; `attempts` counts claims;
    `family` and `shape_params` name the kernel family and its dimensions beyond N and K."""

    task_id: int
    sweep_id: int
    device_name: str
    N: int
    K: int
    M: int
    block_shape: tuple[int, int] | None
    out_dtype: str
    strategy: str
    budget: int
    seed: int
    space: str
    attempts: int
    family: str
    shape_params: str = ""


def _now(now: datetime | None) -> datetime:
    if now is None:
        return utcnow()
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError(f"now={now!r} is naive: pass a timezone-aware UTC datetime")
    return now


def _claimable(task: Any, now: datetime) -> ColumnElement[bool]:
    """Pending, or running under a lease that ended before `now`."""
    expired = and_(task.state == "running", task.lease_expires_at < now)
    return or_(task.state == "pending", expired)


def _in_scope(
    task: Any, *, sweep_id: int | None, device_name: str | None, space: str | None
) -> list[ColumnElement[bool]]:
    """Conditions that keep `task` to one sweep, to sweeps on one device, of one config space."""
    conditions: list[ColumnElement[bool]] = []
    if sweep_id is not None:
        conditions.append(task.sweep_id == sweep_id)
    if device_name is not None or space is not None:
        sweeps = select(Sweep.sweep_id)
        if device_name is not None:
            sweeps = sweeps.join(Device, Sweep.device_id == Device.device_id).where(
                Device.device_name == device_name
            )
        if space is not None:
            sweeps = sweeps.where(Sweep.space == space)
        conditions.append(task.sweep_id.in_(sweeps))
    return conditions


def _task_info(session: Session, *, task_id: int) -> TaskInfo:
    task, sweep, device_name = session.execute(
        select(Task, Sweep, Device.device_name)
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(Task.task_id == task_id)
    ).one()
    return TaskInfo(
        task_id=task.task_id,
        sweep_id=task.sweep_id,
        device_name=device_name,
        N=task.N,
        K=task.K,
        M=task.M,
        block_shape=block_shape_of(sweep.block_n, sweep.block_k),
        out_dtype=sweep.out_dtype,
        strategy=sweep.strategy,
        budget=sweep.budget,
        seed=sweep.seed,
        space=sweep.space,
        attempts=task.attempts,
        family=task.family,
        shape_params=task.shape_params,
    )


def claim_task(
    session: Session,
    *,
    sweep_id: int | None,
    worker_id: str,
    lease_s: float,
    now: datetime | None = None,
    device_name: str | None = None,
    space: str | None = None,
) -> TaskInfo | None:
    """Claim the first claimable task (lowest task_id): pending, or running with an expired lease.

    One `UPDATE tasks ... WHERE task_id = (SELECT ... LIMIT 1 [FOR UPDATE SKIP LOCKED]) AND
    <claimable> RETURNING task_id`: SQLite runs it under its single write lock, PostgreSQL
    skips rows other claimers hold, and the outer condition re-checks the row, so no two
    workers get the same task.

    Args:
        session: the open session; commit it promptly to publish the claim.
        sweep_id: only tasks of this sweep; None for any sweep.
        worker_id: the claimer, e.g. "host:pid:gpu".
        lease_s: seconds the claim holds without a heartbeat.
        now: the current time (timezone-aware); None for the clock.
        device_name: only tasks of sweeps on this device; None for any device.
        space: only tasks of sweeps over this config space (`Sweep.space`); None for any.

    Returns:
        The claimed task (state running, attempts counted, no config in flight), or None when
        nothing is claimable.
    """
    now = _now(now)
    claim, candidates = _claim_statements(
        now,
        worker_id=worker_id,
        lease_s=lease_s,
        sweep_id=sweep_id,
        device_name=device_name,
        space=space,
    )
    for _ in range(_CLAIM_TRIES):
        task_id = session.execute(claim).scalar_one_or_none()
        if task_id is not None:
            return _task_info(session, task_id=task_id)
        if session.scalar(candidates.limit(1)) is None:
            return None
    return None


def _claim_statements(
    now: datetime,
    *,
    worker_id: str,
    lease_s: float,
    sweep_id: int | None,
    device_name: str | None,
    space: str | None,
) -> tuple[Update, Select]:
    """`claim_task`'s statements: the UPDATE that claims the first claimable task in scope
    (its id picked FOR UPDATE SKIP LOCKED, re-checked claimable) RETURNING task_id, and the
    SELECT of the claimable task ids in scope.
    """
    candidate = aliased(Task)
    candidates = select(candidate.task_id).where(
        _claimable(candidate, now),
        *_in_scope(candidate, sweep_id=sweep_id, device_name=device_name, space=space),
    )
    pick = (
        candidates.order_by(candidate.task_id).limit(1).with_for_update(skip_locked=True)
    ).scalar_subquery()
    claim = (
        update(Task)
        .where(Task.task_id == pick, _claimable(Task, now))
        .values(
            state="running",
            worker_id=worker_id,
            lease_expires_at=now + timedelta(seconds=lease_s),
            attempts=Task.attempts + 1,
            started_at=now,
            error=None,
            in_flight_config=None,
            in_flight_since=None,
        )
        .returning(Task.task_id)
        .execution_options(synchronize_session=False)
    )
    return claim, candidates


def heartbeat(
    session: Session, *, task_id: int, worker_id: str, lease_s: float, now: datetime | None = None
) -> bool:
    """Extend the lease of a task this worker still holds.

    Returns:
        True when the task is running under this worker_id and its lease now ends at
        now + lease_s; False when another worker re-claimed it or it is no longer running.
    """
    now = _now(now)
    extended = session.execute(
        update(Task)
        .where(Task.task_id == task_id, Task.worker_id == worker_id, Task.state == "running")
        .values(lease_expires_at=now + timedelta(seconds=lease_s))
        .returning(Task.task_id)
        .execution_options(synchronize_session=False)
    ).all()
    return len(extended) == 1


def finish_task(
    session: Session,
    *,
    task_id: int,
    worker_id: str,
    state: str = "done",
    error: str | None = None,
    now: datetime | None = None,
    budget: int | None = None,
) -> bool:
    """Mark a task this worker holds as done or failed and drop its lease. A task reopened by
    a larger budget (`db.sweeps.open_sweep`) keeps its first `finished_at` (warm starts read it).

    Args:
        session: the open session.
        task_id: the task.
        worker_id: the worker that claimed it.
        state: "done" or "failed".
        error: why it failed, one line.
        now: the finish time (timezone-aware); None for the clock.
        budget: the sweep budget the task was searched with (`TaskInfo.budget`); if the sweep's
            budget changed since (extended), the task goes back to the queue instead (pending,
            trials kept) to be searched to the new budget. None: no check.

    Returns:
        True when the task was running under this worker_id and is now done or failed;
        False otherwise (unchanged, or handed back for a new budget).

    Raises:
        ValueError: state is neither "done" nor "failed".
    """
    if state not in ("done", "failed"):
        raise ValueError(f"a task finishes as 'done' or 'failed', not {state!r}")
    held = [Task.task_id == task_id, Task.worker_id == worker_id, Task.state == "running"]
    check = budget is not None and state == "done"
    if check:
        sweep = select(Task.sweep_id).where(Task.task_id == task_id).scalar_subquery()
        # FOR SHARE (PostgreSQL): this and an extension of the sweep wait for each other.
        session.execute(
            select(Sweep.budget).where(Sweep.sweep_id == sweep).with_for_update(read=True)
        )
        held.append(Task.sweep_id.in_(select(Sweep.sweep_id).where(Sweep.budget == budget)))
    first = func.coalesce(Task.finished_at, literal(_now(now), UTCDateTime()))
    finished = session.execute(
        update(Task)
        .where(*held)
        .values(
            state=state,
            error=error,
            finished_at=first,
            lease_expires_at=None,
            in_flight_config=None,
            in_flight_since=None,
        )
        .returning(Task.task_id)
        .execution_options(synchronize_session=False)
    ).all()
    if check and not finished:  # the budget grew: searched again to it, by whoever claims it
        release_tasks(session, worker_id=worker_id, task_id=task_id)
    return len(finished) == 1


def release_tasks(session: Session, *, worker_id: str, task_id: int | None = None) -> int:
    """Hand every running task of a worker (or only `task_id`) back to the queue (on a clean
    shutdown, or when its sweep's budget grew).

    Returns:
        How many tasks went back to pending; their attempts are kept.
    """
    only = [] if task_id is None else [Task.task_id == task_id]
    released = session.execute(
        update(Task)
        .where(Task.worker_id == worker_id, Task.state == "running", *only)
        .values(
            state="pending",
            worker_id=None,
            lease_expires_at=None,
            in_flight_config=None,
            in_flight_since=None,
        )
        .returning(Task.task_id)
        .execution_options(synchronize_session=False)
    ).all()
    return len(released)


def _held(task_id: int, worker_id: str) -> ColumnElement[bool]:
    return and_(Task.task_id == task_id, Task.worker_id == worker_id, Task.state == "running")


def end_trial(session: Session, *, task_id: int, worker_id: str) -> bool:
    """Clear the config in flight; call it in the transaction that records the trial.

    Args:
        session: the open session.
        task_id: the task.
        worker_id: the worker that claimed it.

    Returns:
        True when the worker still holds the task. False means the task was taken from it
        (its lease expired and another worker claimed it, or its sweep released it): roll
        back instead of recording.
    """
    cleared = session.execute(
        update(Task)
        .where(_held(task_id, worker_id))
        .values(in_flight_config=None, in_flight_since=None)
        .returning(Task.task_id)
        .execution_options(synchronize_session=False)
    ).all()
    return len(cleared) == 1


def unfinished_tasks(
    session: Session,
    *,
    sweep_id: int | None = None,
    device_name: str | None = None,
    space: str | None = None,
) -> int:
    """Pending and running tasks in the scope a worker claims from (see `claim_task`).

    Args:
        session: the open session.
        sweep_id: only tasks of this sweep; None for any sweep.
        device_name: only tasks of sweeps on this device; None for any device.
        space: only tasks of sweeps over this config space; None for any.

    Returns:
        How many tasks are neither done nor failed.
    """
    return (
        session.scalar(
            select(func.count())
            .select_from(Task)
            .where(
                Task.state.in_(("pending", "running")),
                *_in_scope(Task, sweep_id=sweep_id, device_name=device_name, space=space),
            )
        )
        or 0
    )
