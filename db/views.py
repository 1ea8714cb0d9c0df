"""What the store's rows say, read-only: the winner per (family, shape_params, N, K, block_shape,
M) of a device, the warm starts and related trials a new task's search reads, how much of each
shape's M grid is tuned, sweeps and tasks with their counts, environments, trials, totals.

Runs are never compared by absolute latency: timings of two sweeps (another day, clock, load)
are only comparable re-timed interleaved (`tuner verify`). Where several sweeps tuned a key, the
decision made last stands (a task decides when it finishes, an extended task again when its
finalists change); with no decision, the newest task's fastest ok trial.

Provenance filter: `kernel_hash` keeps trials and decisions whose environment has that kernel
hash (or any of a sequence of hashes, one per kernel family); `triton_minor` ("3.6") those whose
environment's triton has that major.minor ("3.6", "3.6.1+git" match; "3.60" does not). None
leaves that part out. Each function is a fixed number of queries, none per task.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Row, Select, and_, func, or_, select
from sqlalchemy.orm import Session

from db.models import (
    Decision,
    Device,
    Environment,
    ImportedFile,
    Release,
    Retime,
    Sweep,
    Task,
    TaskState,
    Trial,
    block_columns,
    block_shape_of,
    config_of,
    take,
)
from tuner.core import CONFIG_KEYS, TrialStatus, minor_of

OK = TrialStatus.OK.value
# The key of a winner: one file's entry.
KEY = (Task.family, Task.shape_params, Task.N, Task.K, Sweep.block_n, Sweep.block_k, Task.M)
CONFIG = [getattr(Trial, name) for name in CONFIG_KEYS]
# Trials that were never launched (compile-for-target pruning) take no measuring time.
_NOT_MEASURED = (TrialStatus.OUT_OF_RESOURCES.value,)


@dataclass(frozen=True)
class WinnerRow:
    """The winner of one (device_name, family, shape_params, N, K, block_shape, M) over all
    sweeps: that of task `task_id` of sweep `sweep_id`; `other_sweeps` are the other sweeps with
    a decision or an ok trial for the key, set aside without comparing latencies.

    Decided (`decided`): the decided config with the decision's re-timed `latency_us`,
    `default_latency_us` and `spread_us`. Otherwise the fastest ok trial, `default_latency_us`
    from the task's fastest default-config trial (None without one), `spread_us` None.
    `environment_id` is that of the winning trial or decision, `kept` and `note` the decision's
    (why it kept the config). Latencies in microseconds; `block_shape` None: per-tensor.
    """

    device_name: str
    N: int
    K: int
    block_shape: tuple[int, int] | None
    M: int
    config: dict[str, int]
    latency_us: float
    default_latency_us: float | None
    is_default: bool
    task_id: int
    family: str
    spread_us: float | None = None
    decided: bool = False
    environment_id: int | None = None
    shape_params: str = ""
    sweep_id: int | None = None
    other_sweeps: tuple[int, ...] = ()
    kept: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class TaskWinnerRow:
    """The fastest ok config of one (N, K, M) among finished tasks of a device; also one ok
    trial of a related finished task (`related_trials`)."""

    N: int
    K: int
    M: int
    config: dict[str, int]
    latency_us: float


def matching_environments(
    session: Session, kernel_hash: str | Sequence[str] | None, triton_minor: str | None
) -> list[int] | None:
    """The sorted environment_ids that pass the provenance filter; None without a filter.

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    if kernel_hash is None and triton_minor is None:
        return None
    if triton_minor is not None and not re.fullmatch(r"\d+\.\d+", triton_minor):
        raise ValueError(f"triton_minor {triton_minor!r} is not major.minor, e.g. 3.6")
    hashes = [kernel_hash] if isinstance(kernel_hash, str) else kernel_hash
    query = select(Environment.environment_id, Environment.triton)
    if hashes is not None:
        query = query.where(Environment.kernel_hash.in_(list(hashes)))
    wanted = None if triton_minor is None else minor_of(triton_minor)
    rows = session.execute(query)
    return sorted(env for env, triton in rows if wanted is None or minor_of(triton) == wanted)


