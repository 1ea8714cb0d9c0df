"""The write side of a sweep: devices and environments, sweeps and their tasks, the task queue
(claim with a lease, heartbeat, finish, release), trials, re-timings with the decision they
lead to, and the ceilings measured on a GPU.

Like every repository function these are keyword-only, take a Session (a Connection for
`record_held_trial`), never commit and return frozen dataclasses. Writes that may race
(get-or-create, trial records, claims) are single statements (`INSERT ... ON CONFLICT DO
NOTHING`, `UPDATE ... RETURNING`) that are safe with several processes on one SQLite file and
on PostgreSQL.

A sweep asked again with a larger trial budget is the same sweep, extended (`open_sweep`): its
budget and key are raised and its done tasks go back to the queue, so their searches resume with
the trials already stored. A trial's record checks that its worker still holds the task
(`end_trial`, `record_held_trial`), so a worker whose task was taken (lease expired, released by
its sweep) cannot store a trial another worker measures too. The tasks' `in_flight_*` columns are
only ever cleared (the config in flight lives in memory shared with the supervisor).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from db.connection import dialect_insert
from db.models import (
    DECISION_KEPT,
    ENVIRONMENT_KEY,
    Ceiling,
    Decision,
    Device,
    Environment,
    Retime,
    Sweep,
    Task,
    Trial,
    UTCDateTime,
    block_columns,
    block_shape_of,
    config_of,
    take,
    utcnow,
)
from tuner.core import CONFIG_KEYS, DEVICE_NAME_MAX, OutDtype, TrialStatus, is_device_name

# A claim that loses a race on PostgreSQL (all candidates locked by other claimers) retries.
_CLAIM_TRIES = 5
# The error text of a task that a store error failed (`f"{type(exc).__name__}: {exc}"` of
# SQLAlchemy's wrappers); re-running the same command re-opens such tasks.
STORE_ERROR_PREFIXES = ("OperationalError: ", "InterfaceError: ", "TimeoutError: QueuePool")
_NOT_FLYING = {"in_flight_config": None, "in_flight_since": None}
_PENDING = {"state": "pending", "worker_id": None, "lease_expires_at": None}
_CEILING_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")  # the unit is its suffix: copy_gbps
_RETIME_KEYS = {"config", "is_default", "rounds", "latency_us", "p20_us", "p80_us"}
_DECISION_KEYS = {"config", "latency_us", "default_latency_us", "runner_up", "spread_us"}
_DECISION_KEYS |= {"kept", "note"}


def _returning(session: Session, statement: Any) -> int:
    """Run an UPDATE, RETURNING the ids it touched; how many."""
    returning = statement.returning(Task.task_id).execution_options(synchronize_session=False)
    return len(session.execute(returning).all())


# --- devices and environments -------------------------------------------------------------


def _check_device_name(device_name: str) -> None:
    """Refuse a name that is not vLLM's key as we store it (`tuner.core.is_device_name`); it ends
    up in file names, URLs, headers and shell lines."""
    if not is_device_name(device_name):
        raise ValueError(
            f"device_name {device_name!r:.160} must be vLLM's key, e.g. NVIDIA_L20 "
            f"or Intel(R)_Data_Center_GPU_Max_1550: 1..{DEVICE_NAME_MAX} printable "
            "ASCII characters without space, '\"', '/', '\\' or '..'"
        )


def _get_or_insert(session: Session, table: type[Any], key: Mapping[str, Any], **more: Any) -> int:
    """The id of the row of `table` with these unique-key values, inserted with `more` when
    there is none (race-safe: ON CONFLICT DO NOTHING, then read)."""
    find = select(*table.__mapper__.primary_key).where(
        *(getattr(table, name) == value for name, value in key.items())
    )
    found = session.scalar(find)
    if found is None:
        insert_row = dialect_insert(session, table).values(**key, **more)
        session.execute(insert_row.on_conflict_do_nothing(index_elements=list(key)))
        found = session.scalars(find).one()
    return found


def get_or_create_device(session: Session, *, device_name: str) -> int:
    """The device_id of vLLM's key `device_name` (e.g. `NVIDIA_L20`), added if new.

    Raises:
        ValueError: the name is not vLLM's key as we store it.
    """
    _check_device_name(device_name)
    return _get_or_insert(session, Device, {"device_name": device_name}, created_at=utcnow())


def get_or_create_environment(
    session: Session,
    *,
    device_name: str,
    gpu_name: str,
    compute_capability: str,
    driver: str,
    cuda: str,
    torch: str,
    triton: str,
    tuner: str,
    kernel_hash: str,
    kernel_source: str = "builtin",
    vllm: str = "",
) -> int:
    """The environment_id of the environment trials ran in ("" for what does not apply), added
    if new. It is found by all but kernel_source ("builtin" or "vllm") and vllm (vLLM's version
    or ""): the first vLLM version that timed a kernel text is the one kept for it."""
    given = dict(locals())
    key = {"device_id": get_or_create_device(session, device_name=device_name)}
    key |= {name: given[name] for name in ENVIRONMENT_KEY}
    return _get_or_insert(session, Environment, key, kernel_source=kernel_source, vllm=vllm)


# --- sweeps -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepInfo:
    """A sweep's parameters; `block_shape` None for per-tensor scales, `m_values` sorted."""

    sweep_id: int
    sweep_key: str
    device_name: str
    model: str
    tp: int
    strategy: str
    budget: int
    space: str
    seed: int
    m_values: tuple[int, ...]
    out_dtype: str
    block_shape: tuple[int, int] | None
    created_at: datetime


