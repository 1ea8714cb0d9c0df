"""`tuner ab`: two arms of a real serving engine compared end to end, under vLLM's own load
client, with every run kept in the store (`tuner.ab`)."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import asdict, replace
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from sqlalchemy import Engine

from db import repo
from db.repo import session_scope
from tuner.ab.arms import Arm, ArmError, proof
from tuner.ab.run import Plan, Step, run_ab, verdicts
from tuner.ab.stats import SLOWER, Estimate, overall
from tuner.ab.workloads import WORKLOADS, ClientError, Load
from tuner.cli.errors import fail
from tuner.cli.options import DbOpt
from tuner.cli.output import console, err_console, plain
from tuner.cli.store import open_db
from tuner.cli.tables import Column, print_table
from tuner.core import AbRunRow
from tuner.inputs.devices import device_among

WorkloadName = StrEnum("WorkloadName", {name: name for name in WORKLOADS})  # type: ignore[misc]
_WORKLOAD_HELP = "; ".join(f"{w.name}: {w.about}" for w in WORKLOADS.values())
UrlOpt = typer.Option(help="Its server's base URL; /health must answer 200 when it is ready.")
CmdOpt = typer.Option(
    help="A command that starts its server (`vllm serve ...`, `docker run ...`): started when "
    "its runs come, stopped before the other arm's command starts, its log kept [default: a "
    "server already running at the URL]."
)
COLUMNS = [Column("metric", text=True)]
COLUMNS += [Column(header) for header in ("baseline", "candidate", "ratio", "95% interval")]
COLUMNS += [Column("drift", optional=True), Column("verdict", text=True)]


def _arm(name: str, url: str, command: str | None) -> Arm:
    if not url.startswith(("http://", "https://")):
        raise fail(f"--{name} {url!r} is not an http:// or https:// URL")
    try:
        argv = tuple(shlex.split(command or ""))
    except ValueError as exc:
        raise fail(f"--{name}-cmd: {exc}") from None
    return Arm(name, url.rstrip("/"), argv)


def _num(x: float) -> str:
    return f"{x:,.1f}" if x >= 100 else f"{x:.3g}"


def _row(e: Estimate) -> list[str]:
    ratios = [f"{e.ratio:.3f}", f"{e.low:.3f}-{e.high:.3f}", f"{e.drift:.3f}"]
    return [e.metric, _num(e.baseline), _num(e.candidate), *ratios, e.verdict]


def _report(plan: Plan, found: dict[str, list[Estimate]], min_effect: float) -> str:
    """Print each arm's log proof, the tables and the drift warnings; return the verdict."""
    for arm in plan.arms:
        log = plan.folder / f"{arm.name}.log"
        if arm.command and log.exists():
            said = proof(log)
            line = f"{arm.name}: read {len(said.read)} config files, missed {len(said.missing)}"
            plain(f"{line}. {said.kernel_line or ''}".rstrip())
    for name, estimates in found.items():
        print_table(console, COLUMNS, [_row(e) for e in estimates], title=name)
        for e in estimates:
            if abs(e.drift - 1) > max(min_effect, e.high / e.low - 1):
                plain(f"warning: {name} {e.metric}: the baseline drifted {e.drift - 1:+.1%}")
    return overall(e.verdict for estimates in found.values() for e in estimates)


WorkloadOpt = Annotated[
    list[WorkloadName] | None,
    typer.Option(help=f"Repeat for several [default: all]. {_WORKLOAD_HELP}."),
]
BlocksOpt = Annotated[
    int, typer.Option(help="Blocks of one run per arm, in the order A B, B A, A B, ...", min=2)
]
InputLenOpt = Annotated[
    int, typer.Option(help="Prompt tokens (the stable prefix of the others).", min=1)
]
OutputLenOpt = Annotated[int, typer.Option(help="Output tokens of decode and concurrent.", min=2)]
PromptsOpt = Annotated[int, typer.Option(help="Timed requests per client run.", min=1)]
StreamsOpt = Annotated[int, typer.Option(help="Concurrent requests of concurrent.", min=1)]
DatasetOpt = Annotated[
    Path | None,
    typer.Option(help="ShareGPT-format prompts instead of random tokens.", exists=True),
]
MinEffectOpt = Annotated[
    float, typer.Option(help="Smallest relative change a verdict counts.", min=0.0)
]
ClientOpt = Annotated[str, typer.Option(help="The load client's command.")]
TokenizerOpt = Annotated[
    str | None, typer.Option(help="For the client, when the served name is not a tokenizer's.")
]
SeedOpt = Annotated[int, typer.Option(help="Seed of the first run's prompts; run i has seed + i.")]
OutOpt = Annotated[
    Path | None,
    typer.Option(help="Folder for the servers' logs and client results [default: ab-<key>]."),
]
HealthOpt = Annotated[
    float, typer.Option(help="Seconds a started server has to answer /health.", min=1.0)
]
DeviceOpt = Annotated[
    str | None, typer.Option(help="With --release: whose (L20, NVIDIA_L20, H200, ...).")
]
ReleaseOpt = Annotated[
    int | None,
    typer.Option(
        help="The --device release the candidate serves: its log must show one of the "
        "release's files read, and the release carries the verdict.",
        min=1,
    ),
]


