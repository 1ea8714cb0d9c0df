"""HTTP routes for serving engineers: imports (token-protected, 4xx never 500, store unchanged),
SGLang spelling, mounts, the HTML report and /metrics."""

from __future__ import annotations

import io
import json
import sqlite3
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from api.app import create_app
from api.settings import Settings
from tests.storefill import DEFAULT, FAST, SLOW, TRITON, fill, publish, row_counts
from tuner.files.format import dump_config_file
from tuner.kernels.dense.naming import config_file_name, engine_file_name
from tuner.kernels.engines import SGLANG_NOTE

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PLAN = {
    (576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)],
    (576, 7168, 16): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 12.0)],
    (7168, 2048, 1): [(DEFAULT, True, "ok", 20.0), (FAST, False, "ok", 16.0)],
    (7168, 2048, 16): [(DEFAULT, True, "ok", 30.0), (SLOW, False, "ok", 15.0)],
}
NAME = config_file_name(576, 7168, "NVIDIA_L20")
SHIPPED = dump_config_file({1: SLOW, 2048: SLOW, 4096: FAST})


@pytest.fixture
def store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'tuner.db'}"
    fill(url, PLAN, m_values=(1, 16))
    publish(url)
    return url


@pytest.fixture
def client(store: str) -> Iterator[TestClient]:
    with TestClient(create_app(Settings(db_url=store, api_token=TOKEN))) as test_client:
        yield test_client


def post(client: TestClient, body: dict, headers: dict | None = AUTH, device: str = "L20"):
    return client.post(f"/devices/{device}/imports", json=body, headers=headers)


def test_import_then_merge(client: TestClient) -> None:
    response = post(client, {"file_name": NAME, "content": SHIPPED, "label": "vllm-0.33.0"})
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["family"], body["shape_params"]) == ("dense", "")
    assert (body["device_name"], body["N"], body["K"], body["m_keys"], body["note"]) == (
        "NVIDIA_L20",
        576,
        7168,
        [1, 2048, 4096],
        None,
    )
    assert body["coverage"]["grid_present"] == [1, 2048, 4096]
    assert body["coverage"]["summary"].startswith("3 of vLLM's 18 M values: 1, 2048, 4096")
    listed = client.get("/devices/NVIDIA_L20/imports").json()
    assert [(i["file_name"], i["label"]) for i in listed] == [(NAME, "vllm-0.33.0")]
    configs = client.get("/devices/L20/configs").json()
    merged = next(f for f in configs["files"] if f["N"] == 576)
    assert merged["m_keys"] == [1, 16, 2048, 4096] and merged["m_imported"] == [2048, 4096]
    assert "M=1: measured winner replaces the entry imported from 'vllm-0.33.0'" in merged["notes"]
    assert not any("faster" in n for n in merged["notes"] if "imported" in n)
    text = client.get(f"/devices/L20/configs/{NAME}").text
    assert json.loads(text) == {"1": FAST, "16": DEFAULT, "2048": SLOW, "4096": FAST}
    with zipfile.ZipFile(io.BytesIO(client.get("/devices/L20/configs.zip").content)) as opened:
        readme = opened.read("README.txt").decode()
    assert "  imported, not measured: M=2048, 4096" in readme.splitlines()


@pytest.mark.parametrize(
    ("headers", "code", "detail"),
    [
        (None, 401, "a valid 'Authorization: Bearer <token>' header is required"),
        ({"Authorization": "Bearer wrong"}, 401, "a valid 'Authorization: Bearer <token>'"),
    ],
)
def test_import_needs_the_token(client: TestClient, store: str, headers, code, detail) -> None:
    before = row_counts(store)
    response = post(client, {"file_name": NAME, "content": SHIPPED}, headers=headers)
    assert response.status_code == code and detail in response.json()["detail"]
    assert row_counts(store) == before


def test_writes_disabled_without_a_token(store: str) -> None:
    with TestClient(create_app(Settings(db_url=store))) as client:
        response = post(client, {"file_name": NAME, "content": SHIPPED})
    assert response.status_code == 403


