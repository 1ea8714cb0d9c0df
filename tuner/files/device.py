"""The one path from the store to a device's files: which trials count (provenance scope),
winners, coverage and imports read in one session, then the merge and its notes.

`tuner export`, `verify`, `mounts`, the HTML report and every HTTP route read a device through
`read_device` (the store's view) or `device_files` (that view merged into files); none of them
re-assembles the pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sqlalchemy.orm import Session

from db import repo
from tuner.files.engine_folders import DEFAULT_ENGINE_VERSIONS
from tuner.files.merge import DeviceFiles, SkippedShape, build_device_files, entries_left_out
from tuner.files.mounts import (
    PULL_FORMATS,
    MountRequest,
    release_request,
    render_mounts,
    versions_line,
)
from tuner.files.provenance import Provenance, current_provenance, installed_triton_minor
from tuner.files.pull import one_triton, release_entry
from tuner.inputs.devices import device_among, engine_device_name
from tuner.kernels.shape import FamilyShape, Shape

# How each front end tells a user to take stale trials too.
CLI_STALE_HINT = "--allow-stale"
HTTP_STALE_HINT = "?allow_stale=true"

VERSION_KEYS: tuple[str, ...] = ("torch", "triton", "vllm", "kernel_source")


class MergeError(ValueError):
    """A device's winners cannot be merged into files (e.g. winners of two output dtypes for
    one (shape, M)); the message starts with `cannot merge <device_name>:`."""


@dataclass(frozen=True)
class Scope:
    """Which trials count for a device: those of the current kernel source and Triton
    major.minor (`current`), unless stale ones are allowed.

    Attributes:
        allow_stale: every trial counts.
        current: the current provenance (`tuner.files.provenance.current_provenance`).
        stale_trials: ok trials the scope leaves out (0 with allow_stale).
    """

    allow_stale: bool
    current: Provenance
    stale_trials: int

    @property
    def filters(self) -> dict[str, Any]:
        """Keyword filters of `repo.winners`, `repo.shape_coverage` and `repo.stale_trials`
        (none with allow_stale)."""
        if self.allow_stale:
            return {}
        return {"kernel_hash": self.current.hashes, "triton_minor": self.current.triton_minor}

    def note(self, device_name: str) -> str | None:
        """The line the CLI prints about stale trials left out, or None when none were."""
        if not self.stale_trials:
            return None
        return (
            f"note: left out {self.stale_trials} ok trial(s) of {device_name} timed with "
            f"another kernel or Triton than the current ({self.current.source_label} kernel "
            f"{self.current.kernel_hash[:12]}, triton {self.current.triton_minor or 'any'}); "
            f"{CLI_STALE_HINT} uses them, --kernel picks the source"
        )


@dataclass(frozen=True)
class DeviceView:
    """What the store holds for a device, within a scope: read in one session.

    Attributes:
        device_name: vLLM's device key.
        out_dtype: the output dtype read, or None for all.
        scope: which trials count.
        environments: the device's environments (`repo.device_environments`).
        winners: one per (shape, M, out_dtype) (`repo.winners`).
        coverage: one per shape (`repo.shape_coverage`).
        imported: imported entries per import key, the family and the shape its file's name
            says (`repo.imported_configs`).
    """

    device_name: str
    out_dtype: str | None
    scope: Scope
    environments: list[repo.EnvironmentRow]
    winners: list[repo.WinnerRow]
    coverage: list[repo.ShapeCoverage]
    imported: dict[FamilyShape, repo.ImportedShape] = field(default_factory=dict)

    @property
    def compute_capability(self) -> str | None:
        """The GPU's compute capability from its newest environment with one (e.g. "8.9");
        None for the interpreter, a replayed landscape without one, or no trials."""
        known = [e for e in self.environments if e.compute_capability]
        return max(known, key=lambda e: e.environment_id).compute_capability if known else None

    @property
    def versions(self) -> dict[str, list[str]]:
        """Every torch, Triton and vLLM version and kernel source the winners were timed with:
        {key: sorted distinct non-empty values} for each of `VERSION_KEYS`."""
        used = {w.environment_id for w in self.winners}
        timed = [e for e in self.environments if e.environment_id in used]
        return {key: sorted({getattr(e, key) for e in timed} - {""}) for key in VERSION_KEYS}

    @property
    def grids(self) -> dict[FamilyShape, tuple[int, ...]]:
        """A shape's key -> the M grid of the shape's sweeps."""
        return {FamilyShape.of_row(row): tuple(row.m_requested) for row in self.coverage}

    def merge(self, *, allow_partial: bool, engine: str = "vllm") -> DeviceFiles:
        """The device's files: winners merged with the no-regression rule, imported entries
        filling M without a winner (`tuner.files.merge.build_device_files`).

        Raises:
            MergeError: the winners cannot be merged.
        """
        try:
            return build_device_files(
                self.winners,
                self.coverage,
                allow_partial=allow_partial,
                imported=self.imported,
                device_name=self.device_name,
                engine=engine,
                triton_of={e.environment_id: e.triton for e in self.environments},
                file_device=engine_device_name(
                    engine, self.device_name, [e.gpu_name for e in self.environments]
                ),
            )
        except ValueError as exc:
            raise MergeError(f"cannot merge {self.device_name}: {exc}") from None


@dataclass(frozen=True)
class StoreFiles:
    """A device's files as the store gives them, with what the store said on the way.

    Attributes:
        view: what was read.
        files: the merged files and the shapes left out (raw reasons).
    """

    view: DeviceView
    files: DeviceFiles

    def stale_reason(self, skipped: SkippedShape, hint: str = CLI_STALE_HINT) -> str:
        """What to add to a skipped shape's reason when stale trials made it partial, or ""."""
        rows = (r.m_stale for r in self.view.coverage if FamilyShape.of_row(r) == skipped.key)
        stale = sorted(set(skipped.m_missing) & set(next(rows, ())))
        if not stale:
            return ""
        return (
            f"; M={', '.join(map(str, stale))} only have trials of another kernel or Triton "
            f"({hint} uses them)"
        )

    def explained(self, hint: str = CLI_STALE_HINT) -> DeviceFiles:
        """The files, with each skipped shape's reason naming the M that have only stale
        trials (and `hint`, how to use them)."""
        skipped = [
            replace(item, reason=item.reason + self.stale_reason(item, hint))
            for item in self.files.skipped
        ]
        return replace(self.files, skipped=skipped)


