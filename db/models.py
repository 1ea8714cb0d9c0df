"""The store's tables: devices, environments, sweeps, tasks, trials, imports, retimes, decisions,
ceilings, comparisons, releases with their files and the blobs of their bytes (SQLAlchemy 2
ORM)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

# The comparison and release tables join Base.metadata wherever the models are loaded.
import db.comparison_models  # noqa: F401
import db.release_models  # noqa: F401
from db.base import Base, UTCDateTime, utcnow
from tuner.core import CONFIG_KEYS

TASK_STATES: tuple[str, ...] = ("pending", "running", "done", "failed")

# Why a decision kept its config: the fastest re-timed config beat the runner-up
# by more than the spread; or it did not, and the default or a simpler config was kept.
DECISION_KEPT: tuple[str, ...] = ("fastest", "default", "simpler")

# The kernel family of tasks that name none (tuner.kernels.registry.DEFAULT_FAMILY; db imports
# nothing of tuner).
DEFAULT_FAMILY = "dense"

class Device(Base):
    """A device_name key as vLLM spells it (`NVIDIA_L20`), or `TRITON_INTERPRETER`."""

    __tablename__ = "devices"

    device_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_name: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (UniqueConstraint("device_name"),)


class Environment(Base):
    """The software and hardware a trial ran on; "" stands for a value that does not apply."""

    __tablename__ = "environments"

    environment_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.device_id"))
    gpu_name: Mapped[str] = mapped_column(String(128))
    compute_capability: Mapped[str] = mapped_column(String(16))
    driver: Mapped[str] = mapped_column(String(64))
    cuda: Mapped[str] = mapped_column(String(64))
    torch: Mapped[str] = mapped_column(String(64))
    triton: Mapped[str] = mapped_column(String(64))
    tuner: Mapped[str] = mapped_column(String(64))
    kernel_hash: Mapped[str] = mapped_column(String(128))
    # "builtin" (the tuner's kernel) or "vllm" (the installed vLLM's); vLLM's version or "".
    # Not in the unique key: the kernel hash already differs between sources.
    kernel_source: Mapped[str] = mapped_column(String(16), default="builtin",
                                               server_default="builtin")
    vllm: Mapped[str] = mapped_column(String(64), default="", server_default="")

    __table_args__ = (
        UniqueConstraint(
            "device_id",
            "gpu_name",
            "compute_capability",
            "driver",
            "cuda",
            "torch",
            "triton",
            "tuner",
            "kernel_hash",
        ),
    )


class Sweep(Base):
    """One tuning command: a set of (N, K) shapes over an M grid on one device_name.

    `sweep_key` is the sha256 of the canonical JSON of all parameters, so that re-running
    the same command finds the same sweep.
    """

    __tablename__ = "sweeps"

    sweep_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_key: Mapped[str] = mapped_column(String(64))
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.device_id"))
    model: Mapped[str] = mapped_column(String(256))
    tp: Mapped[int] = mapped_column(Integer)
    strategy: Mapped[str] = mapped_column(String(64))
    budget: Mapped[int] = mapped_column(Integer)
    space: Mapped[str] = mapped_column(String(128))
    seed: Mapped[int] = mapped_column(Integer)
    m_values: Mapped[list[int]] = mapped_column(JSON)
    out_dtype: Mapped[str] = mapped_column(String(16))
    block_n: Mapped[int] = mapped_column(Integer)
    block_k: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (UniqueConstraint("sweep_key"),)


class Task(Base):
    """One (N, K, M) of a sweep for one kernel family: the unit a worker claims with a lease."""

    __tablename__ = "tasks"

    task_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.sweep_id", ondelete="CASCADE"))
    # The kernel family (tuner.kernels.registry) and its dimensions beyond N and K, as
    # `name=value,...` ("" for the dense GEMM); a row that names no family is "dense".
    family: Mapped[str] = mapped_column(String(32), default=DEFAULT_FAMILY,
                                        server_default=DEFAULT_FAMILY)
    shape_params: Mapped[str] = mapped_column(String(128), default="", server_default="")
    N: Mapped[int] = mapped_column(Integer)
    K: Mapped[int] = mapped_column(Integer)
    M: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), default="pending")
    worker_id: Mapped[str | None] = mapped_column(String(256))
    lease_expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    error: Mapped[str | None] = mapped_column(Text)
    # The config a worker is measuring right now (vLLM keys), and since when: if the worker
    # dies or hangs, the sweep records that config as crashed or timed out.
    in_flight_config: Mapped[dict[str, int] | None] = mapped_column(JSON)
    in_flight_since: Mapped[datetime | None] = mapped_column(UTCDateTime())

    __table_args__ = (
        UniqueConstraint("sweep_id", "N", "K", "M"),  # one family per sweep
        CheckConstraint("state IN ('pending', 'running', 'done', 'failed')", name="state"),
        Index(None, "state", "lease_expires_at"),
    )


class TaskConfig:
    """Columns of every row that is about one config of one task (trials, retimes, decisions):
    the task, the environment it was timed in, and vLLM's six config keys."""

    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.task_id", ondelete="CASCADE"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.environment_id"))
    BLOCK_SIZE_M: Mapped[int] = mapped_column(Integer)
    BLOCK_SIZE_N: Mapped[int] = mapped_column(Integer)
    BLOCK_SIZE_K: Mapped[int] = mapped_column(Integer)
    GROUP_SIZE_M: Mapped[int] = mapped_column(Integer)
    num_warps: Mapped[int] = mapped_column(Integer)
    num_stages: Mapped[int] = mapped_column(Integer)


