"""A device whose files were imported and never swept: its files are
exported, published and downloaded like any other, every entry marked imported, not measured."""

from __future__ import annotations

import json
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.settings import Settings
from tests.storefill import FAST, SLOW
from tuner.cli.app import app
from tuner.files.format import dump_config_file
from tuner.kernels.dense.family import config_file_name

runner = CliRunner()
NAME = config_file_name(576, 7168, "NVIDIA_L20")
SHIPPED = dump_config_file({1: SLOW, 4096: FAST})


def test_imported_only_device_is_exported_published_and_served(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    shipped = tmp_path / NAME
    shipped.write_text(SHIPPED)
    imported = runner.invoke(
        app, ["import", str(shipped), "--label", "vllm-0.33.0", "--db", db, "--no-check"]
    )
    assert imported.exit_code == 0, imported.output
    assert imported.stdout.splitlines()[-1].startswith(
        "published NVIDIA_L20 release 1: 1 file(s), content "
    )
    out = tmp_path / "out"
    exported = runner.invoke(
        app, ["export", "--device", "NVIDIA_L20", "--out", str(out), "--db", db]
    )
    assert exported.exit_code == 0, exported.output
    assert (out / NAME).read_text() == SHIPPED
    flat = " ".join(exported.stdout.split())
    assert (
        "M=1: imported from 'vllm-0.33.0', not measured here (no comparison with the default)"
    ) in flat
    with TestClient(create_app(Settings(db_url=db))) as client:
        listed = client.get("/devices/NVIDIA_L20/configs")
        assert listed.status_code == 200, listed.text
        (item,) = listed.json()["files"]
        assert item["file_name"] == NAME and item["m_keys"] == [1, 4096]
        one = client.get(f"/devices/NVIDIA_L20/configs/{NAME}")
        assert one.status_code == 200 and one.content == SHIPPED.encode()
        assert json.loads(one.content) == {"1": SLOW, "4096": FAST}
        preview = client.get("/devices/NVIDIA_L20/preview/configs")
        assert preview.status_code == 200, preview.text
        assert client.get("/devices/NVIDIA_L20/imports").status_code == 200


LEFT_OUT = "config 128x256x128 g64 w8 s5 needs 197632 bytes of shared memory"
NAME_B = config_file_name(1536, 7168, "NVIDIA_L20")


def _import_two_sources(tmp_path: Path) -> str:
    """An L20 store with imports only: one file by `tuner import` (unchecked), one recorded as
    `tuner import`'s launch check stores it on sm89 (M=1 left out)."""
    from db import repo
    from db.connection import open_store, session_scope

    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    shipped = tmp_path / NAME
    shipped.write_text(SHIPPED)
    imported = runner.invoke(
        app,
        [
            "import",
            str(shipped),
            "--label",
            "vllm-0.33.0",
            "--db",
            db,
            "--no-check",
            "--no-publish",
        ],
    )
    assert imported.exit_code == 0, imported.output
    engine = open_store(db)
    try:
        with session_scope(engine) as session:
            repo.record_import(
                session,
                device_name="NVIDIA_L20",
                N=1536,
                K=7168,
                block_shape=(128, 128),
                label="shipped L20",
                file_name=NAME_B,
                sha256="ab" * 32,
                configs={1: SLOW, 64: FAST},
                checked_arch=89,
                cannot_launch={1: LEFT_OUT},
                family="dense",
                shape_params="",
            )
    finally:
        engine.dispose()
    return db


def test_imported_only_device_is_listed_with_its_files(tmp_path: Path) -> None:
    db = _import_two_sources(tmp_path)
    with TestClient(create_app(Settings(db_url=db))) as client:
        listed = client.get("/devices").json()
    (device,) = listed
    assert device["device_name"] == "NVIDIA_L20"
    assert device["shapes"] == [] and device["tuned_with"] == []
    assert device["imported"] == [
        {
            "label": "vllm-0.33.0",
            "file_name": NAME,
            "N": 576,
            "K": 7168,
            "block_shape": [128, 128],
            "m_keys": [1, 4096],
            "m_left_out": [],
        },
        {
            "label": "shipped L20",
            "file_name": NAME_B,
            "N": 1536,
            "K": 7168,
            "block_shape": [128, 128],
            "m_keys": [1, 64],
            "m_left_out": [1],
        },
    ]
    assert device["note"] == (
        "only imported files (2 file(s) from 'shipped L20', 'vllm-0.33.0'; 1 entry left out, "
        "cannot launch there), no sweeps: nothing was measured here; GET "
        "/devices/NVIDIA_L20/imports lists them, GET /devices/NVIDIA_L20/report shows their "
        "entries"
    )


def test_imported_only_report_shows_the_files_their_labels_and_what_was_left_out(
    tmp_path: Path,
) -> None:
    db = _import_two_sources(tmp_path)
    with TestClient(create_app(Settings(db_url=db))) as client:
        html = client.get("/devices/L20/report").text
    assert "No shapes in the store" not in html
    assert "; 2 shape(s)." in html
    assert (
        '<p class="note" id="imported-only">only imported files (2 file(s) from '
        "&#x27;shipped L20&#x27;, &#x27;vllm-0.33.0&#x27;; 1 entry left out, cannot launch "
        "there), no sweeps: nothing was measured here; their entries are below, marked not "
        "measured, and the files under Imported files.</p>"
    ) in html
    assert (
        "<tr><td class=l>vllm-0.33.0</td><td class=l>" + NAME + "</td><td>576</td>"
        "<td>7168</td><td class=l>1, 4096</td><td class=l>not checked</td>"
        "<td class=l>none</td></tr>"
    ) in html
    assert (
        "<tr><td class=l>shipped L20</td><td class=l>" + NAME_B + "</td><td>1536</td>"
        "<td>7168</td><td class=l>1, 64</td><td class=l>sm89</td>"
        f"<td class=l>M=1: {LEFT_OUT}</td></tr>"
    ) in html
    section = html[html.index('id="shape-1536x7168"') :]
    section = section[: section.index("</section>")]
    assert (
        "M grid requested: none; measured winners for 0 M; imported entries, not measured, "
        "for 1 M (from &#x27;shipped L20&#x27;)."
    ) in section
    assert (
        "<tr><td>1</td><td class=l>-</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td>"
        "<td class=l>left out: imported from &#x27;shipped L20&#x27;, cannot launch here</td>"
        "<td>-</td><td class=l>-</td></tr>"
    ) in section
    assert (
        "<tr><td>64</td><td class=l>16x64x128 g1 w4 s3</td><td>-</td><td>-</td><td>-</td>"
        "<td>-</td><td>-</td><td class=l>imported from &#x27;shipped L20&#x27; (not "
        "measured)</td>"
    ) in section


def test_winners_of_an_imported_only_device_says_why_in_one_line(tmp_path: Path) -> None:
    db = _import_two_sources(tmp_path)
    result = runner.invoke(app, ["winners", "--device", "L20", "--db", db])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "NVIDIA_L20: no winners, it has only imported files (2 file(s) from 'shipped L20', "
        "'vllm-0.33.0'; 1 entry left out, cannot launch there), never swept here; `tuner export "
        "--device NVIDIA_L20 --out DIR` writes them with a note per entry, GET "
        "/devices/NVIDIA_L20/imports lists them"
    ]


