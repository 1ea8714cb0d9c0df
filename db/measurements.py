"""A measurement is made once: the trials any sweep stored of the same measurement (device,
kernel and its hash, the versions that time it, family, shape, M, block shape, output dtype and
config space) answer a task of another sweep, so an extended M grid, a larger budget or a
second model sharing a shape measures only what is new.

Like the repository functions these take a Session and never commit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from sqlalchemy import ColumnElement, CursorResult, and_, literal, or_, select
from sqlalchemy.orm import Session, aliased

from db.connection import dialect_insert
from db.models import Device, Environment, Sweep, Task, Trial, block_columns
from tuner.core import CONFIG_KEYS

# The environment's fields that make two trials one measurement (with its device): the
# kernel's text and the software that compiles and times it.
MEASUREMENT_FIELDS = ("kernel_hash", "torch", "triton", "tuner")


def _same_measurement(environment: Mapping[str, str]) -> ColumnElement[bool]:
    """Trials (joined with their task, sweep, environment and device) timed in an environment
    with the same device and `MEASUREMENT_FIELDS` as `environment`."""
    return and_(
        Device.device_name == environment["device_name"],
        *(getattr(Environment, name) == environment[name] for name in MEASUREMENT_FIELDS),
    )


def _measured():
    """Trials with their task, sweep, environment and device."""
    return (
        select(Trial)
        .join(Task, Trial.task_id == Task.task_id)
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Environment, Trial.environment_id == Environment.environment_id)
        .join(Device, Environment.device_id == Device.device_id)
    )


def adopt_measurements(session: Session, *, task_id: int, environment_id: int) -> int:
    """Copy into a task every trial another task stored of the same measurement (its family,
    shape params, N, K, M, its sweep's block shape, output dtype and config space, timed in an
    environment with the same device and `MEASUREMENT_FIELDS` as `environment_id`'s), each
    config once and keeping its environment and time, so the task resumes from them as from
    its own (`tuner.run.task.TaskRun.resume`).

    Returns:
        The trials copied (configs the task had not stored).
    """
    task = session.get(Task, task_id)
    environment = session.get(Environment, environment_id)
    if task is None or environment is None:
        return 0
    sweep = session.get(Sweep, task.sweep_id)
    assert sweep is not None
    fields = {name: getattr(environment, name) for name in MEASUREMENT_FIELDS}
    device = session.get(Device, environment.device_id)
    assert device is not None
    fields["device_name"] = device.device_name
    own = aliased(Trial)
    copied = [*CONFIG_KEYS, "environment_id", "is_default", "status", "latency_us", "p20_us"]
    copied += ["p80_us", "rel_error", "error", "measure_s", "created_at"]
    source = (
        _measured()
        .with_only_columns(literal(task_id), *(getattr(Trial, name) for name in copied))
        .where(
            _same_measurement(fields),
            Task.task_id != task_id,
            Task.family == task.family,
            Task.shape_params == task.shape_params,
            Task.N == task.N,
            Task.K == task.K,
            Task.M == task.M,
            Sweep.block_n == sweep.block_n,
            Sweep.block_k == sweep.block_k,
            Sweep.out_dtype == sweep.out_dtype,
            Sweep.space == sweep.space,
            ~select(own.trial_id)
            .where(
                own.task_id == task_id, *(getattr(own, k) == getattr(Trial, k) for k in CONFIG_KEYS)
            )
            .exists(),
        )
        .order_by(Trial.created_at)
    )
    inserted = session.execute(
        dialect_insert(session, Trial)
        .from_select(["task_id", *copied], source)
        .on_conflict_do_nothing(index_elements=["task_id", *CONFIG_KEYS])
    )
    return max(0, cast(CursorResult, inserted).rowcount or 0)


def known_configs(
    session: Session,
    *,
    environment: Mapping[str, str],
    family: str,
    shape_params: str,
    block_shape: tuple[int, int] | None,
    out_dtype: str,
    space: str,
    tasks: Iterable[tuple[int, int, int]],
) -> dict[tuple[int, int, int], int]:
    """Per (N, K, M): the distinct configs the store holds of that measurement, in any sweep
    (`adopt_measurements`'s rule), for the plan's count of trials reused and still to run.

    Args:
        environment: device_name and `MEASUREMENT_FIELDS` of the environment trials would be
            timed in.
        family, shape_params, block_shape, out_dtype, space: the sweep's.
        tasks: the (N, K, M) asked about.

    Returns:
        (N, K, M) -> distinct configs stored; absent for none.
    """
    wanted = list(tasks)
    if not wanted:
        return {}
    block_n, block_k = block_columns(block_shape)
    query = (
        _measured()
        .with_only_columns(Task.N, Task.K, Task.M, *(getattr(Trial, k) for k in CONFIG_KEYS))
        .where(
            _same_measurement(environment),
            Task.family == family,
            Task.shape_params == shape_params,
            Sweep.block_n == block_n,
            Sweep.block_k == block_k,
            Sweep.out_dtype == out_dtype,
            Sweep.space == space,
            or_(*(and_(Task.N == n, Task.K == k, Task.M == m) for n, k, m in wanted)),
        )
        .distinct()
    )
    counts: dict[tuple[int, int, int], int] = {}
    for row in session.execute(query):
        counts[row[:3]] = counts.get(row[:3], 0) + 1
    return counts
