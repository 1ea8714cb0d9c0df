"""Read-only queries of the store: sweep progress, devices, winners, M-grid coverage, a
device's trials (landscape files) and the winners of done tasks (warm starts).

Re-exported by `db.repo`; like the repository functions they take a Session, are keyword-only
and return frozen dataclasses. Each is a fixed number of SQL queries (no query per task) that
run on SQLite (3.30 or newer: window functions, FILTER) and PostgreSQL.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import Select, and_, func, select
from sqlalchemy.orm import Session

from db.models import CONFIG_COLUMNS, Device, Environment, Sweep, Task, Trial


@dataclass(frozen=True)
class SweepProgress:
    """Task counts by state and trial counts of one sweep."""

    tasks_total: int
    tasks_pending: int
    tasks_running: int
    tasks_done: int
    tasks_failed: int
    trials_total: int
    trials_ok: int


@dataclass(frozen=True)
class WinnerRow:
    """The fastest ok config for one (device_name, N, K, block_shape, M) over all sweeps.

    `default_latency_us` and `default_config` come from the default-config trial of the same
    task as the winner (None when that task has no ok default trial); `is_default` says the
    winner is that default config itself.
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
    trial_id: int
    task_id: int


@dataclass(frozen=True)
class ShapeCoverage:
    """How much of the M grid of one (N, K, block_shape) of a device is tuned.

    `m_requested` is the sorted union of the M of all its tasks, `m_done` the M whose task is
    done in at least one sweep, `models` the sorted names of the models of those sweeps.
    """

    N: int
    K: int
    block_shape: tuple[int, int]
    m_requested: tuple[int, ...]
    m_done: tuple[int, ...]
    models: tuple[str, ...]


def sweep_progress(session: Session, *, sweep_id: int) -> SweepProgress:
    """Count the tasks and trials of a sweep.

    Returns:
        The counts.

    Raises:
        LookupError: there is no sweep with that id.
    """
    if session.get(Sweep, sweep_id) is None:
        raise LookupError(f"no sweep with sweep_id {sweep_id}")
    by_state: dict[str, int] = {
        state: count
        for state, count in session.execute(
            select(Task.state, func.count()).where(Task.sweep_id == sweep_id).group_by(Task.state)
        )
    }
    trials_total, trials_ok = session.execute(
        select(func.count(), func.count().filter(Trial.status == "ok"))
        .select_from(Trial)
        .join(Task, Trial.task_id == Task.task_id)
        .where(Task.sweep_id == sweep_id)
    ).one()
    return SweepProgress(
        tasks_total=sum(by_state.values()),
        tasks_pending=by_state.get("pending", 0),
        tasks_running=by_state.get("running", 0),
        tasks_done=by_state.get("done", 0),
        tasks_failed=by_state.get("failed", 0),
        trials_total=trials_total,
        trials_ok=trials_ok,
    )


def list_device_names(session: Session) -> list[str]:
    """The device_name keys that have at least one sweep.

    Returns:
        The names, sorted.
    """
    names = session.scalars(
        select(Device.device_name)
        .where(select(Sweep.sweep_id).where(Sweep.device_id == Device.device_id).exists())
        .order_by(Device.device_name)
    )
    return list(names)


def _ok_trials(
    columns: list, *, device_name: str, out_dtype: str | None, kernel_hash: str | None
) -> Select:
    """Trials with status ok and a latency, of tasks of sweeps on one device."""
    query = (
        select(*columns)
        .select_from(Trial)
        .join(Task, Trial.task_id == Task.task_id)
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(
            Device.device_name == device_name,
            Trial.status == "ok",
            Trial.latency_us.is_not(None),
        )
    )
    if out_dtype is not None:
        query = query.where(Sweep.out_dtype == out_dtype)
    if kernel_hash is not None:
        query = query.join(Environment, Trial.environment_id == Environment.environment_id).where(
            Environment.kernel_hash == kernel_hash
        )
    return query


