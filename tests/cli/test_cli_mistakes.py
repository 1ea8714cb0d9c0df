"""A newcomer's usual mistakes on the command line: one line on stderr with the fix, exit 2,
no traceback, and nothing created on disk. A mistyped model or device gets the closest known
name, a plain path or a malformed sqlite URL as --db the URL forms, --out naming a file,
a JSON that is no model's config or configs file that lacks keys, a bad --m, a busy port or one
out of range."""

from __future__ import annotations

import os
import re
import shlex
import socket
from pathlib import Path

import pytest

from db.connection import open_store
from tests.cli.common import invoke, one_line_error

DB = "--db (or TUNER_DB_URL)"
FORMS = (
    "use sqlite:///PATH for a SQLite file (sqlite:////abs/path for an absolute one) or "
    "postgresql://USER@HOST/DB for PostgreSQL"
)
OUT_IS_A_FILE = "--out {tmp}/configs is a file, not a folder: name a folder (created if absent)"
# The command line (after any VARIABLE=value words of its environment, as a shell takes them)
# and its one line; {tmp} is the test's folder, the working folder, which
# holds a file `configs`, a package.json, a bad.json of configs and, where the arguments name
# it, an empty store t.db.
CASES = {
    "shapes show qwen3.8-27B": (
        "unknown model 'qwen3.8-27B'; known: deepseek-v3, "
        "qwen3-30b-a3b-fp8, qwen3.8-27b, tiny, tiny-moe"
    ),
    "sweep --device interpreter --model llama3": (
        "unknown model 'llama3'; known: deepseek-v3, qwen3-30b-a3b-fp8, qwen3.8-27b, tiny, tiny-moe"
    ),
    "sweep --device interpreter --model tiny --m 1,a": (
        "--m: 'a' is not a positive integer (expected e.g. 1,16,32)"
    ),
    "sweep --device interpreter --model tiny --configs {tmp}/bad.json": (
        "{tmp}/bad.json: config #1: missing key(s) BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, "
        "num_warps, num_stages"
    ),
    "sweep --device L2O --model tiny": (
        "no visible GPU matches --device L2O; visible: no CUDA GPU"
    ),
    "sweep --device L2O --model tiny --no-run --db sqlite:///{tmp}/new.db": (
        "--device 'L2O' is not a GPU model name such as L20, H200, NVIDIA H200, nvidia_h200 or "
        "NVIDIA_H100_80GB_HBM3"
    ),
    "winners --device interpeter --db sqlite:///{tmp}/t.db": (
        "no device in the store matches 'interpeter'; known: "
        "none; `tuner sweep --device interpeter` on that GPU, or `tuner import` of its files, "
        "adds it"
    ),
    "export --device L20 --out {tmp}/configs --db sqlite:///{tmp}/none.db": OUT_IS_A_FILE,
    "pull --server http://127.0.0.1:9 --device L20 --out {tmp}/configs": OUT_IS_A_FILE,
    "pull --server ftp://x --device L20 --out {tmp}/out": (
        "--server must be an http:// or https:// URL, got 'ftp://x'"
    ),
    "shapes from-config {tmp}/package.json --tp 1": (
        "{tmp}/package.json: architectures None is not one of LlamaForCausalLM, "
        "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM (other "
        "architectures: their MoE experts only)"
    ),
    "status --db tuner.db": f"{DB} 'tuner.db' is not a database URL: {FORMS}",
    "TUNER_DB_URL=/some/file.db winners --device L20": (
        f"{DB} '/some/file.db' is not a database URL: {FORMS}"
    ),
    "status --db sqlite://data/x.db": (
        f"{DB} sqlite://data/x.db is not a SQLite URL (it names a host): {FORMS}"
    ),
    "db backup copy.db --db sqlite:///tuner.db": (
        "no store at sqlite:///tuner.db: run `tuner sweep` first, or point --db (or "
        "TUNER_DB_URL) at the store"
    ),
    "db backup copy.db --db postgres://tuner@db/tuner": (
        "store postgresql+psycopg://tuner@db/tuner is not a SQLite file: back up PostgreSQL "
        "with pg_dump"
    ),
}


def listing(folder: Path) -> list[str]:
    """The folder's entries, less SQLite's -wal and -shm files of the open store."""
    return sorted(n for n in os.listdir(folder) if not n.endswith(("-wal", "-shm")))


@pytest.mark.parametrize(("command", "line"), CASES.items())
def test_a_mistake_is_one_line(tmp_path, monkeypatch, no_visible_gpu, command, line) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TUNER_DB_URL", raising=False)
    if "t.db" in command:
        open_store(f"sqlite:///{tmp_path}/t.db").dispose()
    (tmp_path / "configs").write_text("x")
    (tmp_path / "package.json").write_text('{"name": "web", "version": "1.0.0"}')
    (tmp_path / "bad.json").write_text('[{"BLOCK_SIZE_M": 16}]')
    before = listing(tmp_path)
    words = [word.format(tmp=tmp_path) for word in shlex.split(command)]
    env = dict(word.split("=", 1) for word in words if re.fullmatch(r"[A-Z_]+=\S+", word))
    result = invoke(*words[len(env) :], env=env)
    one_line_error(result, line.format(tmp=tmp_path))
    assert listing(tmp_path) == before


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ("serve --port 0 --db sqlite://", "--port"),
        ("serve --port 99999 --db sqlite://", "--port"),
        ("sweep --device interpreter --model tiny --trial-timeout 0", "--trial-timeout"),
    ],
)
def test_an_option_out_of_range_is_refused(args: str, option: str) -> None:
    result = invoke(*args.split(), code=2)
    assert f"Invalid value for '{option}'" in result.output and "Traceback" not in result.output


def test_serve_on_a_busy_port(tmp_path: Path) -> None:
    open_store(f"sqlite:///{tmp_path}/t.db").dispose()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = invoke(*f"serve --port {port} --db sqlite:///{tmp_path}/t.db".split())
    one_line_error(
        result,
        f"cannot listen on 127.0.0.1:{port}: Address already in use",
    )