class Trial(TaskConfig, Base):
    """One config timed (or failed) for one task, on one environment."""

    __tablename__ = "trials"

    trial_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    is_default: Mapped[bool] = mapped_column(default=False)
    status: Mapped[str] = mapped_column(String(32))
    latency_us: Mapped[float | None] = mapped_column(Float)
    p20_us: Mapped[float | None] = mapped_column(Float)
    p80_us: Mapped[float | None] = mapped_column(Float)
    rel_error: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Text)
    measure_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (UniqueConstraint("task_id", *CONFIG_KEYS),)


class ImportedFile(Base):
    """The configs of an existing file (for example one shipped with vLLM), kept as a labelled
    source for one device and shape. Never measured here: a merge uses its entries only for M
    without a measured winner, and never those that cannot launch on the device."""

    __tablename__ = "imports"

    import_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.device_id"))
    N: Mapped[int] = mapped_column(Integer)
    K: Mapped[int] = mapped_column(Integer)
    block_n: Mapped[int] = mapped_column(Integer)
    block_k: Mapped[int] = mapped_column(Integer)
    label: Mapped[str] = mapped_column(String(128))
    file_name: Mapped[str] = mapped_column(String(512))
    sha256: Mapped[str] = mapped_column(String(64))
    # M (decimal string, as in the file) -> config with the file's keys (AMD keys kept).
    configs: Mapped[dict[str, dict[str, int]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # The launch check of `tuner import`: the compute capability the entries were
    # compiled for (e.g. 89; NULL: not checked), and M (decimal string) -> why that entry cannot
    # launch there. Merges leave those entries out.
    checked_arch: Mapped[int | None] = mapped_column(Integer)
    cannot_launch: Mapped[dict[str, str]] = mapped_column(JSON, default=dict, server_default="{}")
    # The kernel family the file's name parses as (`tuner.kernels.registry.family_of_file`).
    family: Mapped[str] = mapped_column(String(32), default=DEFAULT_FAMILY,
                                        server_default=DEFAULT_FAMILY)

    __table_args__ = (UniqueConstraint("device_id", "N", "K", "block_n", "block_k", "label"),)


class Retime(TaskConfig, Base):
    """One config of a task re-timed interleaved with the other finalists and the default config
    (A B A B ...) before the task's winner is declared. Latencies in
    microseconds over `rounds` interleaved rounds: median, 20th and 80th percentile."""

    __tablename__ = "retimes"

    retime_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    is_default: Mapped[bool] = mapped_column(default=False)
    rounds: Mapped[int] = mapped_column(Integer)
    latency_us: Mapped[float] = mapped_column(Float)
    p20_us: Mapped[float] = mapped_column(Float)
    p80_us: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (UniqueConstraint("task_id", *CONFIG_KEYS),)


class Decision(TaskConfig, Base):
    """The config a task keeps after the re-timing, and why: at most one per task.

    `latency_us` and `default_latency_us` are re-timed medians in microseconds; `spread_us` is
    the measured noise the winner had to beat the runner-up by; `runner_up` holds vLLM's keys of
    the second-fastest re-timed config (None when there was none).
    """

    __tablename__ = "decisions"

    decision_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    latency_us: Mapped[float] = mapped_column(Float)
    default_latency_us: Mapped[float | None] = mapped_column(Float)
    runner_up: Mapped[dict[str, int] | None] = mapped_column(JSON)
    spread_us: Mapped[float] = mapped_column(Float)
    kept: Mapped[str] = mapped_column(String(16))
    note: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (
        UniqueConstraint("task_id"),
        CheckConstraint("kept IN ('fastest', 'default', 'simpler')", name="kept"),
    )


class Ceiling(Base):
    """A ceiling measured on one environment's GPU, e.g. `copy_gbps` (a large
    device-to-device copy, GB/s) or `fp8_mm_tflops` (torch's FP8 matrix product, TFLOP/s); the
    unit is the name's suffix. Every measurement is kept; readers take the latest per name."""

    __tablename__ = "ceilings"

    ceiling_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.environment_id"))
    name: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
