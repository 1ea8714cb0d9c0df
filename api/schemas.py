"""Response models of the HTTP API."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_type_hints

from pydantic import BaseModel, Field, create_model

from db.repo import SweepInfo, SweepProgress
from tuner.core import DEVICE_ARG_PATTERN, DEVICE_NAME_MAX, VLLM_M_GRID, OutDtype
from tuner.inputs.shapes import MODEL_KEY_RE
from tuner.search.registry import DEFAULT_STRATEGY, DEFAULT_TRIALS, STRATEGIES

# A file's name spelled as vLLM or SGLang spells it (`?engine=`).
EngineName = Literal["vllm", "sglang"]


class Health(BaseModel):
    """The service is up; which version and which store (password masked)."""

    status: Literal["ok"]
    version: str
    store: str


class ShapeFields(BaseModel):
    """A shape: N, K and the weight scales' block shape (null: per-tensor scales)."""

    N: int
    K: int
    block_shape: tuple[int, int] | None


class ShapeCoverage(ShapeFields):
    """One (N, K, block_shape) of a device: its M grid, which M have a winner, and which M have
    only stale trials (another kernel source or Triton major.minor; empty with allow_stale)."""

    m_requested: list[int]
    m_covered: list[int]
    complete: bool
    file_name: str
    m_stale: list[int] = []


class Provenance(BaseModel):
    """What current trials match: this service's kernel source hash and Triton major.minor
    (the installed triton; without one, the newest tuned with the current kernel; None: any)."""

    kernel_hash: str
    triton_minor: str | None


class TunedWith(BaseModel):
    """An environment a device's trials ran in: GPU, driver and versions, kernel source hash;
    how many trials ran in it and how many of the served winners (one per N, K, block_shape, M)
    come from it; `current` when its kernel hash and Triton major.minor are the current ones."""

    gpu_name: str
    compute_capability: str
    driver: str
    cuda: str
    torch: str
    triton: str
    tuner: str
    kernel_hash: str
    trials: int
    winners: int
    current: bool


class DeviceImport(ShapeFields):
    """One file imported for a device (`tuner import`, POST /devices/{d}/imports): where it
    came from (`label`), its name and shape, its M keys, and the M whose entries the launch
    check left out (they cannot launch on the device; GET /devices/{d}/imports says why)."""

    label: str
    file_name: str
    m_keys: list[int]
    m_left_out: list[int] = []


class Device(BaseModel):
    """A device_name key in the store (swept, or with imported files only), with the coverage
    of each swept shape, the versions its files were tuned with (most trials first), its
    imported files, and a `note` when it has only imported files (nothing measured here)."""

    device_name: str
    shapes: list[ShapeCoverage]
    current: Provenance
    tuned_with: list[TunedWith]
    imported: list[DeviceImport] = []
    note: str | None = None


class ConfigFile(ShapeFields):
    """One merged file of a device: its name as vLLM looks it up, hash and merge report (a
    release's file `detail`, with defaults for what an older release did not record)."""

    file_name: str
    sha256: str
    m_keys: list[int] = []
    partial: bool = False
    m_missing: list[int] = []
    notes: list[str] = []
    warnings: list[str] = []
    m_imported: list[int] = []


class SkippedShape(ShapeFields):
    """A shape with no file, and why (usually: M without a winner yet)."""

    reason: str
    m_missing: list[int]


class DeviceConfigs(BaseModel):
    """All files of a device, and the shapes left out; `engine` is the file-name spelling."""

    device_name: str
    files: list[ConfigFile]
    skipped: list[SkippedShape]
    engine: EngineName = "vllm"
    engine_note: str | None = None
    release: int | None = None


class ReleaseFile(BaseModel):
    """One file of a release: vLLM's name, sha256 and size of its bytes, its M keys."""

    file_name: str
    sha256: str
    size: int
    m_keys: list[int] = []
    m_imported: list[int] = []


class Release(BaseModel):
    """A published release: number, content hash, who published it (and with what), when,
    its files and the summary frozen with it (scope, versions tuned with, skipped shapes)."""

    device_name: str
    number: int
    content_sha256: str
    created_at: datetime
    created_by: str
    reason: str
    files: list[ReleaseFile]
    summary: dict[str, Any]


class MCoverage(BaseModel):
    """Which of vLLM's 18 tuning-grid M values a file has."""

    grid_present: list[int]
    grid_missing: list[int]
    extra: list[int]
    summary: str


class ImportRequest(BaseModel):
    """An existing config file to keep as a labelled source: its name and its text."""

    file_name: str = Field(
        min_length=1,
        max_length=512,
        description="vLLM's (or SGLang's) file name, e.g. "
        "`N=576,K=7168,device_name=NVIDIA_L20,dtype=fp8_w8a8,"
        "block_shape=[128,128].json`",
    )
    content: str = Field(min_length=1, max_length=1_048_576, description="The file's JSON text.")
    label: str = Field(
        default="imported",
        min_length=1,
        max_length=128,
        description="Where the file comes from, e.g. `vllm-0.33.0`.",
    )


