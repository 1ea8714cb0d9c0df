"""The write side of a sweep: devices and environments, sweeps and their tasks, the task queue
(claim with a lease, heartbeat, finish, release), trials, re-timings with the decision they
lead to.

Writes that may race (get-or-create, trial records, claims) are single statements (`INSERT ...
ON CONFLICT DO NOTHING`, `UPDATE ... RETURNING`), safe with several processes on one SQLite
file and on PostgreSQL. A trial's record checks that its worker still holds the task, so a
worker whose task was taken (lease expired, released) cannot store a trial another worker
measures too. The tasks' `in_flight_*` columns are only ever cleared here. A task adopts the
trials other sweeps stored of the same measurement (`adopt_measurements`): a sweep asked again
with a larger trial budget is another sweep that measures only the new trials.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    CursorResult,
    and_,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session, aliased

from db.connection import dialect_insert
from db.models import (
    Decision,
    Device,
    Environment,
    Retime,
    Sweep,
    Task,
    TaskState,
    Trial,
    block_columns,
    block_shape_of,
    take,
    utcnow,
)
from tuner.core import CONFIG_KEYS, DEVICE_NAME_MAX, TrialStatus, is_device_name

_NOT_FLYING = {"in_flight_config": None, "in_flight_since": None}
_PENDING = {"state": TaskState.PENDING, "worker_id": None, "lease_expires_at": None}


def _returning(session: Session, statement: Any) -> int:
    """Run an UPDATE, RETURNING the task ids it touched; how many."""
    returning = statement.returning(Task.task_id).execution_options(synchronize_session=False)
    return len(session.execute(returning).all())


def _get_or_insert(session: Session, table: type[Any], key: Mapping[str, Any], **more: Any) -> int:
    """The id of the row of `table` with these unique-key values, inserted with `more` when
    there is none (race-safe: ON CONFLICT DO NOTHING, then read)."""
    find = select(*table.__mapper__.primary_key).filter_by(**key)
    found = session.scalar(find)
    if found is None:
        insert_row = dialect_insert(session, table).values(**key, **more)
        session.execute(insert_row.on_conflict_do_nothing(index_elements=list(key)))
        found = session.scalars(find).one()
    return found


def get_or_create_device(session: Session, *, device_name: str) -> int:
    """The device_id of vLLM's key `device_name` (e.g. `NVIDIA_L20`), added if new.

    Raises:
        ValueError: the name is not vLLM's key as we store it (`tuner.core.is_device_name`).
    """
    if not is_device_name(device_name):
        raise ValueError(
            f"device_name {device_name!r:.160} must be vLLM's key, e.g. NVIDIA_L20 "
            f"or Intel(R)_Data_Center_GPU_Max_1550: 1..{DEVICE_NAME_MAX} printable "
            "ASCII characters without space, '\"', '/', '\\' or '..'"
        )
    return _get_or_insert(session, Device, {"device_name": device_name}, created_at=utcnow())


def get_or_create_environment(
    session: Session,
    *,
    device_name: str,
    kernel_source: str = "builtin",
    vllm: str = "",
    **key: str,
) -> int:
    """The environment_id of the environment trials ran in, added if new: `key` holds the
    `ENVIRONMENT_KEY` fields (gpu_name, compute_capability, driver, cuda, torch, triton, tuner,
    kernel_hash; "" for what does not apply). It is found by those, not by kernel_source
    ("builtin" or "vllm") and vllm (vLLM's version or ""): the first vLLM version that timed a
    kernel text is the one kept for it.
    """
    found = {"device_id": get_or_create_device(session, device_name=device_name), **key}
    return _get_or_insert(session, Environment, found, kernel_source=kernel_source, vllm=vllm)


# --- sweeps -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepParams:
    """What a sweep stored and a sweep asked for share: on `device_name`, a model at TP `tp`
    over the M grid `m_values`, with weight scales' `block_shape` (None: per-tensor),
    `out_dtype`, the config space's name and the search (`strategy`, trials per task `budget`,
    `seed`)."""

    device_name: str
    model: str
    tp: int
    strategy: str
    budget: int
    space: str
    seed: int
    m_values: Sequence[int]
    out_dtype: str
    block_shape: tuple[int, int] | None


@dataclass(frozen=True)
class SweepSpec(SweepParams):
    """What a sweep tunes: its parameters, the model's (N, K) `shapes`, and its tasks of kernel
    `family` with `shape_params` ("E=8", "" for none). `family_in_key`: the family enters the
    sweep's key (False for the family keyed before the store knew families)."""

    shapes: Sequence[tuple[int, int]]
    family: str
    shape_params: str
    family_in_key: bool


