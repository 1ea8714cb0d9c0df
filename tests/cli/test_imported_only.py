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
from tuner.kernels.dense.naming import config_file_name

runner = CliRunner()
NAME = config_file_name(576, 7168, "NVIDIA_L20")
SHIPPED = dump_config_file({1: SLOW, 4096: FAST})


def test_imported_only_device_is_exported_published_and_served(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'tuner.db'}"
    shipped = tmp_path / NAME
    shipped.write_text(SHIPPED)
    imported = runner.invoke(app, ["import", str(shipped), "--label", "vllm-0.33.0", "--db", db,
                                   "--no-check"])
    assert imported.exit_code == 0, imported.output
    assert imported.stdout.splitlines()[-1].startswith(
        "published NVIDIA_L20 release 1: 1 file(s), content ")
    out = tmp_path / "out"
    exported = runner.invoke(app, ["export", "--device", "NVIDIA_L20", "--out", str(out),
                                   "--db", db])
    assert exported.exit_code == 0, exported.output
    assert (out / NAME).read_text() == SHIPPED
    flat = " ".join(exported.stdout.split())
    assert ("M=1: imported from 'vllm-0.33.0', not measured here (no comparison with the "
            "default)") in flat
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