def on_device(query: Select, device_name: str, out_dtype: str | None = None) -> Select:
    """Restrict a query that selects from Task to tasks of sweeps on one device (and dtype)."""
    query = query.join(Sweep, Task.sweep_id == Sweep.sweep_id)
    query = query.join(Device, Sweep.device_id == Device.device_id)
    query = query.where(Device.device_name == device_name)
    return query if out_dtype is None else query.where(Sweep.out_dtype == out_dtype)


def _measured(table: Any, columns: Sequence[Any], scope: dict[str, Any]) -> Select:
    """Ok trials with a latency (table Trial) or decisions (Decision) of tasks of sweeps on one
    device (`scope`: device_name, out_dtype, environments: their ids, or None for any)."""
    query = select(*columns).select_from(table).join(Task, table.task_id == Task.task_id)
    query = on_device(query, scope["device_name"], scope["out_dtype"])
    if table is Trial:
        query = query.where(Trial.status == OK, Trial.latency_us.is_not(None))
    environments = scope["environments"]
    return query if environments is None else query.where(table.environment_id.in_(environments))


def _firsts(session: Session, query: Select, partition: Sequence[Any], order: Sequence[Any]):
    """The first row of `query` per `partition` in `order` (row_number), as mappings."""
    rank = func.row_number().over(partition_by=partition, order_by=order).label("rank")
    ranked = query.add_columns(rank).subquery()
    return session.execute(select(ranked).where(ranked.c.rank == 1)).mappings().all()


def _winners_of(
    rows: Sequence[Any], scope: dict[str, Any], default_us: dict[int, float] | None = None
) -> dict[tuple, WinnerRow]:
    """The WinnerRow of each result row of the trial query (with the default latency of each
    task, `default_us`) or of the decision query (None), by key."""
    found = {}
    for row in rows:
        given: dict[str, Any] = {"decided": True}
        if default_us is not None:
            given = {"default_latency_us": default_us.get(row["task_id"])}
        found[tuple(row[c.key] for c in KEY)] = take(
            WinnerRow,
            row,
            device_name=scope["device_name"],
            block_shape=block_shape_of(row["block_n"], row["block_k"]),
            config=config_of(row),
            is_default=bool(row["is_default"]),
            **given,
        )
    return found


def _trial_winners(session: Session, scope: dict[str, Any]) -> dict[tuple, WinnerRow]:
    """The fastest ok trial of the newest task per key, with the task's fastest ok default."""
    columns = [Trial.task_id, Trial.environment_id, Task.sweep_id, *KEY, *CONFIG]
    columns += [Trial.latency_us, Trial.is_default]
    order = (Task.task_id.desc(), Trial.latency_us, Trial.trial_id)
    best = _firsts(session, _measured(Trial, columns, scope), KEY, order)
    defaults_query = _measured(Trial, columns, scope).where(Trial.is_default.is_(True))
    defaults = _firsts(session, defaults_query, [Trial.task_id], order[1:])
    return _winners_of(best, scope, {row["task_id"]: row["latency_us"] for row in defaults})


def _decision_winners(session: Session, scope: dict[str, Any]) -> dict[tuple, WinnerRow]:
    """The decision made last per key (ties: the newest decision row), with its kept retime
    (is it the default)."""
    columns = [Decision.task_id, Decision.environment_id, Task.sweep_id, *KEY]
    columns += [getattr(Decision, name) for name in CONFIG_KEYS]
    columns += [Decision.latency_us, Decision.default_latency_us, Decision.spread_us]
    columns += [Decision.kept, Decision.note]
    kept = [getattr(Retime, name) == getattr(Decision, name) for name in CONFIG_KEYS]
    query = _measured(Decision, [*columns, Retime.is_default], scope).outerjoin(
        Retime, and_(Retime.task_id == Decision.task_id, *kept)
    )
    order = (Decision.created_at.desc(), Decision.decision_id.desc())
    return _winners_of(_firsts(session, query, KEY, order), scope)