@dataclass(frozen=True)
class OpenedSweep:
    """What `open_sweep` did: `outcome` "new", "resumed" (same parameters and budget), "extended"
    (a smaller budget was stored: raised, done tasks reopened, `reopened` of them) or "kept" (a
    larger budget is stored: it stands). `previous_budget` is the stored one."""

    info: SweepInfo
    outcome: str
    previous_budget: int
    reopened: int = 0


def sweep_key(
    *,
    device_name: str,
    model: str,
    tp: int,
    strategy: str,
    budget: int,
    space: str,
    seed: int,
    m_values: Sequence[int],
    out_dtype: str,
    block_shape: tuple[int, int] | None,
    shapes: Sequence[tuple[int, int]],
    family: str,
    shape_params: str,
    family_in_key: bool,
) -> str:
    """The identity of a sweep: sha256 (64 hex digits) of the canonical JSON of its parameters.

    `m_values` and `shapes` are deduplicated and sorted first. The family and its shape params
    enter when `family_in_key` or when there are shape params: a family whose sweeps were keyed
    before the store knew families keeps those keys by leaving its name out
    (`FamilyShapes.sweep_key_has_family`). A block shape hashes as a pair, None as null.
    """
    params = {
        "device_name": device_name,
        "model": model,
        "tp": int(tp),
        "strategy": strategy,
        "budget": int(budget),
        "space": space,
        "seed": int(seed),
        "m_values": sorted({int(m) for m in m_values}),
        "out_dtype": out_dtype,
        "block_shape": None if block_shape is None else [int(size) for size in block_shape],
        "shapes": sorted({(int(n), int(k)) for n, k in shapes}),
    }
    if family_in_key or shape_params:
        params.update(family=family, shape_params=shape_params)
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _positive(name: str, values: Sequence[int]) -> None:
    if any(isinstance(v, bool) or int(v) != v or v < 1 for v in values):
        raise ValueError(f"{name} must be positive integers, got {list(values)!r}")


def _validate(
    *,
    out_dtype: str,
    m_values: Sequence[int],
    shapes: Sequence[tuple[int, int]],
    block_shape: tuple[int, int] | None,
    tp: int,
    budget: int,
) -> None:
    if out_dtype not in {dtype.value for dtype in OutDtype}:
        dtypes = ", ".join(dtype.value for dtype in OutDtype)
        raise ValueError(f"out_dtype {out_dtype!r} is not one of {dtypes}")
    if not m_values or not shapes:
        raise ValueError("a sweep needs at least one M value and one (N, K) shape")
    _positive("m_values", list(m_values))
    _positive("shapes", [size for shape in shapes for size in shape])
    if block_shape is not None:
        _positive("block_shape", list(block_shape))
    _positive("tp and budget", [tp, budget])
    if (block_shape is not None and len(block_shape) != 2) or any(len(s) != 2 for s in shapes):
        raise ValueError("block_shape and every shape must be pairs: (group_n, group_k), (N, K)")


