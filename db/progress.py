"""Read-only queries of the store: sweep progress, devices, M-grid coverage and a device's
trials (landscape files). Winners are in `db.winners`.

Re-exported by `db.repo`; like the repository functions they take a Session, are keyword-only
and return frozen dataclasses. Each is a fixed number of SQL queries (no query per task) that
run on SQLite (3.30 or newer: window functions, FILTER) and PostgreSQL.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from db.models import Device, Environment, Sweep, Task, Trial, block_shape_of
from db.winners import decided_tasks, matching_environments, ok_trials
from tuner.core import CONFIG_KEYS


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
class ShapeCoverage:
    """How much of the M grid of one (family, shape_params, N, K, block_shape) of a device is
    tuned.

    `m_requested` is the sorted union of the M of all its tasks, `m_done` the M whose task is
    done in at least one sweep, `models` the sorted names of the models of those sweeps.
    `m_stale` (with a provenance filter only) the M whose ok trials and decisions all come from
    other kernel or Triton versions. `block_shape` is None for per-tensor scales.
    """

    N: int
    K: int
    block_shape: tuple[int, int] | None
    m_requested: tuple[int, ...]
    m_done: tuple[int, ...]
    models: tuple[str, ...]
    family: str
    m_stale: tuple[int, ...] = ()
    shape_params: str = ""


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


def _measured_tasks(
    session: Session, environments: list[int], *, device_name: str, out_dtype: str | None
) -> tuple[set[tuple], set[tuple]]:
    """The (family, shape_params, N, K, block_n, block_k, M, state) of tasks with an ok trial or
    a decision: of the matching `environments`, and of any environment."""
    current: set[tuple] = set()
    measured: set[tuple] = set()
    key = [
        Task.family,
        Task.shape_params,
        Task.N,
        Task.K,
        Sweep.block_n,
        Sweep.block_k,
        Task.M,
        Task.state,
    ]
    for matching, found in ((environments, current), (None, measured)):
        for select_from in (ok_trials, decided_tasks):
            measured_query = select_from(
                key, environments=matching, device_name=device_name, out_dtype=out_dtype
            ).distinct()
            found.update(tuple(row) for row in session.execute(measured_query))
    return current, measured


def shape_coverage(
    session: Session,
    *,
    device_name: str,
    out_dtype: str | None = None,
    kernel_hash: str | Sequence[str] | None = None,
    triton_minor: str | None = None,
) -> list[ShapeCoverage]:
    """The requested and finished M per (family, shape_params, N, K, block_shape) of a device,
    over all its sweeps.

    With a provenance filter (kernel_hash, triton_minor; see `db.winners`) an M counts as done
    only when its task is done and has an ok trial or a decision of a matching environment, and
    `m_stale` lists the M that have ok trials or decisions, none of them matching: the M that
    `winners` with the same filter leaves without a winner, which a file is partial for. The
    requested grid does not depend on the filter.

    Args:
        session: the open session.
        device_name: vLLM's device key.
        out_dtype: only sweeps with this output dtype; None for all.
        kernel_hash: only count trials and decisions of this kernel hash (or any of these
            hashes); None for all.
        triton_minor: only count trials and decisions of this triton major.minor; None for all.

    Returns:
        One entry per (family, shape_params, N, K, block_shape) with tasks, sorted that way.

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    query = _task_grid_query(device_name, out_dtype)
    environments = matching_environments(
        session, kernel_hash=kernel_hash, triton_minor=triton_minor
    )
    current, measured = (
        (set(), set())
        if environments is None
        else _measured_tasks(session, environments, device_name=device_name, out_dtype=out_dtype)
    )
    # Keyed by (family, shape_params, N, K, block_n, block_k).
    requested: dict[tuple, set[int]] = defaultdict(set)
    done: dict[tuple, set[int]] = defaultdict(set)
    stale: dict[tuple, set[int]] = defaultdict(set)
    models: dict[tuple, set[str]] = defaultdict(set)
    for family, params, n, k, block_n, block_k, m, state, model in session.execute(query):
        shape = (family, params, n, k, block_n, block_k)
        requested[shape].add(m)
        models[shape].add(model)
        if state == "done" and (environments is None or (*shape, m, state) in current):
            done[shape].add(m)
    if environments is not None:
        current_m = {row[:7] for row in current}
        for *stale_shape, m, _ in measured - current:
            if (*stale_shape, m) not in current_m:
                stale[tuple(stale_shape)].add(m)
    return _coverage_entries(requested, done, models, stale)


def _task_grid_query(device_name: str, out_dtype: str | None) -> Select:
    """Each distinct (family, shape_params, N, K, block_n, block_k, M, state, model) of the
    device's tasks, only of sweeps with `out_dtype` unless it is None."""
    query = (
        select(
            Task.family,
            Task.shape_params,
            Task.N,
            Task.K,
            Sweep.block_n,
            Sweep.block_k,
            Task.M,
            Task.state,
            Sweep.model,
        )
        .distinct()
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(Device.device_name == device_name)
    )
    if out_dtype is not None:
        query = query.where(Sweep.out_dtype == out_dtype)
    return query


def _coverage_entries(
    requested: dict[tuple, set[int]],
    done: dict[tuple, set[int]],
    models: dict[tuple, set[str]],
    stale: dict[tuple, set[int]],
) -> list[ShapeCoverage]:
    """One ShapeCoverage per requested (family, shape_params, N, K, block_n, block_k), sorted
    that way (a shape without block scales, stored as 0/0, first); a shape missing from `done`
    or `stale` has none there."""
    return [
        ShapeCoverage(
            N=shape[2],
            K=shape[3],
            block_shape=block_shape_of(shape[4], shape[5]),
            m_requested=tuple(sorted(requested[shape])),
            m_done=tuple(sorted(done.get(shape, ()))),
            models=tuple(sorted(models[shape])),
            m_stale=tuple(sorted(stale.get(shape, ()))),
            family=shape[0],
            shape_params=shape[1],
        )
        for shape in sorted(requested)
    ]


# Environment columns a landscape file records (`tuner.measure.landscape.Landscape`'s environment).
ENVIRONMENT_FIELDS: tuple[str, ...] = (
    "gpu_name",
    "compute_capability",
    "driver",
    "cuda",
    "torch",
    "triton",
    "tuner",
    "kernel_hash",
)


@dataclass(frozen=True)
class DeviceTrialRow:
    """One stored trial of a device with its problem, sweep and environment.

    `environment` holds ENVIRONMENT_FIELDS; rows of one environment share one dict.
    `block_shape` is None for per-tensor scales.
    """

    trial_id: int
    N: int
    K: int
    M: int
    block_shape: tuple[int, int] | None
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
        select(
            Trial,
            Task.N,
            Task.K,
            Task.M,
            Sweep.block_n,
            Sweep.block_k,
            Sweep.out_dtype,
            Sweep.space,
            Environment,
        )
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
                name: getattr(env, name) for name in ENVIRONMENT_FIELDS
            }
        rows.append(
            DeviceTrialRow(
                trial_id=trial.trial_id,
                N=n,
                K=k,
                M=m,
                block_shape=block_shape_of(block_n, block_k),
                out_dtype=dtype,
                space=space,
                config={name: getattr(trial, name) for name in CONFIG_KEYS},
                status=trial.status,
                latency_us=trial.latency_us,
                p20_us=trial.p20_us,
                p80_us=trial.p80_us,
                environment_id=env.environment_id,
                environment=environments[env.environment_id],
            )
        )
    return rows