def read_device(
    session: Session,
    device_name: str,
    *,
    out_dtype: str | None,
    allow_stale: bool,
    kernel: str = "auto",
) -> DeviceView:
    """Read what the store holds for a device: its scope, environments, winners, coverage and
    imported entries.

    Args:
        session: an open session.
        device_name: vLLM's device key, as stored.
        out_dtype: only sweeps with this output dtype; None for all.
        allow_stale: also trials of another kernel source or Triton major.minor.
        kernel: whose kernels' trials count (`tuner.files.provenance.read_source`).
    """
    environments = repo.device_environments(session, device_name=device_name)
    current = current_provenance(
        environments, installed_triton=installed_triton_minor(), kernel=kernel
    )
    scope = Scope(allow_stale, current, 0)
    if not allow_stale:
        stale = repo.stale_trials(session, device_name=device_name, **scope.filters)
        scope = replace(scope, stale_trials=stale)
    chosen = {"device_name": device_name, "out_dtype": out_dtype, **scope.filters}
    imported: dict[FamilyShape, repo.ImportedShape] = {}
    found = repo.imported_configs(session, device_name=device_name)
    for (family, params, N, K, block_shape), entries in found.items():
        imported[FamilyShape(family, Shape.from_store(N, K, block_shape, params))] = entries
    winners = repo.winners(session, **chosen)
    coverage = repo.shape_coverage(session, **chosen)
    return DeviceView(device_name, out_dtype, scope, environments, winners, coverage, imported)


def device_files(
    session: Session, device_name: str, *, allow_partial: bool, engine: str = "vllm", **read: Any
) -> StoreFiles:
    """Turn the store into a device's files: `read_device` (with `read`: out_dtype,
    allow_stale, kernel), then the merge.

    Winners come from trials of the current kernel source and Triton major.minor unless
    allow_stale; measured winners beat imported entries, which fill M without a winner.
    `allow_partial`: also files of shapes whose M grid is not fully tuned; `engine`: the
    file-name spelling, "vllm" or "sglang".

    Raises:
        MergeError: the winners cannot be merged (e.g. two output dtypes for one (shape, M)).
    """
    view = read_device(session, device_name, **read)
    return StoreFiles(view, view.merge(allow_partial=allow_partial, engine=engine))