def get_sweep(session: Session, *, sweep_id: int) -> SweepInfo | None:
    """A sweep by id; None when there is none."""
    row = session.execute(
        select(Sweep, Device.device_name)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(Sweep.sweep_id == sweep_id)
    ).one_or_none()
    if row is None:
        return None
    sweep, device_name = row
    block_shape = block_shape_of(sweep.block_n, sweep.block_k)
    m_values = tuple(sweep.m_values)
    return take(
        SweepInfo, sweep, device_name=device_name, m_values=m_values, block_shape=block_shape
    )


def open_sweep(
    session: Session,
    *,
    device_name: str,
    model: str,
    tp: int,
    strategy: str,
    budget: int,
    space: str,
    seed: int,
    m_values: Sequence[int],
    out_dtype: str,
    block_shape: tuple[int, int] | None,
    shapes: Sequence[tuple[int, int]],
    family: str,
    shape_params: str,
    family_in_key: bool,
) -> OpenedSweep:
    """Find the sweep with these parameters (`sweep_key`'s), extend the same sweep stored with a
    smaller budget, or create it with one pending task per (N, K, M), in (N, K, M) order, the
    order `claim_task` hands them out.

    A sweep is the same when every parameter but the budget is. Asked with a larger budget it is
    extended in this transaction (budget and key raised, done tasks pending again, trials,
    retimes and decisions kept, failed tasks stay failed); with a smaller one it stands ("kept").
    Tasks a store error failed are reopened whenever a sweep is found again.

    Raises:
        ValueError: an empty grid or shape list, a non-positive size, an unknown out_dtype.
    """
    fields = dict(locals())
    del fields["session"]
    _validate(
        **{name: fields[name] for name in ("out_dtype", "m_values", "shapes", "block_shape")},
        tp=tp,
        budget=budget,
    )
    key = sweep_key(**fields)
    for _ in range(3):  # another process may extend the same sweep between our reads
        sweep_id = session.scalar(select(Sweep.sweep_id).where(Sweep.sweep_key == key))
        if sweep_id is not None:
            return _opened(session, sweep_id, "resumed")
        same = _same_but_budget(session, fields)
        if same is None:
            return _create(session, key, fields)
        if same.budget > budget:
            return _opened(session, same.sweep_id, "kept")
        previous, sweep_id = same.budget, same.sweep_id
        reopened = _extend(session, same, budget, key)
        if reopened is not None:
            return _opened(session, sweep_id, "extended", previous, reopened)
    return _create(session, key, fields)


def _same_but_budget(session: Session, fields: dict[str, Any]) -> Sweep | None:
    """The stored sweep whose parameters are `fields`' but the budget (the largest budget, then
    the newest): its key recomputed with its own budget matches."""
    block_n, block_k = block_columns(fields["block_shape"])
    candidates = session.scalars(
        select(Sweep)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(
            Device.device_name == fields["device_name"],
            *(getattr(Sweep, name) == fields[name] for name in ("model", "strategy", "space")),
            *(getattr(Sweep, name) == int(fields[name]) for name in ("tp", "seed")),
            Sweep.out_dtype == fields["out_dtype"],
            Sweep.block_n == block_n,
            Sweep.block_k == block_k,
        )
        .order_by(Sweep.budget.desc(), Sweep.sweep_id.desc())
    )
    return next(
        (s for s in candidates if s.sweep_key == sweep_key(**fields | {"budget": s.budget})), None
    )


def _extend(session: Session, sweep: Sweep, budget: int, key: str) -> int | None:
    """Raise a sweep's budget (and key) and reopen its done tasks; None when another process
    changed the sweep first. The sweep row is updated first: it stays locked until commit, so a
    worker finishing a task of it (`finish_task` with its budget) waits, then sees the new
    budget and hands the task back. finished_at is kept: warm starts read it."""
    raised = session.execute(
        update(Sweep)
        .where(Sweep.sweep_id == sweep.sweep_id, Sweep.budget == sweep.budget)
        .values(budget=int(budget), sweep_key=key)
        .returning(Sweep.sweep_id)
        .execution_options(synchronize_session=False)
    ).all()
    if not raised:
        return None
    reopened = _returning(
        session,
        update(Task)
        .where(Task.sweep_id == sweep.sweep_id, Task.state == "done")
        .values(**_PENDING, error=None),
    )
    session.expire_all()
    return reopened