def winners(
    session: Session,
    *,
    device_name: str,
    out_dtype: str | None = None,
    kernel_hash: str | Sequence[str] | None = None,
    triton_minor: str | None = None,
) -> list[WinnerRow]:
    """The winner per (family, shape_params, N, K, block_shape, M) of a device over all its
    sweeps (only those of `out_dtype` unless None), with the provenance filter: the decided
    config where some task of the key has a decision (among several, the decision made last),
    else the fastest ok trial of its newest task (ties in latency to the lowest trial_id).

    Returns:
        One row per key with an ok trial or a decision, sorted by key.

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    environments = matching_environments(session, kernel_hash, triton_minor)
    scope = {"device_name": device_name, "out_dtype": out_dtype, "environments": environments}
    found = _trial_winners(session, scope)
    found.update(_decision_winners(session, scope))
    columns = [*KEY, Task.sweep_id]
    sweeps = defaultdict(set)
    for *key, sweep_id in session.execute(
        _measured(Trial, columns, scope).union(_measured(Decision, columns, scope))
    ):
        sweeps[tuple(key)].add(sweep_id)
    return [
        replace(row, other_sweeps=tuple(sorted(sweeps[key] - {row.sweep_id})))
        for key, row in sorted(found.items())
    ]


def stale_trials(
    session: Session,
    *,
    device_name: str,
    kernel_hash: str | Sequence[str] | None,
    triton_minor: str | None,
) -> int:
    """How many ok trials of a device the provenance filter leaves out (0 without a filter), for
    "12 trials of other kernel or Triton versions left out; --allow-stale includes them"."""
    environments = matching_environments(session, kernel_hash, triton_minor)
    if environments is None:
        return 0
    scope = {"device_name": device_name, "out_dtype": None, "environments": None}
    query = _measured(Trial, [func.count()], scope).where(Trial.environment_id.not_in(environments))
    return session.scalar(query) or 0


def _finished_trials(session: Session, scope: dict[str, Any]) -> Select:
    """Ok trials (N, K, M, config, latency) of finished, not failed tasks of a device's sweeps
    of one family, dimensions, block shape and dtype (`task_winners`' arguments, `scope`);
    tasks first finished, and trials stored, before `finished_before`."""
    before = scope.get("finished_before")
    environments = matching_environments(
        session, scope.get("kernel_hash"), scope.get("triton_minor")
    )
    columns = [Task.N, Task.K, Task.M, *CONFIG, Trial.latency_us]
    block_n, block_k = block_columns(scope["block_shape"])
    query = _measured(Trial, columns, scope | {"environments": environments}).where(
        Task.finished_at.is_not(None),
        Task.state != TaskState.FAILED,
        Task.family == scope["family"],
        Task.shape_params == scope.get("shape_params", ""),
        Sweep.block_n == block_n,
        Sweep.block_k == block_k,
    )
    if before is not None:
        query = query.where(Task.finished_at < before, Trial.created_at < before)
    return query


def task_winners(
    session: Session,
    *,
    device_name: str,
    block_shape: tuple[int, int] | None,
    out_dtype: str,
    kernel_hash: str | None = None,
    triton_minor: str | None = None,
    finished_before: datetime | None = None,
    family: str,
    shape_params: str = "",
) -> list[TaskWinnerRow]:
    """The fastest ok trial per (N, K, M) of a device's finished tasks, ties to the lowest
    trial_id, sorted by (N, K, M): what a new task warm-starts from (decisions are not read: a
    warm start wants fast configs).

    `finished_before` keeps tasks first finished, and trials stored, before it: a resumed task
    passes the time of its first trial, so it gets the warm starts its first run got, and a
    killed sweep resumes into the trials of an uninterrupted one.

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    query = _finished_trials(session, locals())
    order = (Trial.latency_us, Trial.trial_id)
    rows = _firsts(session, query, (Task.N, Task.K, Task.M), order)
    rows = sorted(rows, key=lambda row: (row["N"], row["K"], row["M"]))
    return [take(TaskWinnerRow, row, config=config_of(row)) for row in rows]


def related_trials(
    session: Session, *, N: int, K: int, M: int, **scope: Any
) -> list[TaskWinnerRow]:
    """The ok trials of the finished tasks related to (N, K, M): the same (N, K) at another M,
    another (N, K) at the same M; tasks and trials chosen as by `task_winners` (`scope`: its
    keyword arguments). Sorted by (N, K, M, trial_id).

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
        KeyError: `scope` lacks one of `task_winners`' arguments without a default.
    """
    query = _finished_trials(session, scope).where(
        or_(
            and_(Task.N == N, Task.K == K, Task.M != M),
            and_(or_(Task.N != N, Task.K != K), Task.M == M),
        )
    )
    rows = session.execute(query.order_by(Task.N, Task.K, Task.M, Trial.trial_id)).mappings()
    return [take(TaskWinnerRow, row, config=config_of(row)) for row in rows]


@dataclass(frozen=True)
class ShapeCoverage:
    """How much of the M grid of one (family, shape_params, N, K, block_shape) of a device is
    tuned: `m_requested` the M of all its tasks, `m_done` those whose task is done in some
    sweep, `models` those sweeps' models, `m_stale` (with a provenance filter) the M whose ok
    trials and decisions all come from other kernel or Triton versions. All sorted."""

    family: str
    shape_params: str
    N: int
    K: int
    block_shape: tuple[int, int] | None
    m_requested: tuple[int, ...]
    m_done: tuple[int, ...]
    models: tuple[str, ...]
    m_stale: tuple[int, ...] = ()


def _has_result(environments: list[int] | None) -> Any:
    """Whether the task has an ok trial or a decision (of `environments`, unless None)."""
    trial = select(Trial.trial_id).where(
        Trial.task_id == Task.task_id, Trial.status == OK, Trial.latency_us.is_not(None)
    )
    decision = select(Decision.decision_id).where(Decision.task_id == Task.task_id)
    if environments is not None:
        trial = trial.where(Trial.environment_id.in_(environments))
        decision = decision.where(Decision.environment_id.in_(environments))
    return or_(trial.exists(), decision.exists())


def shape_coverage(
    session: Session,
    *,
    device_name: str,
    out_dtype: str | None = None,
    kernel_hash: str | Sequence[str] | None = None,
    triton_minor: str | None = None,
) -> list[ShapeCoverage]:
    """The requested and finished M per (family, shape_params, N, K, block_shape) of a device,
    over its sweeps (of `out_dtype` unless None), sorted that way (per-tensor first).

    With a provenance filter an M counts as done only when its task is done and has an ok trial
    or a decision of a matching environment, and `m_stale` lists the M with ok trials or
    decisions, none matching: those `winners` with the same filter leaves without a winner.

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    environments = matching_environments(session, kernel_hash, triton_minor)
    query = select(*KEY, Task.state, Sweep.model, _has_result(environments), _has_result(None))
    found: dict[tuple, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for *shape, m, state, model, matching, any_result in session.execute(
        on_device(query.select_from(Task), device_name, out_dtype)
    ):
        got = found[tuple(shape)]
        got["m_requested"].add(m)
        got["models"].add(model)
        if state == TaskState.DONE and (matching or environments is None):
            got["m_done"].add(m)
        if environments is not None and (matching or any_result):
            got["current" if matching else "measured"].add(m)
    return [
        ShapeCoverage(
            *(family, params, n, k, block_shape_of(block_n, block_k)),
            m_requested=tuple(sorted(got["m_requested"])),
            m_done=tuple(sorted(got["m_done"])),
            models=tuple(sorted(got["models"])),
            m_stale=tuple(sorted(got["measured"] - got["current"])),
        )
        for (family, params, n, k, block_n, block_k), got in sorted(found.items())
    ]


def sweep_tasks(session: Session, *, sweep_id: int) -> list[Row[Any]]:
    """The tasks of one sweep, sorted by (N, K, M): rows of task_id, N, K, M, state, attempts,
    worker_id, error, trial counts `trials_ok` and `trials_total`, and the fastest ok trial's
    and the fastest ok default-config trial's latency (`best_latency_us`, `default_latency_us`,
    microseconds; None without one); empty for no such sweep.
    """
    ok, fastest = Trial.status == OK, func.min(Trial.latency_us)
    query = select(Task.task_id, Task.N, Task.K, Task.M, Task.state, Task.attempts)
    query = query.add_columns(Task.worker_id, Task.error).add_columns(
        func.count().filter(ok).label("trials_ok"),
        func.count(Trial.trial_id).label("trials_total"),
        fastest.filter(ok).label("best_latency_us"),
        fastest.filter(ok, Trial.is_default.is_(True)).label("default_latency_us"),
    )
    query = query.outerjoin(Trial, Trial.task_id == Task.task_id).where(Task.sweep_id == sweep_id)
    return list(session.execute(query.group_by(Task.task_id).order_by(Task.N, Task.K, Task.M)))


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


def device_environments(session: Session, *, device_name: str) -> list[EnvironmentRow]:
    """The environments trials of a device ran in, with trial counts: most trials first, then
    by versions."""
    rows = session.execute(
        select(Environment, func.count(Trial.trial_id))
        .join(Trial, Trial.environment_id == Environment.environment_id)
        .join(Device, Environment.device_id == Device.device_id)
        .where(Device.device_name == device_name)
        .group_by(Environment.environment_id)
    )
    found = [take(EnvironmentRow, env, trials=count) for env, count in rows]
    return sorted(found, key=lambda e: (-e.trials, e.torch, e.triton, e.tuner, e.kernel_hash))


@dataclass(frozen=True)
class TrialTimeRow:
    """Mean measuring seconds (`mean_s`, check and timing, compile excluded) of the `trials` of
    a device with a recorded `measure_s` at one (N, K, M) of one kernel family."""

    family: str
    N: int
    K: int
    M: int
    trials: int
    mean_s: float


def trial_times(session: Session, *, device_name: str) -> list[TrialTimeRow]:
    """Mean measuring seconds of every (family, N, K, M) a device has trials of, sorted; pruned
    trials (never launched) left out: the time estimate `tuner sweep` prints."""
    group = (Task.family, Task.N, Task.K, Task.M)
    query = select(*group, func.count(), func.avg(Trial.measure_s)).join_from(Trial, Task)
    query = on_device(query, device_name).where(
        Trial.measure_s.is_not(None), Trial.status.not_in(_NOT_MEASURED)
    )
    rows = session.execute(query.group_by(*group).order_by(*group))
    return [TrialTimeRow(f, n, k, m, count, float(mean)) for f, n, k, m, count, mean in rows]


def known_device_names(session: Session, *, swept: bool = False) -> list[str]:
    """The device_name keys the store knows a device by: those with a sweep, an import or a
    release (what a `--device` argument or a URL's device is matched against), or (`swept`) only
    those with a sweep; sorted."""
    tables = (Sweep,) if swept else (Sweep, ImportedFile, Release)
    has_row = (select(t).where(t.device_id == Device.device_id).exists() for t in tables)
    query = select(Device.device_name).where(or_(*has_row)).order_by(Device.device_name)
    return list(session.scalars(query))


def store_counts(session: Session) -> dict[str, Any]:
    """Totals over the whole store (for /metrics): `trials` by status and `tasks` by state (every
    status and state, zeros included), and the numbers of `sweeps` and `imports`."""
    trials = dict.fromkeys((status.value for status in TrialStatus), 0)
    trials.update(session.execute(select(Trial.status, func.count()).group_by(Trial.status)).all())
    tasks = dict.fromkeys(map(str, TaskState), 0)
    tasks.update(session.execute(select(Task.state, func.count()).group_by(Task.state)).all())
    sweeps = session.scalar(select(func.count()).select_from(Sweep))
    imports = session.scalar(select(func.count()).select_from(ImportedFile))
    return {"trials": trials, "tasks": tasks, "sweeps": sweeps, "imports": imports}
