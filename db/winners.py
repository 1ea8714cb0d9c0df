"""Winners of the store: per (family, shape_params, N, K, block_shape, M) the decided config,
else the fastest ok trial;
only trials of the current kernel and Triton when asked (provenance filter).

Re-exported by `db.repo`; like the repository functions they take a Session, are keyword-only
and return frozen dataclasses. Each is a fixed number of SQL queries (none per task).

Provenance filter: `kernel_hash` keeps trials and decisions whose environment has that kernel
hash; `triton_minor` ("3.6") keeps those whose environment's triton version has that major.minor
("3.6", "3.6.0", "3.6.1+git..." match; "3.60" does not). None leaves that part out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Select, and_, func, select
from sqlalchemy.orm import Session

from db.models import (
    CONFIG_COLUMNS,
    DEFAULT_FAMILY,
    Decision,
    Device,
    Environment,
    Retime,
    Sweep,
    Task,
    Trial,
)

# major.minor at the start of a version string, not followed by another digit (same rule as
# tuner.files.provenance.triton_minor; db imports nothing of tuner).
_MINOR = re.compile(r"(\d+)\.(\d+)(?!\d)")


@dataclass(frozen=True)
class WinnerRow:
    """The winner of one (device_name, family, shape_params, N, K, block_shape, M) over all
    sweeps.

    Where a task of the key has a decision (`decided`), the winner is the decided config with
    the decision's re-timed `latency_us`, `default_latency_us` and `spread_us`; `default_config`
    is the task's re-timed default config (None when it was not re-timed). Otherwise it is the
    fastest ok trial, with `default_latency_us` and `default_config` from the default-config
    trial of the same task (None when that task has none) and `spread_us` None. `is_default`
    says the winner is the default config itself; `trial_id` is the winner's trial (None for a
    decided config with no trial in its task); `environment_id` the environment of the winning
    trial or decision. Latencies in microseconds.
    """

    device_name: str
    N: int
    K: int
    block_shape: tuple[int, int]
    M: int
    config: dict[str, int]
    latency_us: float
    default_latency_us: float | None
    default_config: dict[str, int] | None
    is_default: bool
    trial_id: int | None
    task_id: int
    spread_us: float | None = None
    decided: bool = False
    environment_id: int | None = None
    family: str = DEFAULT_FAMILY
    shape_params: str = ""


@dataclass(frozen=True)
class TaskWinnerRow:
    """The fastest ok config of one (N, K, M) among finished tasks of a device."""

    N: int
    K: int
    M: int
    config: dict[str, int]
    latency_us: float


def _minor_of(version: str) -> tuple[int, int] | None:
    found = _MINOR.match(version.strip())
    return (int(found[1]), int(found[2])) if found else None


def matching_environments(
    session: Session, *, kernel_hash: str | None, triton_minor: str | None
) -> list[int] | None:
    """The environments that pass the provenance filter.

    Args:
        session: the open session.
        kernel_hash: keep environments with this kernel hash; None for any.
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
        wanted = _minor_of(triton_minor)
    query = select(Environment.environment_id, Environment.triton)
    if kernel_hash is not None:
        query = query.where(Environment.kernel_hash == kernel_hash)
    return sorted(env_id for env_id, triton in session.execute(query)
                  if wanted is None or _minor_of(triton) == wanted)


def _scoped(query: Select, *, device_name: str, out_dtype: str | None) -> Select:
    """Restrict a query that selects from Task to tasks of sweeps on one device (and dtype)."""
    query = (
        query.join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(Device.device_name == device_name)
    )
    return query if out_dtype is None else query.where(Sweep.out_dtype == out_dtype)


def ok_trials(
    columns: list, *, device_name: str, out_dtype: str | None,
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
        device_name=device_name, out_dtype=out_dtype,
    ).where(Trial.status == "ok", Trial.latency_us.is_not(None))
    if environments is not None:
        query = query.where(Trial.environment_id.in_(environments))
    return query


def decided_tasks(
    columns: list, *, device_name: str, out_dtype: str | None,
    environments: Sequence[int] | None,
) -> Select:
    """Decisions of tasks of sweeps on one device, like `ok_trials`."""
    query = _scoped(
        select(*columns).select_from(Decision).join(Task, Decision.task_id == Task.task_id),
        device_name=device_name, out_dtype=out_dtype,
    )
    if environments is not None:
        query = query.where(Decision.environment_id.in_(environments))
    return query


def _config(row, prefix: str = "") -> dict[str, int]:
    return {name: row[f"{prefix}{name}"] for name in CONFIG_COLUMNS}


