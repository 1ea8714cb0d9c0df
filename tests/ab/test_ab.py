"""`tuner ab` against stand-ins: the order of runs, the intervals and verdicts, the client's exact
arguments, and the command end to end with servers it starts (Python's http.server, whose
/health is a file) and a stand-in client with set latencies: rows in the store, resume after a
failed run, exit codes, and the release check on a server's log."""

from __future__ import annotations

import json
import math
import re
import shlex
import signal
import subprocess
import sys
import time
from hashlib import sha256
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from db import repo
from db.models import AbRun, AbTest
from db.repo import ReleaseFileRow
from tests.cli.common import invoke, ok, one_line_error, service, session_on
from tests.pgserver import free_port
from tuner.ab.arms import Arm, ArmError, Server, healthy, proof
from tuner.ab.run import WARMUP_SEED, Plan, run_ab
from tuner.ab.stats import estimate, schedule
from tuner.ab.workloads import WORKLOADS, ClientError, Load, client_argv
from tuner.files.pull import release_entry

HERE = Path(__file__).parent
# Lines as vLLM 0.33.0 logs them (fp8_utils.py get_w8a8_block_fp8_configs; the paths shortened).
FILE = "N=512,K=256,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json"
READ = (
    f"INFO 12-06 05:22:25 [fp8_utils.py:945] Using configuration from /c/{FILE} for W8A8 Block "
    "FP8 kernel."
)
MISSED = (
    "WARNING 12-06 05:22:25 [fp8_utils.py:955] Using default W8A8 Block FP8 kernel config. "
    "Performance might be sub-optimal! Config file not found at /c/N=1024,K=256,"
    "device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json"
)


def test_runs_alternate_arms_block_by_block() -> None:
    b, c = "baseline", "candidate"
    assert schedule(3) == [(0, b), (0, c), (1, c), (1, b), (2, b), (2, c)]


