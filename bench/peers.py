"""Our strategies against peer tuners: same landscapes, problems, budgets, seeds, warm starts.

    python bench/peers.py                                   # every peer, defaults below
    python bench/peers.py --combine A.json B.json --out C.json   # one table of several runs

Peers, each searching vLLM's 1,280-config space of every (N, K, M) of each landscape through
its recorded timings (no GPU); quality = optimum latency_us / best latency_us found:
- ours: the strategies of `tuner.search` (`guided`, `optuna`);
- `kt:<name>`: Kernel Tuner 1.5's strategies in its simulation mode, from a cache file built
  from the landscape (one per problem): the space is `tune_params` with vLLM's values and a
  restriction that admits the configs the landscape recorded as ok, so configs that cannot
  launch are outside Kernel Tuner's search space (they cost nothing, as for `guided`);
- `optuna:<name>`: optuna's TPE, CMA-ES and GP samplers on the integer coordinates of
  `tuner.search.axes` (each value's index on its axis), pruned configs told as failed and
  not counted;
- `random`: distinct configs in a seeded random order, pruned ones not counted.

Warm starts (vLLM's default first; in "sweep" mode also the winners the same peer found for
earlier tasks, `warm_start_for_task`) are measured first and count against the budget, for
every peer: ours take them as `warm_start`, optuna's as enqueued trials, Kernel Tuner's are
measured before it runs and its start `x0` is vLLM's default (`bayes_opt` and `random_sample`
take no x0: they start from their own samples). Kernel Tuner's strategies are seeded through
Python's and numpy's global generators, which they draw from (Kernel Tuner 1.5 uses its
`seed` option only in pymoo strategies). In "sweep" mode ours also get the ok trials of the
earlier related tasks (`related`: same (N, K) at another M, other (N, K) at the same M), as
`tuner sweep` hands them from its store: `guided` orders its steps by a prior fitted on them
(`tuner.search.guided.fit_prior`); the other peers get the winners only. Writes
bench/results/peers_<date>.json with versions, landscape sha256s and date.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import platform
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.landscape_file import optimum  # noqa: E402
from tuner.core import CONFIG_KEYS  # noqa: E402
from tuner.kernels.config import KernelConfig  # noqa: E402
from tuner.kernels.dense.space import default_config, vllm_space  # noqa: E402
from tuner.measure.landscape import Landscape, load_landscape  # noqa: E402
from tuner.measure.trial import TrialResult  # noqa: E402
from tuner.search.axes import space_axes  # noqa: E402
from tuner.search.base import PRUNED, BudgetedEvaluate, Evaluate, History, best  # noqa: E402
from tuner.search.optuna_tpe import param_name  # noqa: E402
from tuner.search.registry import STRATEGIES, get_strategy  # noqa: E402
from tuner.search.warm_start import related, warm_start_for_task  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from peers_table import (  # noqa: E402
    OURS,
    PEERS,
    leaders,
    markdown,
    summarize,
    targets,
    versus,
)

LANDSCAPES = (
    "synthetic_sm90",
    "kt_gemm_min",
    "kt_gemm_fixed",
    "kt_dedisp",
    "kt_conv",
)  # bench/landscapes/
HELD_OUT = ("kt_conv",)  # no design is chosen on it (bench/landscapes/README.md)
BUDGETS = (16, 32, 64, 128)  # distinct configs per (N, K, M), warm starts included
SEEDS = 10  # seeds 0 .. SEEDS-1
MODES = ("default", "sweep")  # warm starts: vLLM's default only, or a replayed sweep's winners
# Peers whose CPU per task makes every seed, budget and mode too long on 2 cores (seconds per
# task here: bayes_opt up to 0.3 at 32 trials; optuna's GP 20-38 at 16 and about 230 at 128;
# TPE and CMA-ES 3-18 at 128, as they ask again and again for configs that are measured or
# pruned): at most this many seeds, budgets up to the given one, these modes. The table states
# what each row covers.
SLOW = {
    "kt:bayes_opt": (SEEDS, 32, MODES),
    "optuna:gp": (1, 16, ("default",)),
    "optuna:tpe": (1, 128, MODES),
    "optuna:cmaes": (1, 128, MODES),
}
PEER_SEEDS = None  # at most this many seeds for peers other than ours (None: --seeds)
WORKERS = 2  # processes
SAVE_EVERY = 20  # finished jobs between writes of the result file (partial until the last)
OUT_DIR = HERE / "results"
KT_KERNEL = "w8a8_block_fp8_matmul"  # the kernel name the cache files carry


def _key(config: KernelConfig) -> str:
    """Kernel Tuner's cache key of a config: its values in vLLM's key order, comma-joined."""
    return ",".join(str(value) for value in config.as_dict().values())


def write_kt_cache(
    path: Path,
    trials: dict[KernelConfig, TrialResult],
    space: Sequence[KernelConfig],
    device_name: str,
) -> dict[str, list[int]]:
    """Write one problem's ok timings as a Kernel Tuner cache file (`kernel_tuner.util
    .process_cache`'s format: device_name, kernel_name, problem_size, tune_params_keys,
    tune_params, objective, cache of "v1,...,v6" -> {param: value, time, times}); `time` is the
    recorded median in microseconds (Kernel Tuner minimises it whatever the unit).

    Returns:
        tune_params: vLLM's key -> its values in the space, ascending.
    """
    tune_params = {key: sorted({getattr(c, key) for c in space}) for key in CONFIG_KEYS}
    cache = {
        _key(c): {
            **c.as_dict(),
            "time": r.latency_us,
            "times": [r.latency_us],
            "compile_time": 0.0,
            "verification_time": 0.0,
            "benchmark_time": 0.0,
        }
        for c, r in trials.items()
        if r.ok
    }
    body = {
        "device_name": device_name,
        "kernel_name": KT_KERNEL,
        "problem_size": [1, 1, 1],
        "tune_params_keys": list(CONFIG_KEYS),
        "tune_params": tune_params,
        "objective": "time",
        "cache": cache,
    }
    path.write_text(json.dumps(body))
    return tune_params


class KernelTunerPeer:
    """One of Kernel Tuner's strategies, in its simulation mode on a problem's cache file."""

    free = PRUNED

    def __init__(
        self,
        strategy: str,
        cache: Path,
        tune_params: dict[str, list[int]],
        runnable: frozenset[str],
    ) -> None:
        self.name = f"kt:{strategy}"
        self.strategy = strategy
        self.cache = cache
        self.tune_params = tune_params
        self.runnable = runnable

    def _run(self, max_fevals: int, seed: int, x0: KernelConfig | None) -> list[KernelConfig]:
        """Kernel Tuner's distinct evaluations, in order, of one seeded run."""
        import kernel_tuner
        import numpy as np

        runnable = self.runnable

        def restriction(params: dict[str, int]) -> bool:  # ok in the landscape
            return ",".join(str(params[key]) for key in CONFIG_KEYS) in runnable

        options: dict = {"max_fevals": max_fevals}
        if x0 is not None and self.strategy not in ("bayes_opt", "random_sample"):
            options["x0"] = list(x0.as_dict().values())
        random.seed(seed)
        np.random.seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results, _ = kernel_tuner.tune_kernel(
                KT_KERNEL,
                "",
                (1, 1, 1),
                [],
                self.tune_params,
                restrictions=[restriction],
                cache=str(self.cache),
                simulation_mode=True,
                strategy=self.strategy,
                strategy_options=options,
                quiet=True,
            )
        keys = dict.fromkeys(",".join(str(r[key]) for key in CONFIG_KEYS) for r in results)
        return [KernelConfig(*map(int, key.split(","))) for key in keys]

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Warm starts, then Kernel Tuner's run with the budget they left; its evaluations of
        warm-start configs are answered again and not counted (a rerun with that many more
        max_fevals, until its distinct new configs fill the budget or it stops short)."""
        tracker = BudgetedEvaluate(evaluate, space, budget, free=self.free)
        tracker.warm_start(warm_start)
        x0 = next((c for c in warm_start if _key(c) in self.runnable), None)
        left = tracker.left
        extra = 0
        for _ in range(4):
            if left <= 0:
                break
            order = self._run(left + extra, seed, x0)
            again = sum(c in tracker.results for c in order)
            if again == extra or len(order) < left + extra:
                break
            extra = again
        for config in order if left > 0 else ():
            if tracker.left <= 0:
                break
            tracker(config)
        return tracker.history


class OptunaPeer:
    """An optuna sampler on the integer coordinates of each config key."""

    free = PRUNED

    def __init__(self, sampler: str) -> None:
        self.name = f"optuna:{sampler}"
        self.sampler = sampler

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Enqueue the warm starts, then ask and tell until `budget` counted trials (at most
        20 asks per trial): a pruned config is told as failed and costs nothing, a repeated
        one is told its first result again."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = {
                "tpe": optuna.samplers.TPESampler,
                "gp": optuna.samplers.GPSampler,
                "cmaes": optuna.samplers.CmaEsSampler,
            }[self.sampler](seed=seed)
        tracker = BudgetedEvaluate(evaluate, space, budget, free=self.free)
        axes = space_axes(space)
        distributions = {
            param_name(axis): optuna.distributions.IntDistribution(0, len(axis.values) - 1)
            for axis in axes
        }
        study = optuna.create_study(direction="minimize", sampler=sampler)
        for config in dict.fromkeys(warm_start):
            if config in tracker.allowed:
                study.enqueue_trial(
                    {
                        param_name(axis): axis.values.index(getattr(config, axis.key))
                        for axis in axes
                    }
                )
        asks = 0
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            while tracker.left > 0 and asks < 20 * budget:
                asks += 1
                trial = study.ask(distributions)
                config = KernelConfig(
                    **{axis.key: axis.values[trial.params[param_name(axis)]] for axis in axes}
                )
                result = tracker(config)
                if result is not None and result.ok:
                    study.tell(trial, result.latency_us)
                else:
                    study.tell(trial, state=optuna.trial.TrialState.FAIL)
        return tracker.history


class RandomPeer:
    """Distinct configs of the space in a seeded random order, pruned ones not counted."""

    name = "random"
    free = PRUNED

    def search(
        self,
        evaluate: Evaluate,
        *,
        space: Sequence[KernelConfig],
        budget: int,
        seed: int,
        warm_start: Sequence[KernelConfig] = (),
    ) -> History:
        """Warm starts, then random configs until `budget` counted trials."""
        tracker = BudgetedEvaluate(evaluate, space, budget, free=self.free)
        tracker.warm_start(warm_start)
        order = list(space)
        random.Random(seed).shuffle(order)
        for config in order:
            if tracker.left <= 0:
                break
            tracker(config)
        return tracker.history


def run_job(job: tuple[str, str, str, int, int]) -> dict:
    """Quality of one (peer, landscape, mode, seed, budget) on every problem of the landscape."""
    name, path, mode, seed, budget = job
    landscape = _landscape(path)
    space = vllm_space()
    default = default_config(landscape.block_shape)
    found: list[tuple[int, int, int, KernelConfig]] = []
    timings: dict[tuple[int, int, int], list[tuple[KernelConfig, float]]] = {}
    ratios: dict[str, float] = {}
    evaluations = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        for n, k, m in sorted(landscape.problems):
            runner = landscape.runner(n, k, m)
            peer = _peer(name, landscape, (n, k, m), Path(folder), space)
            warm = [default]
            extra = {}
            if mode == "sweep":
                warm = warm_start_for_task(found, N=n, K=k, M=m, default=default)
                if getattr(peer, "reads_related", False):
                    extra["related"] = related((n, k, m), timings)
            history = peer.search(
                runner.evaluate, space=space, budget=budget, seed=seed, warm_start=warm, **extra
            )
            timings[(n, k, m)] = [(c, r.latency_us) for c, r in history if r.ok]
            evaluations += len(history)
            winner = best(history)
            ratios[f"{n},{k},{m}"] = (
                0.0 if winner is None else (optimum(runner)[1].latency_us / winner[1].latency_us)
            )
            if winner is not None:
                found.append((n, k, m, winner[0]))
    return {
        "peer": name,
        "landscape": Path(path).stem,
        "mode": mode,
        "seed": seed,
        "budget": budget,
        "ratios": ratios,
        "evaluations": evaluations,
        "search_s": time.perf_counter() - start,
    }


_LOADED: dict[str, Landscape] = {}


def _landscape(path: str) -> Landscape:
    """`load_landscape`, once per worker process (a job is one seed and budget)."""
    if path not in _LOADED:
        _LOADED[path] = load_landscape(path)
    return _LOADED[path]


def _peer(
    name: str,
    landscape: Landscape,
    problem: tuple[int, int, int],
    folder: Path,
    space: Sequence[KernelConfig],
):
    if name in STRATEGIES:
        return get_strategy(name)
    if name == "random":
        return RandomPeer()
    kind, _, strategy = name.partition(":")
    if kind == "optuna":
        return OptunaPeer(strategy)
    trials = landscape.problems[problem]
    cache = folder / ("_".join(map(str, problem)) + ".json")
    tune_params = write_kt_cache(cache, trials, space, landscape.device_name)
    runnable = frozenset(_key(c) for c, r in trials.items() if r.ok)
    return KernelTunerPeer(strategy, cache, tune_params, runnable)


def _versions() -> dict[str, str]:
    names = ("blockfp8-tuner", "kernel_tuner", "optuna", "cmaes", "scipy", "numpy", "torch")
    installed = {
        d.metadata["Name"].lower().replace("-", "_"): d.version for d in metadata.distributions()
    }
    return {
        "python": platform.python_version(),
        **{n: installed.get(n.replace("-", "_"), "not installed") for n in names},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landscape", action="append", help=f"default: {', '.join(LANDSCAPES)}")
    parser.add_argument("--peer", action="append", choices=PEERS)
    parser.add_argument("--budget", type=int, action="append")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--mode", action="append", choices=MODES)
    parser.add_argument(
        "--peer-seeds",
        type=int,
        default=PEER_SEEDS,
        help="at most this many seeds for peers other than ours",
    )
    parser.add_argument(
        "--slow-seeds",
        type=int,
        default=None,
        help="seeds for the SLOW peers (default: their entry in SLOW)",
    )
    parser.add_argument("--workers", type=int, default=WORKERS)
    parser.add_argument("--combine", type=Path, nargs="+", help="result files to merge instead")
    parser.add_argument("--out", type=Path, default=None, help="result file (default: dated)")
    args = parser.parse_args()
    start = time.perf_counter()
    out = args.out or OUT_DIR / f"peers_{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    if args.combine:
        parts = [json.loads(path.read_text()) for path in args.combine]
        runs = combined_runs(parts)
        landscapes = {k: v for part in parts for k, v in part["landscapes"].items()}
        commands = [c for part in parts for c in part["commands"]]
        write_report(
            out,
            runs,
            landscapes,
            commands,
            start,
            complete=all(part.get("complete", True) for part in parts),
        )
        return
    paths = [
        HERE / "landscapes" / f"{name}.json" if "/" not in name else Path(name)
        for name in args.landscape or LANDSCAPES
    ]
    jobs = []
    for peer in args.peer or PEERS:
        seeds, top, modes = SLOW.get(peer, (args.seeds, max(BUDGETS), MODES))
        if peer in SLOW and args.slow_seeds is not None:
            seeds = args.slow_seeds
        if peer not in OURS and args.peer_seeds is not None:
            seeds = min(seeds, args.peer_seeds)
        jobs += [
            (peer, str(path), mode, seed, budget)
            for path in paths
            for mode in args.mode or MODES
            if mode in modes
            for seed in range(min(seeds, args.seeds))
            for budget in args.budget or BUDGETS
            if budget <= top
        ]
    # The default strategy first, then seed by seed, slow peers last: a run cut short leaves
    # a table of what finished (the file says "complete": false until the last job).
    jobs.sort(key=lambda job: (job[0] != "guided", job[0] in SLOW, job[3]))
    landscapes = {path.stem: hashlib.sha256(path.read_bytes()).hexdigest() for path in paths}
    commands = [" ".join(["python", "bench/peers.py", *sys.argv[1:]])]
    runs: list[dict] = []
    with mp.get_context("spawn").Pool(args.workers) as pool:
        for run in pool.imap_unordered(run_job, jobs):
            runs.append(run)
            if len(runs) % SAVE_EVERY == 0:
                write_report(out, runs, landscapes, commands, start, complete=False)
    write_report(out, runs, landscapes, commands, start, complete=True)


def combined_runs(parts: Sequence[dict]) -> list[dict]:
    """The runs of several result files, each (peer, landscape, mode, seed, budget) once: from
    the last file that has it (a rerun at more seeds replaces the seeds it repeats)."""
    return list(
        {
            (run["peer"], run["landscape"], run["mode"], run["seed"], run["budget"]): run
            for part in parts
            for run in part["runs"]
        }.values()
    )


def write_report(
    out: Path,
    runs: list[dict],
    landscapes: dict[str, str],
    commands: list[str],
    start: float,
    *,
    complete: bool,
) -> None:
    """Summarize the runs and write the result file (and print the table when complete)."""
    rows = summarize(runs)
    table = markdown(rows)
    against = versus(runs)
    reached = targets(runs)
    ahead = leaders(runs, HELD_OUT)
    report = {
        "benchmark": "peers",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "complete": complete,
        "commands": commands,
        "landscapes": landscapes,
        "versions": _versions(),
        "host": platform.node(),
        "wall_s": round(time.perf_counter() - start),
        "summary": rows,
        "table": table,
        "versus": against,
        "targets": reached,
        "leaders": ahead,
        "runs": runs,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    if complete:
        print(table)
        print(against)
        print(reached)
        print(ahead)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