def _trial_winners(session: Session, device_name: str, scope: dict) -> dict[tuple, WinnerRow]:
    """The fastest ok trial per key, with the default-config trial of its task (one query)."""
    config = [getattr(Trial, name) for name in CONFIG_COLUMNS]
    key = (Task.family, Task.shape_params, Task.N, Task.K, Sweep.block_n, Sweep.block_k, Task.M)
    ranked = ok_trials(
        [Trial.trial_id, Trial.task_id, Trial.environment_id, *key, *config, Trial.latency_us,
         Trial.is_default,
         func.row_number().over(partition_by=key, order_by=(Trial.latency_us, Trial.trial_id))
         .label("rank")],
        **scope,
    ).subquery("ranked")
    defaults = (
        ok_trials(
            [Trial.task_id, *config, Trial.latency_us,
             func.row_number().over(partition_by=Trial.task_id,
                                    order_by=(Trial.latency_us, Trial.trial_id)).label("rank")],
            **scope,
        )
        .where(Trial.is_default.is_(True))
        .subquery("defaults")
    )
    rows = session.execute(
        select(
            ranked.c.trial_id, ranked.c.task_id, ranked.c.environment_id, ranked.c.family,
            ranked.c.shape_params, ranked.c.N, ranked.c.K, ranked.c.block_n, ranked.c.block_k,
            ranked.c.M, ranked.c.latency_us, ranked.c.is_default,
            defaults.c.latency_us.label("default_latency_us"),
            *(ranked.c[name] for name in CONFIG_COLUMNS),
            *(defaults.c[name].label(f"default_{name}") for name in CONFIG_COLUMNS),
        )
        .select_from(ranked)
        .outerjoin(defaults, and_(defaults.c.task_id == ranked.c.task_id, defaults.c.rank == 1))
        .where(ranked.c.rank == 1)
    ).mappings()
    return dict(_winner_row(device_name, row, has_default=row["default_latency_us"] is not None)
                for row in rows)


def _winner_row(device_name: str, row, *, has_default: bool, **decided) -> tuple[tuple, WinnerRow]:
    """(key, WinnerRow) of one result row of the trial or the decision query."""
    key = (row["family"], row["shape_params"], row["N"], row["K"], row["block_n"],
           row["block_k"], row["M"])
    return key, WinnerRow(
        device_name=device_name, N=row["N"], K=row["K"],
        block_shape=(row["block_n"], row["block_k"]), M=row["M"], config=_config(row),
        latency_us=row["latency_us"], default_latency_us=row["default_latency_us"],
        default_config=_config(row, "default_") if has_default else None,
        is_default=bool(row["is_default"]), trial_id=row["trial_id"], task_id=row["task_id"],
        environment_id=row["environment_id"], family=row["family"],
        shape_params=row["shape_params"], **decided,
    )


def _same_config(table, other) -> list:
    return [getattr(table, name) == getattr(other, name) for name in CONFIG_COLUMNS]


def _decision_winners(session: Session, device_name: str, scope: dict) -> dict[tuple, WinnerRow]:
    """The decision with the lowest latency per key (ties: lowest task_id), one query."""
    key = (Task.family, Task.shape_params, Task.N, Task.K, Sweep.block_n, Sweep.block_k, Task.M)
    ranked = decided_tasks(
        [Decision.task_id, Decision.environment_id, *key,
         *(getattr(Decision, name) for name in CONFIG_COLUMNS),
         Decision.latency_us, Decision.default_latency_us, Decision.spread_us,
         func.row_number().over(partition_by=key, order_by=(Decision.latency_us,
                                                            Decision.task_id)).label("rank")],
        **scope,
    ).subquery("ranked")
    kept = select(Retime).subquery("kept")
    default = select(Retime).where(Retime.is_default.is_(True)).subquery("default")
    trial = select(Trial.trial_id, Trial.task_id, *(getattr(Trial, name)
                                                    for name in CONFIG_COLUMNS)).subquery("trial")
    rows = session.execute(
        select(
            ranked, kept.c.is_default, trial.c.trial_id,
            default.c.retime_id.label("default_retime_id"),
            *(default.c[name].label(f"default_{name}") for name in CONFIG_COLUMNS),
        )
        .select_from(ranked)
        .outerjoin(kept, and_(kept.c.task_id == ranked.c.task_id,
                              *_same_config(kept.c, ranked.c)))
        .outerjoin(trial, and_(trial.c.task_id == ranked.c.task_id,
                               *_same_config(trial.c, ranked.c)))
        .outerjoin(default, default.c.task_id == ranked.c.task_id)
        .where(ranked.c.rank == 1)
    ).mappings()
    return dict(_winner_row(device_name, row, has_default=row["default_retime_id"] is not None,
                            spread_us=row["spread_us"], decided=True)
                for row in rows)