def test_the_interval_is_students_t_on_the_blocks_log_ratios() -> None:
    found = estimate("tok_s", [(100.0, 110.0), (100.0, 121.0)], min_effect=0.02)
    mean, sd = 1.5 * math.log(1.1), math.log(1.1) / math.sqrt(2)
    half = 12.706204736 * sd / math.sqrt(2)  # t(0.975, 1 degree of freedom)
    assert found.ratio == pytest.approx(1.1**1.5)
    assert (found.low, found.high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert (found.baseline, found.candidate, found.drift) == (100.0, 115.5, 1.0)
    assert found.verdict == "within noise"  # two blocks this far apart: no decision


@pytest.mark.parametrize(
    ("candidate", "metric", "min_effect", "verdict"),
    [
        ((105, 106, 104, 105), "out_tok_s", 0.02, "faster"),
        ((105, 106, 104, 105), "ttft_ms", 0.02, "slower"),  # a latency: lower is better
        ((101, 101.2, 100.8, 101), "out_tok_s", 0.02, "within noise"),  # sure, but under 2%
        ((101, 101.2, 100.8, 101), "out_tok_s", 0.005, "faster"),
        ((90, 120, 95, 110), "out_tok_s", 0.02, "within noise"),  # the interval holds 1
    ],
)
def test_verdicts(candidate, metric, min_effect, verdict) -> None:
    pairs = [(100.0, float(c)) for c in candidate]
    assert estimate(metric, pairs, min_effect=min_effect).verdict == verdict


def test_the_client_gets_each_workloads_arguments(tmp_path: Path) -> None:
    load = Load(input_len=3500, output_len=512, prompts=16, streams=4)
    head = ["vllm", "bench", "serve", "--backend", "openai", "--base-url", "http://h:8000"]
    tail = ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95"]
    tail += ["--save-result", "--result-dir", str(tmp_path), "--result-filename", "r.json"]
    tail += ["--disable-tqdm"]
    common = ["--num-prompts", "16", "--seed", "7"]
    expected = {
        "prefill-cold": ["--dataset-name", "random", "--input-len", "3500", "--output-len", "1"],
        "prefill-cached": ["--dataset-name", "random", "--random-prefix-len", "3500"]
        + ["--input-len", "64", "--output-len", "1", "--num-warmups", "1"],
        "decode": ["--dataset-name", "random", "--random-prefix-len", "3500"]
        + ["--input-len", "64", "--output-len", "512"],
        "concurrent": ["--dataset-name", "random", "--random-prefix-len", "3500"]
        + ["--input-len", "64", "--output-len", "512"],
    }
    for name, dataset in expected.items():
        streams = "4" if name == "concurrent" else "1"
        end = ["--max-concurrency", streams, "--ignore-eos", "--temperature", "0"]
        argv = client_argv(
            ["vllm", "bench", "serve"],
            WORKLOADS[name],
            load,
            base_url="http://h:8000",
            seed=7,
            result=tmp_path / "r.json",
        )
        assert argv == head + common + dataset + end + tail, name


def test_metrics_are_read_from_the_clients_result() -> None:
    result = {"completed": 4, "failed": 0, "median_tpot_ms": 8.0, "output_throughput": 400.0}
    result |= {"p50_e2el_ms": 20.0, "p95_e2el_ms": 30.0}
    load = Load(prompts=4)
    assert WORKLOADS["decode"].read(result, load) == {"decode_tok_s": 125.0}
    assert WORKLOADS["concurrent"].read(result, load) == {
        "output_tok_s": 400.0,
        "p50_e2el_ms": 20.0,
        "p95_e2el_ms": 30.0,
    }
    with pytest.raises(ClientError, match="decode: 3 of 4 requests completed, 1 failed"):
        WORKLOADS["decode"].read({**result, "completed": 3, "failed": 1}, load)


def test_a_log_says_which_files_were_read_and_missed(tmp_path: Path) -> None:
    log = tmp_path / "candidate.log"
    log.write_text(f"{READ}\n{READ}\n{MISSED}\n")
    said = proof(log)
    assert said.read == (FILE,)
    assert said.missing == (MISSED.rsplit("/", 1)[1],)


def _server(root: Path, port: int, say: str = "") -> tuple[str, ...]:
    """The argv of a server whose /health answers 200 (a file), printing `say` first."""
    (root / "health").write_text("ok")
    serve = f"{sys.executable} -m http.server {port} --bind 127.0.0.1 --directory {root}"
    return ("sh", "-c", f"echo {shlex.quote(say)}; exec {serve}")


@pytest.fixture
def stage(tmp_path: Path):
    """Two server commands (baseline, candidate), the stand-in client's settings and the store."""
    ports = [free_port(), free_port()]
    settings = {"ports": {}, "calls": str(tmp_path / "calls.txt")}
    path = tmp_path / "settings.json"

    def set_arms(
        baseline_ttft, candidate_ttft, fail_seeds=(), hold_seeds=(), mute_seeds=()
    ) -> None:
        arms = zip(ports, (baseline_ttft, candidate_ttft), strict=True)
        settings["ports"] = {str(p): {"ttft_ms": t, "tok_s": 100.0} for p, t in arms}
        settings["fail_seeds"], settings["hold_seeds"] = list(fail_seeds), list(hold_seeds)
        settings["mute_seeds"] = list(mute_seeds)
        path.write_text(json.dumps(settings))

    def args(*more: str) -> list[str]:
        return [
            "ab",
            *("--baseline", f"http://127.0.0.1:{ports[0]}"),
            *("--baseline-cmd", shlex.join(_server(tmp_path, ports[0]))),
            *("--candidate", f"http://127.0.0.1:{ports[1]}"),
            *("--candidate-cmd", shlex.join(_server(tmp_path, ports[1], READ))),
            *("--client", f"{sys.executable} {HERE / 'standin_client.py'} {path}"),
            *("--workload", "prefill-cached", "--blocks", "3", "--out", str(tmp_path / "ab")),
            *("--db", f"sqlite:///{tmp_path / 'tuner.db'}"),
            *more,
        ]

    def rows() -> list[tuple]:
        with Session(create_engine(f"sqlite:///{tmp_path / 'tuner.db'}")) as session:
            runs = session.scalars(select(AbRun).order_by(AbRun.ab_run_id))
            return [(r.block, r.arm, r.workload, r.seed, r.metrics["ttft_ms"]) for r in runs]

    def calls() -> list[int]:
        return [int(line) for line in Path(settings["calls"]).read_text().split()]

    return set_arms, args, rows, calls, tmp_path, ports


def test_an_ab_runs_its_arms_in_order_and_keeps_every_run(stage) -> None:
    set_arms, args, rows, calls, tmp_path, _ = stage
    set_arms(100.0, 80.0)
    result = invoke(*args())
    assert result.exit_code == 0, result.output
    order = [(0, "baseline"), (0, "candidate"), (1, "candidate"), (1, "baseline")]
    order += [(2, "baseline"), (2, "candidate")]
    jitter = [1 + 0.005 * ((s * 7) % 5 - 2) for s in range(6)]
    ttft = [
        (100.0 if arm == "baseline" else 80.0) * j
        for (_, arm), j in zip(order, jitter, strict=True)
    ]
    expected = [
        (b, arm, "prefill-cached", s, round(t, 9))
        for s, ((b, arm), t) in enumerate(zip(order, ttft, strict=True))
    ]
    assert [(*r[:4], round(r[4], 9)) for r in rows()] == expected
    # A warm-up (its own seed, discarded) after each start, before the arm's first run there.
    w = WARMUP_SEED
    assert calls() == [w, 0, w + 1, 1, 2, w + 3, 3, 4, w + 5, 5]
    assert "candidate: read 1 config files, missed 0" in result.output
    assert "A/B 1 verdict: the candidate is faster" in result.output
    # Each server was started once per stretch of its runs: B, C, C... makes 4 starts.
    logs = [
        (tmp_path / "ab" / f"{arm}.log").read_text().count("--- tuner ab:")
        for arm in ("baseline", "candidate")
    ]
    assert logs == [2, 2]
    with Session(create_engine(f"sqlite:///{tmp_path / 'tuner.db'}")) as session:
        ab = session.scalars(select(AbTest)).one()
        assert ab.verdict == "faster"
        (ttft_estimate,) = ab.result["estimates"]["prefill-cached"]
        assert ttft_estimate["verdict"] == "faster"
        assert ttft_estimate["ratio"] == pytest.approx(0.8, rel=0.01)


def test_a_slower_candidate_exits_1(stage) -> None:
    set_arms, args, rows, calls, tmp_path, _ = stage
    set_arms(100.0, 130.0)
    result = invoke(*args())
    assert result.exit_code == 1, result.output
    assert "A/B 1 verdict: the candidate is slower" in result.output


def test_a_failed_run_stops_the_ab_and_the_same_command_resumes(stage) -> None:
    set_arms, args, rows, calls, _, _ = stage
    set_arms(100.0, 100.0, fail_seeds=[3])
    failed = invoke(*args())
    assert failed.exit_code == 2, failed.output
    assert "block 2 baseline prefill-cached: the client exited with code 3" in failed.stderr
    assert [r[3] for r in rows()] == [0, 1, 2]
    set_arms(100.0, 100.0)
    resumed = invoke(*args())
    assert resumed.exit_code == 0, resumed.output
    assert "A/B 1: 3 runs kept" in resumed.output
    assert [r[3] for r in rows()] == [0, 1, 2, 3, 4, 5]
    timed = [seed for seed in calls() if seed < WARMUP_SEED]
    assert timed == [0, 1, 2, 3, 3, 4, 5]  # seed 3 again, nothing else twice
    assert "A/B 1 verdict: the candidate is within noise" in resumed.output
    more = invoke(*args("--blocks", "4"))  # the last --blocks counts
    assert more.exit_code == 0, more.output
    assert [r[3] for r in rows()] == [0, 1, 2, 3, 4, 5, 6, 7]  # more blocks extend it


def test_a_client_that_writes_no_result_is_one_line_and_exit_2(stage) -> None:
    set_arms, args, rows, _, tmp_path, _ = stage
    set_arms(100.0, 100.0, mute_seeds=[1])
    result = invoke(*args())
    assert result.exit_code == 2
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    missing = tmp_path / "ab" / "runs" / "001-candidate-prefill-cached.json"
    assert line.startswith(
        f"error: block 1 candidate prefill-cached: the client left no readable result {missing}: "
    )
    assert [r[3] for r in rows()] == [0]


def test_an_arm_that_never_answers_is_one_line_and_exit_2(stage) -> None:
    set_arms, args, rows, calls, _, _ = stage
    set_arms(100.0, 100.0)
    argv = args()
    argv[argv.index("--baseline-cmd") + 1] = f"{sys.executable} -c 'raise SystemExit(3)'"
    result = invoke(*argv)
    assert result.exit_code == 2
    assert "error: baseline: the server exited with code 3; its log:" in result.stderr
    assert rows() == []


def test_a_release_needs_its_device_and_must_exist(stage) -> None:
    _, args, _, _, _, _ = stage
    one_line_error(
        invoke(*args("--release", "1")), "--release needs --device (whose release it is)"
    )


def test_a_candidate_that_read_none_of_the_release_stops(tmp_path: Path) -> None:
    port = free_port()
    settings = tmp_path / "settings.json"
    ports = {str(port): {"ttft_ms": 1.0, "tok_s": 1.0}}
    settings.write_text(json.dumps({"ports": ports, "calls": str(tmp_path / "calls")}))
    arm = Arm("candidate", f"http://127.0.0.1:{port}", _server(tmp_path, port, MISSED))
    plan = Plan(
        (Arm("baseline", arm.url), arm),
        (WORKLOADS["decode"],),
        Load(prompts=2),
        2,
        (sys.executable, str(HERE / "standin_client.py"), str(settings)),
        tmp_path,
        must_read=(FILE,),
    )
    kept: list = []
    with pytest.raises(ArmError, match="candidate read none of the release's 1 files"):
        run_ab(plan, {(0, "baseline", "decode")}, kept.append)
    assert [(r.block, r.arm) for r in kept] == [(0, "candidate")]


def test_an_aa_of_one_running_server_warms_it_once(tmp_path: Path) -> None:
    port = free_port()
    settings = tmp_path / "settings.json"
    ports = {str(port): {"ttft_ms": 1.0, "tok_s": 1.0}}
    settings.write_text(json.dumps({"ports": ports, "calls": str(tmp_path / "calls")}))
    server = Server(
        Arm("aa", f"http://127.0.0.1:{port}", _server(tmp_path, port)), tmp_path / "log"
    )
    server.start(timeout_s=30)
    try:
        arms = (Arm("baseline", server.arm.url), Arm("candidate", server.arm.url))
        client = (sys.executable, str(HERE / "standin_client.py"), str(settings))
        plan = Plan(arms, (WORKLOADS["decode"],), Load(prompts=2), 2, client, tmp_path)
        kept: list = []
        run_ab(plan, set(), kept.append)
    finally:
        server.stop()
    assert [(r.block, r.arm, r.seed) for r in kept] == [
        (0, "baseline", 0),
        (0, "candidate", 1),
        (1, "candidate", 2),
        (1, "baseline", 3),
    ]
    calls = [int(seed) for seed in (tmp_path / "calls").read_text().split()]
    assert calls == [WARMUP_SEED, 0, 1, 2, 3]  # one warm-up: both arms are the one server


def test_a_release_carries_its_ab_verdict(stage) -> None:
    set_arms, args, _, _, tmp_path, _ = stage
    set_arms(100.0, 80.0)
    url, device = f"sqlite:///{tmp_path / 'tuner.db'}", "NVIDIA_H100_80GB_HBM3"
    # An imported file (the one the candidate's log names) makes the device one the store knows.
    config = {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128}}
    config["1"] |= {"GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}
    (tmp_path / FILE).write_text(json.dumps(config))
    ok("import", tmp_path / FILE, "--db", url)
    other = "N=64,K=32,device_name=NVIDIA_H100_80GB_HBM3,dtype=fp8_w8a8,block_shape=[128,128].json"
    with session_on(url) as session:
        new = ReleaseFileRow(other, 64, 32, (128, 128), sha256(b"{}").hexdigest(), 2, {}, "dense")
        repo.publish_release(
            session,
            device_name=device,
            files=[(new, b"{}")],
            archives={},
            summary={},
            created_by="test",
            reason="test",
        )
        releases = repo.list_releases(session, device_name=device)
    number = {r.files[0].file_name: r.number for r in releases}
    missing = str(len(releases) + 1)
    one_line_error(
        invoke(*args("--device", device, "--release", missing)),
        f"{device} has no release {missing} in the store",
    )
    # A release whose file the candidate's log never names: stopped after its first run.
    refused = invoke(*args("--device", device, "--release", str(number[other])))
    assert refused.exit_code == 2
    assert "error: candidate read none of the release's 1 files" in refused.stderr
    ok(*args("--device", device, "--release", str(number[FILE])))
    with service(url) as client:
        listed = client.get(f"/devices/{device}/releases").json()
        report = client.get(f"/devices/{device}/report").text
    verdict = {"ab_test_id": 2, "verdict": "faster"}
    assert {r["number"]: r["ab"] for r in listed} == {number[FILE]: verdict, number[other]: None}
    assert f"<h3>A/B 2: release {number[FILE]}: the candidate is faster</h3>" in report
    cells = r"<td class=l>prefill-cached</td><td class=l>ttft_ms</td><td>([0-9.]+)</td>"
    (point,) = re.findall(cells, report)
    assert float(point) == pytest.approx(0.8, rel=0.01)
    with session_on(url) as session:
        release = repo.get_release(session, device_name=device, number=number[FILE])
        assert release_entry(release)["ab"] == verdict


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_servers_keeps_the_runs_and_the_command_resumes(stage) -> None:
    set_arms, args, rows, calls, tmp_path, ports = stage
    set_arms(100.0, 100.0, hold_seeds=[3])  # the fourth run (block 2's baseline) hangs
    argv = [sys.executable, "-m", "tuner.cli", *args()]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    # Ctrl-C's default in the command, even under a runner started in the background, whose
    # children inherit SIGINT ignored (Python then leaves it ignored).
    running = subprocess.Popen(argv, preexec_fn=_default_sigint, **pipes)
    deadline = time.monotonic() + 120
    while not ((tmp_path / "calls.txt").exists() and 3 in calls()):  # run 4 is in flight
        assert running.poll() is None and time.monotonic() < deadline, running.communicate()
        time.sleep(0.2)
    running.send_signal(signal.SIGINT)
    _, stderr = running.communicate(timeout=120)
    assert running.returncode == 130
    assert stderr.strip().splitlines()[-1] == (
        "error: stopped: finished runs are kept; the same command resumes"
    )
    assert not any(healthy(f"http://127.0.0.1:{port}") for port in ports)
    assert [r[3] for r in rows()] == [0, 1, 2]
    set_arms(100.0, 100.0)
    ok(*args())
    assert [r[3] for r in rows()] == list(range(6))
    # Each seed was sent once, but the one in flight at Ctrl-C, which was sent again.
    timed = [seed for seed in calls() if seed < WARMUP_SEED]
    assert sorted(timed) == [0, 1, 2, 3, 3, 4, 5]
