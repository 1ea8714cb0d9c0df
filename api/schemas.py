"""Request and response models of the HTTP API; those that answer what the store holds are made
from db's dataclasses (`model_of`), so a field is declared once."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_type_hints

from pydantic import BaseModel, Field, create_model

from db import repo
from tuner.core import DEVICE_ARG_PATTERN, DEVICE_NAME_MAX, VLLM_M_GRID, OutDtype
from tuner.inputs.shapes import MODEL_KEY_RE
from tuner.search.registry import DEFAULT_STRATEGY, DEFAULT_TRIALS, STRATEGIES

EngineName = Literal["vllm", "sglang"]  # a file's name spelled as vLLM or SGLang spells it
MAX_INT32 = 2**31 - 1  # bounds keep every value inside the store's 32-bit integer columns


def model_of(name: str, *sources: type, drop: tuple[str, ...] = (), **extra: Any) -> Any:
    """A pydantic model with the fields of `sources` (dataclasses), less `drop`, and `extra`
    (name=(type, default))."""
    fields: dict[str, Any] = {
        field: (kind, ...)
        for source in sources
        for field, kind in get_type_hints(source).items()
        if field not in drop
    }
    return create_model(name, **fields, **extra)


class ShapeFields(BaseModel):
    """A shape: N, K and the weight scales' block shape (null: per-tensor scales)."""

    N: int
    K: int
    block_shape: tuple[int, int] | None


# One (N, K, block_shape) of a device: its M grid, which M have a winner (`m_covered`), and which
# M have only stale trials (another kernel source or Triton major.minor; empty with allow_stale).
ShapeCoverage = model_of(
    "ShapeCoverage",
    repo.ShapeCoverage,
    drop=("m_done", "models", "family", "shape_params"),
    m_covered=(list[int], ...),
    complete=(bool, ...),
    file_name=(str, ...),
)


class Provenance(BaseModel):
    """What current trials match: this service's kernel source hash and Triton major.minor
    (the installed triton; without one, the newest tuned with the current kernel; None: any)."""

    kernel_hash: str
    triton_minor: str | None


class MCoverage(BaseModel):
    """Which of vLLM's 18 tuning-grid M values a file has."""

    grid_present: list[int]
    grid_missing: list[int]
    extra: list[int]
    summary: str


# An environment a device's trials ran in, how many trials ran in it and how many of the served
# winners (one per N, K, block_shape, M) come from it; `current`: its kernel hash and Triton
# major.minor are the current ones.
TunedWith = model_of(
    "TunedWith",
    repo.EnvironmentRow,
    drop=("environment_id",),
    winners=(int, ...),
    current=(bool, ...),
)
# An imported file of a device: its shape, family, label, hash, M keys and their coverage, and
# the launch check `tuner import` ran: `checked_arch` (e.g. 89; None: not checked, as for files
# imported over HTTP) and `cannot_launch` (M -> why; merges leave those entries out, `m_left_out`).
ImportedFile = model_of(
    "ImportedFile",
    repo.ImportInfo,
    drop=("import_id", "configs", "created_at"),
    m_keys=(list[int], ...),
    m_left_out=(list[int], ...),
    coverage=(MCoverage, ...),
    note=(str | None, None),
)
# A sweep's parameters and progress (tasks by state, trials stored), as the store reads them.
SweepStatus = model_of("SweepStatus", repo.SweepInfo, drop=("sweep_key",))


class Device(BaseModel):
    """A device_name key in the store (swept, or with imported files only), with the coverage
    of each swept shape, the versions its files were tuned with (most trials first), its
    imported files, and a `note` when it has only imported files (nothing measured here)."""

    device_name: str
    shapes: list[ShapeCoverage]  # type: ignore[valid-type]
    current: Provenance
    tuned_with: list[TunedWith]  # type: ignore[valid-type]
    imported: list[ImportedFile] = []  # type: ignore[valid-type]
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


# A published release: number, content hash, who published it (and with what), when, its files
# and the summary frozen with it (scope, versions tuned with, skipped shapes).
Release = model_of(
    "Release",
    repo.ReleaseInfo,
    drop=("release_id", "archives", "files"),
    files=(list[ReleaseFile], ...),
)


class ImportRequest(BaseModel):
    """An existing config file to keep as a labelled source: its name and its text."""

    file_name: str = Field(min_length=1, max_length=512, description="vLLM's or SGLang's name.")
    content: str = Field(min_length=1, max_length=1_048_576, description="The file's JSON text.")
    label: str = Field(
        default="imported", min_length=1, max_length=128, description="e.g. `vllm-0.33.0`."
    )


class SweepCreate(BaseModel):
    """A sweep to create for `tuner worker` processes to run: vLLM's config space. `device_name`
    is a device of the store or a GPU model name (`H200`, `NVIDIA H200` and `nvidia_h200` all
    name vLLM's key `NVIDIA_H200`, which the workers claim it with); `model` a key of `tuner
    shapes list`; `tp` may be left out when the model lists one; `m_values` default to vLLM's
    18; `strategy` is a registered search strategy; `trials` the configs per (N, K, M) (not
    grid), vLLM's default included."""

    model_config = {"extra": "forbid"}

    device_name: str = Field(pattern=DEVICE_ARG_PATTERN, max_length=DEVICE_NAME_MAX)
    model: str = Field(pattern=f"^{MODEL_KEY_RE.pattern}$", examples=["qwen3.8-27b"])
    tp: int | None = Field(default=None, ge=1, le=1024)
    m_values: list[Annotated[int, Field(ge=1, le=1_048_576)]] = Field(
        default=list(VLLM_M_GRID), min_length=1, max_length=64
    )
    strategy: str = Field(
        default=DEFAULT_STRATEGY,
        pattern=r"^[a-z][a-z0-9+_\-]{0,31}$",
        # The registry's names when the schema is built: a strategy registered at run time too.
        json_schema_extra=lambda schema: schema.update(enum=list(STRATEGIES)),
    )
    trials: int = Field(default=DEFAULT_TRIALS, ge=1, le=100_000)
    seed: int = Field(default=0, ge=0, le=MAX_INT32)
    out_dtype: OutDtype = OutDtype.bfloat16
