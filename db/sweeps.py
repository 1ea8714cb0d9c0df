"""Sweeps: their identity (a hash of their parameters), and finding or creating one with its
tasks.

Re-exported by `db.repo`; like the repository functions these take a Session, are keyword-only,
and do not commit."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from db.devices import get_or_create_device
from db.engine import dialect_insert
from db.models import DEFAULT_FAMILY, OUT_DTYPES, Device, Sweep, Task, utcnow


@dataclass(frozen=True)
class SweepInfo:
    """A sweep's parameters; `block_shape` is [group_n, group_k], `m_values` sorted."""

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
    block_shape: tuple[int, int]
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
    block_shape: tuple[int, int],
    shapes: Sequence[tuple[int, int]],
    family: str = DEFAULT_FAMILY,
    shape_params: str = "",
) -> str:
    """The identity of a sweep: sha256 of the canonical JSON of its parameters.

    `m_values` and `shapes` are deduplicated and sorted first, so their order does not matter.
    The family and its shape params enter only when they are not the dense GEMM's, so sweeps
    stored before kernel families existed keep their keys.

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
        "block_shape": [int(block_shape[0]), int(block_shape[1])],
        "shapes": sorted({(int(n), int(k)) for n, k in shapes}),
    }
    if family != DEFAULT_FAMILY or shape_params:
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
        block_shape=(sweep.block_n, sweep.block_k),
        created_at=sweep.created_at,
    )


def create_sweep(
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
    block_shape: tuple[int, int],
    shapes: Sequence[tuple[int, int]],
    family: str = DEFAULT_FAMILY,
    shape_params: str = "",
) -> tuple[SweepInfo, bool]:
    """Find the sweep with these parameters, or create it with one pending task per (N, K, M).

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
        block_shape: [group_n, group_k] of the weight scales, e.g. (128, 128).
        shapes: the (N, K) weight shapes.
        family: the kernel family of its tasks (`tuner.kernels.registry`).
        shape_params: the family's dimensions beyond N and K, `name=value,...` ("" for none).

    Returns:
        (the sweep, True when it was created by this call). Tasks are created in
        (N, K, M) order, which is also the order `claim_task` hands them out.

    Raises:
        ValueError: an empty grid or shape list, a non-positive size, an unknown out_dtype.
    """
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype {out_dtype!r} is not one of {', '.join(OUT_DTYPES)}")
    if not m_values or not shapes:
        raise ValueError("a sweep needs at least one M value and one (N, K) shape")
    _positive("m_values", list(m_values))
    _positive("shapes", [size for shape in shapes for size in shape])
    _positive("block_shape", list(block_shape))
    _positive("tp and budget", [tp, budget])
    if len(block_shape) != 2 or any(len(shape) != 2 for shape in shapes):
        raise ValueError("block_shape and every shape must be pairs: (group_n, group_k), (N, K)")
    key = sweep_key(
        device_name=device_name,
        model=model,
        tp=tp,
        strategy=strategy,
        budget=budget,
        space=space,
        seed=seed,
        m_values=m_values,
        out_dtype=out_dtype,
        block_shape=block_shape,
        shapes=shapes,
        family=family,
        shape_params=shape_params,
    )
    find = select(Sweep.sweep_id).where(Sweep.sweep_key == key)
    sweep_id = session.scalar(find)
    created = False
    if sweep_id is None:
        grid = sorted({int(m) for m in m_values})
        sweep_id = session.execute(
            dialect_insert(session, Sweep)
            .values(
                sweep_key=key,
                device_id=get_or_create_device(session, device_name=device_name),
                model=model,
                tp=int(tp),
                strategy=strategy,
                budget=int(budget),
                space=space,
                seed=int(seed),
                m_values=grid,
                out_dtype=out_dtype,
                block_n=int(block_shape[0]),
                block_k=int(block_shape[1]),
                created_at=utcnow(),
            )
            .on_conflict_do_nothing(index_elements=["sweep_key"])
            .returning(Sweep.sweep_id)
        ).scalar_one_or_none()
        if sweep_id is None:  # another process created it between our SELECT and INSERT
            sweep_id = session.scalars(find).one()
        else:
            created = True
            rows = [
                {"sweep_id": sweep_id, "family": family, "shape_params": shape_params, "N": n,
                 "K": k, "M": m, "state": "pending", "attempts": 0}
                for n, k in sorted({(int(n), int(k)) for n, k in shapes})
                for m in grid
            ]
            session.execute(insert(Task), rows)
    info = get_sweep(session, sweep_id=sweep_id)
    assert info is not None  # the row was found or inserted above, in this transaction
    return info, created
