"""A device whose files were imported and never swept: its files are exported, published,
listed, reported and downloaded like any other, every entry marked imported, not measured, and
an entry that cannot launch there left out of every output."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import yaml

from db.files import record_import
from tests.cli.common import invoke, ok, service, session_on
from tests.storefill import DEFAULT, FAST, SLOW, fill
from tuner.files.format import dump_config_file
from tuner.kernels.dense.family import config_file_name

NAME = config_file_name(576, 7168, "NVIDIA_L20")
NAME_B = config_file_name(1536, 7168, "NVIDIA_L20")
SHIPPED = dump_config_file({1: SLOW, 4096: FAST})
LEFT_OUT = "config 128x256x128 g64 w8 s5 needs 197632 bytes of shared memory"
SOURCES = "2 file(s) from 'shipped L20', 'vllm-0.33.0'; 1 entry left out, cannot launch there"


def import_shipped(tmp_path: Path, *flags: str) -> str:
    """A store holding NAME imported by `tuner import` as 'vllm-0.33.0', unchecked."""
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    (tmp_path / NAME).write_text(SHIPPED)
    ok("import", str(tmp_path / NAME), "--label", "vllm-0.33.0", "--db", db, "--no-check", *flags)
    return db


def import_two_sources(tmp_path: Path) -> str:
    """An L20 store with imports only: NAME (unchecked), and NAME_B recorded as `tuner
    import`'s launch check stores it on sm89 (M=1 left out)."""
    db = import_shipped(tmp_path, "--no-publish")
    with session_on(db) as session:
        shape = {"device_name": "NVIDIA_L20", "N": 1536, "K": 7168, "block_shape": (128, 128)}
        shape |= {"family": "dense", "shape_params": ""}
        record_import(
            session,
            **shape,
            label="shipped L20",
            file_name=NAME_B,
            sha256="ab" * 32,
            configs={1: SLOW, 64: FAST},
            checked_arch=89,
            cannot_launch={1: LEFT_OUT},
        )
    return db


def test_imported_only_device_is_exported_published_and_served(tmp_path: Path) -> None:
    db = import_shipped(tmp_path)
    out = tmp_path / "out"
    exported = ok("export", "--device", "NVIDIA_L20", "--out", str(out), "--db", db)
    assert (out / NAME).read_text() == SHIPPED
    note = "M=1: imported from 'vllm-0.33.0', not measured here (no comparison with the default)"
    assert note in " ".join(exported.stdout.split())
    with service(db) as client:
        (item,) = client.get("/devices/NVIDIA_L20/configs").json()["files"]
        assert (item["file_name"], item["m_keys"]) == (NAME, [1, 4096])
        assert client.get(f"/devices/NVIDIA_L20/configs/{NAME}").content == SHIPPED.encode()
        assert client.get("/devices/NVIDIA_L20/preview/configs").status_code == 200
        assert client.get("/devices/NVIDIA_L20/imports").status_code == 200
        (release,) = client.get("/devices/NVIDIA_L20/releases").json()
    assert release["number"] == 1  # `tuner import` published it


