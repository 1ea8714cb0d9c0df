"""The tables of published releases: a release per device and number, its files, and the blobs
of their bytes (stored once per content)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from db.base import Base, UTCDateTime, utcnow


class Blob(Base):
    """Bytes of a released file or archive, stored once per content."""

    __tablename__ = "blobs"

    sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    size: Mapped[int] = mapped_column(Integer)
    content: Mapped[bytes] = mapped_column(LargeBinary)


class Release(Base):
    """A device's files frozen as published: numbered 1, 2, ... per device, never
    changed. `content_sha256` hashes the sorted (file name, sha256) list; `archives` maps an
    engine ("vllm", "sglang") to its zip's sha256; `summary` holds the scope, coverage, merge
    notes, skipped shapes and the versions the files were tuned with."""

    __tablename__ = "releases"

    release_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.device_id"))
    number: Mapped[int] = mapped_column(Integer)
    content_sha256: Mapped[str] = mapped_column(String(64))
    archives: Mapped[dict[str, str]] = mapped_column(JSON)
    summary: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_by: Mapped[str] = mapped_column(String(256))
    reason: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    __table_args__ = (UniqueConstraint("device_id", "number"),)


class ReleaseFile(Base):
    """One file of a release, named as vLLM looks it up; its bytes are the blob `sha256`."""

    __tablename__ = "release_files"

    release_file_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    release_id: Mapped[int] = mapped_column(ForeignKey("releases.release_id"))
    file_name: Mapped[str] = mapped_column(String(512))
    family: Mapped[str] = mapped_column(String(32))
    shape_params: Mapped[str] = mapped_column(String(128))
    N: Mapped[int] = mapped_column(Integer)
    K: Mapped[int] = mapped_column(Integer)
    block_n: Mapped[int] = mapped_column(Integer)
    block_k: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(ForeignKey("blobs.sha256"))
    # m_keys, m_imported, m_missing, partial, notes, warnings of the merge.
    detail: Mapped[dict[str, Any]] = mapped_column(JSON)

    __table_args__ = (UniqueConstraint("release_id", "file_name"),)
