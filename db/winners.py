"""Winners of the store: per (family, shape_params, N, K, block_shape, M) the decided config,
else the fastest ok trial;
only trials of the current kernel and Triton when asked (provenance filter).

Runs are never compared by absolute latency: timings of two sweeps (another day, another
clock, another load) are only comparable re-timed interleaved (`tuner verify`). Where several
sweeps tuned a key, the decision made last stands (a task decides when it finishes; an extended
task decides again when its finalists change); with no decision, the newest sweep's fastest
trial. `WinnerRow.other_sweeps` names the sweeps set aside.

Re-exported by `db.repo`; like the repository functions they take a Session, are keyword-only
and return frozen dataclasses. Each is a fixed number of SQL queries (none per task).

Provenance filter: `kernel_hash` keeps trials and decisions whose environment has that kernel
hash (or any of a sequence of hashes, one per kernel family); `triton_minor` ("3.6") keeps those
whose environment's triton version has that major.minor
("3.6", "3.6.0", "3.6.1+git..." match; "3.60" does not). None leaves that part out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sqlalchemy import Select, Subquery, and_, func, select
from sqlalchemy.orm import Session

from db.models import (
    Decision,
    Device,
    Environment,
    Retime,
    Sweep,
    Task,
    Trial,
    block_shape_of,
)
from tuner.core import CONFIG_KEYS, minor_of


@dataclass(frozen=True)
class WinnerRow:
    """The winner of one (device_name, family, shape_params, N, K, block_shape, M) over all
    sweeps: that of one task (`task_id`, of sweep `sweep_id`); `other_sweeps` are the other
    sweeps with a decision or an ok trial for the key, set aside without comparing latencies.

    Where a task of the key has a decision (`decided`), the winner is the decided config with
    the decision's re-timed `latency_us`, `default_latency_us` and `spread_us`; `default_config`
    is the task's re-timed default config (None when it was not re-timed). Otherwise it is the
    fastest ok trial, with `default_latency_us` and `default_config` from the default-config
    trial of the same task (None when that task has none) and `spread_us` None. `is_default`
    says the winner is the default config itself; `trial_id` is the winner's trial (None for a
    decided config with no trial in its task); `environment_id` the environment of the winning
    trial or decision. Latencies in microseconds. `block_shape` is None for per-tensor scales.
    """

    device_name: str
    N: int
    K: int
    block_shape: tuple[int, int] | None
    M: int
    config: dict[str, int]
    latency_us: float
    default_latency_us: float | None
    default_config: dict[str, int] | None
    is_default: bool
    trial_id: int | None
    task_id: int
    family: str
    spread_us: float | None = None
    decided: bool = False
    environment_id: int | None = None
    shape_params: str = ""
    sweep_id: int | None = None
    other_sweeps: tuple[int, ...] = ()


def matching_environments(
    session: Session, *, kernel_hash: str | Sequence[str] | None, triton_minor: str | None
) -> list[int] | None:
    """The environments that pass the provenance filter.

    Args:
        session: the open session.
        kernel_hash: keep environments with this kernel hash, or with any of these hashes (one
            per kernel family: an environment records the hash of its trials' family's kernel);
            None for any.
        triton_minor: keep environments whose triton version is this major.minor, e.g. "3.6";
            None for any.

    Returns:
        Their environment_ids, sorted; None when both filters are None (no filter).

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    if kernel_hash is None and triton_minor is None:
        return None
    wanted = None
    if triton_minor is not None:
        if not re.fullmatch(r"\d+\.\d+", triton_minor):
            raise ValueError(f"triton_minor {triton_minor!r} is not major.minor, e.g. 3.6")
        wanted = minor_of(triton_minor)
    query = select(Environment.environment_id, Environment.triton)
    if isinstance(kernel_hash, str):
        query = query.where(Environment.kernel_hash == kernel_hash)
    elif kernel_hash is not None:
        query = query.where(Environment.kernel_hash.in_(list(kernel_hash)))
    return sorted(
        env_id
        for env_id, triton in session.execute(query)
        if wanted is None or minor_of(triton) == wanted
    )


def _scoped(query: Select, *, device_name: str, out_dtype: str | None) -> Select:
    """Restrict a query that selects from Task to tasks of sweeps on one device (and dtype)."""
    query = (
        query.join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(Device.device_name == device_name)
    )
    return query if out_dtype is None else query.where(Sweep.out_dtype == out_dtype)


def ok_trials(
    columns: list,
    *,
    device_name: str,
    out_dtype: str | None,
    environments: Sequence[int] | None,
) -> Select:
    """Trials with status ok and a latency, of tasks of sweeps on one device.

    Args:
        columns: what to select.
        device_name: vLLM's device key.
        out_dtype: only sweeps with this output dtype; None for all.
        environments: only trials of these environments (`matching_environments`); None for all.

    Returns:
        The query, to refine further.
    """
    query = _scoped(
        select(*columns).select_from(Trial).join(Task, Trial.task_id == Task.task_id),
        device_name=device_name,
        out_dtype=out_dtype,
    ).where(Trial.status == "ok", Trial.latency_us.is_not(None))
    if environments is not None:
        query = query.where(Trial.environment_id.in_(environments))
    return query


