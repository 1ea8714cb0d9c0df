"""The store's side of `tuner ab`: an A/B found again by its key (so the same command resumes it),
its client runs kept one by one, its result, and the latest verdict of a release."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.connection import dialect_insert
from db.models import AbRun, AbTest, Device, Release, take, utcnow
from tuner.core import AbRunRow


@dataclass(frozen=True)
class AbInfo:
    """An A/B as stored: its id, key, device (or None), release number (or None), spec,
    result and verdict (None until finished), when it began and finished (UTC)."""

    ab_test_id: int
    key: str
    device_name: str | None
    release: int | None
    spec: dict[str, Any]
    result: dict[str, Any] | None
    verdict: str | None
    created_at: datetime
    finished_at: datetime | None


def open_ab(session: Session, *, key: str, spec: dict[str, Any], release_id: int | None) -> int:
    """The id of the A/B with this key (hex sha256 of the spec, the caller's), made when new;
    `release_id`: the release the candidate serves (its device's), or None."""
    device_id = None if release_id is None else session.get_one(Release, release_id).device_id
    insert = dialect_insert(session, AbTest).values(
        key=key, spec=spec, device_id=device_id, release_id=release_id, created_at=utcnow()
    )
    session.execute(insert.on_conflict_do_nothing(index_elements=["key"]))
    return session.scalar(select(AbTest.ab_test_id).where(AbTest.key == key))  # type: ignore[return-value]


def record_ab_run(session: Session, *, ab_test_id: int, run: AbRunRow) -> None:
    """Keep one client run; a run already kept under the same (block, arm, workload) stays."""
    values = {"ab_test_id": ab_test_id, **asdict(run), "created_at": utcnow()}
    insert = dialect_insert(session, AbRun).values(**values)
    session.execute(
        insert.on_conflict_do_nothing(index_elements=["ab_test_id", "block", "arm", "workload"])
    )


def ab_runs(session: Session, *, ab_test_id: int) -> list[AbRunRow]:
    """The A/B's kept runs, in the order they were kept."""
    rows = session.scalars(
        select(AbRun).where(AbRun.ab_test_id == ab_test_id).order_by(AbRun.ab_run_id)
    )
    return [take(AbRunRow, row) for row in rows]


def finish_ab(session: Session, *, ab_test_id: int, result: dict[str, Any], verdict: str) -> None:
    """Store the A/B's estimates and overall verdict (again, when it is extended later)."""
    row = session.get_one(AbTest, ab_test_id)
    row.result, row.verdict, row.finished_at = result, verdict, utcnow()


def list_abs(session: Session, *, device_name: str | None = None) -> list[AbInfo]:
    """A/B tests, newest first; only those of `device_name` when given."""
    query = (
        select(AbTest, Device.device_name, Release.number)
        .outerjoin(Device, AbTest.device_id == Device.device_id)
        .outerjoin(Release, AbTest.release_id == Release.release_id)
        .order_by(AbTest.ab_test_id.desc())
    )
    if device_name is not None:
        query = query.where(Device.device_name == device_name)
    found = session.execute(query)
    return [take(AbInfo, row, device_name=name, release=number) for row, name, number in found]


@dataclass(frozen=True)
class AbVerdict:
    """A finished A/B's id and overall verdict ("faster", "slower", "within noise")."""

    ab_test_id: int
    verdict: str


def release_ab(session: Session, *, release_id: int) -> AbVerdict | None:
    """The release's latest finished A/B, or None."""
    row = session.execute(
        select(AbTest.ab_test_id, AbTest.verdict)
        .where(AbTest.release_id == release_id, AbTest.verdict.is_not(None))
        .order_by(AbTest.ab_test_id.desc())
    ).first()
    return None if row is None else AbVerdict(row[0], str(row[1]))