def winners(
    session: Session,
    *,
    device_name: str,
    out_dtype: str | None = None,
    kernel_hash: str | None = None,
    triton_minor: str | None = None,
) -> list[WinnerRow]:
    """The winner per (family, shape_params, N, K, block_shape, M) of a device, over all its
    sweeps.

    A key where some task has a decision (`db.repo.record_decision`) is won by the decided
    config; among several decided tasks, the lowest decision latency_us, ties to the lowest
    task_id. Any other key keeps the fastest ok trial, ties in latency_us to the lowest
    trial_id. Two queries (`row_number()` rankings), whatever the number of tasks.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        out_dtype: only sweeps with this output dtype; None for all.
        kernel_hash: only trials and decisions whose environment has this kernel hash; None
            for all.
        triton_minor: only trials and decisions whose environment's triton is this
            major.minor, e.g. "3.6"; None for all.

    Returns:
        One row per key that has an ok trial or a decision, sorted by (family, shape_params, N,
        K, block_shape, M).

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    scope = {
        "device_name": device_name, "out_dtype": out_dtype,
        "environments": matching_environments(session, kernel_hash=kernel_hash,
                                              triton_minor=triton_minor),
    }
    found = _trial_winners(session, device_name, scope)
    found.update(_decision_winners(session, device_name, scope))
    return [found[key] for key in sorted(found)]


def task_winners(
    session: Session,
    *,
    device_name: str,
    block_shape: tuple[int, int],
    out_dtype: str,
    kernel_hash: str | None = None,
    triton_minor: str | None = None,
    finished_before: datetime | None = None,
    family: str = DEFAULT_FAMILY,
    shape_params: str = "",
) -> list[TaskWinnerRow]:
    """Winners of the finished tasks of a device (done, or reopened by a larger budget after
    they were done): what a new task warm-starts from
    (`tuner.search.warm_start_for_task`). One query with a `row_number()` ranking of ok
    trials (decisions are not consulted: a warm start wants fast configs, not the kept one).

    Args:
        session: the open session.
        device_name: vLLM's device key.
        block_shape: [group_n, group_k] of the sweeps to read.
        out_dtype: output dtype of the sweeps to read.
        kernel_hash: only trials whose environment has this kernel hash; None for all.
        triton_minor: only trials whose environment's triton is this major.minor; None for all.
        finished_before: only tasks first finished before this time (UTC), and their trials
            stored before it; None for all. A resumed task passes the time of its first trial,
            so it gets the warm starts its first run got, and a killed or extended sweep
            resumes into the trials of an uninterrupted one (a task reopened by a larger
            budget keeps its first `finished_at`).
        family: only tasks of this kernel family.
        shape_params: only tasks with these family dimensions beyond N and K.

    Returns:
        One row per (N, K, M) with a finished task and an ok trial, sorted by (N, K, M); ties in
        latency_us go to the lowest trial_id.

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    environments = matching_environments(session, kernel_hash=kernel_hash,
                                         triton_minor=triton_minor)
    key = (Task.N, Task.K, Task.M)
    ranked = (
        ok_trials(
            [*key, *(getattr(Trial, name) for name in CONFIG_COLUMNS), Trial.latency_us,
             func.row_number().over(partition_by=key, order_by=(Trial.latency_us,
                                                                Trial.trial_id)).label("rank")],
            device_name=device_name, out_dtype=out_dtype, environments=environments,
        )
        .where(Task.finished_at.is_not(None), Task.state != "failed", Task.family == family,
               Task.shape_params == shape_params, Sweep.block_n == block_shape[0],
               Sweep.block_k == block_shape[1],
               *([Task.finished_at < finished_before, Trial.created_at < finished_before]
                 if finished_before is not None else []))
        .subquery("ranked")
    )
    rows = session.execute(
        select(ranked).where(ranked.c.rank == 1).order_by(ranked.c.N, ranked.c.K, ranked.c.M)
    ).mappings()
    return [
        TaskWinnerRow(N=row["N"], K=row["K"], M=row["M"], config=_config(row),
                      latency_us=row["latency_us"])
        for row in rows
    ]


def stale_trials(
    session: Session, *, device_name: str, kernel_hash: str | None, triton_minor: str | None
) -> int:
    """How many ok trials of a device the provenance filter leaves out (for messages such as
    "12 trials of other kernel or Triton versions left out; --allow-stale includes them").

    Args:
        session: the open session.
        device_name: vLLM's device key.
        kernel_hash: the current kernel hash; None for any.
        triton_minor: the current triton major.minor, e.g. "3.6"; None for any.

    Returns:
        The number of ok trials (with a latency) of the device's sweeps whose environment does
        not match; 0 when both filters are None.

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    environments = matching_environments(session, kernel_hash=kernel_hash,
                                         triton_minor=triton_minor)
    if environments is None:
        return 0
    query = ok_trials([func.count()], device_name=device_name, out_dtype=None,
                      environments=None).where(Trial.environment_id.not_in(environments))
    return session.scalar(query) or 0
