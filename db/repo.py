"""Repository functions of the store: keyword-only, take a Session, never commit.

They return frozen dataclasses, not ORM objects, so callers hold nothing across sessions.
Writes that may race (get-or-create, trial recording, task claims) are single statements
(`INSERT ... ON CONFLICT DO NOTHING`, `UPDATE ... RETURNING`) that are safe with several
processes on one SQLite file and on PostgreSQL.
"""

from __future__ import annotations

from db.comparisons import ComparisonInfo, PointRow, list_comparisons, record_comparison
from db.decisions import (
    DecisionInfo,
    RetimeInfo,
    device_ceilings,
    record_ceilings,
    record_decision,
    task_decision,
)
from db.devices import get_or_create_device, get_or_create_environment
from db.imports import (
    ImportedShape,
    ImportInfo,
    imported_configs,
    list_import_device_names,
    list_imports,
    record_import,
)
from db.overview import (
    EnvironmentRow,
    StoreCounts,
    SweepSummary,
    TaskSummary,
    device_environments,
    list_sweeps,
    store_counts,
    sweep_tasks,
)
from db.progress import (
    DeviceTrialRow,
    ShapeCoverage,
    SweepProgress,
    device_trials,
    list_device_names,
    shape_coverage,
    sweep_progress,
)
from db.sweeps import (
    OpenedSweep,
    SweepInfo,
    create_sweep,
    get_sweep,
    open_sweep,
    reopen_store_failures,
    sweep_key,
)
from db.task_winners import RelatedTrialRow, TaskWinnerRow, related_trials, task_winners
from db.tasks import (
    TaskInfo,
    claim_task,
    end_trial,
    finish_task,
    heartbeat,
    release_tasks,
    unfinished_tasks,
)
from db.trials import TrialInfo, record_held_trial, record_trial, task_trials
from db.winners import WinnerRow, stale_trials, winners

__all__ = [
    "ComparisonInfo",
    "DecisionInfo",
    "DeviceTrialRow",
    "EnvironmentRow",
    "ImportInfo",
    "ImportedShape",
    "OpenedSweep",
    "PointRow",
    "RelatedTrialRow",
    "RetimeInfo",
    "ShapeCoverage",
    "StoreCounts",
    "SweepInfo",
    "SweepProgress",
    "SweepSummary",
    "TaskInfo",
    "TaskSummary",
    "TaskWinnerRow",
    "TrialInfo",
    "WinnerRow",
    "claim_task",
    "create_sweep",
    "device_ceilings",
    "device_environments",
    "device_trials",
    "end_trial",
    "finish_task",
    "get_or_create_device",
    "get_or_create_environment",
    "get_sweep",
    "heartbeat",
    "imported_configs",
    "list_comparisons",
    "list_device_names",
    "list_import_device_names",
    "list_imports",
    "list_sweeps",
    "open_sweep",
    "record_ceilings",
    "record_comparison",
    "record_decision",
    "record_import",
    "record_held_trial",
    "record_trial",
    "related_trials",
    "release_tasks",
    "reopen_store_failures",
    "shape_coverage",
    "stale_trials",
    "store_counts",
    "sweep_key",
    "sweep_progress",
    "sweep_tasks",
    "task_decision",
    "task_trials",
    "task_winners",
    "unfinished_tasks",
    "winners",
]