def reopen_store_failures(session: Session, *, sweep_id: int) -> int:
    """Put a sweep's tasks that failed because of the store (STORE_ERROR_PREFIXES) back to
    pending, trials kept; how many."""
    store_error = or_(*(Task.error.startswith(p, autoescape=True) for p in STORE_ERROR_PREFIXES))
    return _returning(
        session,
        update(Task)
        .where(Task.sweep_id == sweep_id, Task.state == "failed", store_error)
        .values(**_PENDING, error=None),
    )


def _opened(
    session: Session, sweep_id: int, outcome: str, previous: int | None = None, reopened: int = 0
) -> OpenedSweep:
    if outcome != "new":  # a task a store error failed is never final: re-running resumes it
        reopen_store_failures(session, sweep_id=sweep_id)
    info = get_sweep(session, sweep_id=sweep_id)
    assert info is not None  # found or written in this transaction
    return OpenedSweep(info, outcome, info.budget if previous is None else previous, reopened)


def _create(session: Session, key: str, fields: dict[str, Any]) -> OpenedSweep:
    """Insert the sweep and its tasks, or find it when another process inserted it first."""
    grid = sorted({int(m) for m in fields["m_values"]})
    block_n, block_k = block_columns(fields["block_shape"])
    sweep_id = session.execute(
        dialect_insert(session, Sweep)
        .values(
            sweep_key=key,
            device_id=get_or_create_device(session, device_name=fields["device_name"]),
            **{name: fields[name] for name in ("model", "strategy", "space", "out_dtype")},
            **{name: int(fields[name]) for name in ("tp", "budget", "seed")},
            m_values=grid,
            block_n=block_n,
            block_k=block_k,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["sweep_key"])
        .returning(Sweep.sweep_id)
    ).scalar_one_or_none()
    if sweep_id is None:  # another process created it between our SELECT and INSERT
        found = session.scalars(select(Sweep.sweep_id).where(Sweep.sweep_key == key)).one()
        return _opened(session, found, "resumed")
    family = {"family": fields["family"], "shape_params": fields["shape_params"]}
    rows = [
        {"sweep_id": sweep_id, **family, "N": n, "K": k, "M": m, "state": "pending", "attempts": 0}
        for n, k in sorted({(int(n), int(k)) for n, k in fields["shapes"]})
        for m in grid
    ]
    session.execute(insert(Task), rows)
    return _opened(session, sweep_id, "new")


def create_sweep(session: Session, **fields: Any) -> tuple[SweepInfo, bool]:
    """`open_sweep` (same keyword arguments), answering (the sweep, True when this call created
    it); a larger budget extends the stored sweep (False)."""
    opened = open_sweep(session, **fields)
    return opened.info, opened.outcome == "new"


# --- the task queue ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskInfo:
    """A claimed task with what a worker needs from its sweep; `attempts` counts claims."""

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
    if now is not None and (now.tzinfo is None or now.utcoffset() is None):
        raise ValueError(f"now={now!r} is naive: pass a timezone-aware UTC datetime")
    return utcnow() if now is None else now


def _in_scope(
    task: Any, *, sweep_id: int | None, device_name: str | None, space: str | None
) -> list[ColumnElement[bool]]:
    """Conditions that keep `task` to one sweep, to sweeps on one device, of one config space."""
    sweeps = select(Sweep.sweep_id).join(Device, Sweep.device_id == Device.device_id)
    if device_name is not None:
        sweeps = sweeps.where(Device.device_name == device_name)
    if space is not None:
        sweeps = sweeps.where(Sweep.space == space)
    conditions = [] if sweep_id is None else [task.sweep_id == sweep_id]
    if device_name is not None or space is not None:
        conditions.append(task.sweep_id.in_(sweeps))
    return conditions


