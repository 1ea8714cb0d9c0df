"""Publishing: a device's merged files (`tuner.files.device.device_files`) frozen in the store as
an immutable, numbered release (`db.files`) that downloads serve byte for byte.

`tuner publish`, the end of `tuner sweep`, `verify --fix`, `tuner import` and the HTTP import
route publish through `publish`; the preview routes show `candidate` without storing it.
"""

from __future__ import annotations

import getpass
import socket
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy.orm import Session

import tuner
from db.repo import NewFile, ReleaseInfo, publish_release
from tuner.files.archive import build_zip
from tuner.files.device import StoreFiles, device_files, versions_line
from tuner.files.merge import entries_left_out

IMPORTED_NOTE = "imported, not measured here"


class NothingToPublish(ValueError):
    """The device has no file to publish (within the scope asked for); the message says why in
    one line."""


@dataclass(frozen=True)
class Candidate:
    """What a publish would freeze: the files, the zips (engine -> bytes), the summary, and the
    merge it came from."""

    files: list[NewFile]
    archives: dict[str, bytes]
    summary: dict[str, Any]
    read: StoreFiles


@dataclass(frozen=True)
class Published:
    """A publish's outcome: the release, whether it is new, and what was published."""

    release: ReleaseInfo
    created: bool
    candidate: Candidate

    def line(self) -> str:
        """One line for the CLI: which release, how many files, new or unchanged, and what
        its winners were timed with (torch, Triton, vLLM, kernel source) when recorded."""
        r = self.release
        tuned = versions_line(self.candidate.summary.get("versions") or {})
        tuned = f"; tuned with {tuned}" if tuned else ""
        left_out = self.candidate.read.files.left_out
        tuned += f"; {entries_left_out(len(left_out))}, cannot launch there" if left_out else ""
        if not self.created:
            return (
                f"{r.device_name}: files unchanged since release {r.number}; no new release{tuned}"
            )
        return (
            f"published {r.device_name} release {r.number}: {len(r.files)} file(s), "
            f"content {r.content_sha256[:12]}{tuned}"
        )


def who() -> str:
    """user@host of this process ("unknown" where the OS can't say)."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _summary(
    read: StoreFiles, *, allow_partial: bool, allow_stale: bool, out_dtype: str | None
) -> dict[str, Any]:
    view = read.view
    winners = Counter(row.environment_id for row in view.winners)
    tuned_with = [
        {k: v for k, v in asdict(e).items() if k not in ("trials", "environment_id")}
        | {"winners": winners[e.environment_id]}
        for e in view.environments
        if winners.get(e.environment_id)
    ]
    measured = bool(view.winners)
    current = view.scope.current
    return {
        "scope": {
            "allow_partial": allow_partial,
            "allow_stale": allow_stale,
            "out_dtype": out_dtype,
            "kernel_hash": current.kernel_hash,
            "triton_minor": current.triton_minor,
            "kernel_source": current.kernel_source,
            "vllm": current.vllm,
        },
        # What the serving side compares with its own (`tuner pull`): every version the
        # winners were timed with, and whose kernels.
        "versions": view.versions,
        "tuned_with": tuned_with,
        "measured": measured,
        "note": None if measured else IMPORTED_NOTE,
        "skipped": [
            {"N": s.N, "K": s.K, "block_shape": s.block_shape and list(s.block_shape)}
            | {"m_missing": list(s.m_missing), "reason": s.reason}
            for s in read.explained().skipped
        ],
        "left_out": read.files.left_out,
        "tuner": tuner.__version__,
    }


def _new_files(read: StoreFiles) -> list[NewFile]:
    """The merged files as the store keeps them, with what the merge decided."""
    return [
        NewFile(
            file_name=f.file_name,
            N=f.N,
            K=f.K,
            block_shape=f.block_shape,
            content=f.merged.text.encode(),
            **f.key.store_fields(),
            detail={
                "m_keys": list(f.merged.configs),
                "m_imported": f.merged.m_imported,
                "m_missing": f.merged.m_missing,
                "partial": f.merged.partial,
                "notes": f.merged.notes,
                "warnings": f.merged.warnings,
            },
        )
        for f in read.files.files
    ]


def candidate(
    session: Session,
    device_name: str,
    *,
    allow_partial: bool = False,
    allow_stale: bool = False,
    out_dtype: str | None = None,
    kernel: str = "auto",
) -> Candidate:
    """What `publish` would freeze now for a device (vLLM's key, as stored), read in the
    given session; the scope as `tuner.files.device.device_files` takes it.

    Raises:
        tuner.files.device.MergeError: the winners cannot be merged.
    """
    read = device_files(
        session,
        device_name,
        out_dtype=out_dtype,
        allow_stale=allow_stale,
        allow_partial=allow_partial,
        kernel=kernel,
    )
    sglang = read.view.merge(allow_partial=allow_partial, engine="sglang")
    summary = _summary(
        read, allow_partial=allow_partial, allow_stale=allow_stale, out_dtype=out_dtype
    )
    tuned_with = versions_line(summary["versions"])
    archives = {
        "vllm": build_zip(
            device_name,
            read.files,
            tuned_with=tuned_with,
            compute_capability=read.view.compute_capability,
        ),
        "sglang": build_zip(device_name, sglang, engine="sglang", tuned_with=tuned_with),
    }
    return Candidate(_new_files(read), archives, summary, read)


def publish(
    session: Session,
    device_name: str,
    *,
    reason: str,
    created_by: str | None = None,
    allow_partial: bool = False,
    allow_stale: bool = False,
    out_dtype: str | None = None,
    kernel: str = "auto",
) -> Published:
    """Freeze a device's files as its next release (nothing new when they equal the latest).

    Args:
        session: an open session (the caller commits).
        device_name: vLLM's device key, as stored.
        reason: what publishes, e.g. "tuner publish", "tuner sweep".
        created_by: who; default user@host of this process.
        allow_partial, allow_stale, out_dtype, kernel: the scope, as in `candidate`.

    Raises:
        NothingToPublish: no file within the scope (the message names the first skipped
            shape's reason, or says the device has nothing).
        tuner.files.device.MergeError: the winners cannot be merged.
    """
    found = candidate(
        session,
        device_name,
        allow_partial=allow_partial,
        allow_stale=allow_stale,
        out_dtype=out_dtype,
        kernel=kernel,
    )
    if not found.files:
        skipped = found.read.explained().skipped
        why = f"; e.g. N={skipped[0].N}, K={skipped[0].K}: {skipped[0].reason}" if skipped else ""
        raise NothingToPublish(f"nothing to publish for {device_name}: no complete file{why}")
    release, created = publish_release(
        session,
        device_name=device_name,
        files=found.files,
        archives=found.archives,
        summary=found.summary,
        created_by=created_by or who(),
        reason=reason,
    )
    return Published(release, created, found)
