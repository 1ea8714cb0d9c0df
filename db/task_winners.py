"""What a device's finished tasks tell the next task's search: their winners, as warm starts
(`tuner.search.warm_start.warm_start_for_task`), and the ok trials of the related ones, as a
prior (`tuner.search.guided.fit_prior`).

Re-exported by `db.repo`; like the repository functions it takes a Session and is keyword-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from db.models import Sweep, Task, Trial, block_columns
from db.winners import _config, matching_environments, ok_trials
from tuner.core import CONFIG_KEYS


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
    block_shape: tuple[int, int] | None,
    out_dtype: str,
    kernel_hash: str | None = None,
    triton_minor: str | None = None,
    finished_before: datetime | None = None,
    family: str,
    shape_params: str = "",
) -> list[TaskWinnerRow]:
    """Winners of the finished tasks of a device (done, or reopened by a larger budget after
    they were done): what a new task warm-starts from
    (`tuner.search.warm_start.warm_start_for_task`). One query with a `row_number()` ranking of ok
    trials (decisions are not consulted: a warm start wants fast configs, not the kept one).

    Args:
        session: the open session.
        device_name: vLLM's device key.
        block_shape: [group_n, group_k] of the sweeps to read; None: per-tensor sweeps.
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
    environments = matching_environments(
        session, kernel_hash=kernel_hash, triton_minor=triton_minor
    )
    key = (Task.N, Task.K, Task.M)
    ranked = (
        ok_trials(
            [
                *key,
                *(getattr(Trial, name) for name in CONFIG_KEYS),
                Trial.latency_us,
                func.row_number()
                .over(partition_by=key, order_by=(Trial.latency_us, Trial.trial_id))
                .label("rank"),
            ],
            device_name=device_name,
            out_dtype=out_dtype,
            environments=environments,
        )
        .where(*_finished(block_shape, finished_before, family, shape_params))
        .subquery("ranked")
    )
    rows = session.execute(
        select(ranked).where(ranked.c.rank == 1).order_by(ranked.c.N, ranked.c.K, ranked.c.M)
    ).mappings()
    return [
        TaskWinnerRow(
            N=row["N"], K=row["K"], M=row["M"], config=_config(row), latency_us=row["latency_us"]
        )
        for row in rows
    ]


@dataclass(frozen=True)
class RelatedTrialRow:
    """One ok trial of a finished task related to the one being searched."""

    N: int
    K: int
    M: int
    config: dict[str, int]
    latency_us: float


def related_trials(
    session: Session,
    *,
    device_name: str,
    block_shape: tuple[int, int] | None,
    out_dtype: str,
    N: int,
    K: int,
    M: int,
    kernel_hash: str | None = None,
    triton_minor: str | None = None,
    finished_before: datetime | None = None,
    family: str,
    shape_params: str = "",
) -> list[RelatedTrialRow]:
    """The ok trials of the finished tasks of a device related to (N, K, M): the same (N, K)
    at another M, and another (N, K) at the same M (`tuner.search.warm_start.related`). The tasks
    and trials are chosen as by `task_winners` (same arguments), so a resumed task that passes
    the time of its first trial gets the trials its first run got.

    Returns:
        Every such trial, sorted by (N, K, M, trial_id).

    Raises:
        ValueError: triton_minor is not of the form "<major>.<minor>".
    """
    environments = matching_environments(
        session, kernel_hash=kernel_hash, triton_minor=triton_minor
    )
    query = (
        ok_trials(
            [
                Task.N,
                Task.K,
                Task.M,
                *(getattr(Trial, name) for name in CONFIG_KEYS),
                Trial.latency_us,
            ],
            device_name=device_name,
            out_dtype=out_dtype,
            environments=environments,
        )
        .where(
            *_finished(block_shape, finished_before, family, shape_params),
            or_(
                and_(Task.N == N, Task.K == K, Task.M != M),
                and_(or_(Task.N != N, Task.K != K), Task.M == M),
            ),
        )
        .order_by(Task.N, Task.K, Task.M, Trial.trial_id)
    )
    return [
        RelatedTrialRow(
            N=row["N"], K=row["K"], M=row["M"], config=_config(row), latency_us=row["latency_us"]
        )
        for row in session.execute(query).mappings()
    ]


def _finished(
    block_shape: tuple[int, int] | None,
    finished_before: datetime | None,
    family: str,
    shape_params: str,
) -> list:
    """The conditions `task_winners` and `related_trials` share: finished, not failed tasks of
    the family, dimensions and block shape, first finished (and their trials stored) before
    `finished_before`."""
    block_n, block_k = block_columns(block_shape)
    return [
        Task.finished_at.is_not(None),
        Task.state != "failed",
        Task.family == family,
        Task.shape_params == shape_params,
        Sweep.block_n == block_n,
        Sweep.block_k == block_k,
        *(
            [Task.finished_at < finished_before, Trial.created_at < finished_before]
            if finished_before is not None
            else []
        ),
    ]