def _claimable(task: Any, now: datetime) -> ColumnElement[bool]:
    """Pending, or running under a lease that ended before `now`."""
    return or_(task.state == "pending", and_(task.state == "running", task.lease_expires_at < now))


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
    scope = _in_scope(candidate, sweep_id=sweep_id, device_name=device_name, space=space)
    candidates = select(candidate.task_id).where(_claimable(candidate, now), *scope)
    pick = candidates.order_by(candidate.task_id).limit(1).with_for_update(skip_locked=True)
    claim = (
        update(Task)
        .where(Task.task_id == pick.scalar_subquery(), _claimable(Task, now))
        .values(state="running", worker_id=worker_id, attempts=Task.attempts + 1, error=None)
        .values(lease_expires_at=now + timedelta(seconds=lease_s), started_at=now, **_NOT_FLYING)
        .returning(Task.task_id)
        .execution_options(synchronize_session=False)
    )
    for _ in range(_CLAIM_TRIES):
        task_id = session.execute(claim).scalar_one_or_none()
        if task_id is not None:
            task, sweep, name = session.execute(
                select(Task, Sweep, Device.device_name)
                .join(Sweep, Task.sweep_id == Sweep.sweep_id)
                .join(Device, Sweep.device_id == Device.device_id)
                .where(Task.task_id == task_id)
            ).one()
            block_shape = block_shape_of(sweep.block_n, sweep.block_k)
            sweep_fields = {name: getattr(sweep, name) for name in ("out_dtype", "strategy")}
            sweep_fields |= {name: getattr(sweep, name) for name in ("budget", "seed", "space")}
            return take(TaskInfo, task, device_name=name, block_shape=block_shape, **sweep_fields)
        if session.scalar(candidates.limit(1)) is None:
            return None
    return None


def _held(task_id: int, worker_id: str) -> ColumnElement[bool]:
    return and_(Task.task_id == task_id, Task.worker_id == worker_id, Task.state == "running")


def heartbeat(
    session: Session, *, task_id: int, worker_id: str, lease_s: float, now: datetime | None = None
) -> bool:
    """Extend the lease of a task this worker still holds to now + lease_s; False when another
    worker re-claimed it or it is no longer running."""
    lease = _now(now) + timedelta(seconds=lease_s)
    held = update(Task).where(_held(task_id, worker_id)).values(lease_expires_at=lease)
    return _returning(session, held) == 1


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
    """Mark a task this worker holds as "done" or "failed" (with `error`, one line) and drop its
    lease; a task reopened by a larger budget keeps its first `finished_at` (warm starts read
    it). With `budget` (the sweep budget it was searched with), a task whose sweep was extended
    since goes back to the queue instead, trials kept.

    Returns:
        True when the task was running under this worker_id and is now done or failed.

    Raises:
        ValueError: state is neither "done" nor "failed".
    """
    if state not in ("done", "failed"):
        raise ValueError(f"a task finishes as 'done' or 'failed', not {state!r}")
    held = [_held(task_id, worker_id)]
    check = budget is not None and state == "done"
    if check:
        sweep = select(Task.sweep_id).where(Task.task_id == task_id).scalar_subquery()
        # FOR SHARE (PostgreSQL): this and an extension of the sweep wait for each other.
        session.execute(
            select(Sweep.budget).where(Sweep.sweep_id == sweep).with_for_update(read=True)
        )
        held.append(Task.sweep_id.in_(select(Sweep.sweep_id).where(Sweep.budget == budget)))
    first = func.coalesce(Task.finished_at, literal(_now(now), UTCDateTime()))
    finished = _returning(
        session,
        update(Task)
        .where(*held)
        .values(state=state, error=error, finished_at=first, lease_expires_at=None, **_NOT_FLYING),
    )
    if check and not finished:  # the budget grew: searched again to it, by whoever claims it
        release_tasks(session, worker_id=worker_id, task_id=task_id)
    return finished == 1