@dataclass(frozen=True)
class SweepInfo(SweepParams):
    """A stored sweep: its parameters (`m_values` a sorted tuple), id, key and creation time,
    its task counts by state and trial counts."""

    sweep_id: int
    sweep_key: str
    created_at: datetime
    tasks_total: int
    tasks_pending: int
    tasks_running: int
    tasks_done: int
    tasks_failed: int
    trials_total: int
    trials_ok: int


def sweep_key(spec: SweepSpec) -> str:
    """The identity of a sweep: sha256 (64 hex digits) of the canonical JSON of its parameters,
    `m_values` and `shapes` deduplicated and sorted, a block shape as a pair (None: null); the
    family and shape params only with `family_in_key` or shape params, so that stored sweeps of
    the family keyed before families existed keep their keys."""
    params = {name: getattr(spec, name) for name in ("device_name", "model", "strategy", "space")}
    params |= {name: int(getattr(spec, name)) for name in ("tp", "budget", "seed")}
    params |= {"m_values": sorted({int(m) for m in spec.m_values}), "out_dtype": spec.out_dtype}
    params["block_shape"] = None if spec.block_shape is None else [int(s) for s in spec.block_shape]
    params["shapes"] = sorted({(int(n), int(k)) for n, k in spec.shapes})
    if spec.family_in_key or spec.shape_params:
        params.update(family=spec.family, shape_params=spec.shape_params)
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def sweep_params(sweep: Sweep, device_name: str) -> dict[str, Any]:
    """The `SweepParams` fields of a stored sweep on `device_name`."""
    block_shape = block_shape_of(sweep.block_n, sweep.block_k)
    given = {"device_name": device_name, "m_values": tuple(sweep.m_values)}
    return vars(take(SweepParams, sweep, **given, block_shape=block_shape))


def _count(*where: Any, trials: bool = False) -> Any:
    """The count of the outer query's sweep's tasks (or their trials) where `where` holds."""
    rows = select(func.count()).select_from(Trial).join(Task) if trials else select(func.count())
    return rows.where(Task.sweep_id == Sweep.sweep_id, *where).scalar_subquery()


def list_sweeps(session: Session, *, sweep_id: int | None = None) -> list[SweepInfo]:
    """Every sweep (or only `sweep_id`) with task counts by state and trial counts, by id."""
    counts = {f"tasks_{state}": _count(Task.state == state) for state in TaskState}
    counts["trials_ok"] = _count(Trial.status == TrialStatus.OK.value, trials=True)
    counts["trials_total"] = _count(trials=True)
    query = select(Sweep, Device.device_name, *counts.values()).join(Device)
    if sweep_id is not None:
        query = query.where(Sweep.sweep_id == sweep_id)
    summaries = []
    for sweep, name, *values in session.execute(query.order_by(Sweep.sweep_id)):
        got = dict(zip(counts, values, strict=True))
        total = sum(got[f"tasks_{state}"] for state in TaskState)
        summaries.append(
            take(SweepInfo, sweep, **sweep_params(sweep, name), **got, tasks_total=total)
        )
    return summaries


def create_sweep(session: Session, spec: SweepSpec) -> tuple[SweepInfo, bool]:
    """The sweep of `spec` (by `sweep_key`), created with one pending task per (N, K, M), in
    (N, K, M) order, the order `claim_task` hands them out, when there is none; (the sweep,
    True when this call created it). Asked with another budget it is another sweep, whose
    tasks start from the trials of the first (`adopt_measurements`).
    """
    key = sweep_key(spec)
    found = select(Sweep.sweep_id).where(Sweep.sweep_key == key)
    sweep_id = session.scalar(found)
    if sweep_id is not None:
        return list_sweeps(session, sweep_id=sweep_id)[0], False
    block_n, block_k = block_columns(spec.block_shape)
    grid = sorted({int(m) for m in spec.m_values})
    sweep_id = session.execute(
        dialect_insert(session, Sweep)
        .values(sweep_key=key, m_values=grid, block_n=block_n, block_k=block_k)
        .values(device_id=get_or_create_device(session, device_name=spec.device_name))
        .values(model=spec.model, strategy=spec.strategy, space=spec.space)
        .values(out_dtype=spec.out_dtype, tp=int(spec.tp), budget=int(spec.budget))
        .values(seed=int(spec.seed), created_at=utcnow())
        .on_conflict_do_nothing(index_elements=["sweep_key"])
        .returning(Sweep.sweep_id)
    ).scalar_one_or_none()
    if sweep_id is None:  # another process created it between our SELECT and INSERT
        return list_sweeps(session, sweep_id=session.scalars(found).one())[0], False
    task = {"sweep_id": sweep_id, "family": spec.family, "shape_params": spec.shape_params}
    rows = [
        {**task, "N": n, "K": k, "M": m, "state": TaskState.PENDING, "attempts": 0}
        for n, k in sorted({(int(n), int(k)) for n, k in spec.shapes})
        for m in grid
    ]
    session.execute(insert(Task), rows)
    return list_sweeps(session, sweep_id=sweep_id)[0], True


