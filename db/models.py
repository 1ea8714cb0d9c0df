"""The store's schema in one module: the declarative base with its naming convention, the
timestamp type and clock of the store, and every table: devices, environments, sweeps, tasks,
trials, imports, retimes, decisions, comparisons, releases with their files and the
blobs of their bytes (SQLAlchemy 2 ORM)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from tuner.core import CONFIG_KEYS


def utcnow() -> datetime:
    """The current time as a timezone-aware UTC datetime."""
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python.

    PostgreSQL stores `timestamp with time zone`. SQLite has no time zones: the value is
    stored as naive UTC text and read back with `tzinfo=UTC`, so comparisons in SQL and in
    Python agree on both. Naive datetimes are refused rather than guessed at.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"naive datetime {value!r}: the store takes timezone-aware UTC")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: Any, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    """Declarative base of every table; its metadata carries the naming convention."""

    type_annotation_map = {float: sa.Float}  # not SQLAlchemy's Double: the schema's FLOAT
    # Constraint names must be deterministic for Alembic's batch mode on SQLite.
    metadata = sa.MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class TaskState(StrEnum):
    """Where a task stands in the queue, as stored in `tasks.state`."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class Device(Base):
    """A device_name key as vLLM spells it (`NVIDIA_L20`), or `TRITON_INTERPRETER`."""

    __tablename__ = "devices"

    device_id: Mapped[int] = mapped_column(primary_key=True)
    device_name: Mapped[str] = mapped_column(sa.String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (sa.UniqueConstraint("device_name"),)


# What tells two environments apart (with the device): not kernel_source and vllm, since the
# kernel hash already differs between sources.
ENVIRONMENT_KEY = tuple(
    "gpu_name compute_capability driver cuda torch triton tuner kernel_hash".split()
)


class Environment(Base):
    """The software and hardware a trial ran on; "" stands for a value that does not apply."""

    __tablename__ = "environments"

    environment_id: Mapped[int] = mapped_column(primary_key=True)
    device_id: Mapped[int] = mapped_column(sa.ForeignKey("devices.device_id"))
    gpu_name: Mapped[str] = mapped_column(sa.String(128))
    compute_capability: Mapped[str] = mapped_column(sa.String(16))
    driver: Mapped[str] = mapped_column(sa.String(64))
    cuda: Mapped[str] = mapped_column(sa.String(64))
    torch: Mapped[str] = mapped_column(sa.String(64))
    triton: Mapped[str] = mapped_column(sa.String(64))
    tuner: Mapped[str] = mapped_column(sa.String(64))
    kernel_hash: Mapped[str] = mapped_column(sa.String(128))
    # "builtin" (the tuner's kernel) or "vllm" (the installed vLLM's); vLLM's version or "".
    # Not in the unique key: the kernel hash already differs between sources.
    kernel_source: Mapped[str] = mapped_column(
        sa.String(16), default="builtin", server_default="builtin"
    )
    vllm: Mapped[str] = mapped_column(sa.String(64), default="", server_default="")

    __table_args__ = (sa.UniqueConstraint("device_id", *ENVIRONMENT_KEY),)


# A shape without block scales (per-tensor; None in every dataclass of db) is stored as
# block_n = block_k = 0: the columns stay NOT NULL, since NULLs never collide in a unique key
# (imports' upsert would add duplicates). The two functions below are the only places the
# encoding is written or read.


def block_columns(block_shape: tuple[int, int] | None) -> tuple[int, int]:
    """The (block_n, block_k) columns of [group_n, group_k] of the weight scales; (0, 0) for
    None (per-tensor scales)."""
    return (0, 0) if block_shape is None else (int(block_shape[0]), int(block_shape[1]))


def block_shape_of(block_n: int, block_k: int) -> tuple[int, int] | None:
    """The block shape of stored (block_n, block_k) columns: None for (0, 0) (per-tensor)."""
    return None if (block_n, block_k) == (0, 0) else (int(block_n), int(block_k))


def config_of(row: Any, prefix: str = "") -> dict[str, int]:
    """vLLM's six config keys of a row (an ORM object, a mapping), named with `prefix`."""
    if isinstance(row, Mapping):
        return {name: row[prefix + name] for name in CONFIG_KEYS}
    return {name: getattr(row, prefix + name) for name in CONFIG_KEYS}


def take(cls: Any, row: Any, **given: Any) -> Any:
    """A dataclass `cls` of the fields `given`, the others read from `row` by name (an ORM
    object's attributes or a mapping's keys) where it has them."""
    names = [f.name for f in fields(cls) if f.name not in given]
    if isinstance(row, Mapping):
        return cls(**{name: row[name] for name in names if name in row}, **given)
    return cls(**{name: getattr(row, name) for name in names if hasattr(row, name)}, **given)


class Sweep(Base):
    """One tuning command: a set of (N, K) shapes over an M grid on one device_name.

    `sweep_key` is the sha256 of the canonical JSON of all parameters, so that re-running
    the same command finds the same sweep. `block_n`/`block_k` are the weight scales' block
    shape; 0/0 for a family without block scales (`block_columns`, `block_shape_of`).
    """

    __tablename__ = "sweeps"

    sweep_id: Mapped[int] = mapped_column(primary_key=True)
    sweep_key: Mapped[str] = mapped_column(sa.String(64))
    device_id: Mapped[int] = mapped_column(sa.ForeignKey("devices.device_id"))
    model: Mapped[str] = mapped_column(sa.String(256))
    tp: Mapped[int] = mapped_column()
    strategy: Mapped[str] = mapped_column(sa.String(64))
    budget: Mapped[int] = mapped_column()
    space: Mapped[str] = mapped_column(sa.String(128))
    seed: Mapped[int] = mapped_column()
    m_values: Mapped[list[int]] = mapped_column(sa.JSON)
    out_dtype: Mapped[str] = mapped_column(sa.String(16))
    block_n: Mapped[int] = mapped_column()
    block_k: Mapped[int] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (sa.UniqueConstraint("sweep_key"),)


class Task(Base):
    """One (N, K, M) of a sweep for one kernel family: the unit a worker claims with a lease."""

    __tablename__ = "tasks"

    task_id: Mapped[int] = mapped_column(primary_key=True)
    sweep_id: Mapped[int] = mapped_column(sa.ForeignKey("sweeps.sweep_id", ondelete="CASCADE"))
    # The kernel family (tuner.kernels.registry) and its dimensions beyond N and K, as
    # `name=value,...` ("" for none). Every writer names the family (`db.repo.create_sweep`);
    # rows stored before families existed got theirs from the migration that added the column.
    family: Mapped[str] = mapped_column(sa.String(32))
    shape_params: Mapped[str] = mapped_column(sa.String(128), default="", server_default="")
    N: Mapped[int] = mapped_column()
    K: Mapped[int] = mapped_column()
    M: Mapped[int] = mapped_column()
    state: Mapped[str] = mapped_column(sa.String(16), default=TaskState.PENDING)
    worker_id: Mapped[str | None] = mapped_column(sa.String(256))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    attempts: Mapped[int] = mapped_column(default=0)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(sa.Text)
    # The config a worker is measuring right now (vLLM keys), and since when: if the worker
    # dies or hangs, the sweep records that config as crashed or timed out.
    in_flight_config: Mapped[dict[str, int] | None] = mapped_column(sa.JSON)
    in_flight_since: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        sa.UniqueConstraint("sweep_id", "N", "K", "M"),  # one family per sweep
        sa.CheckConstraint("state IN ('pending', 'running', 'done', 'failed')", name="state"),
        sa.Index(None, "state", "lease_expires_at"),
    )