class ImportedFile(ShapeFields):
    """An imported file of a device: its shape, label, hash, M keys and their coverage, and the
    launch check `tuner import` ran: `checked_arch` (compute capability as an int, e.g. 89;
    None: not checked, as for files imported over HTTP) and `cannot_launch` (M -> why its entry
    cannot launch on the device; merges leave those entries out)."""

    device_name: str
    family: str = Field(description="The kernel family whose name the file has, e.g. `dense`.")
    shape_params: str = Field(
        description="The family's dimensions beyond N and K that the name carries, "
        '`name=value,...` (e.g. `E=8` for a fused-MoE file); "" for none.'
    )
    label: str
    file_name: str
    sha256: str
    m_keys: list[int]
    coverage: MCoverage
    note: str | None = None
    checked_arch: int | None = None
    cannot_launch: dict[int, str] = Field(default_factory=dict)


# Bounds keep every value inside the store's 32-bit integer columns.
MAX_INT32 = 2**31 - 1
MValue = Annotated[int, Field(ge=1, le=1_048_576)]


class SweepCreate(BaseModel):
    """A sweep to create for `tuner worker` processes to run: vLLM's config space."""

    model_config = {"extra": "forbid"}

    device_name: str = Field(
        pattern=DEVICE_ARG_PATTERN,
        max_length=DEVICE_NAME_MAX,
        examples=["NVIDIA_L20"],
        description="The device as `tuner sweep --device` names it: a "
        "device of the store, or a GPU model name (`H200`, `NVIDIA H200` "
        "and `nvidia_h200` all name vLLM's key `NVIDIA_H200`, which the "
        "workers claim it with).",
    )
    model: str = Field(
        pattern=f"^{MODEL_KEY_RE.pattern}$",
        examples=["qwen3.8-27b"],
        description="Model key of `tuner shapes list`.",
    )
    tp: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        examples=[2],
        description="Tensor-parallel size; omit when the model lists one.",
    )
    m_values: list[MValue] = Field(
        default=list(VLLM_M_GRID),
        min_length=1,
        max_length=64,
        examples=[[1, 16, 32, 2048, 4096]],
        description="Batch sizes M to tune; default vLLM's 18 batch "
        "sizes, 1 to 4096, as `tuner sweep` without --m.",
    )
    strategy: str = Field(
        default=DEFAULT_STRATEGY,
        pattern=r"^[a-z][a-z0-9+_\-]{0,31}$",
        examples=[DEFAULT_STRATEGY],
        description="A registered search strategy, as `tuner sweep --strategy` names it.",
        # The registry's names when the schema is built: a strategy registered at run time too.
        json_schema_extra=lambda schema: schema.update(enum=list(STRATEGIES)),
    )
    trials: int = Field(
        default=DEFAULT_TRIALS,
        ge=1,
        le=100_000,
        description="Configs per (N, K, M) (not grid), vLLM's default included.",
    )
    seed: int = Field(default=0, ge=0, le=MAX_INT32)
    out_dtype: OutDtype = OutDtype.bfloat16


# A sweep's parameters and progress (tasks by state, trials stored), as the store reads them.
SWEEP_FIELDS: dict[str, Any] = {
    name: (kind, ...)
    for source in (SweepInfo, SweepProgress)
    for name, kind in get_type_hints(source).items()
    if name != "sweep_key"
}
SweepStatus = create_model("SweepStatus", **SWEEP_FIELDS)


class ComparisonPointOut(BaseModel):
    """One kernel at one (N, K, M) of a `tuner compare` run."""

    N: int
    K: int
    M: int
    backend: str = Field(
        description="triton-tuned, triton-default, torch-scaled_mm, "
        "torch-dequant-cpu, vllm-deepgemm, vllm-cutlass, vllm-marlin or "
        "vllm-humming."
    )
    status: Literal["ok", "failed", "unavailable"]
    latency_us: float | None = Field(
        description="Median of the interleaved samples, microseconds; null unless ok."
    )
    p20_us: float | None
    p80_us: float | None
    note: str = Field(description="The Triton config, or why it failed or was not timed.")


class ComparisonOut(BaseModel):
    """One `tuner compare` run: where it ran, its verdict lines and every point."""

    comparison_id: int
    device_name: str
    gpu_name: str
    model: str
    tp: int
    out_dtype: str
    created_at: datetime
    verdicts: list[str]
    points: list[ComparisonPointOut]
    kernel_source: str = Field(
        description="Whose Triton kernel the triton-tuned and "
        "triton-default points timed: builtin or vllm."
    )
    vllm: str = Field(description="vLLM's version when kernel_source is vllm, else empty.")