def decided_tasks(
    columns: list,
    *,
    device_name: str,
    out_dtype: str | None,
    environments: Sequence[int] | None,
) -> Select:
    """Decisions of tasks of sweeps on one device, like `ok_trials`."""
    query = _scoped(
        select(*columns).select_from(Decision).join(Task, Decision.task_id == Task.task_id),
        device_name=device_name,
        out_dtype=out_dtype,
    )
    if environments is not None:
        query = query.where(Decision.environment_id.in_(environments))
    return query


def _config(row, prefix: str = "") -> dict[str, int]:
    return {name: row[f"{prefix}{name}"] for name in CONFIG_KEYS}


def _trial_winners(session: Session, device_name: str, scope: dict) -> dict[tuple, WinnerRow]:
    """The fastest ok trial of the newest task per key, with the default-config trial of that
    task (one query)."""
    ranked = _ranked_trials(scope)
    defaults = _ranked_defaults(scope)
    rows = session.execute(
        select(
            ranked.c.trial_id,
            ranked.c.task_id,
            ranked.c.environment_id,
            ranked.c.sweep_id,
            ranked.c.family,
            ranked.c.shape_params,
            ranked.c.N,
            ranked.c.K,
            ranked.c.block_n,
            ranked.c.block_k,
            ranked.c.M,
            ranked.c.latency_us,
            ranked.c.is_default,
            defaults.c.latency_us.label("default_latency_us"),
            *(ranked.c[name] for name in CONFIG_KEYS),
            *(defaults.c[name].label(f"default_{name}") for name in CONFIG_KEYS),
        )
        .select_from(ranked)
        .outerjoin(defaults, and_(defaults.c.task_id == ranked.c.task_id, defaults.c.rank == 1))
        .where(ranked.c.rank == 1)
    ).mappings()
    return dict(
        _winner_row(device_name, row, has_default=row["default_latency_us"] is not None)
        for row in rows
    )


def _ranked_trials(scope: dict) -> Subquery:
    """Subquery "ranked": the ok trials in scope, `rank` 1 for the fastest trial of the newest
    task per key (ties: the lowest trial id)."""
    key = (Task.family, Task.shape_params, Task.N, Task.K, Sweep.block_n, Sweep.block_k, Task.M)
    return ok_trials(
        [
            Trial.trial_id,
            Trial.task_id,
            Trial.environment_id,
            Task.sweep_id,
            *key,
            *(getattr(Trial, name) for name in CONFIG_KEYS),
            Trial.latency_us,
            Trial.is_default,
            func.row_number()
            .over(
                partition_by=key, order_by=(Task.task_id.desc(), Trial.latency_us, Trial.trial_id)
            )
            .label("rank"),
        ],
        **scope,
    ).subquery("ranked")


def _ranked_defaults(scope: dict) -> Subquery:
    """Subquery "defaults": the ok default-config trials in scope, `rank` 1 for the fastest of
    each task (ties: the lowest trial id)."""
    return (
        ok_trials(
            [
                Trial.task_id,
                *(getattr(Trial, name) for name in CONFIG_KEYS),
                Trial.latency_us,
                func.row_number()
                .over(partition_by=Trial.task_id, order_by=(Trial.latency_us, Trial.trial_id))
                .label("rank"),
            ],
            **scope,
        )
        .where(Trial.is_default.is_(True))
        .subquery("defaults")
    )


def _winner_row(device_name: str, row, *, has_default: bool, **decided) -> tuple[tuple, WinnerRow]:
    """(key, WinnerRow) of one result row of the trial or the decision query."""
    key = (
        row["family"],
        row["shape_params"],
        row["N"],
        row["K"],
        row["block_n"],
        row["block_k"],
        row["M"],
    )
    return key, WinnerRow(
        device_name=device_name,
        N=row["N"],
        K=row["K"],
        block_shape=block_shape_of(row["block_n"], row["block_k"]),
        M=row["M"],
        config=_config(row),
        latency_us=row["latency_us"],
        default_latency_us=row["default_latency_us"],
        default_config=_config(row, "default_") if has_default else None,
        is_default=bool(row["is_default"]),
        trial_id=row["trial_id"],
        task_id=row["task_id"],
        environment_id=row["environment_id"],
        family=row["family"],
        shape_params=row["shape_params"],
        sweep_id=row["sweep_id"],
        **decided,
    )


def _same_config(table, other) -> list:
    return [getattr(table, name) == getattr(other, name) for name in CONFIG_KEYS]


