"""The `tuner` command line: help, shapes, and one-line errors with exit code 2."""

import re
import sqlite3

import pytest
from typer.testing import CliRunner

from tuner.cli import app, parse_m_values

runner = CliRunner()


def invoke(*args, env=None):
    return runner.invoke(app, list(args), env=env)


def one_line_error(result, text):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert lines == [f"error: {text}"]


def test_help_lists_the_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("sweep", "export", "serve", "shapes", "db"):
        assert command in result.stdout
    sweep_help = " ".join(invoke("sweep", "--help").stdout.split())
    assert "--strategy" in sweep_help and "--trials" in sweep_help and "TUNER_DB_URL" in sweep_help


def test_parse_m_values():
    assert parse_m_values("32, 1,16,1") == (1, 16, 32)
    with pytest.raises(ValueError, match="'0' is not a positive integer"):
        parse_m_values("1,0")


def test_shapes_list_and_show():
    listed = invoke("shapes", "list")
    assert listed.exit_code == 0
    for model in ("qwen3.8-27b", "deepseek-v3", "tiny"):
        assert model in listed.stdout
    shown = invoke("shapes", "show", "qwen3.8-27b", "--tp", "2")
    assert shown.exit_code == 0
    for n, k in ((17408, 5120), (5120, 3072), (5120, 8704), (7168, 5120), (8192, 5120)):
        assert re.search(rf"\b{n}\s*│\s*{k}\b", shown.stdout)
    assert "source: field report" in shown.stdout


def test_unknown_model_lists_known_ones():
    one_line_error(invoke("shapes", "show", "llama3"),
                   "unknown model 'llama3'; known: deepseek-v3, qwen3.8-27b, tiny")
    one_line_error(invoke("sweep", "--device", "interpreter", "--model", "llama3"),
                   "unknown model 'llama3'; known: deepseek-v3, qwen3.8-27b, tiny")


def test_no_matching_gpu_names_what_is_visible():
    # CI has CPU torch only: nothing is visible.
    one_line_error(invoke("sweep", "--device", "L20", "--model", "tiny"),
                   "no visible GPU matches --device L20; visible: no CUDA GPU")


def test_bad_m_grid():
    one_line_error(invoke("sweep", "--device", "interpreter", "--model", "tiny", "--m", "1,a"),
                   "--m: 'a' is not a positive integer (expected e.g. 1,16,32)")


def test_bad_configs_file(tmp_path):
    bad = tmp_path / "configs.json"
    bad.write_text('[{"BLOCK_SIZE_M": 16}]')
    result = invoke("sweep", "--device", "interpreter", "--model", "tiny", "--configs", str(bad),
                    "--db", f"sqlite:///{tmp_path}/t.db")
    one_line_error(result, f"{bad}: config #1: missing key(s) BLOCK_SIZE_N, BLOCK_SIZE_K, "
                   "GROUP_SIZE_M, num_warps, num_stages")


def test_export_unknown_device_lists_known(tmp_path):
    result = invoke("export", "--device", "L20", "--out", str(tmp_path / "out"),
                    "--db", f"sqlite:///{tmp_path}/t.db")
    one_line_error(result, "no device in the store matches 'L20'; known: none (run tuner sweep "
                   "first)")


def test_old_schema_asks_for_upgrade(tmp_path):
    store = tmp_path / "old.db"
    with sqlite3.connect(store) as connection:
        connection.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        connection.execute("INSERT INTO alembic_version VALUES ('0000')")
    result = invoke("export", "--device", "L20", "--out", str(tmp_path / "out"),
                    "--db", f"sqlite:///{store}")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "schema revision 0000" in result.stderr and "run `tuner db upgrade`" in result.stderr


def test_db_upgrade_creates_the_schema(tmp_path):
    result = invoke("db", "upgrade", "--db", f"sqlite:///{tmp_path}/new.db")
    assert result.exit_code == 0
    with sqlite3.connect(tmp_path / "new.db") as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master")}
    assert {"devices", "environments", "sweeps", "tasks", "trials"} <= tables
