"""Read-only overviews of the store: sweeps with counts, a sweep's tasks, environments, totals.

Re-exported by `db.repo`; like the repository functions they take a Session, are keyword-only
and return frozen dataclasses. Each is a fixed number of queries (none per sweep or task).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.models import TASK_STATES, Device, Environment, ImportedFile, Sweep, Task, Trial
from tuner.core import TRIAL_STATUSES


@dataclass(frozen=True)
class SweepSummary:
    """One sweep with its task counts by state and trial counts."""

    sweep_id: int
    device_name: str
    model: str
    tp: int
    strategy: str
    budget: int
    m_values: tuple[int, ...]
    created_at: datetime
    tasks: dict[str, int]
    trials_ok: int
    trials_total: int


@dataclass(frozen=True)
class TaskSummary:
    """One task of a sweep with its trial counts and best and default latency (ok trials)."""

    task_id: int
    N: int
    K: int
    M: int
    state: str
    attempts: int
    worker_id: str | None
    error: str | None
    trials_ok: int
    trials_total: int
    best_latency_us: float | None
    default_latency_us: float | None


@dataclass(frozen=True)
class EnvironmentRow:
    """An environment that trials of a device ran in, and how many trials; `environment_id`
    is what `WinnerRow.environment_id` refers to."""

    gpu_name: str
    compute_capability: str
    driver: str
    cuda: str
    torch: str
    triton: str
    tuner: str
    kernel_hash: str
    trials: int
    environment_id: int
    kernel_source: str = "builtin"
    vllm: str = ""


@dataclass(frozen=True)
class StoreCounts:
    """Totals of the whole store: trials by status, tasks by state, sweeps, imports."""

    trials: dict[str, int]
    tasks: dict[str, int]
    sweeps: int
    imports: int


def _by_state(rows) -> dict[int, dict[str, int]]:
    counts: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(TASK_STATES, 0))
    for key, state, count in rows:
        counts[key][state] = count
    return counts


def list_sweeps(session: Session) -> list[SweepSummary]:
    """Every sweep with task counts by state and trial counts.

    Args:
        session: the open session.

    Returns:
        Sorted by sweep_id.
    """
    tasks = _by_state(
        session.execute(
            select(Task.sweep_id, Task.state, func.count()).group_by(Task.sweep_id, Task.state)
        )
    )
    trials = {
        sweep_id: (ok, total)
        for sweep_id, ok, total in session.execute(
            select(Task.sweep_id, func.count().filter(Trial.status == "ok"), func.count())
            .select_from(Trial)
            .join(Task, Trial.task_id == Task.task_id)
            .group_by(Task.sweep_id)
        )
    }
    rows = session.execute(
        select(Sweep, Device.device_name)
        .join(Device, Sweep.device_id == Device.device_id)
        .order_by(Sweep.sweep_id)
    )
    return [
        SweepSummary(
            sweep_id=sweep.sweep_id,
            device_name=name,
            model=sweep.model,
            tp=sweep.tp,
            strategy=sweep.strategy,
            budget=sweep.budget,
            m_values=tuple(sweep.m_values),
            created_at=sweep.created_at,
            tasks=dict(tasks.get(sweep.sweep_id, dict.fromkeys(TASK_STATES, 0))),
            trials_ok=trials.get(sweep.sweep_id, (0, 0))[0],
            trials_total=trials.get(sweep.sweep_id, (0, 0))[1],
        )
        for sweep, name in rows
    ]


def sweep_tasks(session: Session, *, sweep_id: int) -> list[TaskSummary]:
    """The tasks of one sweep with trial counts and latencies.

    Args:
        session: the open session.
        sweep_id: the sweep.

    Returns:
        Sorted by (N, K, M).

    Raises:
        LookupError: there is no sweep with that id.
    """
    if session.get(Sweep, sweep_id) is None:
        raise LookupError(f"no sweep with sweep_id {sweep_id}")
    ok = Trial.status == "ok"
    stats = {
        task_id: (n_ok, total, best, default)
        for task_id, n_ok, total, best, default in session.execute(
            select(
                Trial.task_id,
                func.count().filter(ok),
                func.count(),
                func.min(Trial.latency_us).filter(ok),
                func.min(Trial.latency_us).filter(ok, Trial.is_default.is_(True)),
            )
            .join(Task, Trial.task_id == Task.task_id)
            .where(Task.sweep_id == sweep_id)
            .group_by(Trial.task_id)
        )
    }
    tasks = session.scalars(
        select(Task).where(Task.sweep_id == sweep_id).order_by(Task.N, Task.K, Task.M)
    )
    result = []
    for task in tasks:
        n_ok, total, best, default = stats.get(task.task_id, (0, 0, None, None))
        result.append(
            TaskSummary(
                task_id=task.task_id,
                N=task.N,
                K=task.K,
                M=task.M,
                state=task.state,
                attempts=task.attempts,
                worker_id=task.worker_id,
                error=task.error,
                trials_ok=n_ok,
                trials_total=total,
                best_latency_us=best,
                default_latency_us=default,
            )
        )
    return result


def device_environments(session: Session, *, device_name: str) -> list[EnvironmentRow]:
    """The environments that trials of a device's sweeps ran in, with trial counts.

    Args:
        session: the open session.
        device_name: vLLM's device key.

    Returns:
        Sorted by the number of trials, most first, then by versions.
    """
    rows = session.execute(
        select(
            Environment.gpu_name,
            Environment.compute_capability,
            Environment.driver,
            Environment.cuda,
            Environment.torch,
            Environment.triton,
            Environment.tuner,
            Environment.kernel_hash,
            func.count(Trial.trial_id),
            Environment.environment_id,
            Environment.kernel_source,
            Environment.vllm,
        )
        .join(Trial, Trial.environment_id == Environment.environment_id)
        .join(Device, Environment.device_id == Device.device_id)
        .where(Device.device_name == device_name)
        .group_by(Environment.environment_id)
    )
    found = [EnvironmentRow(*row) for row in rows]
    return sorted(found, key=lambda e: (-e.trials, e.torch, e.triton, e.tuner, e.kernel_hash))


def store_counts(session: Session) -> StoreCounts:
    """Totals over the whole store (for /metrics): every status and state, zeros included.

    Args:
        session: the open session.

    Returns:
        The counts.
    """
    trials = dict.fromkeys(TRIAL_STATUSES, 0)
    trials.update(
        (status, n)
        for status, n in session.execute(select(Trial.status, func.count()).group_by(Trial.status))
    )
    tasks = dict.fromkeys(TASK_STATES, 0)
    tasks.update(
        (state, n)
        for state, n in session.execute(select(Task.state, func.count()).group_by(Task.state))
    )
    sweeps = session.scalar(select(func.count()).select_from(Sweep)) or 0
    imports = session.scalar(select(func.count()).select_from(ImportedFile)) or 0
    return StoreCounts(trials=trials, tasks=tasks, sweeps=sweeps, imports=imports)