# --- the task queue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskInfo(SweepParams):
    """A claimed task with its sweep's parameters (what a worker needs); `attempts` counts
    claims."""

    task_id: int
    sweep_id: int
    N: int
    K: int
    M: int
    attempts: int
    family: str
    shape_params: str = ""


def _now(now: datetime | None) -> datetime:
    if now is not None and (now.tzinfo is None or now.utcoffset() is None):
        raise ValueError(f"now={now!r} is naive: pass a timezone-aware UTC datetime")
    return utcnow() if now is None else now


def _in_scope(task: Any, sweep_id: int | None, device_name: str | None, space: str | None) -> list:
    """Conditions that keep `task` to one sweep, to sweeps on one device, of one config space."""
    sweeps = select(Sweep.sweep_id).join(Device)
    if device_name is not None:
        sweeps = sweeps.where(Device.device_name == device_name)
    if space is not None:
        sweeps = sweeps.where(Sweep.space == space)
    conditions = [] if sweep_id is None else [task.sweep_id == sweep_id]
    if device_name is not None or space is not None:
        conditions.append(task.sweep_id.in_(sweeps))
    return conditions


def _claimable(task: Any, now: datetime) -> Any:
    """Pending, or running under a lease that ended before `now`."""
    running = and_(task.state == TaskState.RUNNING, task.lease_expires_at < now)
    return or_(task.state == TaskState.PENDING, running)


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
    """Claim the first claimable task (lowest task_id: pending, or running with an expired
    lease) of a sweep (None: any), of sweeps on a device and of a config space (None: any), for
    `lease_s` seconds; None when nothing is claimable. Commit promptly to publish the claim.

    One `UPDATE tasks ... WHERE task_id = (SELECT ... LIMIT 1 FOR UPDATE SKIP LOCKED) AND
    <claimable> RETURNING task_id`: SQLite runs it under its single write lock, PostgreSQL skips
    rows other claimers hold, and the outer condition re-checks the row, so no two workers get
    the same task. The claimed task is running, its attempts counted, no config in flight.
    """
    now = _now(now)
    candidate = aliased(Task)
    scope = _in_scope(candidate, sweep_id, device_name, space)
    candidates = select(candidate.task_id).where(_claimable(candidate, now), *scope)
    pick = candidates.order_by(candidate.task_id).limit(1).with_for_update(skip_locked=True)
    claim = (
        update(Task)
        .where(Task.task_id == pick.scalar_subquery(), _claimable(Task, now))
        .values(
            state=TaskState.RUNNING, worker_id=worker_id, attempts=Task.attempts + 1, error=None
        )
        .values(lease_expires_at=now + timedelta(seconds=lease_s), started_at=now, **_NOT_FLYING)
        .returning(Task.task_id)
        .execution_options(synchronize_session=False)
    )
    for _ in range(5):  # a claim that loses a race on PostgreSQL (all candidates locked) retries
        task_id = session.execute(claim).scalar_one_or_none()
        if task_id is not None:
            task = session.get_one(Task, task_id, populate_existing=True)
            sweep = session.get_one(Sweep, task.sweep_id)
            name = session.get_one(Device, sweep.device_id).device_name
            return take(TaskInfo, task, **sweep_params(sweep, name))
        if session.scalar(candidates.limit(1)) is None:
            return None
    return None


def _held(task_id: Any, worker_id: Any) -> Any:
    return and_(
        Task.task_id == task_id, Task.worker_id == worker_id, Task.state == TaskState.RUNNING
    )


def _update_held(session: Session, task_id: int, worker_id: str, **values: Any) -> bool:
    """Set `values` on a task this worker still holds (running under its worker_id); False
    when another worker re-claimed it or it is no longer running."""
    return _returning(session, update(Task).where(_held(task_id, worker_id)).values(values)) == 1


