"""Publishers racing: threads that publish the same files at the same moment
make one release between them, on SQLite and on PostgreSQL."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import Engine, select

import tuner.files.release as release_module
from db.connection import session_scope
from db.models import Device, Release
from tests.storefill import DEFAULT, FAST, SLOW, fill
from tuner.files.release import publish

PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}
PUBLISHERS = 4


def _race(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """PUBLISHERS threads merge the device's files, meet, then all store them at once."""
    barrier = threading.Barrier(PUBLISHERS, timeout=60)
    store = release_module.publish_release

    def meet_then_store(session, **kwargs):
        barrier.wait()  # every thread has merged the same files and read no release yet
        return store(session, **kwargs)

    monkeypatch.setattr(release_module, "publish_release", meet_then_store)

    def one() -> tuple[int, bool]:
        with session_scope(engine) as session:
            done = publish(session, "NVIDIA_L20", reason="race")
        return done.release.number, done.created

    with ThreadPoolExecutor(PUBLISHERS) as pool:
        return [f.result() for f in [pool.submit(one) for _ in range(PUBLISHERS)]]


def _releases(engine: Engine) -> list[tuple[int, str]]:
    with engine.connect() as connection:
        return [
            tuple(row)
            for row in connection.execute(
                select(Release.number, Release.content_sha256)
                .join(Device, Release.device_id == Device.device_id)
                .where(Device.device_name == "NVIDIA_L20")
                .order_by(Release.number)
            )
        ]


def test_concurrent_identical_publishes_make_one_release(
    engine: Engine, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store_url, PLAN, m_values=(1, 16))
    outcomes = _race(engine, monkeypatch)
    assert sorted(outcomes) == [(1, False)] * (PUBLISHERS - 1) + [(1, True)]
    assert [number for number, _ in _releases(engine)] == [1]


def test_a_changed_store_still_makes_the_next_release(
    engine: Engine, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store_url, PLAN, m_values=(1, 16))
    with session_scope(engine) as session:
        assert publish(session, "NVIDIA_L20", reason="first").release.number == 1
    fill(
        store_url,
        {
            (7168, 2048, 1): [(DEFAULT, True, "ok", 20.0)],
            (7168, 2048, 16): [(DEFAULT, True, "ok", 30.0)],
        },
        m_values=(1, 16),
    )
    outcomes = _race(engine, monkeypatch)
    assert sorted(outcomes) == [(2, False)] * (PUBLISHERS - 1) + [(2, True)]
    numbers, contents = zip(*_releases(engine), strict=True)
    assert numbers == (1, 2) and contents[0] != contents[1]
