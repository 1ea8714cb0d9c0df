"""CLI for serving engineers: import, export for SGLang,
mounts and status; bad files are one line on stderr, exit code 2, store unchanged."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from tests.cli.common import PLAN, flat, invoke, ok, one_line_error
from tests.storefill import DEFAULT, FAST, SLOW, TRITON, fill, row_counts
from tuner.files.format import dump_config_file
from tuner.kernels.dense.family import config_file_name, engine_file_name


def test_malformed_user_shapes_file(tmp_path: Path, db, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TUNER_SHAPES_DIR", str(tmp_path))
    (tmp_path / "broken.toml").write_text("model = \n")
    message = f"{tmp_path / 'broken.toml'}: invalid TOML: Invalid value (at line 1, column 9)"
    one_line_error(invoke("shapes", "show", "broken"), message)
    listed = invoke("shapes", "list")
    one_line_error(listed, message)
    assert "qwen3.8-27b" in listed.stdout  # the good ones are still listed
    one_line_error(
        invoke("sweep", "--device", "interpreter", "--model", "broken", "--db", db), message
    )


GOOD = dump_config_file({1: FAST, 4096: SLOW})


def test_an_unknown_device_or_bad_configs_file_changes_nothing(tmp_path: Path, db) -> None:
    fill(db, PLAN)
    path = tmp_path / config_file_name(576, 7168, "NVIDIA_H200")
    path.write_text(GOOD)
    before = row_counts(db)
    one_line_error(
        invoke("import", str(path), "--device", "L40S", "--db", db),
        f"{path}: device 'L40S' is neither in the store (known: NVIDIA_L20) nor the "
        "file's device 'NVIDIA_H200'",
    )
    assert row_counts(db) == before
    config, bad = json.dumps(FAST), tmp_path / "configs.json"
    sweep = "sweep --device interpreter --model tiny --m 1 --strategy grid --configs".split()
    for content, problem in [  # a bad configs file changes nothing either
        (f"[{config}"[:-5], "invalid JSON: Unterminated string"),
        (f'[{config}, {config[:-1]}, "kpack": 1}}]', "config #2: AMD key(s) kpack"),
        ("{}", "expected a non-empty JSON list of config objects"),
    ]:
        bad.write_text(content)
        (line,) = invoke(*sweep, bad, "--db", db, code=2).stderr.strip().splitlines()
        assert line.startswith(f"error: {bad}: ") and problem in line
        assert row_counts(db) == before
    moved = ok("import", str(path), "--device", "L20", "--db", db, "--no-check")
    assert "for NVIDIA_L20 (file named for NVIDIA_H200) as 'imported'" in moved.stdout


def test_export_merges_imports_and_spells_for_sglang(tmp_path, db) -> None:
    fill(db, PLAN, m_values=(1, 16))
    shipped = tmp_path / config_file_name(576, 7168, "NVIDIA_L20")
    shipped.write_text(dump_config_file({1: SLOW, 2048: SLOW}))
    # --no-check: SLOW needs more shared memory than an L20 has; the check has its own tests.
    ok("import", str(shipped), "--label", "vllm-0.33.0", "--db", db, "--no-check")
    out = tmp_path / "out"
    result = ok("export", "--device", "L20", "--out", str(out), "--engine", "sglang", "--db", db)
    name = engine_file_name(shipped.name, "sglang")
    assert [p.name for p in out.iterdir()] == [name]
    written = json.loads((out / name).read_text())
    # M=1: measured winner beats the import; M=16: the default (SLOW was slower); M=2048 imported.
    assert written == {"1": FAST, "16": DEFAULT, "2048": SLOW}
    # The merge's notes: tests/api/test_writes.py; export prints them.
    assert "M=1: measured winner replaces the entry imported from" in flat(result.stdout)
    assert "a sweep against SGLang's kernel is the exact answer" in result.stderr


def test_mounts_from_the_store(db) -> None:
    fill(db, PLAN, m_values=(1, 16))
    name = config_file_name(576, 7168, "NVIDIA_L20")
    result = ok("mounts", "--device", "L20", "--db", db)
    site = "/usr/local/lib/python3.12/dist-packages"
    target = f"{site}/vllm/model_executor/layers/quantization/utils/configs/{name}"
    assert f'  -v "$PWD/configs/{name}:{target}:ro" \\' in result.stdout.splitlines()
    assert result.stderr == ""
    assert result.stdout.startswith(
        "# 1 W8A8 block-FP8 config file(s) for NVIDIA_L20, mounted read-only (vllm 0.33.0; "
        "restart it after changing them).\n# The files: tuner export --device NVIDIA_L20 "
        "--engine vllm --out $PWD/configs (or unzip the release's configs.zip there).\n"
    )
    tuned = f"# Tuned with torch 2.11.0, triton {TRITON}, kernels of builtin."
    assert tuned in result.stdout.splitlines()
    sglang = "--engine sglang --format k8s --host-dir /srv/cfg".split()
    k8s = ok("mounts", "--device", "L20", "--db", db, *sglang)
    spaced = engine_file_name(name, "sglang")
    parts = [doc for doc in yaml.safe_load_all(k8s.stdout) if doc]
    assert list(parts[0]["data"]) == [re.sub(r"[=,\[\] ]", "_", spaced)]
    assert parts[-1]["volumeMounts"][0]["mountPath"] == (
        f"/sgl-workspace/sglang/python/sglang/kernels/ops/gemm/configs/{spaced}"
    )
    one_line_error(
        invoke("mounts", "--device", "L20", "--db", db, "--host-dir", "rel"),
        "the host folder must be an absolute path without quotes, '$', '\\', ':' or '..', "
        "got 'rel'",
    )