def release_tasks(session: Session, *, worker_id: str, task_id: int | None = None) -> int:
    """Hand every running task of a worker (or only `task_id`) back to the queue, attempts
    kept; how many."""
    only = [] if task_id is None else [Task.task_id == task_id]
    return _returning(
        session,
        update(Task)
        .where(Task.worker_id == worker_id, Task.state == "running", *only)
        .values(**_PENDING, **_NOT_FLYING),
    )


def end_trial(session: Session, *, task_id: int, worker_id: str) -> bool:
    """Clear the config in flight, in the transaction that records the trial. False: the task
    was taken from this worker (lease expired and re-claimed, or released): roll back."""
    return (
        _returning(session, update(Task).where(_held(task_id, worker_id)).values(_NOT_FLYING)) == 1
    )


def unfinished_tasks(
    session: Session,
    *,
    sweep_id: int | None = None,
    device_name: str | None = None,
    space: str | None = None,
) -> int:
    """Pending and running tasks in the scope a worker claims from (see `claim_task`)."""
    scope = _in_scope(Task, sweep_id=sweep_id, device_name=device_name, space=space)
    count = select(func.count()).where(Task.state.in_(("pending", "running")), *scope)
    return session.scalar(count) or 0


# --- trials -----------------------------------------------------------------------------------


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


def _checked(config: Mapping[str, int], status: str) -> dict[str, int]:
    """The config as six ints; ValueError for other keys, a non-positive value, a bad status."""
    if str(status) not in {s.value for s in TrialStatus}:
        statuses = ", ".join(s.value for s in TrialStatus)
        raise ValueError(f"trial status {status!r} is not one of {statuses}")
    return _config(config, "config")


# Core statements of a trial's record, built once (per dialect): building an ORM statement per
# trial cost more CPU than the transaction itself.
_TASKS = cast(Table, Task.__table__)
_HOLD = (
    update(_TASKS)
    .where(
        _TASKS.c.task_id == bindparam("held_task_id"),
        _TASKS.c.worker_id == bindparam("held_worker_id"),
        _TASKS.c.state == "running",
    )
    .values(_NOT_FLYING)
)
_TRIAL_COLUMNS = ("task_id", "environment_id", *CONFIG_KEYS, "is_default", "status", "latency_us")
_TRIAL_COLUMNS += ("p20_us", "p80_us", "rel_error", "error", "measure_s", "created_at")
_INSERTS = {
    name: module.insert(Trial.__table__)
    .values({column: bindparam(column) for column in _TRIAL_COLUMNS})
    .on_conflict_do_nothing(index_elements=["task_id", *CONFIG_KEYS])
    .returning(Trial.__table__.c.trial_id)
    for name, module in (("sqlite", sqlite), ("postgresql", postgresql))
}


def _insert_trial(connection: Connection, config: Mapping[str, int], **values: Any) -> bool:
    """Store one trial once (a second record of the same task and config is ignored); whether
    it was inserted."""
    insert_trial = _INSERTS.get(connection.dialect.name)
    if insert_trial is None:
        raise NotImplementedError(
            f"store backend {connection.dialect.name!r} is not supported: use SQLite or PostgreSQL"
        )
    row = {**_checked(config, values["status"]), **values, "created_at": utcnow()}
    row |= {"is_default": bool(row["is_default"]), "status": str(row["status"])}
    return connection.execute(insert_trial, row).first() is not None


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
    """Store one trial once: False when the same (task, config) is already stored.

    `config` is vLLM's six keys, `status` a `TrialStatus`; latencies (median, 20th and 80th
    percentile) in microseconds, `rel_error` against the float64 reference, `error` one line,
    `measure_s` the trial's wall seconds.

    Raises:
        ValueError: the config's keys are not exactly vLLM's six, or the status is unknown.
    """
    values = dict(locals())
    del values["session"], values["config"]
    return _insert_trial(session.connection(), config, **values)


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
    """A worker's trial: check that it still holds the task (and clear its config in flight, as
    `end_trial`), then store the trial once, as `record_trial`. Two prepared Core statements on
    a Connection (`store.begin()`), a worker's whole per-trial cost of the store.

    Returns:
        True when the worker holds the task (the trial is stored, or was already); False when
        the task was taken from it: nothing was written, roll back.
    """
    values = dict(locals())
    del values["connection"], values["config"], values["worker_id"]
    _checked(config, status)
    held = connection.execute(_HOLD, {"held_task_id": task_id, "held_worker_id": worker_id})
    if held.rowcount != 1:
        return False
    _insert_trial(connection, config, **values)
    return True