def _decision_winners(session: Session, device_name: str, scope: dict) -> dict[tuple, WinnerRow]:
    """The decision made last per key (ties: the newest decision row), one query."""
    key = (Task.family, Task.shape_params, Task.N, Task.K, Sweep.block_n, Sweep.block_k, Task.M)
    ranked = decided_tasks(
        [
            Decision.task_id,
            Decision.environment_id,
            Task.sweep_id,
            *key,
            *(getattr(Decision, name) for name in CONFIG_KEYS),
            Decision.latency_us,
            Decision.default_latency_us,
            Decision.spread_us,
            func.row_number()
            .over(
                partition_by=key, order_by=(Decision.created_at.desc(), Decision.decision_id.desc())
            )
            .label("rank"),
        ],
        **scope,
    ).subquery("ranked")
    kept = select(Retime).subquery("kept")
    default = select(Retime).where(Retime.is_default.is_(True)).subquery("default")
    trial = select(
        Trial.trial_id, Trial.task_id, *(getattr(Trial, name) for name in CONFIG_KEYS)
    ).subquery("trial")
    rows = session.execute(
        select(
            ranked,
            kept.c.is_default,
            trial.c.trial_id,
            default.c.retime_id.label("default_retime_id"),
            *(default.c[name].label(f"default_{name}") for name in CONFIG_KEYS),
        )
        .select_from(ranked)
        .outerjoin(kept, and_(kept.c.task_id == ranked.c.task_id, *_same_config(kept.c, ranked.c)))
        .outerjoin(
            trial, and_(trial.c.task_id == ranked.c.task_id, *_same_config(trial.c, ranked.c))
        )
        .outerjoin(default, default.c.task_id == ranked.c.task_id)
        .where(ranked.c.rank == 1)
    ).mappings()
    return dict(
        _winner_row(
            device_name,
            row,
            has_default=row["default_retime_id"] is not None,
            spread_us=row["spread_us"],
            decided=True,
        )
        for row in rows
    )


def winners(
    session: Session,
    *,
    device_name: str,
    out_dtype: str | None = None,
    kernel_hash: str | Sequence[str] | None = None,
    triton_minor: str | None = None,
) -> list[WinnerRow]:
    """The winner per (family, shape_params, N, K, block_shape, M) of a device, over all its
    sweeps.

    A key where some task has a decision (`db.repo.record_decision`) is won by the decided
    config; among several decided tasks (several sweeps), the decision made last. Any other
    key keeps the fastest ok trial of its newest task (ties in latency_us to the lowest
    trial_id). Latencies of different tasks are never compared: they come from different runs
    (see the module docstring). Three queries, whatever the number of tasks.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        out_dtype: only sweeps with this output dtype; None for all.
        kernel_hash: only trials and decisions whose environment has this kernel hash, or
            any of these hashes; None for all.
        triton_minor: only trials and decisions whose environment's triton is this
            major.minor, e.g. "3.6"; None for all.

    Returns:
        One row per key that has an ok trial or a decision, sorted by (family, shape_params, N,
        K, block_shape, M).

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    scope = {
        "device_name": device_name,
        "out_dtype": out_dtype,
        "environments": matching_environments(
            session, kernel_hash=kernel_hash, triton_minor=triton_minor
        ),
    }
    found = _trial_winners(session, device_name, scope)
    found.update(_decision_winners(session, device_name, scope))
    sweeps = _sweeps_per_key(session, scope)
    return [
        replace(
            found[key], other_sweeps=tuple(sorted(sweeps.get(key, set()) - {found[key].sweep_id}))
        )
        for key in sorted(found)
    ]


def _sweeps_per_key(session: Session, scope: dict) -> dict[tuple, set[int]]:
    """The sweeps with an ok trial or a decision per key (one query)."""
    key = (Task.family, Task.shape_params, Task.N, Task.K, Sweep.block_n, Sweep.block_k, Task.M)
    query = ok_trials([*key, Task.sweep_id], **scope).union(
        decided_tasks([*key, Task.sweep_id], **scope)
    )
    found: dict[tuple, set[int]] = {}
    for *row, sweep_id in session.execute(query):
        found.setdefault(tuple(row), set()).add(sweep_id)
    return found


def stale_trials(
    session: Session,
    *,
    device_name: str,
    kernel_hash: str | Sequence[str] | None,
    triton_minor: str | None,
) -> int:
    """How many ok trials of a device the provenance filter leaves out (for messages such as
    "12 trials of other kernel or Triton versions left out; --allow-stale includes them").

    Args:
        session: the open session.
        device_name: vLLM's device key.
        kernel_hash: the current kernel hash, or the current hashes; None for any.
        triton_minor: the current triton major.minor, e.g. "3.6"; None for any.

    Returns:
        The number of ok trials (with a latency) of the device's sweeps whose environment does
        not match; 0 when both filters are None.

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    environments = matching_environments(
        session, kernel_hash=kernel_hash, triton_minor=triton_minor
    )
    if environments is None:
        return 0
    query = ok_trials(
        [func.count()], device_name=device_name, out_dtype=None, environments=None
    ).where(Trial.environment_id.not_in(environments))
    return session.scalar(query) or 0