def store_request(read: StoreFiles, fmt: str, engine: str, host_dir: str) -> MountRequest:
    """The mounts of a device's merged files from the store: its key, files, compute
    capability, what its winners were timed with, the GPU's names and the entries left out."""
    view, tuned = read.view, versions_line(read.view.versions)
    files = {f.file_name: f.merged.text for f in read.files.files}
    notes = [
        f"# {len(files)} W8A8 block-FP8 config file(s) for {view.device_name}, mounted "
        f"read-only ({engine} {DEFAULT_ENGINE_VERSIONS[engine]}; restart it after changing them).",
        f"# The files: tuner export --device {view.device_name} --engine {engine} --out "
        f"{host_dir} (or unzip the release's configs.zip there).",
        *([f"# Tuned with {tuned}."] if tuned else []),
        *(f"# {line}" for line in read.files.left_out),
    ]
    return MountRequest(
        view.device_name,
        engine,
        fmt,
        files=files,
        host_dir=host_dir,
        capabilities=[view.compute_capability or ""],
        triton=one_triton(view.versions),
        gpu_names=[e.gpu_name for e in view.environments],
        notes=notes,
    )


def stored_release(session: Session, device_name: str, number: int | None) -> repo.ReleaseInfo:
    """A device's release `number` (None: its latest).

    Raises:
        LookupError: there is no such release (one line).
    """
    info = repo.get_release(session, device_name=device_name, number=number)
    if info is None:
        which = "yet" if number is None else str(number)
        raise LookupError(
            f"{device_name} has no release {which} (`tuner publish --device {device_name}` "
            "makes one)"
        )
    return info


def device_mounts(
    session: Session,
    device_name: str,
    *,
    fmt: str,
    engine: str,
    host_dir: str,
    server: str,
    release: int | None,
    **scope: Any,
) -> str:
    """The text of `tuner mounts` and `GET /devices/{d}/mounts`: mounts of the device's merged
    files (`device_files` with `scope`), or for a pull format the recipe that pulls release
    `release` (None: the latest) from `server`.

    Raises:
        LookupError: no such release, or no complete file (one line).
        MergeError: the winners cannot be merged.
        ValueError: a request `render_mounts` refuses.
    """
    if fmt in PULL_FORMATS:
        info = stored_release(session, device_name, release)
        return render_mounts(release_request(release_entry(info), fmt, engine, server))
    read = device_files(session, device_name, engine=engine, **scope)
    if not read.files.files:
        stale = read.view.scope.stale_trials
        why = f"; {stale} ok trial(s) of another kernel or Triton left out" if stale else ""
        raise LookupError(
            f"{device_name} has no complete file to mount yet (partial files and stale trials "
            f"can be allowed){why}"
        )
    return render_mounts(store_request(read, fmt, engine, host_dir))


def target_device(requested: str | None, file_device: str, known: Sequence[str]) -> str:
    """The device an import is stored for: the file name's device, or the one of the store's
    devices and the file's own that `requested` names (`device_among`), so that a typo never
    creates a device.

    Raises:
        LookupError: the request names neither a known device nor the file's device.
    """
    if requested is None:
        return file_device
    try:
        return device_among(requested, [*known, file_device])
    except ValueError:
        raise LookupError(
            f"device {requested!r} is neither in the store (known: "
            f"{', '.join(sorted(known)) or '(none)'}) nor the file's device {file_device!r}"
        ) from None


def imported_files_summary(imports: Sequence) -> str:
    """What a device's imported files are, for the lines that say it has nothing else: "2
    file(s) from 'a', 'b'; 1 entry left out, cannot launch there" (the part on entries only
    when some were left out by the launch check).

    Args:
        imports: its imported files (`db.repo.list_imports`: `label`, `cannot_launch`).
    """
    labels = ", ".join(repr(label) for label in sorted({i.label for i in imports}))
    left_out = sum(len(i.cannot_launch) for i in imports)
    dropped = f"; {entries_left_out(left_out)}, cannot launch there" if left_out else ""
    return f"{len(imports)} file(s) from {labels}{dropped}"
