"""The tables of what the store hands out: `tuner compare` runs and published releases with
their files and the blobs of their bytes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from db.base import Base, UTCDateTime, utcnow


class Comparison(Base):
    """One `tuner compare` run: a model's shapes timed on one device with every
    kernel vLLM could run for them; `verdicts` holds its decode and prefill lines."""

    __tablename__ = "comparisons"

    comparison_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.device_id"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.environment_id"))
    model: Mapped[str] = mapped_column(String(64))
    tp: Mapped[int] = mapped_column(Integer)
    out_dtype: Mapped[str] = mapped_column(String(16))
    verdicts: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ComparisonPoint(Base):
    """One kernel at one (N, K, M) of a comparison: ok (checked against the float64 reference,
    then timed interleaved with the others), failed or unavailable, with its note."""

    __tablename__ = "comparison_points"

    point_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    comparison_id: Mapped[int] = mapped_column(
        ForeignKey("comparisons.comparison_id", ondelete="CASCADE"))
    N: Mapped[int] = mapped_column(Integer)
    K: Mapped[int] = mapped_column(Integer)
    M: Mapped[int] = mapped_column(Integer)
    backend: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    latency_us: Mapped[float | None] = mapped_column(Float)
    p20_us: Mapped[float | None] = mapped_column(Float)
    p80_us: Mapped[float | None] = mapped_column(Float)
    note: Mapped[str] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("comparison_id", "N", "K", "M", "backend"),
        CheckConstraint("status IN ('ok', 'failed', 'unavailable')", name="status"),
    )


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