def test_imported_only_device_is_listed_reported_and_named_by_winners(tmp_path: Path) -> None:
    db = import_two_sources(tmp_path)
    with service(db) as client:
        (device,) = client.get("/devices").json()
        html = client.get("/devices/L20/report").text
    assert (device["device_name"], device["shapes"], device["tuned_with"]) == ("NVIDIA_L20", [], [])
    imported = [
        (i["label"], i["file_name"], i["N"], i["m_keys"], i["m_left_out"])
        for i in device["imported"]
    ]
    assert imported == [
        ("vllm-0.33.0", NAME, 576, [1, 4096], []),
        ("shipped L20", NAME_B, 1536, [1, 64], [1]),
    ]
    assert device["imported"][0]["block_shape"] == [128, 128]
    assert device["note"] == (
        f"only imported files ({SOURCES}), no sweeps: nothing was measured here; GET "
        "/devices/NVIDIA_L20/imports lists them, GET /devices/NVIDIA_L20/report shows their "
        "entries"
    )
    html_sources = SOURCES.replace("'", "&#39;")
    assert "No shapes in the store" not in html and "; 2 shape(s)." in html
    assert (
        f'<p class="note" id="imported-only">only imported files ({html_sources}), no sweeps: '
        "nothing was measured here; their entries are below, marked not measured, and the "
        "files under Imported files.</p>"
    ) in html
    assert (
        f"<tr><td class=l>vllm-0.33.0</td><td class=l>{NAME}</td><td>576</td><td>7168</td>"
        "<td class=l>1, 4096</td><td class=l>not checked</td><td class=l>none</td></tr>"
    ) in html
    assert (
        f"<tr><td class=l>shipped L20</td><td class=l>{NAME_B}</td><td>1536</td><td>7168</td>"
        f"<td class=l>1, 64</td><td class=l>sm89</td><td class=l>M=1: {LEFT_OUT}</td></tr>"
    ) in html
    section = html[html.index('id="shape-1536x7168"') :]
    section = section[: section.index("</section>")]
    assert (
        "M grid requested: none; measured winners for 0 M; imported entries, not measured, "
        "for 1 M (from &#39;shipped L20&#39;)."
    ) in section
    assert (
        "<tr><td>1</td><td class=l>-</td>" + "<td>-</td>" * 5 + "<td class=l>left out: imported "
        "from &#39;shipped L20&#39;, cannot launch here</td><td>-</td><td class=l>-</td></tr>"
    ) in section
    # An imported row's cells: tests/api/test_report.py (test_rooflines).
    winners = invoke("winners", "--device", "L20", "--db", db)
    assert winners.stdout.splitlines() == [
        f"NVIDIA_L20: no winners, it has only imported files ({SOURCES}), never swept here; "
        "`tuner export --device NVIDIA_L20 --out DIR` writes them with a note per entry, GET "
        "/devices/NVIDIA_L20/imports lists them"
    ], winners.output


def test_swept_device_lists_its_imports_without_the_imported_only_note(tmp_path: Path) -> None:
    db = import_two_sources(tmp_path)
    fill(
        db,
        {(576, 7168, 1): [(DEFAULT, True, "ok", 20.0), (FAST, False, "ok", 10.0)]},
        m_values=(1,),
    )
    with service(db) as client:
        (device,) = client.get("/devices").json()
        html = client.get("/devices/NVIDIA_L20/report").text
    assert device["note"] is None
    left_out = [(i["label"], i["m_left_out"]) for i in device["imported"]]
    assert left_out == [("vllm-0.33.0", []), ("shipped L20", [1])]
    assert [s["N"] for s in device["shapes"]] == [576]
    assert 'id="imported-only"' not in html and '<section id="imports">' in html
    winners = invoke("winners", "--device", "L20", "--db", db)
    assert "only imported files" not in winners.output
    assert winners.stdout.splitlines()[3].split() == (
        "576 7168 1 16x64x128 g1 w4 10.0 20.0 2.00x -".split()
    ), winners.output


def test_an_entry_that_cannot_launch_is_left_out_of_every_output(tmp_path: Path) -> None:
    db = import_two_sources(tmp_path)
    line = f"left out {NAME_B} M=1 (imported from 'shipped L20'): {LEFT_OUT}"
    exported = ok("export", "--device", "L20", "--out", str(tmp_path), "--db", db)
    assert json.loads((tmp_path / NAME_B).read_text()) == {"64": FAST}
    assert exported.stderr.splitlines() == [
        "NVIDIA_L20: imported entries only (`tuner import`), never measured here",
        line,
        "1 entry left out: they cannot launch on NVIDIA_L20",
    ]
    published = invoke("publish", "--device", "L20", "--db", db)
    assert published.stdout.strip().endswith("; 1 entry left out, cannot launch there")
    mounts = invoke("mounts", "--device", "L20", "--format", "k8s", "--db", db)
    assert f"# {line}" in mounts.stdout.splitlines()
    data = [doc for doc in yaml.safe_load_all(mounts.stdout) if doc and "data" in doc][0]["data"]
    assert json.loads(data["n1536-k7168-b128x128.json"]) == {"64": FAST}
    with service(db) as client:
        text = client.get("/devices/L20/mounts", params={"format": "k8s"}).text
        (release,) = client.get("/devices/L20/releases").json()
        archive = client.get("/devices/L20/configs.zip").content
    assert text == mounts.stdout
    assert release["summary"]["left_out"] == [line]
    with zipfile.ZipFile(io.BytesIO(archive)) as zipped:
        assert json.loads(zipped.read(NAME_B)) == {"64": FAST}
        assert f"- {line}" in zipped.read("README.txt").decode().splitlines()
