"""A device whose vLLM key holds '(' and ')' is exported, published and served over HTTP under
its own name, named as a user types the GPU's name (the name rule: tests/tuner/inputs)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from tests.cli.common import PLAN, ok, service
from tests.storefill import DEFAULT, FAST, fill
from tuner.kernels.dense.family import config_file_name

INTEL = "Intel(R)_Data_Center_GPU_Max_1550"
TYPED = "Intel(R) Data Center GPU Max 1550"  # the GPU's own name, as a user would type it


def test_a_device_with_parentheses_exports_and_serves(tmp_path: Path, db) -> None:
    fill(db, PLAN, device_name=INTEL, m_values=(1, 16))
    out = tmp_path / "out"
    ok("export", "--device", TYPED, "--out", out, "--db", db)
    name = config_file_name(576, 7168, INTEL)
    assert [p.name for p in out.iterdir()] == [name]
    exported = (out / name).read_bytes()
    assert json.loads(exported) == {"1": FAST, "16": DEFAULT}
    ok("publish", "--device", TYPED, "--db", db)
    with service(db) as client:
        listed = client.get(f"/devices/{quote(INTEL)}/configs")
        assert [f["file_name"] for f in listed.json()["files"]] == [name], listed.text
        assert client.get(f"/devices/{quote(INTEL)}/configs/{quote(name)}").content == exported
        assert client.get(f"/devices/{quote(TYPED)}/configs").status_code == 200