def winners(
    session: Session,
    *,
    device_name: str,
    out_dtype: str | None = None,
    kernel_hash: str | None = None,
) -> list[WinnerRow]:
    """The fastest ok trial per (N, K, block_shape, M) of a device, over all its sweeps.

    Ties in latency_us go to the lowest trial_id. One query: two `row_number()` rankings
    (winners per key, default-config trials per task) joined on the winner's task.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        out_dtype: only sweeps with this output dtype; None for all.
        kernel_hash: only trials whose environment has this kernel hash; None for all.

    Returns:
        One row per key that has an ok trial, sorted by (N, K, block_shape, M).
    """
    scope = {"device_name": device_name, "out_dtype": out_dtype, "kernel_hash": kernel_hash}
    config = [getattr(Trial, name) for name in CONFIG_COLUMNS]
    key = (Task.N, Task.K, Sweep.block_n, Sweep.block_k, Task.M)
    ranked = _ok_trials(
        [
            Trial.trial_id,
            Trial.task_id,
            *key,
            *config,
            Trial.latency_us,
            Trial.is_default,
            func.row_number()
            .over(partition_by=key, order_by=(Trial.latency_us, Trial.trial_id))
            .label("rank"),
        ],
        **scope,
    ).subquery("ranked")
    defaults = (
        _ok_trials(
            [
                Trial.task_id,
                *config,
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
    rows = session.execute(
        select(
            ranked.c.trial_id,
            ranked.c.task_id,
            ranked.c.N,
            ranked.c.K,
            ranked.c.block_n,
            ranked.c.block_k,
            ranked.c.M,
            ranked.c.latency_us,
            ranked.c.is_default,
            defaults.c.latency_us.label("default_latency_us"),
            *(ranked.c[name] for name in CONFIG_COLUMNS),
            *(defaults.c[name].label(f"default_{name}") for name in CONFIG_COLUMNS),
        )
        .select_from(ranked)
        .outerjoin(defaults, and_(defaults.c.task_id == ranked.c.task_id, defaults.c.rank == 1))
        .where(ranked.c.rank == 1)
        .order_by(ranked.c.N, ranked.c.K, ranked.c.block_n, ranked.c.block_k, ranked.c.M)
    ).mappings()
    result = []
    for row in rows:
        has_default = row["default_latency_us"] is not None
        result.append(
            WinnerRow(
                device_name=device_name,
                N=row["N"],
                K=row["K"],
                block_shape=(row["block_n"], row["block_k"]),
                M=row["M"],
                config={name: row[name] for name in CONFIG_COLUMNS},
                latency_us=row["latency_us"],
                default_latency_us=row["default_latency_us"],
                default_config=(
                    {name: row[f"default_{name}"] for name in CONFIG_COLUMNS}
                    if has_default
                    else None
                ),
                is_default=bool(row["is_default"]),
                trial_id=row["trial_id"],
                task_id=row["task_id"],
            )
        )
    return result


def shape_coverage(
    session: Session, *, device_name: str, out_dtype: str | None = None
) -> list[ShapeCoverage]:
    """The requested and finished M per (N, K, block_shape) of a device, over all its sweeps.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        out_dtype: only sweeps with this output dtype; None for all.

    Returns:
        One entry per (N, K, block_shape) with tasks, sorted by (N, K, block_shape).
    """
    query = (
        select(Task.N, Task.K, Sweep.block_n, Sweep.block_k, Task.M, Task.state, Sweep.model)
        .distinct()
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(Device.device_name == device_name)
    )
    if out_dtype is not None:
        query = query.where(Sweep.out_dtype == out_dtype)
    requested: dict[tuple[int, int, int, int], set[int]] = defaultdict(set)
    done: dict[tuple[int, int, int, int], set[int]] = defaultdict(set)
    models: dict[tuple[int, int, int, int], set[str]] = defaultdict(set)
    for n, k, block_n, block_k, m, state, model in session.execute(query):
        shape = (n, k, block_n, block_k)
        requested[shape].add(m)
        models[shape].add(model)
        if state == "done":
            done[shape].add(m)
    return [
        ShapeCoverage(
            N=n,
            K=k,
            block_shape=(block_n, block_k),
            m_requested=tuple(sorted(requested[(n, k, block_n, block_k)])),
            m_done=tuple(sorted(done[(n, k, block_n, block_k)])),
            models=tuple(sorted(models[(n, k, block_n, block_k)])),
        )
        for n, k, block_n, block_k in sorted(requested)
    ]


# Environment columns a landscape file records (tuner.replay.Landscape.environment).
ENVIRONMENT_FIELDS: tuple[str, ...] = (
    "gpu_name", "compute_capability", "driver", "cuda", "torch", "triton", "tuner", "kernel_hash",
)


@dataclass(frozen=True)
class DeviceTrialRow:
    """One stored trial of a device with its problem, sweep and environment.

    `environment` holds ENVIRONMENT_FIELDS; rows of one environment share one dict.
    """

    trial_id: int
    N: int
    K: int
    M: int
    block_shape: tuple[int, int]
    out_dtype: str
    space: str
    config: dict[str, int]
    status: str
    latency_us: float | None
    p20_us: float | None
    p80_us: float | None
    environment_id: int
    environment: dict[str, str]


def device_trials(
    session: Session, *, device_name: str, out_dtype: str | None = None
) -> list[DeviceTrialRow]:
    """Every trial of a device over all its sweeps, e.g. to record a landscape file.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        out_dtype: only sweeps with this output dtype; None for all.

    Returns:
        The trials, sorted by trial_id (the order they were recorded in).
    """
    query = (
        select(Trial, Task.N, Task.K, Task.M, Sweep.block_n, Sweep.block_k, Sweep.out_dtype,
               Sweep.space, Environment)
        .join(Task, Trial.task_id == Task.task_id)
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Device, Sweep.device_id == Device.device_id)
        .join(Environment, Trial.environment_id == Environment.environment_id)
        .where(Device.device_name == device_name)
        .order_by(Trial.trial_id)
    )
    if out_dtype is not None:
        query = query.where(Sweep.out_dtype == out_dtype)
    environments: dict[int, dict[str, str]] = {}
    rows = []
    for trial, n, k, m, block_n, block_k, dtype, space, env in session.execute(query):
        if env.environment_id not in environments:
            environments[env.environment_id] = {
                name: getattr(env, name) for name in ENVIRONMENT_FIELDS}
        rows.append(DeviceTrialRow(
            trial_id=trial.trial_id, N=n, K=k, M=m, block_shape=(block_n, block_k),
            out_dtype=dtype, space=space,
            config={name: getattr(trial, name) for name in CONFIG_COLUMNS},
            status=trial.status, latency_us=trial.latency_us, p20_us=trial.p20_us,
            p80_us=trial.p80_us, environment_id=env.environment_id,
            environment=environments[env.environment_id],
        ))
    return rows


@dataclass(frozen=True)
class TaskWinnerRow:
    """The fastest ok config of one (N, K, M) among finished tasks of a device."""

    N: int
    K: int
    M: int
    config: dict[str, int]
    latency_us: float


def task_winners(
    session: Session,
    *,
    device_name: str,
    block_shape: tuple[int, int],
    out_dtype: str,
    kernel_hash: str | None = None,
) -> list[TaskWinnerRow]:
    """Winners of the done tasks of a device: what a new task warm-starts from
    (`tuner.strategies.warm_start_for_task`). One query with a `row_number()` ranking.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        block_shape: [group_n, group_k] of the sweeps to read.
        out_dtype: output dtype of the sweeps to read.
        kernel_hash: only trials whose environment has this kernel hash; None for all.

    Returns:
        One row per (N, K, M) with a done task and an ok trial, sorted by (N, K, M); ties in
        latency_us go to the lowest trial_id.
    """
    key = (Task.N, Task.K, Task.M)
    ranked = (
        _ok_trials(
            [*key, *(getattr(Trial, name) for name in CONFIG_COLUMNS), Trial.latency_us,
             func.row_number().over(partition_by=key, order_by=(Trial.latency_us,
                                                                Trial.trial_id)).label("rank")],
            device_name=device_name, out_dtype=out_dtype, kernel_hash=kernel_hash,
        )
        .where(Task.state == "done", Sweep.block_n == block_shape[0],
               Sweep.block_k == block_shape[1])
        .subquery("ranked")
    )
    rows = session.execute(
        select(ranked).where(ranked.c.rank == 1).order_by(ranked.c.N, ranked.c.K, ranked.c.M)
    ).mappings()
    return [
        TaskWinnerRow(N=row["N"], K=row["K"], M=row["M"],
                      config={name: row[name] for name in CONFIG_COLUMNS},
                      latency_us=row["latency_us"])
        for row in rows
    ]