def heartbeat(
    session: Session, *, task_id: int, worker_id: str, lease_s: float, now: datetime | None = None
) -> bool:
    """Extend the lease of a task this worker still holds to now + lease_s; False when another
    worker re-claimed it or it is no longer running."""
    lease = _now(now) + timedelta(seconds=lease_s)
    return _update_held(session, task_id, worker_id, lease_expires_at=lease)


def finish_task(
    session: Session,
    *,
    task_id: int,
    worker_id: str,
    state: TaskState = TaskState.DONE,
    error: str | None = None,
    now: datetime | None = None,
) -> bool:
    """Mark a task this worker holds as "done" or "failed" (with `error`, one line) and drop its
    lease.

    Returns:
        True when the task was running under this worker_id and is now done or failed.
    """
    finished = {"state": state, "error": error, "finished_at": _now(now)}
    return _update_held(
        session, task_id, worker_id, lease_expires_at=None, **finished, **_NOT_FLYING
    )


def release_tasks(session: Session, *, worker_id: str) -> int:
    """Hand every running task of a worker back to the queue, attempts kept; how many."""
    running = and_(Task.worker_id == worker_id, Task.state == TaskState.RUNNING)
    return _returning(session, update(Task).where(running).values(**_PENDING, **_NOT_FLYING))


def end_trial(session: Session, *, task_id: int, worker_id: str) -> bool:
    """Clear the config in flight, in the transaction that records the trial. False: the task
    was taken from this worker (lease expired and re-claimed, or released): roll back."""
    return _update_held(session, task_id, worker_id, **_NOT_FLYING)


def unfinished_tasks(
    session: Session,
    *,
    sweep_id: int | None = None,
    device_name: str | None = None,
    space: str | None = None,
) -> int:
    """Pending and running tasks in the scope a worker claims from (see `claim_task`)."""
    scope = _in_scope(Task, sweep_id, device_name, space)
    count = select(func.count()).where(
        Task.state.in_((TaskState.PENDING, TaskState.RUNNING)), *scope
    )
    return session.scalar(count) or 0


# --- trials, re-timings and decisions ---------------------------------------------------------


def record_trial(
    session: Session,
    *,
    task_id: int,
    environment_id: int,
    config: Mapping[str, int],
    is_default: bool,
    status: str,
    worker_id: str | None = None,
    latency_us: float | None = None,
    p20_us: float | None = None,
    p80_us: float | None = None,
    rel_error: float | None = None,
    error: str | None = None,
    measure_s: float | None = None,
) -> bool:
    """Store one trial once, in the caller's transaction (a worker's whole per-trial cost of
    the store).

    `config` is vLLM's six keys, `status` a `TrialStatus`; latencies (median, 20th and 80th
    percentile) in microseconds, `rel_error` against the float64 reference, `error` one line,
    `measure_s` the trial's wall seconds. With `worker_id`, first check that it still holds the
    task and clear its config in flight (as `end_trial`).

    Returns:
        Without `worker_id`: False when the same (task, config) is already stored. With it:
        True while the worker holds the task (stored now or before); False when it was taken
        from it: nothing was written, roll back.

    Raises:
        ValueError: the status is unknown; KeyError: a config key is missing.
    """
    row: dict[str, Any] = {name: int(config[name]) for name in CONFIG_KEYS}
    row |= {"task_id": task_id, "environment_id": environment_id, "is_default": bool(is_default)}
    row |= {"status": TrialStatus(status).value, "latency_us": latency_us, "p20_us": p20_us}
    row |= {"p80_us": p80_us, "rel_error": rel_error, "error": error, "measure_s": measure_s}
    if worker_id is not None and not end_trial(session, task_id=task_id, worker_id=worker_id):
        return False
    insert_row = dialect_insert(session, Trial).values(**row, created_at=utcnow())
    insert_row = insert_row.on_conflict_do_nothing(index_elements=["task_id", *CONFIG_KEYS])
    inserted = session.execute(insert_row.returning(Trial.trial_id)).first()
    return worker_id is not None or inserted is not None


def task_trials(session: Session, *, task_id: int) -> list[Trial]:
    """Every stored trial of a task in trial_id order (to rebuild a resumed task's study);
    `Trial.config` has vLLM's six keys in vLLM's order."""
    return list(session.scalars(select(Trial).filter_by(task_id=task_id).order_by(Trial.trial_id)))


