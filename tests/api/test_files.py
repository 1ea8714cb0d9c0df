"""The device, release and preview routes on the shared store (tests/api/conftest.py): exact
JSON, bytes, ETags and zip members; current trials unless ?allow_stale; every 4xx with its
detail."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from api.settings import Settings
from tests.api.conftest import DEVICE, ENV, FILE_A, FILE_B, MID, SHAPE_A, VERDICTS
from tests.storefill import DEFAULT, FAST, SLOW, TRITON, fill, publish
from tuner.files.format import dump_config_file
from tuner.files.provenance import current_kernel_hash, installed_triton_minor
from tuner.kernels.dense.family import config_file_name, engine_file_name

TEXT_A = dump_config_file({1: FAST, 16: DEFAULT, 32: MID})  # release 1's only file
SHA_A = hashlib.sha256(TEXT_A.encode()).hexdigest()
NOTE_16 = (
    "M=16: best config 128x256x128 g64 w8 s5 (10.00 us) is not faster than the default "
    "(10.00 us); emitting the default config"
)
WARNINGS_A = [f"M={M} is not in the file: vLLM will use the M=32 entry" for M in (2048, 4096)]
SKIPPED_B = "no winner yet for M=16, 32; M=16 only have trials of another kernel or Triton"


def _env(kernel_hash: str, triton: str, trials: int, winners: int, current: bool) -> dict:
    found = {"gpu_name": "NVIDIA L20", **ENV, "triton": triton, "kernel_hash": kernel_hash}
    found |= {"trials": trials, "kernel_source": "builtin", "vllm": ""}
    return found | {"winners": winners, "current": current}


def test_devices_list_coverage_and_what_the_files_were_tuned_with(client: TestClient) -> None:
    h200, l20 = client.get("/devices").json()
    assert h200["device_name"] == "NVIDIA_H200" and h200["shapes"][0]["m_stale"] == [1]
    assert l20["current"] == {
        "kernel_hash": current_kernel_hash(),
        "triton_minor": installed_triton_minor(),
    }
    assert l20["tuned_with"] == [
        _env(current_kernel_hash(), TRITON, 11, 4, True),
        _env(current_kernel_hash(), "3.5.0", 2, 0, False),
        _env("0ld", TRITON, 1, 0, False),
    ]
    coverage = [
        (s["file_name"], s["m_covered"], s["m_stale"], s["complete"]) for s in l20["shapes"]
    ]
    assert coverage == [(FILE_A, [1, 16, 32], [], True), (FILE_B, [1], [16], False)]
    assert (l20["imported"], l20["note"]) == ([], None)
    (_, stale) = client.get("/devices", params={"allow_stale": "true"}).json()
    assert [s["m_covered"] for s in stale["shapes"]] == [[1, 16, 32], [1, 16]]
    assert [t["winners"] for t in stale["tuned_with"]] == [3, 1, 1]


def test_the_comparisons_of_a_device(client: TestClient) -> None:
    (run,) = client.get("/devices/L20/comparisons").json()
    got = (run["comparison_id"], run["model"], run["kernel_source"], run["vllm"])
    assert got == (1, "tiny", "vllm", "0.33.0")
    assert run["verdicts"] == VERDICTS
    assert [(p["backend"], p["status"], p["latency_us"], p["note"]) for p in run["points"]] == [
        ("triton-default", "ok", 10.0, "default"),
        ("triton-tuned", "ok", 5.0, "16x64 g1"),
        ("vllm-marlin", "unavailable", None, "not wired"),
    ]
    assert client.get("/devices/H200/comparisons").json() == []


def test_a_released_file_is_its_exact_bytes_with_etag_and_sha256(client: TestClient) -> None:
    response = client.get(f"/devices/{DEVICE}/configs/{FILE_A}")
    assert response.content == TEXT_A.encode()
    assert dict(response.headers) | {"content-length": ""} == {
        "content-type": "application/json",
        "content-length": "",
        "etag": f'"{SHA_A}"',
        "cache-control": "no-cache",
        "x-tuner-release": "1",
        "content-disposition": f'attachment; filename="{FILE_A}"',
    }
    for cached in (f'"{SHA_A}"', f'W/"{SHA_A}"', f'"x", "{SHA_A}"', "*"):
        again = client.get(f"/devices/{DEVICE}/configs/{FILE_A}", headers={"If-None-Match": cached})
        assert (again.status_code, again.content, again.headers["etag"]) == (304, b"", f'"{SHA_A}"')
    stale = client.get(f"/devices/{DEVICE}/configs/{FILE_A}", headers={"If-None-Match": '"x"'})
    assert stale.content == TEXT_A.encode()
    sglang = engine_file_name(FILE_A, "sglang")
    for alias in ("L20", "NVIDIA%20L20", "nvidia_l20"):  # named as `--device` names it
        for asked in (FILE_A, sglang):
            spelled = client.get(f"/devices/{alias}/configs/{asked}", params={"engine": "sglang"})
            assert spelled.content == TEXT_A.encode()
            assert spelled.headers["content-disposition"] == f'attachment; filename="{sglang}"'


def test_the_release_listing(client: TestClient) -> None:
    listed = client.get("/devices/L20/configs").json()
    assert listed == {
        "device_name": DEVICE,
        "files": [
            {
                "file_name": FILE_A,
                "N": 5120,
                "K": 3072,
                "block_shape": [128, 128],
                "sha256": SHA_A,
                "m_keys": [1, 16, 32],
                "partial": False,
                "m_missing": [],
                "notes": [NOTE_16],
                "warnings": WARNINGS_A,
                "m_imported": [],
            }
        ],
        "skipped": [
            {
                "N": 7168,
                "K": 5120,
                "block_shape": [128, 128],
                "reason": f"{SKIPPED_B} (--allow-stale uses them)",
                "m_missing": [16, 32],
            }
        ],
        "engine": "vllm",
        "engine_note": None,
        "release": 1,
    }
    spelled = client.get("/devices/L20/configs", params={"engine": "sglang"}).json()
    assert spelled["files"][0]["file_name"] == engine_file_name(FILE_A, "sglang")
    assert "SGLang" in spelled["engine_note"]
    (release,) = client.get("/devices/L20/releases").json()
    assert (release["number"], release["reason"], release["summary"]["measured"]) == (
        1,
        "test",
        True,
    )
    file_a = {"file_name": FILE_A, "sha256": SHA_A, "size": len(TEXT_A), "m_keys": [1, 16, 32]}
    assert release["files"] == [file_a | {"m_imported": []}]


def test_the_zip_and_its_members(client: TestClient) -> None:
    response = client.get(f"/devices/{DEVICE}/configs.zip")
    assert response.headers["content-type"] == "application/zip"
    assert response.headers["etag"] == f'"{hashlib.sha256(response.content).hexdigest()}"'
    assert response.headers["content-disposition"] == f'attachment; filename="{DEVICE}-configs.zip"'
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        assert archive.namelist() == [FILE_A, "README.txt"]
        assert archive.read(FILE_A) == TEXT_A.encode()
        assert {info.date_time for info in archive.infolist()} == {(1980, 1, 1, 0, 0, 0)}
        readme = archive.read("README.txt").decode()
    left_out = f"{FILE_B}: no winner yet for M=16, 32"
    for fact in ("--linear-backend triton", f"sha256 {SHA_A}", WARNINGS_A[0], left_out):
        assert fact in readme
    sglang = client.get("/devices/L20/configs.zip", params={"engine": "sglang"})
    assert 'filename="NVIDIA_L20-configs-sglang.zip"' in sglang.headers["content-disposition"]
    with zipfile.ZipFile(io.BytesIO(sglang.content)) as archive:
        assert engine_file_name(FILE_A, "sglang") in archive.namelist()


def _zip_names(client: TestClient, **params: str) -> list[str]:
    response = client.get("/devices/L20/preview/configs.zip", params=params)
    with zipfile.ZipFile(io.BytesIO(response.content)) as archive:
        return archive.namelist()


def test_the_preview_merges_the_store_on_each_request(client: TestClient) -> None:
    preview = client.get(f"/devices/L20/preview/configs/{FILE_A}")
    assert preview.text == TEXT_A and preview.headers["etag"] == f'"{SHA_A}"'
    stale = client.get(f"/devices/L20/preview/configs/{FILE_A}", params={"allow_stale": "true"})
    assert stale.text == dump_config_file({1: SLOW, 16: DEFAULT, 32: MID})  # the old kernel's
    partial = client.get(f"/devices/L20/preview/configs/{FILE_B}", params={"partial": "true"})
    assert partial.text == dump_config_file({1: FAST})
    body = client.get("/devices/L20/preview/configs", params={"partial": "true"}).json()
    assert [(f["file_name"], f["partial"], f["m_missing"]) for f in body["files"]] == [
        (FILE_A, False, []),
        (FILE_B, True, [16, 32]),
    ]
    assert _zip_names(client) == [FILE_A, "README.txt"]
    assert _zip_names(client, partial="true") == [FILE_A, FILE_B, "README.txt"]


def test_the_allow_partial_setting_is_the_default(store_url: str) -> None:
    with TestClient(create_app(Settings(db_url=store_url, allow_partial=True))) as client:
        assert client.get(f"/devices/L20/preview/configs/{FILE_B}").status_code == 200
        off = client.get(f"/devices/L20/preview/configs/{FILE_B}", params={"partial": "false"})
        assert off.status_code == 404


H100_FILE = config_file_name(*SHAPE_A, "NVIDIA_H100")
UNKNOWN_H100 = (
    "no device in the store matches 'NVIDIA_H100'; known: NVIDIA_H200, NVIDIA_L20; "
    "`tuner sweep --device NVIDIA_H100` on that GPU, or `tuner import` of its files, adds it"
)
OTHER = config_file_name(*SHAPE_A, "TRITON_INTERPRETER")
NO_1024 = config_file_name(1024, 1024, DEVICE)
H100_ROUTES = "configs configs.zip preview/configs releases imports".split()


@pytest.mark.parametrize(
    ("path", "detail"),
    [
        *((f"/devices/NVIDIA_H100/{route}", UNKNOWN_H100) for route in H100_ROUTES),
        (f"/devices/NVIDIA_H100/configs/{H100_FILE}", UNKNOWN_H100),
        ("/devices/H200/configs", "NVIDIA_H200 has no release yet (`tuner publish` makes one)"),
        (
            "/devices/L20/configs?release=3",
            "NVIDIA_L20 has no release 3 (`tuner publish` makes one)",
        ),
        (
            f"/devices/L20/configs/{NO_1024}",
            f"no file {NO_1024!r} in {DEVICE} release 1; files: {FILE_A}",
        ),
        (
            f"/devices/L20/configs/{OTHER}",
            f"{OTHER!r} names device 'TRITON_INTERPRETER', not {DEVICE!r}",
        ),
        (
            f"/devices/L20/configs/{FILE_B}",
            f"no file {FILE_B!r} in {DEVICE} release 1; files: {FILE_A}",
        ),
        (
            f"/devices/L20/preview/configs/{FILE_B}",
            f"no file {FILE_B!r} yet: no winner yet for M=16, 32",
        ),
        (
            "/devices/H200/mounts",
            "NVIDIA_H200 has no complete file to mount yet (partial files and stale trials can be "
            "allowed); 2 ok trial(s) of another kernel or Triton left out",
        ),
        ("/devices/bad%2Fname/configs", "Not Found"),
        ("/sweeps/99", "no sweep with id 99"),
    ],
)
def test_a_404_says_what_there_is(client: TestClient, path: str, detail: str) -> None:
    response = client.get(path)
    assert (response.status_code, response.json()) == (404, {"detail": detail})


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/devices/bad%20name/configs", 404),  # "bad name" matches no device
        ("/devices/bad%3Bname/configs", 404),  # ';' may be in vLLM's key: unknown, not invalid
        ("/devices/" + "x" * 129 + "/configs", 422),
        ("/devices/bad%22name/configs", 422),  # '"' never is
        ("/devices/bad%5Cname/configs", 422),  # nor '\\'
        ("/devices/bad%09name/configs", 422),  # nor a tab
        (f"/devices/{DEVICE}/configs/passwd", 404),
        (f"/devices/{DEVICE}/configs/..%2F..%2Fetc%2Fpasswd", 404),
        (f"/devices/{DEVICE}/preview/configs/..%2Fx.json", 404),
        ("/devices/%2E%2E/configs", 404),
        ("/devices/L20/configs?engine=trt", 422),
        ("/devices/L20/configs.zip?release=0", 422),
        ("/devices/L20/preview/configs.zip?allow_stale=maybe", 422),
        ("/devices/L20/mounts?format=helm", 422),
        ("/devices/L20/comparisons?limit=0", 422),
        ("/sweeps/0", 422),
        ("/sweeps/2147483648", 422),
    ],
)
def test_bad_names_and_parameters_are_4xx(client: TestClient, path: str, status: int) -> None:
    response = client.get(path)
    assert response.status_code == status and response.json()["detail"]


def test_a_pinned_release_keeps_its_bytes_after_release_2(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 't.db'}"
    name = config_file_name(576, 7168, DEVICE)
    fill(
        url,
        {(576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)]},
        m_values=(1,),
    )
    assert publish(url) == 1
    with TestClient(create_app(Settings(db_url=url))) as client:
        one = client.get(f"/devices/L20/configs/{name}").text
        fill(
            url,
            {(576, 7168, 32): [(DEFAULT, True, "ok", 10.0), (SLOW, False, "ok", 5.0)]},
            m_values=(32,),
        )
        assert client.get(f"/devices/L20/configs/{name}").text == one  # not published yet
        preview = client.get(f"/devices/L20/preview/configs/{name}").text
        assert preview == dump_config_file({1: FAST, 32: SLOW})
        assert publish(url) == 2
        latest = client.get(f"/devices/L20/configs/{name}")
        assert (latest.text, latest.headers["x-tuner-release"]) == (preview, "2")
        pinned = client.get(f"/devices/L20/configs/{name}", params={"release": 1})
        immutable = "public, max-age=31536000, immutable"
        assert (pinned.text, pinned.headers["cache-control"]) == (one, immutable)
        listed = client.get("/devices/NVIDIA_L20/releases").json()
        assert [(r["number"], [f["m_keys"] for f in r["files"]]) for r in listed] == [
            (2, [[1, 32]]),
            (1, [[1]]),
        ]
        zipped = client.get("/devices/L20/configs.zip", params={"release": 1})
        assert zipped.headers["x-tuner-release"] == "1"