def test_swept_device_lists_its_imports_without_the_imported_only_note(tmp_path: Path) -> None:
    from tests.storefill import DEFAULT, fill

    db = _import_two_sources(tmp_path)
    fill(
        db,
        {(576, 7168, 1): [(DEFAULT, True, "ok", 20.0), (FAST, False, "ok", 10.0)]},
        m_values=(1,),
    )
    with TestClient(create_app(Settings(db_url=db))) as client:
        (device,) = client.get("/devices").json()
        html = client.get("/devices/NVIDIA_L20/report").text
    assert device["note"] is None
    assert [(i["label"], i["m_left_out"]) for i in device["imported"]] == [
        ("vllm-0.33.0", []),
        ("shipped L20", [1]),
    ]
    assert [s["N"] for s in device["shapes"]] == [576]
    assert 'id="imported-only"' not in html and '<section id="imports">' in html
    winners = runner.invoke(app, ["winners", "--device", "L20", "--db", db])
    assert winners.exit_code == 0, winners.output
    assert "only imported files" not in winners.output
    assert winners.stdout.splitlines()[3].split() == [
        "576",
        "7168",
        "1",
        "16x64x128",
        "g1",
        "w4",
        "10.0",
        "20.0",
        "2.00x",
        "-",
    ]


def test_an_entry_that_cannot_launch_is_left_out_of_every_output(tmp_path: Path) -> None:
    import io
    import zipfile

    import yaml

    db = _import_two_sources(tmp_path)
    line = f"left out {NAME_B} M=1 (imported from 'shipped L20'): {LEFT_OUT}"
    exported = runner.invoke(app, ["export", "--device", "L20", "--out", str(tmp_path), "--db", db])
    assert exported.exit_code == 0, exported.output
    assert json.loads((tmp_path / NAME_B).read_text()) == {"64": FAST}
    assert exported.stderr.splitlines() == [
        "NVIDIA_L20: imported entries only (`tuner import`), never measured here",
        line,
        "1 entry left out: they cannot launch on NVIDIA_L20",
    ]
    published = runner.invoke(app, ["publish", "--device", "L20", "--db", db])
    assert published.stdout.strip().endswith("; 1 entry left out, cannot launch there")
    mounts = runner.invoke(app, ["mounts", "--device", "L20", "--format", "k8s", "--db", db])
    assert f"# {line}" in mounts.stdout.splitlines()
    data = [doc for doc in yaml.safe_load_all(mounts.stdout) if doc and "data" in doc][0]["data"]
    assert json.loads(data["n1536-k7168-b128x128.json"]) == {"64": FAST}
    with TestClient(create_app(Settings(db_url=db))) as client:
        text = client.get("/devices/L20/mounts", params={"format": "k8s"}).text
        (release,) = client.get("/devices/L20/releases").json()
        archive = client.get("/devices/L20/configs.zip").content
    assert text == mounts.stdout
    assert release["summary"]["left_out"] == [line]
    with zipfile.ZipFile(io.BytesIO(archive)) as zipped:
        assert json.loads(zipped.read(NAME_B)) == {"64": FAST}
        assert f"- {line}" in zipped.read("README.txt").decode().splitlines()
