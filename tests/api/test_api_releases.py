"""Releases over HTTP: downloads serve a release's stored bytes, pinned with
?release=N while newer releases appear; a busy store is a 503 with Retry-After, never a 500."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlalchemy.exc import TimeoutError as PoolTimeout

from api.app import create_app
from api.settings import Settings
from tests.storefill import DEFAULT, FAST, SLOW, fill, publish
from tuner.files.format import dump_config_file
from tuner.kernels.dense.naming import config_file_name

NAME = config_file_name(576, 7168, "NVIDIA_L20")
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}


def test_pinned_release_keeps_its_bytes_after_release_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    fill(url, PLAN, m_values=(1, 16))
    assert publish(url) == 1
    one = dump_config_file({1: FAST, 16: DEFAULT})
    with TestClient(create_app(Settings(db_url=url))) as client:
        first = client.get(f"/devices/L20/configs/{NAME}")
        assert (first.text, first.headers["x-tuner-release"]) == (one, "1")
        assert first.headers["cache-control"] == "no-cache"
        fill(
            url,
            {(576, 7168, 32): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 5.0)]},
            m_values=(32,),
        )
        # not published yet: downloads still serve release 1, the preview merges the store
        assert client.get(f"/devices/L20/configs/{NAME}").text == one
        preview = client.get(f"/devices/L20/preview/configs/{NAME}").text
        assert preview == dump_config_file({1: FAST, 16: DEFAULT, 32: SLOW})
        assert publish(url) == 2
        latest = client.get(f"/devices/L20/configs/{NAME}")
        assert (latest.text, latest.headers["x-tuner-release"]) == (preview, "2")
        pinned = client.get(f"/devices/L20/configs/{NAME}", params={"release": 1})
        assert pinned.text == one
        assert pinned.headers["cache-control"] == "public, max-age=31536000, immutable"
        assert (
            client.get(
                f"/devices/L20/configs/{NAME}",
                params={"release": 1},
                headers={"If-None-Match": pinned.headers["etag"]},
            ).status_code
            == 304
        )
        listed = client.get("/devices/NVIDIA_L20/releases").json()
        assert [(r["number"], [f["m_keys"] for f in r["files"]]) for r in listed] == [
            (2, [[1, 16, 32]]),
            (1, [[1, 16]]),
        ]
        assert listed[0]["reason"] == "test" and listed[0]["summary"]["measured"] is True
        missing = client.get(f"/devices/L20/configs/{NAME}", params={"release": 3})
        assert missing.status_code == 404
        assert missing.json() == {"detail": "NVIDIA_L20 has no release 3; releases: 1, 2"}
        zipped = client.get("/devices/L20/configs.zip", params={"release": 1})
        assert zipped.status_code == 200 and zipped.headers["x-tuner-release"] == "1"


def test_a_busy_store_is_503_with_retry_after(tmp_path: Path, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    fill(url, PLAN, m_values=(1, 16))
    publish(url)

    def busy(*_args, **_kwargs):
        raise PoolTimeout("QueuePool limit of size 40 overflow 0 reached")

    monkeypatch.setattr("db.repo.find_released_file", busy)
    with TestClient(create_app(Settings(db_url=url)), raise_server_exceptions=False) as client:
        response = client.get(f"/devices/L20/configs/{NAME}")
    assert response.status_code == 503
    assert response.headers["retry-after"] == "1"
    assert response.json() == {"detail": f"store {url} is busy: every connection is in use"}


def test_the_api_pool_is_sized_for_the_thread_pool(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    fill(url, PLAN, m_values=(1, 16))
    app = create_app(Settings(db_url=url))
    pool = app.state.store.open().pool
    assert (pool.size(), pool._max_overflow, pool._timeout) == (40, 0, 10.0)
    app.state.store.dispose()
