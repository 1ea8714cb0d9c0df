"""`tuner publish`: a device's merged files frozen as numbered releases in the
store, their bytes exactly those of `tuner export`, identical content stored once."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

from sqlalchemy import text
from typer.testing import CliRunner

from db.connection import open_store, session_scope
from db.repo import blob, get_release, list_releases
from tests.storefill import DEFAULT, FAST, SLOW, TRITON, fill
from tuner.cli.app import app

runner = CliRunner()
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}
NAME = "N=576,K=7168,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"


def _count(url: str, table: str) -> int:
    engine = open_store(url)
    try:
        with engine.connect() as connection:
            return connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
    finally:
        engine.dispose()


def test_publish_freezes_the_exported_bytes_once(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    fill(db, PLAN, m_values=(1, 16))
    first = runner.invoke(app, ["publish", "--device", "L20", "--db", db])
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith("published NVIDIA_L20 release 1: 1 file(s), content ")
    tuned = f"; tuned with torch 2.11.0, triton {TRITON}, kernels of builtin"
    assert first.stdout.strip().endswith(tuned)
    again = runner.invoke(app, ["publish", "--device", "NVIDIA_L20", "--db", db])
    assert again.stdout.strip() == (
        "NVIDIA_L20: files unchanged since release 1; no new release" + tuned
    )
    exported = runner.invoke(
        app, ["export", "--device", "L20", "--out", str(tmp_path / "o"), "--db", db]
    )
    assert exported.exit_code == 0, exported.output
    expected = (tmp_path / "o" / NAME).read_bytes()
    engine = open_store(db)
    with session_scope(engine) as session:
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
        assert [
            (t["gpu_name"], t["driver"], t["winners"]) for t in release.summary["tuned_with"]
        ] == [("NVIDIA L20", "580.1", 2)]
    engine.dispose()
    # one file blob and two zip blobs (vllm, sglang), however often it is published
    assert _count(db, "blobs") == 3 and _count(db, "releases") == 1


def test_new_winner_makes_release_2_and_keeps_release_1(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    fill(db, PLAN, m_values=(1, 16))
    runner.invoke(app, ["publish", "--device", "L20", "--db", db])
    fill(
        db,
        {(576, 7168, 32): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 5.0)]},
        m_values=(32,),
    )
    result = runner.invoke(app, ["publish", "--device", "L20", "--db", db])
    assert result.stdout.startswith("published NVIDIA_L20 release 2: 1 file(s)"), result.output
    engine = open_store(db)
    with session_scope(engine) as session:
        one = get_release(session, device_name="NVIDIA_L20", number=1)
        two = get_release(session, device_name="NVIDIA_L20")
        assert (one.files[0].detail["m_keys"], two.files[0].detail["m_keys"]) == (
            [1, 16],
            [1, 16, 32],
        )
        assert one.files[0].sha256 != two.files[0].sha256
    engine.dispose()


def test_nothing_to_publish_is_exit_1(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 't.db'}"
    fill(db, {(576, 7168, 1): [(DEFAULT, True, "ok", 10.0)]}, m_values=(1, 16))
    result = runner.invoke(app, ["publish", "--device", "L20", "--db", db])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: nothing to publish for NVIDIA_L20: no complete file; e.g. N=576, K=7168: "
        "no winner yet for M=16"
    )
    assert _count(db, "releases") == 0
