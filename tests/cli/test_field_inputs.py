"""A device whose vLLM key holds '(' and ')' is exported, published and served over HTTP under
its own name, named as a user types the GPU's name (the name rule: tests/tuner/inputs)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from tests.cli.common import invoke
from tests.storefill import DEFAULT, FAST, SLOW, fill
from tuner.kernels.dense.family import config_file_name

INTEL = "Intel(R)_Data_Center_GPU_Max_1550"
TYPED = "Intel(R) Data Center GPU Max 1550"  # the GPU's own name, as a user would type it
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
}


def test_a_device_with_parentheses_exports_and_serves(tmp_path: Path, db) -> None:
    fill(db, PLAN, device_name=INTEL, m_values=(1, 16))
    out = tmp_path / "out"
    result = invoke("export", "--device", TYPED, "--out", out, "--db", db)
    assert result.exit_code == 0, result.output
    name = config_file_name(576, 7168, INTEL)
    assert [p.name for p in out.iterdir()] == [name]
    exported = (out / name).read_bytes()
    assert json.loads(exported) == {"1": FAST, "16": DEFAULT}
    published = invoke("publish", "--device", TYPED, "--db", db)
    assert published.exit_code == 0, published.output
    with TestClient(create_app(Settings(db_url=db))) as client:
        listed = client.get(f"/devices/{quote(INTEL)}/configs")
        assert [f["file_name"] for f in listed.json()["files"]] == [name], listed.text
        assert client.get(f"/devices/{quote(INTEL)}/configs/{quote(name)}").content == exported
        assert client.get(f"/devices/{quote(TYPED)}/configs").status_code == 200
