"""What a device has measured before, for the time estimate `tuner sweep` prints before it
measures: seconds per trial by (N, K, M), and the trials a sweep already holds."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from db.models import Device, Sweep, Task, Trial

# Trials that were never launched (compile-for-target pruning) take no measuring time.
_NOT_MEASURED = ("out_of_resources",)


@dataclass(frozen=True)
class TrialTimeRow:
    """Mean measuring seconds of a device's trials at one (N, K, M) of one kernel family.

    Attributes:
        family: the kernel family of the tasks.
        N: weight rows.
        K: reduction size.
        M: rows of A.
        trials: trials with a recorded `measure_s`.
        mean_s: their mean `measure_s` (check and timing, compile excluded).
    """

    family: str
    N: int
    K: int
    M: int
    trials: int
    mean_s: float


def trial_times(session: Session, *, device_name: str) -> list[TrialTimeRow]:
    """Mean measuring seconds of every (family, N, K, M) a device has trials of.

    Args:
        session: the open session.
        device_name: vLLM's device key.

    Returns:
        One row per (family, N, K, M), sorted; pruned trials (never launched) left out.
    """
    query = (
        select(
            Task.family,
            Task.N,
            Task.K,
            Task.M,
            func.count(Trial.trial_id),
            func.avg(Trial.measure_s),
        )
        .join(Task, Trial.task_id == Task.task_id)
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Device, Sweep.device_id == Device.device_id)
        .where(
            Device.device_name == device_name,
            Trial.measure_s.is_not(None),
            Trial.status.not_in(_NOT_MEASURED),
        )
        .group_by(Task.family, Task.N, Task.K, Task.M)
        .order_by(Task.family, Task.N, Task.K, Task.M)
    )
    return [
        TrialTimeRow(family=family, N=n, K=k, M=m, trials=count, mean_s=float(mean))
        for family, n, k, m, count, mean in session.execute(query)
    ]


def stored_trials(session: Session, *, sweep_key: str) -> int:
    """Trials already stored for the sweep with this key (`db.sweeps.sweep_key`); 0 when there
    is no such sweep."""
    query = (
        select(func.count(Trial.trial_id))
        .join(Task, Trial.task_id == Task.task_id)
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .where(Sweep.sweep_key == sweep_key)
    )
    return int(session.scalar(query) or 0)