class TaskConfig:
    """Columns of every row that is about one config of one task (trials, retimes, decisions):
    the task, the environment it was timed in, and vLLM's six config keys."""

    task_id: Mapped[int] = mapped_column(sa.ForeignKey("tasks.task_id", ondelete="CASCADE"))
    environment_id: Mapped[int] = mapped_column(sa.ForeignKey("environments.environment_id"))
    BLOCK_SIZE_M: Mapped[int] = mapped_column()
    BLOCK_SIZE_N: Mapped[int] = mapped_column()
    BLOCK_SIZE_K: Mapped[int] = mapped_column()
    GROUP_SIZE_M: Mapped[int] = mapped_column()
    num_warps: Mapped[int] = mapped_column()
    num_stages: Mapped[int] = mapped_column()

    @property
    def config(self) -> dict[str, int]:
        """vLLM's six config keys of the row, in vLLM's order."""
        return config_of(self)


class Trial(TaskConfig, Base):
    """One config timed (or failed) for one task, on one environment."""

    __tablename__ = "trials"

    trial_id: Mapped[int] = mapped_column(primary_key=True)
    is_default: Mapped[bool] = mapped_column(default=False)
    status: Mapped[str] = mapped_column(sa.String(32))
    latency_us: Mapped[float | None] = mapped_column()
    p20_us: Mapped[float | None] = mapped_column()
    p80_us: Mapped[float | None] = mapped_column()
    rel_error: Mapped[float | None] = mapped_column()
    error: Mapped[str | None] = mapped_column(sa.Text)
    measure_s: Mapped[float | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (sa.UniqueConstraint("task_id", *CONFIG_KEYS),)


class ImportedFile(Base):
    """The configs of an existing file (for example one shipped with vLLM), kept as a labelled
    source for one device and shape. Never measured here: a merge uses its entries only for M
    without a measured winner, and never those that cannot launch on the device.

    `block_n`/`block_k` are 0/0 for a file without block scales (`block_columns`): never NULL,
    so that the unique key, and the upsert on it, sees two imports of such a file as one."""

    __tablename__ = "imports"

    import_id: Mapped[int] = mapped_column(primary_key=True)
    device_id: Mapped[int] = mapped_column(sa.ForeignKey("devices.device_id"))
    N: Mapped[int] = mapped_column()
    K: Mapped[int] = mapped_column()
    block_n: Mapped[int] = mapped_column()
    block_k: Mapped[int] = mapped_column()
    label: Mapped[str] = mapped_column(sa.String(128))
    file_name: Mapped[str] = mapped_column(sa.String(512))
    sha256: Mapped[str] = mapped_column(sa.String(64))
    # M (decimal string, as in the file) -> config with the file's keys (AMD keys kept).
    configs: Mapped[dict[str, dict[str, int]]] = mapped_column(sa.JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The launch check of `tuner import`: the compute capability the entries were
    # compiled for (e.g. 89; NULL: not checked), and M (decimal string) -> why that entry cannot
    # launch there. Merges leave those entries out.
    checked_arch: Mapped[int | None] = mapped_column()
    cannot_launch: Mapped[dict[str, str]] = mapped_column(
        sa.JSON, default=dict, server_default="{}"
    )
    # The kernel family the file's name parses as (`tuner.kernels.registry.family_of_file`);
    # every writer names it (`db.repo.record_import`), older rows got theirs from the
    # migration that added the column.
    family: Mapped[str] = mapped_column(sa.String(32))
    # The family's dimensions beyond N and K that the file's name carries, as tasks store them
    # (`tuner.kernels.shape.store_columns`): "E=8" for a fused-MoE file, "" for none. With
    # the family in the unique key: one (N, K, block_shape, label) may hold a file of each.
    shape_params: Mapped[str] = mapped_column(sa.String(128), server_default="")

    __table_args__ = (
        sa.UniqueConstraint(
            "device_id", "family", "shape_params", "N", "K", "block_n", "block_k", "label"
        ),
    )


class Retime(TaskConfig, Base):
    """One config of a task re-timed interleaved with the other finalists and the default config
    (A B A B ...) before the task's winner is declared. Latencies in
    microseconds over `rounds` interleaved rounds: median, 20th and 80th percentile."""

    __tablename__ = "retimes"

    retime_id: Mapped[int] = mapped_column(primary_key=True)
    is_default: Mapped[bool] = mapped_column(default=False)
    rounds: Mapped[int] = mapped_column()
    latency_us: Mapped[float] = mapped_column()
    p20_us: Mapped[float] = mapped_column()
    p80_us: Mapped[float] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (sa.UniqueConstraint("task_id", *CONFIG_KEYS),)


class Decision(TaskConfig, Base):
    """The config a task keeps after the re-timing, and why: at most one per task.

    `latency_us` and `default_latency_us` are re-timed medians in microseconds; `spread_us` is
    the measured noise the winner had to beat the runner-up by; `runner_up` holds vLLM's keys of
    the second-fastest re-timed config (None when there was none).
    """

    __tablename__ = "decisions"

    decision_id: Mapped[int] = mapped_column(primary_key=True)
    latency_us: Mapped[float] = mapped_column()
    default_latency_us: Mapped[float | None] = mapped_column()
    runner_up: Mapped[dict[str, int] | None] = mapped_column(sa.JSON)
    spread_us: Mapped[float] = mapped_column()
    kept: Mapped[str] = mapped_column(sa.String(16))
    note: Mapped[str] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The task's re-timed configs, fastest first (then as recorded); read with the decision.
    retimes: Mapped[list[Retime]] = relationship(
        primaryjoin="foreign(Retime.task_id) == Decision.task_id",
        order_by="(Retime.latency_us, Retime.retime_id)",
        viewonly=True,
        lazy="selectin",
    )

    __table_args__ = (
        sa.UniqueConstraint("task_id"),
        sa.CheckConstraint("kept IN ('fastest', 'default', 'simpler')", name="kept"),
    )


class Comparison(Base):
    """One `tuner compare` run: a model's shapes timed on one device with every
    kernel vLLM could run for them; `verdicts` holds its decode and prefill lines."""

    __tablename__ = "comparisons"

    comparison_id: Mapped[int] = mapped_column(primary_key=True)
    device_id: Mapped[int] = mapped_column(sa.ForeignKey("devices.device_id"))
    environment_id: Mapped[int] = mapped_column(sa.ForeignKey("environments.environment_id"))
    model: Mapped[str] = mapped_column(sa.String(64))
    tp: Mapped[int] = mapped_column()
    out_dtype: Mapped[str] = mapped_column(sa.String(16))
    verdicts: Mapped[list[str]] = mapped_column(sa.JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ComparisonPoint(Base):
    """One kernel at one (N, K, M) of a comparison: ok (checked against the float64 reference,
    then timed interleaved with the others), failed or unavailable, with its note."""

    __tablename__ = "comparison_points"

    point_id: Mapped[int] = mapped_column(primary_key=True)
    comparison_id: Mapped[int] = mapped_column(
        sa.ForeignKey("comparisons.comparison_id", ondelete="CASCADE")
    )
    N: Mapped[int] = mapped_column()
    K: Mapped[int] = mapped_column()
    M: Mapped[int] = mapped_column()
    backend: Mapped[str] = mapped_column(sa.String(32))
    status: Mapped[str] = mapped_column(sa.String(16))
    latency_us: Mapped[float | None] = mapped_column()
    p20_us: Mapped[float | None] = mapped_column()
    p80_us: Mapped[float | None] = mapped_column()
    note: Mapped[str] = mapped_column(sa.Text)

    __table_args__ = (
        sa.UniqueConstraint("comparison_id", "N", "K", "M", "backend"),
        sa.CheckConstraint("status IN ('ok', 'failed', 'unavailable')", name="status"),
    )


class Blob(Base):
    """Bytes of a released file or archive, stored once per content."""

    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    size: Mapped[int] = mapped_column()
    content: Mapped[bytes] = mapped_column()


class Release(Base):
    """A device's files frozen as published: numbered 1, 2, ... per device, never
    changed. `content_sha256` hashes the sorted (file name, sha256) list; `archives` maps an
    engine ("vllm", "sglang") to its zip's sha256; `summary` holds the scope, coverage, merge
    notes, skipped shapes and the versions the files were tuned with."""

    __tablename__ = "releases"

    release_id: Mapped[int] = mapped_column(primary_key=True)
    device_id: Mapped[int] = mapped_column(sa.ForeignKey("devices.device_id"))
    number: Mapped[int] = mapped_column()
    content_sha256: Mapped[str] = mapped_column(sa.String(64))
    archives: Mapped[dict[str, str]] = mapped_column(sa.JSON)
    summary: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    created_by: Mapped[str] = mapped_column(sa.String(256))
    reason: Mapped[str] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (sa.UniqueConstraint("device_id", "number"),)


class ReleaseFile(Base):
    """One file of a release, named as vLLM looks it up; its bytes are the blob `sha256`.
    `block_n`/`block_k` are 0/0 for a file without block scales (`block_columns`)."""

    __tablename__ = "release_files"

    release_file_id: Mapped[int] = mapped_column(primary_key=True)
    release_id: Mapped[int] = mapped_column(sa.ForeignKey("releases.release_id"))
    file_name: Mapped[str] = mapped_column(sa.String(512))
    family: Mapped[str] = mapped_column(sa.String(32))
    shape_params: Mapped[str] = mapped_column(sa.String(128))
    N: Mapped[int] = mapped_column()
    K: Mapped[int] = mapped_column()
    block_n: Mapped[int] = mapped_column()
    block_k: Mapped[int] = mapped_column()
    sha256: Mapped[str] = mapped_column(sa.ForeignKey("blobs.sha256"))
    # m_keys, m_imported, m_missing, partial, notes, warnings of the merge.
    detail: Mapped[dict[str, Any]] = mapped_column(sa.JSON)

    __table_args__ = (sa.UniqueConstraint("release_id", "file_name"),)


class AbTest(Base):
    """One `tuner ab`: two serving arms compared on named workloads. `key` hashes `spec` (arms,
    workloads, sizes, client, seed), so the same command finds its A/B again and resumes it;
    `release_id` is the release whose files the candidate read, if any; `result` holds the
    estimates per workload and metric once it finished, `verdict` the overall one ("faster",
    "slower", "within noise")."""

    __tablename__ = "ab_tests"

    ab_test_id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(sa.String(64))
    device_id: Mapped[int | None] = mapped_column(sa.ForeignKey("devices.device_id"))
    release_id: Mapped[int | None] = mapped_column(sa.ForeignKey("releases.release_id"))
    spec: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    result: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    verdict: Mapped[str | None] = mapped_column(sa.String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (sa.UniqueConstraint("key"),)


class AbRun(Base):
    """One client run of an A/B: its block, arm and workload, the seed of its prompts, the
    metrics read from it and the client's whole result JSON."""

    __tablename__ = "ab_runs"

    ab_run_id: Mapped[int] = mapped_column(primary_key=True)
    ab_test_id: Mapped[int] = mapped_column(
        sa.ForeignKey("ab_tests.ab_test_id", ondelete="CASCADE")
    )
    block: Mapped[int] = mapped_column()
    arm: Mapped[str] = mapped_column(sa.String(16))
    workload: Mapped[str] = mapped_column(sa.String(32))
    seed: Mapped[int] = mapped_column()
    metrics: Mapped[dict[str, float]] = mapped_column(sa.JSON)
    client_result: Mapped[dict[str, Any]] = mapped_column(sa.JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (sa.UniqueConstraint("ab_test_id", "block", "arm", "workload"),)
