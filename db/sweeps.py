"""Sweeps: their identity (a hash of their parameters), and finding, extending or creating one
with its tasks.

A sweep asked again with a larger trial budget is the same sweep, extended (`open_sweep`): its
budget and key are raised and its done tasks go back to the queue, so their searches resume
with the trials already stored and measure only the new ones.

Re-exported by `db.repo`; like the repository functions these take a Session, are keyword-only,
and do not commit."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from sqlalchemy import insert, or_, select, update
from sqlalchemy.orm import Session

from db.connection import dialect_insert
from db.devices import get_or_create_device
from db.models import Device, Sweep, Task, block_columns, block_shape_of, utcnow
from tuner.core import OUT_DTYPES


class _SweepFields(TypedDict):
    """`sweep_key`'s keyword arguments: the parameters that identify one sweep."""

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
    shapes: Sequence[tuple[int, int]]
    family: str
    shape_params: str
    family_in_key: bool


@dataclass(frozen=True)
class SweepInfo:
    """A sweep's parameters; `block_shape` is [group_n, group_k] (None: per-tensor scales),
    `m_values` sorted."""

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
    """The identity of a sweep: sha256 of the canonical JSON of its parameters.

    `m_values` and `shapes` are deduplicated and sorted first, so their order does not matter.
    The family and its shape params enter when `family_in_key` or when there are shape params:
    a family whose sweeps were keyed before the store knew families keeps those keys (and so
    resumes those sweeps) by leaving its name out. A block shape hashes as [group_n, group_k],
    None (per-tensor scales) as null.

    Args:
        family: the kernel family of the sweep's tasks.
        shape_params: the family's dimensions beyond N and K, `name=value,...` ("" for none).
        family_in_key: the family's name enters the key (the family says so:
            `tuner.kernels.family.FamilyShapes.sweep_key_has_family`).
        (the others): as `open_sweep`'s.

    Returns:
        64 lowercase hex digits.
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
        "block_shape": (
            None if block_shape is None else [int(block_shape[0]), int(block_shape[1])]
        ),
        "shapes": sorted({(int(n), int(k)) for n, k in shapes}),
    }
    if family_in_key or shape_params:
        params.update(family=family, shape_params=shape_params)
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _positive(name: str, values: Sequence[int]) -> None:
    if any(isinstance(v, bool) or int(v) != v or v < 1 for v in values):
        raise ValueError(f"{name} must be positive integers, got {list(values)!r}")


def get_sweep(session: Session, *, sweep_id: int) -> SweepInfo | None:
    """A sweep by id.

    Returns:
        The sweep, or None when there is none with that id.
    """
    row = session.execute(
        select(Sweep, Device.device_name)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(Sweep.sweep_id == sweep_id)
    ).one_or_none()
    if row is None:
        return None
    sweep, device_name = row
    return SweepInfo(
        sweep_id=sweep.sweep_id,
        sweep_key=sweep.sweep_key,
        device_name=device_name,
        model=sweep.model,
        tp=sweep.tp,
        strategy=sweep.strategy,
        budget=sweep.budget,
        space=sweep.space,
        seed=sweep.seed,
        m_values=tuple(sweep.m_values),
        out_dtype=sweep.out_dtype,
        block_shape=block_shape_of(sweep.block_n, sweep.block_k),
        created_at=sweep.created_at,
    )


@dataclass(frozen=True)
class OpenedSweep:
    """What `open_sweep` did with a request.

    Attributes:
        info: the sweep (its budget after the call).
        outcome: "new" (created with its tasks), "resumed" (the same parameters and budget
            existed), "extended" (the same sweep with a smaller budget existed: its budget was
            raised and its done tasks reopened) or "kept" (the same sweep with a larger budget
            exists: it stands, budget unchanged).
        previous_budget: the budget the sweep had before ("extended" and "kept": the stored
            one; otherwise equal to info.budget).
        reopened: done tasks put back in the queue ("extended" only, else 0).
    """

    info: SweepInfo
    outcome: str
    previous_budget: int
    reopened: int = 0


def _validate(
    *,
    out_dtype: str,
    m_values: Sequence[int],
    shapes: Sequence[tuple[int, int]],
    block_shape: tuple[int, int] | None,
    tp: int,
    budget: int,
) -> None:
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype {out_dtype!r} is not one of {', '.join(OUT_DTYPES)}")
    if not m_values or not shapes:
        raise ValueError("a sweep needs at least one M value and one (N, K) shape")
    _positive("m_values", list(m_values))
    _positive("shapes", [size for shape in shapes for size in shape])
    if block_shape is not None:
        _positive("block_shape", list(block_shape))
    _positive("tp and budget", [tp, budget])
    if (block_shape is not None and len(block_shape) != 2) or any(
        len(shape) != 2 for shape in shapes
    ):
        raise ValueError("block_shape and every shape must be pairs: (group_n, group_k), (N, K)")


def _same_but_budget(session: Session, fields: _SweepFields) -> Sweep | None:
    """The stored sweep whose parameters are `fields`' except the budget (the largest budget,
    then the newest, when several are stored): its key is recomputed with its own budget."""
    block_n, block_k = block_columns(fields["block_shape"])
    candidates = session.scalars(
        select(Sweep)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(
            Device.device_name == fields["device_name"],
            Sweep.model == fields["model"],
            Sweep.tp == int(fields["tp"]),
            Sweep.strategy == fields["strategy"],
            Sweep.space == fields["space"],
            Sweep.seed == int(fields["seed"]),
            Sweep.out_dtype == fields["out_dtype"],
            Sweep.block_n == block_n,
            Sweep.block_k == block_k,
        )
        .order_by(Sweep.budget.desc(), Sweep.sweep_id.desc())
    ).all()
    for sweep in candidates:
        own: _SweepFields = {**fields, "budget": sweep.budget}
        if sweep.sweep_key == sweep_key(**own):
            return sweep
    return None


def _extend(session: Session, sweep: Sweep, budget: int, key: str) -> int | None:
    """Raise a sweep's budget to `budget` (its key to `key`) and reopen its done tasks, in the
    caller's transaction; None when another process changed the sweep first.

    The sweep row is updated first: on PostgreSQL it stays locked until commit, and a worker
    finishing a task of it (`db.tasks.finish_task` with its budget) waits for the lock, then
    sees the new budget and hands the task back; on SQLite the write lock does the same."""
    raised = session.execute(
        update(Sweep)
        .where(Sweep.sweep_id == sweep.sweep_id, Sweep.budget == sweep.budget)
        .values(budget=int(budget), sweep_key=key)
        .returning(Sweep.sweep_id)
        .execution_options(synchronize_session=False)
    ).all()
    if not raised:
        return None
    # finished_at is kept: it says when each task first finished, which the warm starts of
    # the resumed searches read (`db.task_winners.task_winners`).
    reopened = session.execute(
        update(Task)
        .where(Task.sweep_id == sweep.sweep_id, Task.state == "done")
        .values(state="pending", worker_id=None, lease_expires_at=None, error=None)
        .returning(Task.task_id)
        .execution_options(synchronize_session=False)
    ).all()
    session.expire_all()
    return len(reopened)


# The error text of a task that a store error failed (`f"{type(exc).__name__}: {exc}"` of
# SQLAlchemy's wrappers); a store can hold such tasks as failed, and re-running re-opens them.
STORE_ERROR_PREFIXES = ("OperationalError: ", "InterfaceError: ", "TimeoutError: QueuePool")


def reopen_store_failures(session: Session, *, sweep_id: int) -> int:
    """Put a sweep's tasks that failed because of the store (not of their configs: see
    STORE_ERROR_PREFIXES) back to pending, trials kept, so re-running the same command
    resumes them.

    Returns:
        How many tasks were re-opened.
    """
    reopened = session.execute(
        update(Task)
        .where(
            Task.sweep_id == sweep_id,
            Task.state == "failed",
            or_(
                *(Task.error.startswith(prefix, autoescape=True) for prefix in STORE_ERROR_PREFIXES)
            ),
        )
        .values(state="pending", error=None, worker_id=None, lease_expires_at=None)
        .returning(Task.task_id)
        .execution_options(synchronize_session=False)
    ).all()
    return len(reopened)


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
    """Find the sweep with these parameters, extend the same sweep stored with a smaller
    budget, or create it with one pending task per (N, K, M).

    A sweep is the same when every parameter but the budget is (`sweep_key` with the stored
    budget). Asked with a larger budget, it is extended in this transaction: budget and key
    raised, done tasks pending again (trials, retimes and decisions kept; failed tasks stay
    failed). Asked with a smaller one, the stored sweep stands unchanged ("kept"). So a
    device, model, TP, grid and strategy keep one sweep whatever the budgets asked.

    Args:
        session: the open session.
        device_name: vLLM's device key the sweep tunes for.
        model: the model the shapes come from, e.g. "Qwen3.8-27B-FP8".
        tp: tensor-parallel size of those shapes.
        strategy: search strategy name, e.g. "grid" or "optuna".
        budget: trials per task.
        space: config space name, e.g. "vllm" or "custom:<hash>".
        seed: the strategy's seed.
        m_values: the M grid.
        out_dtype: "bfloat16" or "float16".
        block_shape: [group_n, group_k] of the weight scales, e.g. (128, 128); None for
            per-tensor scales.
        shapes: the (N, K) weight shapes.
        family: the kernel family of its tasks (`tuner.kernels.registry`).
        shape_params: the family's dimensions beyond N and K, `name=value,...` ("" for none).
        family_in_key: the family's name enters the sweep's key (`sweep_key`).

    Returns:
        What was done (`OpenedSweep`). New tasks are created in (N, K, M) order, which is
        also the order `claim_task` hands them out.

    Raises:
        ValueError: an empty grid or shape list, a non-positive size, an unknown out_dtype.
    """
    _validate(
        out_dtype=out_dtype,
        m_values=m_values,
        shapes=shapes,
        block_shape=block_shape,
        tp=tp,
        budget=budget,
    )
    fields: _SweepFields = {
        "device_name": device_name,
        "model": model,
        "tp": tp,
        "strategy": strategy,
        "budget": budget,
        "space": space,
        "seed": seed,
        "m_values": m_values,
        "out_dtype": out_dtype,
        "block_shape": block_shape,
        "shapes": shapes,
        "family": family,
        "shape_params": shape_params,
        "family_in_key": family_in_key,
    }
    key = sweep_key(**fields)
    stored = _find_or_extend(session, key, fields)
    return stored if stored is not None else _create(session, key, fields)


def _find_or_extend(session: Session, key: str, fields: _SweepFields) -> OpenedSweep | None:
    """The stored sweep of `key` ("resumed"), or the one that differs only by its budget:
    "kept" when that budget is larger, else "extended" to `fields["budget"]`. None when
    neither is stored, or when another process kept extending it over three tries.
    """
    budget = fields["budget"]
    find = select(Sweep.sweep_id).where(Sweep.sweep_key == key)
    for _ in range(3):  # another process may extend the same sweep between our reads
        sweep_id = session.scalar(find)
        if sweep_id is not None:
            return _opened(session, sweep_id, "resumed")
        same = _same_but_budget(session, fields)
        if same is None:
            return None
        if same.budget > budget:
            return _opened(session, same.sweep_id, "kept")
        previous, sweep_id = same.budget, same.sweep_id
        reopened = _extend(session, same, budget, key)
        if reopened is not None:
            return _opened(session, sweep_id, "extended", previous, reopened)
    return None


def _opened(
    session: Session, sweep_id: int, outcome: str, previous: int | None = None, reopened: int = 0
) -> OpenedSweep:
    if outcome != "new":  # a task a store error failed is never final: re-running resumes it
        reopen_store_failures(session, sweep_id=sweep_id)
    info = get_sweep(session, sweep_id=sweep_id)
    assert info is not None  # found or written in this transaction
    return OpenedSweep(info, outcome, info.budget if previous is None else previous, reopened)


def _create(session: Session, key: str, fields: _SweepFields) -> OpenedSweep:
    """Insert the sweep and its tasks, or find it when another process inserted it first."""
    find = select(Sweep.sweep_id).where(Sweep.sweep_key == key)
    grid = sorted({int(m) for m in fields["m_values"]})
    block_n, block_k = block_columns(fields["block_shape"])
    sweep_id = session.execute(
        dialect_insert(session, Sweep)
        .values(
            sweep_key=key,
            device_id=get_or_create_device(session, device_name=fields["device_name"]),
            model=fields["model"],
            tp=int(fields["tp"]),
            strategy=fields["strategy"],
            budget=int(fields["budget"]),
            space=fields["space"],
            seed=int(fields["seed"]),
            m_values=grid,
            out_dtype=fields["out_dtype"],
            block_n=block_n,
            block_k=block_k,
            created_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["sweep_key"])
        .returning(Sweep.sweep_id)
    ).scalar_one_or_none()
    if sweep_id is None:  # another process created it between our SELECT and INSERT
        return _opened(session, session.scalars(find).one(), "resumed")
    rows = [
        {
            "sweep_id": sweep_id,
            "family": fields["family"],
            "shape_params": fields["shape_params"],
            "N": n,
            "K": k,
            "M": m,
            "state": "pending",
            "attempts": 0,
        }
        for n, k in sorted({(int(n), int(k)) for n, k in fields["shapes"]})
        for m in grid
    ]
    session.execute(insert(Task), rows)
    return _opened(session, sweep_id, "new")


def create_sweep(session: Session, **fields) -> tuple[SweepInfo, bool]:
    """`open_sweep`, answering (the sweep, True when this call created it).

    Takes `open_sweep`'s keyword arguments; a larger budget extends the stored sweep (False).

    Raises:
        ValueError: as `open_sweep`.
    """
    opened = open_sweep(session, **fields)
    return opened.info, opened.outcome == "new"
