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
from tuner.files.device import StoreFiles, device_files
from tuner.files.merge import DeviceFile, entries_left_out
from tuner.files.mounts import versions_line


class NothingToPublish(ValueError):
    """The device has no file to publish (within the scope asked for); the message says why in
    one line."""


@dataclass(frozen=True)
class Published:
    """A publish's outcome: the release, whether it is new, and the merge it froze."""

    release: ReleaseInfo
    created: bool
    read: StoreFiles

    def line(self) -> str:
        """One line for the CLI: which release, how many files, new or unchanged, and what
        its winners were timed with (torch, Triton, vLLM, kernel source) when recorded."""
        r, left_out = self.release, self.read.files.left_out
        tuned = versions_line(self.read.view.versions)
        tuned = f"; tuned with {tuned}" if tuned else ""
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


def _summary(read: StoreFiles, scope: dict[str, Any]) -> dict[str, Any]:
    """The release's summary: its scope and provenance, the versions the winners were timed
    with (what `tuner pull` compares with its own), each environment's winners, the skips."""
    view, current = read.view, read.view.scope.current
    winners = Counter(row.environment_id for row in view.winners)
    tuned_with = [
        {k: v for k, v in asdict(e).items() if k not in ("trials", "environment_id")}
        | {"winners": winners[e.environment_id]}
        for e in view.environments
        if winners.get(e.environment_id)
    ]
    provenance = {k: v for k, v in asdict(current).items() if k != "other_hashes"}
    return {
        "scope": {k: scope[k] for k in ("allow_partial", "allow_stale", "out_dtype")} | provenance,
        "versions": view.versions,
        "tuned_with": tuned_with,
        "measured": bool(view.winners),
        "skipped": [
            {"N": s.N, "K": s.K, "block_shape": s.block_shape and list(s.block_shape)}
            | {"m_missing": list(s.m_missing), "reason": s.reason}
            for s in read.explained().skipped
        ],
        "left_out": read.files.left_out,
        "tuner": tuner.__version__,
    }


def _new_file(f: DeviceFile) -> NewFile:
    """A merged file as the store keeps it, with what the merge decided."""
    merged = f.merged
    detail = {
        "m_keys": list(merged.configs),
        "m_imported": merged.m_imported,
        "m_missing": merged.m_missing,
        "partial": merged.partial,
        "notes": merged.notes,
        "warnings": merged.warnings,
    }
    return NewFile(
        f.file_name,
        f.N,
        f.K,
        f.block_shape,
        merged.text.encode(),
        **f.key.store_fields(),
        detail=detail,
    )


def publish(
    session: Session, device_name: str, *, reason: str, created_by: str | None = None, **scope: Any
) -> Published:
    """Freeze a device's files as its next release (nothing new when they equal the latest):
    the files, a zip per engine and the summary.

    Args:
        session: an open session (the caller commits).
        device_name: vLLM's device key, as stored.
        reason: what publishes, e.g. "tuner publish", "tuner sweep".
        created_by: who; default user@host of this process.
        scope: allow_partial, allow_stale, out_dtype, kernel, as
            `tuner.files.device.device_files` takes them (default: False, False, None, "auto").

    Raises:
        NothingToPublish: no file within the scope (the message names the first skipped
            shape's reason, or says the device has nothing).
        tuner.files.device.MergeError: the winners cannot be merged.
    """
    scope = {
        "allow_partial": False,
        "allow_stale": False,
        "out_dtype": None,
        "kernel": "auto",
    } | scope
    read = device_files(session, device_name, **scope)
    if not read.files.files:
        skipped = read.explained().skipped
        why = f"; e.g. N={skipped[0].N}, K={skipped[0].K}: {skipped[0].reason}" if skipped else ""
        raise NothingToPublish(f"nothing to publish for {device_name}: no complete file{why}")
    tuned_with = versions_line(read.view.versions)
    sglang = read.view.merge(allow_partial=scope["allow_partial"], engine="sglang")
    capability = read.view.compute_capability
    archives = {
        "vllm": build_zip(
            device_name, read.files, compute_capability=capability, tuned_with=tuned_with
        ),
        "sglang": build_zip(device_name, sglang, engine="sglang", tuned_with=tuned_with),
    }
    release, created = publish_release(
        session,
        device_name=device_name,
        files=[_new_file(f) for f in read.files.files],
        archives=archives,
        summary=_summary(read, scope),
        created_by=created_by or who(),
        reason=reason,
    )
    return Published(release, created, read)