def record_decision(
    session: Session,
    *,
    task_id: int,
    worker_id: str,
    environment_id: int,
    retimes: Sequence[Mapping[str, Any]],
    decision: Mapping[str, Any],
) -> bool:
    """Store a task's re-timed configs and the config it keeps, replacing any earlier ones, only
    while `worker_id` still holds the task (`end_trial`, whose clearing it also does).

    `retimes`: per re-timed config `config` (vLLM's six keys), `is_default`, `rounds`,
    `latency_us`, `p20_us`, `p80_us` (microseconds); configs distinct, at most one default.
    `decision`: `config` (one of the re-timed), `latency_us`, `default_latency_us` (None when
    the default was not re-timed), `runner_up` (six keys or None), `spread_us`, `kept`
    ("fastest", "default" or "simpler") and `note` (one line).

    Returns:
        True when stored; False (nothing written) when the worker no longer holds the task.
    """
    if not end_trial(session, task_id=task_id, worker_id=worker_id):
        return False
    task = {"task_id": task_id, "environment_id": environment_id, "created_at": utcnow()}
    session.execute(delete(Retime).where(Retime.task_id == task_id))
    session.execute(delete(Decision).where(Decision.task_id == task_id))
    session.execute(insert(Retime), [_row(item, task) for item in retimes])
    session.execute(insert(Decision).values(_row(decision, task)))
    return True


def _row(item: Mapping[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """The columns of a retime or decision given with its `config`, for a task."""
    return {k: v for k, v in item.items() if k != "config"} | dict(item["config"]) | task


def task_decision(session: Session, *, task_id: int) -> Decision | None:
    """The decision of a task with its `retimes` (by latency_us, then as recorded), or None."""
    return session.scalars(select(Decision).filter_by(task_id=task_id)).one_or_none()


# --- measurements shared between sweeps ------------------------------------------------------
# A measurement is made once: the trials any sweep stored of the same measurement (device,
# kernel and its hash, the versions that time it, family, shape, M, block shape, output dtype
# and config space) answer a task of another sweep, so an extended M grid, a larger budget or a
# second model sharing a shape measures only what is new.

# The environment's fields that make two trials one measurement (with its device): the
# kernel's text and the software that compiles and times it.
MEASUREMENT_FIELDS = ("kernel_hash", "torch", "triton", "tuner")
_COPIED = (*CONFIG_KEYS, "environment_id", "is_default", "status", "latency_us", "p20_us")
_COPIED += ("p80_us", "rel_error", "error", "measure_s", "created_at")
# What else makes two trials one measurement: the task's and the sweep's.
SAME_TASK = ("family", "shape_params", "N", "K", "M")
SAME_SWEEP = ("block_n", "block_k", "out_dtype", "space")


def adopt_measurements(session: Session, *, task_id: int, environment_id: int) -> int:
    """Copy into a task every trial another task stored of the same measurement (its family,
    shape params, N, K, M, its sweep's block shape, output dtype and config space, timed in an
    environment with the same device and `MEASUREMENT_FIELDS` as `environment_id`'s), each
    config once and keeping its environment and time, so the task resumes from them as from
    its own (`tuner.run.worker.TaskRun.resume`).

    Returns:
        The trials copied (configs the task had not stored).
    """
    task, env = session.get(Task, task_id), session.get(Environment, environment_id)
    if task is None or env is None:
        return 0
    sweep = session.get_one(Sweep, task.sweep_id)
    own = aliased(Trial)
    stored = select(own.trial_id).where(
        own.task_id == task_id, *(getattr(own, k) == getattr(Trial, k) for k in CONFIG_KEYS)
    )
    same_task = (getattr(Task, name) == getattr(task, name) for name in SAME_TASK)
    same_sweep = (getattr(Sweep, name) == getattr(sweep, name) for name in SAME_SWEEP)
    same_env = (getattr(Environment, name) == getattr(env, name) for name in MEASUREMENT_FIELDS)
    source = (
        select(literal(task_id), *(getattr(Trial, name) for name in _COPIED))
        .join_from(Trial, Task, Trial.task_id == Task.task_id)
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Environment, Trial.environment_id == Environment.environment_id)
        .where(Environment.device_id == env.device_id, *same_env, *same_task, *same_sweep)
        .where(Task.task_id != task_id, ~stored.exists())
        .order_by(Trial.created_at)
    )
    inserted = session.execute(
        dialect_insert(session, Trial)
        .from_select(["task_id", *_COPIED], source)
        .on_conflict_do_nothing(index_elements=["task_id", *CONFIG_KEYS])
    )
    return max(0, cast(CursorResult, inserted).rowcount or 0)