def task_trials(session: Session, *, task_id: int) -> list[TrialInfo]:
    """Every stored trial of a task in trial_id order (to rebuild a resumed task's study)."""
    trials = session.scalars(select(Trial).where(Trial.task_id == task_id).order_by(Trial.trial_id))
    return [take(TrialInfo, trial, config=config_of(trial)) for trial in trials]


# --- re-timings, decisions and ceilings --------------------------------------------------------


@dataclass(frozen=True)
class RetimeInfo:
    """One re-timed config of a task: median and percentiles in microseconds over `rounds`."""

    config: dict[str, int]
    is_default: bool
    rounds: int
    latency_us: float
    p20_us: float
    p80_us: float


@dataclass(frozen=True)
class DecisionInfo:
    """The config a task keeps after re-timing (`kept`: fastest, default or simpler), its and
    the default's re-timed latency, the spread it had to beat, and the re-timed configs
    (`retimes`, fastest first). Latencies in microseconds."""

    decision_id: int
    task_id: int
    environment_id: int
    config: dict[str, int]
    latency_us: float
    default_latency_us: float | None
    runner_up: dict[str, int] | None
    spread_us: float
    kept: str
    note: str
    created_at: datetime
    retimes: tuple[RetimeInfo, ...]


def _config(value: object, what: str) -> dict[str, int]:
    if not isinstance(value, Mapping) or set(value) != set(CONFIG_KEYS):
        keys = sorted(value) if isinstance(value, Mapping) else type(value).__name__
        raise ValueError(f"{what}: keys {keys} are not {', '.join(CONFIG_KEYS)}")
    return {name: _positive_int(value[name], f"{what}: {name}") for name in CONFIG_KEYS}


def _positive_int(value: Any, what: str) -> int:
    try:
        whole = int(value)
        ok = not isinstance(value, bool) and whole == value and whole >= 1
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{what} must be a positive integer, got {value!r}")
    return whole


def _number(value: Any, what: str, *, positive: bool = False) -> float:
    """value as a finite float >= 0 (> 0 when `positive`), else ValueError naming `what`."""
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0 or (positive and number == 0):
        wanted = "a finite positive number" if positive else "a finite number of microseconds >= 0"
        raise ValueError(f"{what} must be {wanted}, got {value!r}")
    return number


def _retime_row(item: Mapping[str, Any], index: int) -> dict[str, Any]:
    what = f"retimes[{index}]"
    if set(item) != _RETIME_KEYS:
        raise ValueError(f"{what}: keys {sorted(item)} are not {sorted(_RETIME_KEYS)}")
    times = {
        name: _number(item[name], f"{what}.{name}") for name in ("latency_us", "p20_us", "p80_us")
    }
    if not times["p20_us"] <= times["latency_us"] <= times["p80_us"]:
        raise ValueError(
            f"{what}: need p20_us <= latency_us <= p80_us, got {times['p20_us']}, "
            f"{times['latency_us']}, {times['p80_us']}"
        )
    rounds = _positive_int(item["rounds"], f"{what}: rounds")
    config = _config(item["config"], f"{what}.config")
    return {**config, "is_default": bool(item["is_default"]), "rounds": rounds, **times}


