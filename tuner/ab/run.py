"""Run an A/B: the arms' servers, one client run per (block, arm, workload) in the A B B A order,
each run handed to the caller as it finishes (so a stopped A/B keeps what it finished and the
same plan resumes), and the verdicts from the runs.

Each run has its own seed, so no two runs send the same prompts: a server with prefix caching
never serves one run from another's cache. A command arm's server is started when the order
reaches it and stopped when the order moves to the other arm (two engines seldom fit one GPU
together), so each block sees a fresh start of at least one arm.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from tuner.ab.arms import Arm, ArmError, Server, healthy, proof
from tuner.ab.stats import CANDIDATE, Estimate, estimate, schedule
from tuner.ab.workloads import ClientError, Load, Workload, client_argv
from tuner.core import AbRunRow

# A warm-up run: this many prompts, seeds from here on (never a timed run's).
WARMUP_PROMPTS = 2
WARMUP_SEED = 1_000_000


@dataclass(frozen=True)
class Plan:
    """Everything an A/B runs.

    Attributes:
        arms: (baseline, candidate).
        workloads: in the order each block runs them.
        load: their sizes.
        blocks: how many A B (or B A) blocks; 2 or more.
        client: the load client's command, e.g. ("vllm", "bench", "serve").
        folder: where the servers' logs and the client's outputs go.
        tokenizer: passed to the client when the served model's name is not a tokenizer's.
        seed: the first run's seed; run i has seed + i.
        health_timeout_s: how long a started server has to answer `/health`.
        must_read: config file names of which the candidate's log must show at least one read
            (a release's files); () for no such check.

    Before an arm's first run after its server started (or, for a URL, its first run here),
    one run of `WARMUP_PROMPTS` prompts whose result is discarded warms it up.
    """

    arms: tuple[Arm, Arm]
    workloads: tuple[Workload, ...]
    load: Load
    blocks: int
    client: tuple[str, ...]
    folder: Path
    tokenizer: str | None = None
    seed: int = 0
    health_timeout_s: float = 900.0
    must_read: tuple[str, ...] = ()

    def spec(self) -> dict[str, Any]:
        """What decides the runs' results, as JSON data: two plans with the same spec are the
        same A/B (blocks, folder and timeouts left out, so that more blocks extend it)."""
        load = {**asdict(self.load), "dataset": str(self.load.dataset or "")}
        return {
            "arms": [
                {"url": a.url, "command": list(a.command), "env": dict(a.env)} for a in self.arms
            ],
            "workloads": [w.name for w in self.workloads],
            "load": load,
            "client": list(self.client),
            "tokenizer": self.tokenizer,
            "seed": self.seed,
            "must_read": list(self.must_read),
        }


@dataclass(frozen=True)
class Step:
    """One client run to make: its block, arm name, workload and seed."""

    block: int
    arm: str
    workload: Workload
    seed: int
    warmup: bool = False

    @property
    def key(self) -> tuple[int, str, str]:
        """(block, arm, workload name): what tells finished runs apart."""
        return self.block, self.arm, self.workload.name

    @property
    def label(self) -> str:
        """E.g. "block 2 candidate decode" ("... decode warm-up")."""
        warmup = " warm-up" if self.warmup else ""
        return f"block {self.block + 1} {self.arm} {self.workload.name}{warmup}"


def steps(plan: Plan) -> list[Step]:
    """Every run of the plan in order."""
    order = [(b, arm, w) for b, arm in schedule(plan.blocks) for w in plan.workloads]
    return [Step(b, arm, w, plan.seed + i) for i, (b, arm, w) in enumerate(order)]


def run_client(plan: Plan, arm: Arm, step: Step) -> AbRunRow:
    """Run the load client once against an arm and read its result.

    Raises:
        ClientError: the client cannot start, exits non-zero, leaves no readable JSON, or its
            result is incomplete.
    """
    stem = f"{step.block + 1:03d}-{step.arm}-{step.workload.name}" + ("-warmup" * step.warmup)
    runs = plan.folder / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    result = runs / f"{stem}.json"
    argv = client_argv(
        plan.client, step.workload, plan.load, arm.url, step.seed, result, plan.tokenizer
    )
    with (runs / f"{stem}.log").open("wb") as out:
        try:
            code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT).returncode
        except OSError as exc:
            raise ClientError(f"cannot run the client {plan.client[0]}: {exc}") from None
    if code != 0:
        raise ClientError(f"{step.label}: the client exited with code {code}; see {out.name}")
    try:
        data = json.loads(result.read_text())
    except (OSError, ValueError) as exc:
        why = f"the client left no readable result {result}: {exc}"
        raise ClientError(f"{step.label}: {why}") from None
    metrics = step.workload.read(data, plan.load)
    return AbRunRow(step.block, step.arm, step.workload.name, step.seed, metrics, data)


def _check_read(plan: Plan, log: Path) -> None:
    """Stop when the candidate's log shows none of `plan.must_read` read."""
    said = proof(log)
    if not set(said.read) & set(plan.must_read):
        why = said.kernel_line or f"it read {len(said.read)} config files"
        raise ArmError(
            f"candidate read none of the release's {len(plan.must_read)} files ({why}); "
            f"its log: {log}"
        )


def _ready(plan: Plan, arm: Arm, started: list[Server], seen: set) -> tuple[Server | None, bool]:
    """The server for an arm's next run, and whether it is new here (its warm-up is due: it was
    just started, or no run here has used its URL yet, so an A/A of one server warms it once): a
    command arm's server is started when the running one is the other arm's, and added to
    `started` before it starts (so that an interrupt during its start-up still finds it to
    stop); a URL arm's health is checked before each run.

    Raises:
        ArmError: the arm is not healthy.
    """
    server = started[-1] if started else None
    new = arm.url not in seen
    seen.add(arm.url)
    if not arm.command:
        if not healthy(arm.url):
            raise ArmError(f"{arm.name}: {arm.url}/health does not answer")
    elif server is None or server.arm is not arm:
        if server is not None:
            server.stop()
        server = Server(arm, plan.folder / f"{arm.name}.log")
        started.append(server)
        server.start(plan.health_timeout_s)
        new = True
    return server, new


def run_ab(
    plan: Plan,
    done: Collection[tuple[int, str, str]],
    record: Callable[[AbRunRow], None],
    on_step: Callable[[int, int, Step], None] = lambda i, n, s: None,
) -> None:
    """Make every run of the plan not in `done`, handing each to `record` as it finishes.

    Args:
        plan: the A/B.
        done: keys (`Step.key`) of runs already kept.
        record: called with each finished run.
        on_step: called before each run with its index, the count of runs left to make at the
            start, and the step.

    Raises:
        ArmError: an arm never became healthy, or the candidate read none of `must_read`.
        ClientError: a client run failed.
    """
    arms = {a.name: a for a in plan.arms}
    todo = [s for s in steps(plan) if s.key not in done]
    started: list[Server] = []
    seen: set[object] = set()
    checked = not plan.must_read
    warmup = replace(plan, load=replace(plan.load, prompts=WARMUP_PROMPTS))
    try:
        for i, step in enumerate(todo):
            arm = arms[step.arm]
            server, new = _ready(plan, arm, started, seen)
            on_step(i, len(todo), step)
            if new:
                run_client(warmup, arm, replace(step, seed=WARMUP_SEED + i, warmup=True))
            record(run_client(plan, arm, step))
            if not checked and step.arm == CANDIDATE and server is not None:
                _check_read(plan, server.log)
                checked = True
    finally:
        for each in started:
            each.stop()


def verdicts(
    workloads: Sequence[Workload], runs: Sequence[AbRunRow], *, min_effect: float
) -> dict[str, list[Estimate]]:
    """Each workload's estimates from the blocks where both arms finished it.

    Returns:
        workload name -> one Estimate per metric; a workload with fewer than 2 such blocks is
        left out.
    """
    found: dict[tuple[str, int], dict[str, Mapping[str, float]]] = {}
    for run in runs:
        found.setdefault((run.workload, run.block), {})[run.arm] = run.metrics
    out: dict[str, list[Estimate]] = {}
    for w in workloads:
        blocks = [v for (name, _), v in sorted(found.items()) if name == w.name and len(v) == 2]
        if len(blocks) < 2:
            continue
        out[w.name] = [
            estimate(
                m, [(v["baseline"][m], v[CANDIDATE][m]) for v in blocks], min_effect=min_effect
            )
            for m in w.metrics
        ]
    return out
