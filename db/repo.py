"""The one way into the store from outside db: connecting and migrating (`db.connection`), store
faults and their retry (`db.faults`), and the repository functions, one module per table group.

Repository functions are keyword-only, take a Session and never commit.
They return frozen dataclasses, not ORM objects, so callers hold nothing across sessions.
Writes that may race (get-or-create, trial recording, task claims) are single statements
(`INSERT ... ON CONFLICT DO NOTHING`, `UPDATE ... RETURNING`) that are safe with several
processes on one SQLite file and on PostgreSQL.
"""

from __future__ import annotations

from db.comparisons import ComparisonInfo, PointRow, list_comparisons, record_comparison
from db.connection import (
    SchemaError,
    connect,
    default_db_url,
    normalized_url,
    open_store,
    read_only_url,
    session_scope,
    upgrade,
)
from db.decisions import (
    DecisionInfo,
    RetimeInfo,
    device_ceilings,
    record_ceilings,
    record_decision,
    task_decision,
)
from db.devices import get_or_create_device, get_or_create_environment, known_device_names
from db.faults import (
    Outage,
    StoreUnavailable,
    describe_store_error,
    is_transient,
    retry_store,
    sqlite_path,
    store_timeout_s,
    url_of,
)
from db.history import TrialTimeRow, stored_trials, trial_times
from db.imports import (
    ImportedShape,
    ImportInfo,
    ImportKey,
    imported_configs,
    list_import_device_names,
    list_imports,
    record_import,
)
from db.measurements import adopt_measurements, known_configs
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
from db.releases import (
    NewFile,
    ReleasedFile,
    ReleaseInfo,
    blob,
    find_release_archive,
    find_released_file,
    get_release,
    list_release_device_names,
    list_releases,
    publish_release,
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
    "ImportKey",
    "NewFile",
    "OpenedSweep",
    "Outage",
    "PointRow",
    "RelatedTrialRow",
    "ReleaseInfo",
    "ReleasedFile",
    "RetimeInfo",
    "SchemaError",
    "ShapeCoverage",
    "StoreCounts",
    "StoreUnavailable",
    "SweepInfo",
    "SweepProgress",
    "SweepSummary",
    "TaskInfo",
    "TaskSummary",
    "TaskWinnerRow",
    "TrialInfo",
    "TrialTimeRow",
    "WinnerRow",
    "adopt_measurements",
    "blob",
    "connect",
    "claim_task",
    "create_sweep",
    "default_db_url",
    "describe_store_error",
    "device_ceilings",
    "device_environments",
    "device_trials",
    "end_trial",
    "find_release_archive",
    "find_released_file",
    "finish_task",
    "get_or_create_device",
    "get_or_create_environment",
    "get_release",
    "get_sweep",
    "heartbeat",
    "imported_configs",
    "is_transient",
    "list_comparisons",
    "known_device_names",
    "known_configs",
    "list_device_names",
    "list_import_device_names",
    "list_imports",
    "list_release_device_names",
    "list_releases",
    "list_sweeps",
    "normalized_url",
    "open_store",
    "open_sweep",
    "publish_release",
    "read_only_url",
    "record_ceilings",
    "record_comparison",
    "record_decision",
    "record_held_trial",
    "record_import",
    "record_trial",
    "related_trials",
    "release_tasks",
    "reopen_store_failures",
    "retry_store",
    "session_scope",
    "shape_coverage",
    "sqlite_path",
    "stale_trials",
    "store_counts",
    "store_timeout_s",
    "stored_trials",
    "sweep_key",
    "sweep_progress",
    "sweep_tasks",
    "task_decision",
    "task_trials",
    "task_winners",
    "trial_times",
    "unfinished_tasks",
    "url_of",
    "upgrade",
    "winners",
]