@pytest.mark.parametrize(
    ("body", "device", "code", "detail"),
    [
        ({"file_name": NAME, "content": SHIPPED[:-9]}, "L20", 422, f"{NAME}: invalid JSON"),
        (
            {"file_name": NAME, "content": '{"1": {"BLOCK_SIZE_M": 16}}'},
            "L20",
            422,
            f"{NAME}: M=1: missing key(s) BLOCK_SIZE_N",
        ),
        (
            {"file_name": NAME, "content": SHIPPED.replace('"num_warps": 8', '"num_warps": 1e999')},
            "L20",
            422,
            "num_warps must be an integer, got inf",
        ),
        (
            {
                "file_name": NAME,
                "content": SHIPPED.replace(": 128,", ": 99999999999999999999999,", 1),
            },
            "L20",
            422,
            "is outside 1..65536",
        ),
        ({"file_name": NAME, "content": '{"1": {}, "1": {}}'}, "L20", 422, "duplicate key '1'"),
        ({"file_name": "config.json", "content": SHIPPED}, "L20", 422, "is not a config file name"),
        (
            {"file_name": NAME.replace("fp8", "int8"), "content": SHIPPED},
            "L20",
            422,
            "dtype int8_w8a8 is not fp8_w8a8",
        ),
        ({"file_name": NAME, "content": SHIPPED, "label": ""}, "L20", 422, "at least 1 character"),
        ({"file_name": NAME}, "L20", 422, "Field required"),
        (
            {"file_name": NAME, "content": SHIPPED},
            "H200",
            422,
            "device 'H200' is neither in the store (known: NVIDIA_L20) nor the file's device",
        ),
    ],
)
def test_bad_imports_are_4xx_and_change_nothing(
    client: TestClient, store: str, body: dict, device: str, code: int, detail: str
) -> None:
    before = row_counts(store)
    response = post(client, body, device=device)
    assert response.status_code == code, response.text
    assert detail in json.dumps(response.json()["detail"])
    assert row_counts(store) == before


def test_import_of_the_files_own_new_device(client: TestClient) -> None:
    name = config_file_name(576, 7168, "NVIDIA_H200")
    response = post(client, {"file_name": name, "content": SHIPPED}, device="H200")
    assert response.status_code == 201 and response.json()["device_name"] == "NVIDIA_H200"
    moved = post(client, {"file_name": name, "content": SHIPPED}, device="NVIDIA_L20")
    assert moved.json()["note"] == "stored for NVIDIA_L20; the file is named for NVIDIA_H200"
    missing = client.get("/devices/nope/imports")
    assert missing.status_code == 404
    assert missing.json() == {"detail": "unknown device 'nope'; known: NVIDIA_H200, NVIDIA_L20"}


def test_a_device_with_sweeps_and_no_imports_lists_none(client: TestClient) -> None:
    listed = client.get("/devices/L20/imports")
    assert listed.status_code == 200 and listed.json() == []


def test_sglang_spelling_on_list_file_and_zip(client: TestClient) -> None:
    listed = client.get("/devices/L20/configs", params={"engine": "sglang"}).json()
    spaced = engine_file_name(NAME, "sglang")
    assert [f["file_name"] for f in listed["files"]][0] == spaced
    assert (listed["engine"], listed["engine_note"]) == ("sglang", SGLANG_NOTE)
    for asked in (NAME, spaced):
        file = client.get(f"/devices/L20/configs/{asked}", params={"engine": "sglang"})
        assert file.status_code == 200
        assert file.headers["content-disposition"] == f'attachment; filename="{spaced}"'
        assert file.content == client.get(f"/devices/L20/configs/{NAME}").content
    archive = client.get("/devices/L20/configs.zip", params={"engine": "sglang"})
    assert 'filename="NVIDIA_L20-configs-sglang.zip"' in archive.headers["content-disposition"]
    with zipfile.ZipFile(io.BytesIO(archive.content)) as opened:
        assert spaced in opened.namelist()
        readme = opened.read("README.txt").decode()
    assert SGLANG_NOTE in readme
    assert "    0.5.21 and later: sglang/kernels/ops/gemm/configs\n" in readme
    assert "    before 0.5.16: sglang/srt/layers/quantization/configs\n" in readme
    assert client.get("/devices/L20/configs", params={"engine": "trt"}).status_code == 422


def test_mounts_route(client: TestClient) -> None:
    text = client.get("/devices/L20/mounts", params={"format": "compose"}).text
    assert f"      source: $PWD/configs/{NAME}" in text.splitlines()
    # storefill's environment: the versions its winners were timed with, in the header
    assert f"# Tuned with torch 2.11.0, triton {TRITON}, kernels of builtin." in text.splitlines()
    bad = client.get("/devices/L20/mounts", params={"site_packages": "relative"})
    assert bad.status_code == 422 and "--site-packages must be an absolute path" in bad.text
    assert client.get("/devices/L20/mounts", params={"format": "helm"}).status_code == 422
    assert client.get("/devices/H100/mounts").status_code == 404