def ab(
    baseline: Annotated[str, UrlOpt],
    candidate: Annotated[str, UrlOpt],
    baseline_cmd: Annotated[str | None, CmdOpt] = None,
    candidate_cmd: Annotated[str | None, CmdOpt] = None,
    workload: WorkloadOpt = None,
    blocks: BlocksOpt = 4,
    input_len: InputLenOpt = 3500,
    output_len: OutputLenOpt = 512,
    prompts: PromptsOpt = 16,
    streams: StreamsOpt = 4,
    dataset: DatasetOpt = None,
    min_effect: MinEffectOpt = 0.02,
    client: ClientOpt = "vllm bench serve",
    tokenizer: TokenizerOpt = None,
    seed: SeedOpt = 0,
    out: OutOpt = None,
    health_timeout: HealthOpt = 900.0,
    device: DeviceOpt = None,
    release: ReleaseOpt = None,
    db: DbOpt = None,
) -> None:
    """Compare two serving arms end to end: a candidate (e.g. vLLM with a release's files
    mounted) against a baseline (e.g. vLLM as shipped).

    Each workload runs under vLLM's own load client in blocks of alternating arm order (A B, B A,
    ...), each run with prompts of its own seed, after a discarded 2-prompt warm-up run of each
    arm's fresh server. Per workload and metric: each arm's median, the
    candidate/baseline ratio with a 95% interval, the baseline's drift, a verdict. Runs are kept
    as they finish: the same command resumes, more --blocks extend it. Exit 0: nothing slower
    beyond noise; 1: a metric slower; 2: bad input, an arm never healthy, a failed client run, a
    candidate that read none of --release's files; 130: Ctrl-C (finished runs kept).
    """
    arms = (_arm("baseline", baseline, baseline_cmd), _arm("candidate", candidate, candidate_cmd))
    _, store = open_db(db)
    release_id, must_read = _release_files(store, device, release)
    workloads = tuple(WORKLOADS[w] for w in dict.fromkeys(workload or WORKLOADS))
    load = Load(input_len, output_len, prompts, streams, dataset)
    options = (tokenizer, seed, health_timeout, must_read)
    plan = Plan(arms, workloads, load, blocks, tuple(shlex.split(client)), Path("."), *options)
    ab_id, plan = _open(store, plan, out, release_id)
    _run(store, plan, ab_id)
    if _finish(store, plan, ab_id, min_effect) == SLOWER:
        raise typer.Exit(1)


def _open(store: Engine, plan: Plan, out: Path | None, release_id: int | None) -> tuple[int, Plan]:
    """The A/B's id in the store (found by its spec's hash, else new) and the plan with its
    folder (--out, else `ab-<hash>`), created."""
    spec = plan.spec()
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()
    plan = replace(plan, folder=out or Path(f"ab-{key[:12]}"))
    plan.folder.mkdir(parents=True, exist_ok=True)
    with session_scope(store) as session:
        ab_id = repo.open_ab(session, key=key, spec=spec, release_id=release_id)
    return ab_id, plan


def _release_files(
    store: Engine, device: str | None, release: int | None
) -> tuple[int | None, tuple[str, ...]]:
    """The id of --device's --release and its file names; (None, ()) without --release."""
    if release is None:
        return None, ()
    if device is None:
        raise fail("--release needs --device (whose release it is)")
    with session_scope(store) as session:
        try:
            device_name = device_among(device, repo.known_device_names(session))
        except ValueError as exc:
            raise fail(str(exc)) from None
        info = repo.get_release(session, device_name=device_name, number=release)
    if info is None:
        raise fail(f"{device_name} has no release {release} in the store")
    return info.release_id, tuple(f.file_name for f in info.files)


def _run(store: Engine, plan: Plan, ab_id: int) -> None:
    """Make the A/B's runs not yet kept, keeping each as it finishes, each named on stderr."""
    with session_scope(store) as session:
        done = {(r.block, r.arm, r.workload) for r in repo.ab_runs(session, ab_test_id=ab_id)}
    plain(f"A/B {ab_id}: {len(done)} runs kept; logs and client results in {plan.folder}")

    def record(run: AbRunRow) -> None:
        with session_scope(store) as session:
            repo.record_ab_run(session, ab_test_id=ab_id, run=run)

    def on_step(i: int, total: int, step: Step) -> None:
        err_console.print(f"run {i + 1} of {total}: {step.label}", highlight=False)

    try:
        run_ab(plan, done, record, on_step)
    except (ArmError, ClientError) as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise fail("stopped: finished runs are kept; the same command resumes", 130) from None


def _finish(store: Engine, plan: Plan, ab_id: int, min_effect: float) -> str:
    """Print the A/B's tables and store its result; return its verdict."""
    with session_scope(store) as session:
        runs = repo.ab_runs(session, ab_test_id=ab_id)
        found = verdicts(plan.workloads, runs, min_effect=min_effect)
        verdict = _report(plan, found, min_effect)
        estimates = {w: [asdict(e) for e in es] for w, es in found.items()}
        result = {"min_effect": min_effect, "estimates": estimates}
        repo.finish_ab(session, ab_test_id=ab_id, result=result, verdict=verdict)
    plain(f"A/B {ab_id} verdict: the candidate is {verdict}")
    return verdict