def _decision_row(decision: Mapping[str, Any], configs: list[dict[str, int]]) -> dict[str, Any]:
    if set(decision) != _DECISION_KEYS:
        raise ValueError(f"decision: keys {sorted(decision)} are not {sorted(_DECISION_KEYS)}")
    config = _config(decision["config"], "decision.config")
    if config not in configs:
        raise ValueError("decision.config is not one of the re-timed configs")
    if decision["kept"] not in DECISION_KEPT:
        kinds = ", ".join(DECISION_KEPT)
        raise ValueError(f"decision.kept {decision['kept']!r} is not one of {kinds}")
    if not isinstance(decision["note"], str):
        raise ValueError("decision.note must be text")
    default_us, runner_up = decision["default_latency_us"], decision["runner_up"]
    return {
        **config,
        "latency_us": _number(decision["latency_us"], "decision.latency_us"),
        "default_latency_us": (
            None if default_us is None else _number(default_us, "decision.default_latency_us")
        ),
        "runner_up": None if runner_up is None else _config(runner_up, "decision.runner_up"),
        "spread_us": _number(decision["spread_us"], "decision.spread_us"),
        "kept": decision["kept"],
        "note": decision["note"],
    }


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

    `retimes`: per re-timed config `config` (vLLM's six keys), `is_default`, `rounds` (>= 1),
    `latency_us`, `p20_us`, `p80_us` (microseconds, p20 <= median <= p80); configs distinct, at
    most one default. `decision`: `config` (one of the re-timed), `latency_us`,
    `default_latency_us` (None when the default was not re-timed), `runner_up` (six keys or
    None), `spread_us`, `kept` ("fastest", "default" or "simpler") and `note` (one line).

    Returns:
        True when stored; False (nothing written) when the worker no longer holds the task.

    Raises:
        ValueError: missing or extra keys, a bad config or latency, no retimes, a repeated
            config, two defaults, or a decided config that was not re-timed.
    """
    if not retimes:
        raise ValueError("retimes: a decision needs at least one re-timed config")
    rows = [_retime_row(item, index) for index, item in enumerate(retimes)]
    configs = [config_of(row) for row in rows]
    if len({tuple(config.values()) for config in configs}) != len(configs):
        raise ValueError("retimes: a config is re-timed twice")
    if sum(row["is_default"] for row in rows) > 1:
        raise ValueError("retimes: more than one config marked is_default")
    decided = _decision_row(decision, configs)
    if not end_trial(session, task_id=task_id, worker_id=worker_id):
        return False
    task = {"task_id": task_id, "environment_id": environment_id, "created_at": utcnow()}
    session.execute(delete(Retime).where(Retime.task_id == task_id))
    session.execute(delete(Decision).where(Decision.task_id == task_id))
    session.execute(insert(Retime), [{**row, **task} for row in rows])
    session.execute(insert(Decision).values(**task, **decided))
    return True


def task_decision(session: Session, *, task_id: int) -> DecisionInfo | None:
    """The decision of a task with its retimes (by latency_us, then as recorded), or None."""
    decision = session.scalars(select(Decision).where(Decision.task_id == task_id)).one_or_none()
    if decision is None:
        return None
    retimes = session.scalars(
        select(Retime)
        .where(Retime.task_id == task_id)
        .order_by(Retime.latency_us, Retime.retime_id)
    )
    return take(
        DecisionInfo,
        decision,
        config=config_of(decision),
        runner_up=None if decision.runner_up is None else dict(decision.runner_up),
        retimes=tuple(take(RetimeInfo, r, config=config_of(r)) for r in retimes),
    )


def record_ceilings(
    session: Session,
    *,
    environment_id: int,
    ceilings: Mapping[str, float],
    details: Mapping[str, str] | None = None,
) -> None:
    """Store ceilings measured on the GPU of one environment (every measurement is kept):
    name -> value with the unit in the name's suffix (`copy_gbps`: GB/s of a device-to-device
    copy, `fp8_mm_tflops`: TFLOP/s of torch's FP8 matrix product), and how each was measured.

    Raises:
        ValueError: a name that is not lowercase snake_case of at most 64 characters, a value
            that is not a finite positive number, or a detail for a name not in `ceilings`.
    """
    details = dict(details or {})
    extra = sorted(set(details) - set(ceilings))
    if extra:
        raise ValueError(f"details for {', '.join(extra)}, which are not in ceilings")
    rows = []
    for name, value in ceilings.items():
        if not isinstance(name, str) or not _CEILING_NAME.fullmatch(name):
            raise ValueError(
                f"ceiling name {name!r} must be lowercase snake_case such as copy_gbps"
            )
        number = _number(value, f"ceiling {name}", positive=True)
        detail = details.get(name)
        rows.append({"environment_id": environment_id, "name": name, "value": number})
        rows[-1] |= {"detail": detail, "created_at": utcnow()}
    if rows:
        session.execute(insert(Ceiling), rows)