def test_metrics(client: TestClient) -> None:
    client.get(f"/devices/L20/configs/{NAME}")
    etag = client.get(f"/devices/L20/configs/{NAME}").headers["etag"]
    client.get(f"/devices/L20/configs/{NAME}", headers={"If-None-Match": etag})
    client.get("/devices/L20/configs.zip")
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    lines = set(response.text.splitlines())
    for expected in (
        "tuner_store_up 1.0",
        'tuner_trials{status="ok"} 8.0',
        'tuner_trials{status="crashed"} 0.0',
        'tuner_tasks{state="done"} 4.0',
        'tuner_tasks{state="pending"} 0.0',
        "tuner_sweeps 1.0",
        "tuner_imports 0.0",
        'tuner_downloads_total{route="configs/file",status="200"} 2.0',
        'tuner_downloads_total{route="configs/file",status="304"} 1.0',
        'tuner_downloads_total{route="configs.zip",status="200"} 1.0',
    ):
        assert expected in lines, expected


def test_metrics_when_the_store_is_down(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as connection:  # tables, no schema revision: open_store refuses
        connection.execute("CREATE TABLE foo (x INTEGER)")
    with TestClient(create_app(Settings(db_url=f"sqlite:///{path}"))) as client:
        response = client.get("/metrics")
    assert response.status_code == 200 and "tuner_store_up 0.0" in response.text


def test_report_has_a_chart_per_shape(client: TestClient) -> None:
    post(client, {"file_name": NAME, "content": SHIPPED, "label": "vllm-0.33.0"})
    response = client.get("/devices/L20/report")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    for key in ("576x7168", "7168x2048"):
        assert html.count(f'class="chart latency shape-{key}"') == 1
        assert html.count(f'class="chart speedup shape-{key}"') == 1
    assert 'data-series="winner" data-x="1" data-y="6"' in html
    assert 'data-series="default config" data-x="16" data-y="30"' in html
    # speedup 30 / 15 = 2 at M=16 of (7168, 2048)
    assert 'data-series="speedup over default" data-x="16" data-y="2"' in html
    assert "imported from &#x27;vllm-0.33.0&#x27; (not measured)" in html
    assert "<td>16</td><td class=l>64x128x128 g32 w4 s2</td><td>10.0</td><td>10.0</td>" in html
    assert "default (fastest)" in html
    assert (
        "No winner for M = 32 (decode, small batches); 2048, 4096 (prefill): vLLM will use "
        "the nearest key there."
    ) in html
    assert f"<td class=l>2.11.0</td><td class=l>{TRITON}</td>" in html
    # (7168, 2048), M=1, 16 us: A 2048 + B 7168*2048 + As 4*16 + Bs 4*56*16 + C 2*7168 bytes.
    assert "<td>918.8</td><td>1.84</td>" in html  # 14,700,096 bytes, 29,360,128 flops
    assert client.get("/devices/nope/report").status_code == 404


def test_report_shows_roofline_ratios_from_the_stored_ceilings(store: str) -> None:
    from db import repo
    from db.connection import open_store, session_scope

    engine = open_store(store)
    with session_scope(engine) as session:
        [environment_id] = [
            row[0] for row in session.execute(text("SELECT environment_id FROM environments"))
        ]
        repo.record_ceilings(
            session,
            environment_id=environment_id,
            ceilings={"copy_gbps": 4000.0, "fp8_mm_tflops": 1000.0},
        )
    engine.dispose()
    with TestClient(create_app(Settings(db_url=store, api_token=TOKEN))) as client:
        html = client.get("/devices/L20/report").text
    assert "<th>TFLOP/s</th><th>% copy BW</th><th>% FP8 mm</th>" in html
    # (7168, 2048), M=1, 16 us: 918.8 GB/s of 4000 is 23.0%; 1.84 TFLOP/s of 1000 is 0.2%.
    assert "<td>918.8</td><td>1.84</td><td>23.0%</td><td>0.2%</td><td class=l>memory</td>" in html


def test_an_imported_moe_file_is_served_and_reported_beside_the_dense_files(
    client: TestClient,
) -> None:
    moe_name = "E=4,N=64,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"
    content = dump_config_file({1: SLOW, 64: FAST})
    response = post(client, {"file_name": moe_name, "content": content, "label": "vllm"})
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["family"], body["shape_params"], body["N"], body["K"]) == ("moe", "E=4", 64, 0)
    listed = client.get("/devices/NVIDIA_L20/imports").json()
    assert sorted((i["family"], i["shape_params"], i["file_name"]) for i in listed) == [
        ("moe", "E=4", moe_name)
    ]
    configs = client.get("/devices/L20/configs").json()
    names = [f["file_name"] for f in configs["files"]]
    assert moe_name in names and NAME in names
    assert client.get(f"/devices/L20/configs/{moe_name}").text == content
    report = client.get("/devices/L20/report")
    assert report.status_code == 200, report.text
    assert "MoE E=4, N=64 (imported file)" in report.text
