"""The tables of `tuner compare` runs: one row per run, one per (shape, M, kernel) timed."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    JSON,
    CheckConstraint,
    Float,
    ForeignKey,
    Integer,
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
