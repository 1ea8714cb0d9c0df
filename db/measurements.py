"""A measurement is made once: the trials any sweep stored of the same measurement (device,
kernel and its hash, the versions that time it, family, shape, M, block shape, output dtype and
config space) answer a task of another sweep, so an extended M grid, a larger budget or a
second model sharing a shape measures only what is new.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, cast

from sqlalchemy import CursorResult, Select, and_, literal, or_, select
from sqlalchemy.orm import Session, aliased

from db.connection import dialect_insert
from db.models import Device, Environment, Sweep, Task, Trial, block_columns
from tuner.core import CONFIG_KEYS

# The environment's fields that make two trials one measurement (with its device): the
# kernel's text and the software that compiles and times it.
MEASUREMENT_FIELDS = ("kernel_hash", "torch", "triton", "tuner")
_COPIED = (*CONFIG_KEYS, "environment_id", "is_default", "status", "latency_us", "p20_us")
_COPIED += ("p80_us", "rel_error", "error", "measure_s", "created_at")


def _measured(columns: Iterable[Any], environment: Mapping[str, str], **same: Any) -> Select:
    """`columns` of the trials timed in an environment with the device and `MEASUREMENT_FIELDS`
    of `environment`, of tasks with the `same` family and shape_params (Task's), block_n,
    block_k, out_dtype and space (Sweep's)."""
    tasks = {name: same.pop(name) for name in ("family", "shape_params")}
    return (
        select(*columns)
        .join_from(Trial, Task, Trial.task_id == Task.task_id)
        .join(Sweep, Task.sweep_id == Sweep.sweep_id)
        .join(Environment, Trial.environment_id == Environment.environment_id)
        .join(Device, Environment.device_id == Device.device_id)
        .where(Device.device_name == environment["device_name"])
        .where(*(getattr(Environment, name) == environment[name] for name in MEASUREMENT_FIELDS))
        .where(*(getattr(Task, name) == value for name, value in tasks.items()))
        .where(*(getattr(Sweep, name) == value for name, value in same.items()))
    )


def adopt_measurements(session: Session, *, task_id: int, environment_id: int) -> int:
    """Copy into a task every trial another task stored of the same measurement (its family,
    shape params, N, K, M, its sweep's block shape, output dtype and config space, timed in an
    environment with the same device and `MEASUREMENT_FIELDS` as `environment_id`'s), each
    config once and keeping its environment and time, so the task resumes from them as from
    its own (`tuner.run.worker.TaskRun.resume`).

    Returns:
        The trials copied (configs the task had not stored).
    """
    task, env = session.get(Task, task_id), session.get(Environment, environment_id)
    if task is None or env is None:
        return 0
    sweep, device = session.get_one(Sweep, task.sweep_id), session.get_one(Device, env.device_id)
    environment = {name: getattr(env, name) for name in MEASUREMENT_FIELDS}
    environment["device_name"] = device.device_name
    own = aliased(Trial)
    stored = select(own.trial_id).where(
        own.task_id == task_id, *(getattr(own, k) == getattr(Trial, k) for k in CONFIG_KEYS)
    )
    source = _measured(
        [literal(task_id), *(getattr(Trial, name) for name in _COPIED)],
        environment,
        family=task.family,
        shape_params=task.shape_params,
        **{name: getattr(sweep, name) for name in ("block_n", "block_k", "out_dtype", "space")},
    ).where(Task.task_id != task_id, Task.N == task.N, Task.K == task.K, Task.M == task.M)
    inserted = session.execute(
        dialect_insert(session, Trial)
        .from_select(
            ["task_id", *_COPIED], source.where(~stored.exists()).order_by(Trial.created_at)
        )
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
    same = {"family": family, "shape_params": shape_params, "block_n": block_n}
    same |= {"block_k": block_k, "out_dtype": out_dtype, "space": space}
    columns = [Task.N, Task.K, Task.M, *(getattr(Trial, k) for k in CONFIG_KEYS)]
    query = _measured(columns, environment, **same).where(
        or_(*(and_(Task.N == n, Task.K == k, Task.M == m) for n, k, m in wanted))
    )
    return dict(Counter(tuple(row[:3]) for row in session.execute(query.distinct())))
