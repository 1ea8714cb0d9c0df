"""`tuner publish`: a device's merged files frozen as numbered releases in the store, their
bytes exactly those of `tuner export`, identical content stored once, also when several
processes publish at the same moment (on a SQLite file and on PostgreSQL)."""

from __future__ import annotations

import hashlib
import io
import os
import zipfile
from pathlib import Path

import pytest

from db.files import blob, get_release, list_releases
from tests.cli.common import PLAN, invoke, ok, one_line_error, session_on
from tests.cli.robust import start_tuner, store_rows
from tests.storefill import DEFAULT, SLOW, TRITON, fill, reset_postgresql

NAME = "N=576,K=7168,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
TUNED = f"; tuned with torch 2.11.0, triton {TRITON}, kernels of builtin"
UNCHANGED = "NVIDIA_L20: files unchanged since release 1; no new release" + TUNED
PG_URL = os.environ.get("TUNER_TEST_PG_URL")


def publish(db: str, device: str = "L20"):
    return invoke("publish", "--device", device, "--db", db)


def count(url: str, table: str) -> int:
    return store_rows(url, f"SELECT count(*) FROM {table}")[0][0]


def test_publish_freezes_the_exported_bytes_once(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    fill(db, PLAN, m_values=(1, 16))
    first = publish(db)
    assert first.stdout.startswith("published NVIDIA_L20 release 1: 1 file(s), content ")
    assert first.stdout.strip().endswith(TUNED)
    assert publish(db, "NVIDIA_L20").stdout.strip() == UNCHANGED
    out = tmp_path / "o"
    ok("export", "--device", "L20", "--out", str(out), "--db", db)
    expected = (out / NAME).read_bytes()
    with session_on(db) as session:
        release = get_release(session, device_name="NVIDIA_L20")
        assert [r.number for r in list_releases(session, device_name="NVIDIA_L20")] == [1]
        assert release.reason == "tuner publish"
        assert [(f.file_name, f.sha256, f.size) for f in release.files] == [
            (NAME, hashlib.sha256(expected).hexdigest(), len(expected))
        ]
        assert release.files[0].detail["m_keys"] == [1, 16]
        assert blob(session, sha256=release.files[0].sha256) == expected
        archive = zipfile.ZipFile(io.BytesIO(blob(session, sha256=release.archives["vllm"])))
        assert archive.read(NAME) == expected
        assert release.summary["scope"]["allow_stale"] is False
        tuned = [(t["gpu_name"], t["driver"], t["winners"]) for t in release.summary["tuned_with"]]
        assert tuned == [("NVIDIA L20", "580.1", 2)]
    # one file blob and two zip blobs (vllm, sglang), however often it is published
    assert (count(db, "blobs"), count(db, "releases")) == (3, 1)
    # A new winner makes release 2 and keeps release 1.
    fill(
        db,
        {(576, 7168, 32): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 5.0)]},
        m_values=(32,),
    )
    result = publish(db)
    assert result.stdout.startswith("published NVIDIA_L20 release 2: 1 file(s)"), result.output
    with session_on(db) as session:
        one, two = (get_release(session, device_name="NVIDIA_L20", number=n) for n in (1, 2))
        keys = (one.files[0].detail["m_keys"], two.files[0].detail["m_keys"])
        assert keys == ([1, 16], [1, 16, 32]) and one.files[0].sha256 != two.files[0].sha256


def test_nothing_to_publish_is_exit_1(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    fill(db, {(576, 7168, 1): [(DEFAULT, True, "ok", 10.0)]}, m_values=(1, 16))
    result = publish(db)
    one_line_error(
        result,
        "nothing to publish for NVIDIA_L20: no complete file; e.g. N=576, K=7168: no winner yet "
        "for M=16",
        code=1,
    )
    assert count(db, "releases") == 0


POSTGRESQL = pytest.mark.skipif(
    not PG_URL,
    reason="TUNER_TEST_PG_URL is not set (a scratch PostgreSQL database, as .ci/run sets up)",
)


@pytest.mark.parametrize(
    "url", [None, pytest.param(PG_URL, marks=POSTGRESQL)], ids=["sqlite", "postgresql"]
)
def test_publish_at_once_makes_one_release(tmp_path: Path, url: str | None) -> None:
    if url is None:
        url = f"sqlite:///{tmp_path / 'tuner.db'}"
    else:
        reset_postgresql(url)
    fill(url, PLAN, m_values=(1, 16))
    command = ("publish", "--device", "L20", "--db", url)
    processes = [start_tuner(*command, cwd=tmp_path) for _ in range(3)]
    results = [(p.communicate(timeout=120), p.returncode) for p in processes]
    assert [code for _, code in results] == [0, 0, 0], results
    lines = sorted(out.strip() for (out, _), _ in results)
    assert lines[:-1] == [UNCHANGED] * 2, lines
    assert lines[-1].startswith("published NVIDIA_L20 release 1: 1 file(s), content "), lines
    assert count(url, "releases") == 1
