"""Our winners vs vLLM's shipped config files vs vLLM's default config, timed side by side per M.

    python bench/vs_shipped.py --db sqlite:///tuner.db            # the visible GPU
    python bench/vs_shipped.py --dry-run --device NVIDIA_H200      # what would be timed; any host
    python bench/vs_shipped.py --shapes 7168,2048 --m 1,16,4096    # a shorter run

For each shape of the model (every TP size it lists) that vLLM ships a file for on the device,
and each M key of that file, three configs: ours (what our merged file would make vLLM run at
M: the store's winners with the no-regression rule of tuner.merge, looked up by vLLM's
nearest-key rule), the shipped file's entry for M, and vLLM's default config. Each distinct
config is checked against the float64 reference, then the ones that pass are re-timed
interleaved (A B C A B C ...) in one run (tuner.noise.retime_interleaved), so drift hits them
alike. The copy and FP8-mm ceilings are measured once in the same run (tuner.roofline) and our
latency is put against them. Writes results/vs_shipped_<device_name>.json with device,
versions, date and command.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.configfile import (  # noqa: E402
    FP8_DTYPE,
    parse_config_file,
    parse_config_file_name,
    vllm_pick_key,
)
from tuner.measure import Problem  # noqa: E402
from tuner.merge import merge_shape  # noqa: E402
from tuner.noise import RETIME_ROUNDS, retime_interleaved  # noqa: E402
from tuner.roofline import roofline  # noqa: E402
from tuner.space import KernelConfig, default_config  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHIPPED_DIR = REPO.parent / "shared" / "fixtures" / "vllm-0.33.0"  # vLLM's files, per device
MODEL = "deepseek-v3"  # shapes/<MODEL>.toml, all TP sizes
OUT_DTYPE = "bfloat16"  # what serving uses; our winners are filtered by it
BLOCK_SHAPE = (128, 128)  # [group_n, group_k]; vLLM's shipped files are all 128x128
ROUNDS = RETIME_ROUNDS  # interleaved rounds per (shape, M): samples per config (12)
OUT_DIR = REPO / "bench" / "results"  # where the JSON result goes
ROLES = ("ours", "shipped", "default")


# Problem -> a runner with check(config) -> TrialResult and sample_us(config) -> float
# (tuner.measure.KernelRunner on CUDA, a fake in tests).
RunnerFactory = Callable[[Problem], Any]
# retime(sample_us, configs, *, rounds) -> [Retime(config, latency_us, p20_us, p80_us, rounds)]
Retime = Callable[..., Sequence[Any]]


@dataclass(frozen=True)
class Entry:
    """One (shape, M) to time: the three configs and which file key each came from."""

    N: int
    K: int
    M: int
    shipped: KernelConfig
    default: KernelConfig
    ours: KernelConfig | None
    ours_key: int | None  # the M key of our file that vLLM picks for M


def read_shipped(folder: Path, device_name: str,
                 block_shape: tuple[int, int] = BLOCK_SHAPE) -> dict[tuple[int, int], dict]:
    """vLLM's shipped block-FP8 files of one device: (N, K) -> {M: config dict}.

    Raises:
        ValueError: no folder for the device (the message lists the devices there), or a file
            that does not parse.
    """
    where = folder / device_name
    if not where.is_dir():
        have = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        raise ValueError(f"no shipped files for {device_name} under {folder} "
                         f"(devices there: {', '.join(have) or 'none'})")
    files = {}
    for path in sorted(where.glob("*.json")):
        name = parse_config_file_name(path.name)
        if name.dtype == FP8_DTYPE and name.block_shape == tuple(block_shape):
            files[(name.N, name.K)] = parse_config_file(path.read_text(), source=path.name)
    return files


def our_files(winners: Sequence[Any], block_shape: tuple[int, int] = BLOCK_SHAPE
              ) -> dict[tuple[int, int], dict[int, dict[str, int]]]:
    """What our merged files would hold, per (N, K): store winners (db.repo.WinnerRow) with
    the no-regression rule of `tuner.merge.merge_shape`; any M grid (partial files allowed)."""
    grouped: dict[tuple[int, int], list[Any]] = {}
    for row in winners:
        if tuple(row.block_shape) == tuple(block_shape):
            grouped.setdefault((row.N, row.K), []).append(row)
    return {key: merge_shape(rows, m_requested=[], default=default_config(block_shape),
                             allow_partial=True).configs
            for key, rows in sorted(grouped.items())}


def plan(shipped: Mapping[tuple[int, int], Mapping[int, Mapping[str, int]]],
         ours: Mapping[tuple[int, int], Mapping[int, Mapping[str, int]]],
         shapes: Sequence[tuple[int, int]], *, m_values: Sequence[int] | None = None,
         block_shape: tuple[int, int] = BLOCK_SHAPE) -> list[Entry]:
    """The (shape, M) to time: shapes that have a shipped file, each M key of it (or only
    those in `m_values`), in shape order then ascending M."""
    entries = []
    for N, K in shapes:
        if (N, K) not in shipped:
            continue
        mine = ours.get((N, K), {})
        for M in sorted(shipped[(N, K)]):
            if m_values is not None and M not in m_values:
                continue
            key = vllm_pick_key(mine, M) if mine else None
            entries.append(Entry(
                N=N, K=K, M=M, shipped=KernelConfig.from_dict(shipped[(N, K)][M]),
                default=default_config(block_shape), ours_key=key,
                ours=None if key is None else KernelConfig.from_dict(mine[key]),
            ))
    return entries


def _roles(entry: Entry) -> dict[str, KernelConfig]:
    roles = {"ours": entry.ours, "shipped": entry.shipped, "default": entry.default}
    return {role: config for role, config in roles.items() if config is not None}


def _ratio(numerator: dict | None, denominator: dict | None) -> float | None:
    if not numerator or not denominator or numerator.get("latency_us") is None \
            or denominator.get("latency_us") is None:
        return None
    return round(numerator["latency_us"] / denominator["latency_us"], 4)


def compare_entry(entry: Entry, runner: Any, retime: Retime, *, rounds: int,
                  ceilings: Mapping[str, float] | None, out_dtype: str = OUT_DTYPE,
                  block_shape: tuple[int, int] = BLOCK_SHAPE) -> dict:
    """Check each distinct config of one entry, re-time the passing ones interleaved, and
    return the row: per role its config, key, status and latency_us (median, p20, p80 of the
    interleaved samples), the speedups (>1: ours faster) and our roofline figures."""
    roles = _roles(entry)
    distinct = list(dict.fromkeys(roles.values()))
    checked = {config: runner.check(config) for config in distinct}
    passing = [c for c in distinct if str(checked[c].status) == "ok"]
    timed, failure = {}, None
    try:
        if passing:
            timed = {r.config: r for r in retime(runner.sample_us, passing, rounds=rounds)}
    except Exception as exc:  # noqa: BLE001 - a failed timing is recorded, the run goes on
        failure = f"timing failed: {type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
    row: dict[str, Any] = {"N": entry.N, "K": entry.K, "M": entry.M}
    for role in ROLES:
        config = roles.get(role)
        if config is None:
            row[role] = None
            continue
        cell: dict[str, Any] = {
            "config": config.as_dict(),
            "key_M": entry.ours_key if role == "ours" else (entry.M if role == "shipped" else None),
            "status": str(checked[config].status),
        }
        if config in timed:
            t = timed[config]
            cell.update(latency_us=round(t.latency_us, 3), p20_us=round(t.p20_us, 3),
                        p80_us=round(t.p80_us, 3), rounds=t.rounds)
        else:
            cell.update(latency_us=None, error=checked[config].error or failure)
        row[role] = cell
    spreads = [t.p80_us - t.p20_us for t in timed.values()]
    row["noise_us"] = round(max(spreads), 3) if spreads else None
    row["speedup_vs_default"] = _ratio(row["default"], row["ours"])
    row["speedup_vs_shipped"] = _ratio(row["shipped"], row["ours"])
    row["shipped_vs_default"] = _ratio(row["default"], row["shipped"])
    ours_us = (row["ours"] or {}).get("latency_us")
    figures = None
    if ours_us:
        r = roofline(entry.M, entry.N, entry.K, ours_us, ceilings, block_shape=block_shape,
                     out_dtype=out_dtype)
        figures = {"gbps": round(r.gbps, 1), "tflops": round(r.tflops, 2),
                   "copy_ratio": None if r.copy_ratio is None else round(r.copy_ratio, 4),
                   "fp8_mm_ratio": None if r.fp8_mm_ratio is None else round(r.fp8_mm_ratio, 4),
                   "bound": r.bound}
    row["roofline"] = figures
    return row


def compare(entries: Sequence[Entry], runner_factory: RunnerFactory, *, rounds: int = ROUNDS,
            ceilings: Mapping[str, float] | None = None, retime: Retime | None = None,
            out_dtype: str = OUT_DTYPE, block_shape: tuple[int, int] = BLOCK_SHAPE,
            progress: Callable[[dict], None] | None = None) -> list[dict]:
    """Time every entry; one runner (inputs, reference) per (shape, M).

    Args:
        entries: from `plan`.
        runner_factory: Problem -> runner with `check` and `sample_us` (KernelRunner on CUDA).
        rounds: interleaved rounds per entry.
        ceilings: {"copy_gbps", "fp8_mm_tflops"} measured in this run, or None.
        retime: tuner.noise.retime_interleaved (None) or a stand-in with its signature.
        out_dtype: output dtype of C.
        block_shape: [group_n, group_k].
        progress: called with each finished row.

    Returns:
        One row per entry (`compare_entry`).
    """
    retime = retime or retime_interleaved
    rows = []
    for entry in entries:
        runner = runner_factory(Problem(entry.M, entry.N, entry.K, tuple(block_shape), out_dtype))
        row = compare_entry(entry, runner, retime, rounds=rounds, ceilings=ceilings,
                            out_dtype=out_dtype, block_shape=block_shape)
        del runner  # frees the inputs and the reference before the next M
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def _geomean(values: Sequence[float]) -> float | None:
    return round(math.exp(sum(map(math.log, values)) / len(values)), 4) if values else None


def _slower(rows: Sequence[dict], role: str, than: str) -> list[list[int]]:
    """(N, K, M) where `role` is slower than `than` by more than the row's noise_us."""
    out = []
    for r in rows:
        a, b = (r[role] or {}).get("latency_us"), (r[than] or {}).get("latency_us")
        if a is not None and b is not None and a - b > r["noise_us"]:
            out.append([r["N"], r["K"], r["M"]])
    return out


def summarize(rows: Sequence[dict]) -> dict:
    """Geometric means of the speedups over the rows that have them, and the (N, K, M) where
    one config is slower than another by more than the noise (the larger p80 - p20 of the
    configs timed together)."""
    def have(key: str) -> list[float]:
        return [row[key] for row in rows if row[key] is not None]

    return {
        "rows": len(rows),
        "shapes": len({(row["N"], row["K"]) for row in rows}),
        "geomean_speedup_vs_default": _geomean(have("speedup_vs_default")),
        "geomean_speedup_vs_shipped": _geomean(have("speedup_vs_shipped")),
        "geomean_shipped_vs_default": _geomean(have("shipped_vs_default")),
        "ours_slower_than_default": _slower(rows, "ours", "default"),
        "ours_slower_than_shipped": _slower(rows, "ours", "shipped"),
        "shipped_slower_than_default": _slower(rows, "shipped", "default"),
    }


def _us(cell: dict | None) -> str:
    if cell is None:
        return "-"
    if cell.get("latency_us") is None:
        return cell["status"]
    return f"{cell['latency_us']:.2f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}x"


def format_table(rows: Sequence[dict]) -> str:
    """The rows as a plain-text table, one line per (shape, M)."""
    head = (f"{'N':>6} {'K':>6} {'M':>5} {'ours_us':>9} {'key':>5} {'shipped_us':>10} "
            f"{'default_us':>10} {'vs_default':>10} {'vs_shipped':>10} {'%copy':>6} {'%fp8':>6}")
    lines = [head]
    for r in rows:
        fig = r["roofline"] or {}
        pct = [("-" if fig.get(k) is None else f"{fig[k] * 100:.1f}")
               for k in ("copy_ratio", "fp8_mm_ratio")]
        key = "-" if r["ours"] is None else str(r["ours"]["key_M"])
        lines.append(
            f"{r['N']:>6} {r['K']:>6} {r['M']:>5} {_us(r['ours']):>9} {key:>5} "
            f"{_us(r['shipped']):>10} {_us(r['default']):>10} {_x(r['speedup_vs_default']):>10} "
            f"{_x(r['speedup_vs_shipped']):>10} {pct[0]:>6} {pct[1]:>6}")
    return "\n".join(lines)


def result_doc(rows: Sequence[dict], meta: Mapping[str, Any]) -> dict:
    """The JSON document: `meta` (device, versions, date, command, settings), the ceilings
    inside meta, every row, and the summary."""
    return {"benchmark": "vs_shipped", **meta, "summary": summarize(rows), "rows": list(rows)}


class UsageError(Exception):
    """Bad arguments or inputs: one line for the user, exit status 2."""


def _pair(text: str) -> tuple[int, int]:
    try:
        N, K = (int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N,K (two integers), got {text!r}") from None
    return N, K


def _ints(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 1,16,4096, got {text!r}") \
            from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="device_name (default: the visible GPU's)")
    parser.add_argument("--db", help="store URL with our winners (default: $TUNER_DB_URL or "
                        "sqlite:///tuner.db)")
    parser.add_argument("--shipped-dir", type=Path, default=SHIPPED_DIR,
                        help="folder of vLLM's files, one subfolder per device_name")
    parser.add_argument("--model", default=MODEL, help="shapes/<model>.toml")
    parser.add_argument("--tp", type=int, action="append",
                        help="only this TP size's shapes (repeat); default every TP size")
    parser.add_argument("--shapes", type=_pair, action="append", metavar="N,K",
                        help="only these shapes (repeat); default: the model's")
    parser.add_argument("--m", type=_ints, help="only these M keys, e.g. 1,16,4096")
    parser.add_argument("--out-dtype", choices=("bfloat16", "float16"), default=OUT_DTYPE)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds per M")
    parser.add_argument("--out", type=Path, help="JSON path (default: "
                        "bench/results/vs_shipped_<device_name>.json)")
    parser.add_argument("--allow-stale", action="store_true", help="our winners from any "
                        "kernel hash and Triton version (default: the current ones only)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be timed")
    return parser


def _model_shapes(model: str, tps: Sequence[int] | None) -> list[tuple[int, int]]:
    from tuner.shapes import ShapesFileError, UnknownModelError, load_shapes, tp_sizes

    try:
        seen = {}
        for tp in tps or tp_sizes(model):
            for shape in load_shapes(model, tp).shapes:
                seen.setdefault(tuple(shape), None)
    except (UnknownModelError, ShapesFileError) as exc:
        raise UsageError(str(exc)) from None
    return list(seen)


def _device_name(device: str | None, shipped_dir: Path, dry_run: bool) -> tuple[str, Any]:
    """(device_name, GpuInfo or None); a real run needs a visible GPU of that name."""
    from tuner.devices import matches, resolve, visible_gpus

    gpus = visible_gpus()
    if device is None:
        if not gpus:
            raise UsageError("no CUDA GPU visible: pass --device NAME (with --dry-run to see "
                             "the plan on this host)")
        return gpus[0].device_name, gpus[0]
    gpu = next((g for g in gpus if matches(device, g.device_name)), None)
    if gpu is not None:
        return gpu.device_name, gpu
    if not dry_run:
        seen = ", ".join(g.device_name for g in gpus) or "none"
        raise UsageError(f"no visible GPU is {device} (visible: {seen}); timing needs one")
    known = [p.name for p in shipped_dir.iterdir() if p.is_dir()] if shipped_dir.is_dir() else []
    names = resolve(device, known)
    return (names[0] if names else device), None


def _winner_filter(allow_stale: bool) -> dict[str, str | None]:
    """db.repo.winners' provenance filter: this kernel's hash and the installed Triton's
    major.minor (DESIGN §5), or no filter with --allow-stale."""
    from tuner.provenance import current_kernel_hash, installed_triton_minor

    if allow_stale:
        return {"kernel_hash": None, "triton_minor": None}
    return {"kernel_hash": current_kernel_hash(), "triton_minor": installed_triton_minor()}


def _scope_text(scope: Mapping[str, str | None]) -> str:
    if scope["kernel_hash"] is None:
        return "any kernel and Triton: --allow-stale"
    return f"kernel {scope['kernel_hash'][:12]}, Triton {scope['triton_minor'] or 'any'}"


def _store_winners(url: str | None, device_name: str, out_dtype: str,
                   scope: Mapping[str, str | None]) -> list[Any]:
    """The store's winners of the device within `scope` (`_winner_filter`); none, with a
    warning, when no --db was given and the default SQLite file does not exist."""
    from sqlalchemy.engine import make_url

    from db import repo
    from db.engine import SchemaError, default_db_url, open_store, session_scope

    given = url is not None
    url = url or default_db_url()
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database and \
            not Path(parsed.database).exists():
        if given:
            raise UsageError(f"no store at {parsed.database}")
        print(f"vs_shipped: no store at {parsed.database} (pass --db URL): timing the shipped "
              "and default configs only", file=sys.stderr)
        return []
    try:
        engine = open_store(url)
    except SchemaError as exc:
        raise UsageError(str(exc)) from None
    try:
        with session_scope(engine) as session:
            return repo.winners(session, device_name=device_name, out_dtype=out_dtype, **scope)
    finally:
        engine.dispose()


def _describe(entry: Entry) -> str:
    ours = "-" if entry.ours is None else f"{entry.ours.short()} (key {entry.ours_key})"
    return (f"N={entry.N} K={entry.K} M={entry.M}: ours {ours}; shipped {entry.shipped.short()}; "
            f"default {entry.default.short()}")


def run(args: argparse.Namespace, argv: Sequence[str]) -> int:
    """The command: plan, then (unless --dry-run) time on the GPU and write the JSON."""
    if args.rounds < 2:
        raise UsageError(f"--rounds must be at least 2, got {args.rounds}")
    device_name, gpu = _device_name(args.device, args.shipped_dir, args.dry_run)
    try:
        shipped = read_shipped(args.shipped_dir, device_name)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    shapes = args.shapes or _model_shapes(args.model, args.tp)
    missing = [f"{N},{K}" for N, K in shapes if (N, K) not in shipped]
    scope = _winner_filter(args.allow_stale)
    ours = our_files(_store_winners(args.db, device_name, args.out_dtype, scope))
    entries = plan(shipped, ours, shapes, m_values=args.m)
    print(f"{device_name}: {len(entries)} (shape, M) in {len({(e.N, e.K) for e in entries})} "
          f"shape(s) with shipped files; no shipped file for {', '.join(missing) or 'none'}; "
          f"our winners for {len(ours)} shape(s) ({_scope_text(scope)})", flush=True)
    if args.dry_run:
        for entry in entries:
            print(_describe(entry))
        return 0
    if not entries:
        raise UsageError("nothing to time")
    import torch

    from tuner.measure import KernelRunner
    from tuner.roofline import measure_ceilings
    from tuner.worker import collect_environment

    torch.cuda.set_device(gpu.index)
    env = collect_environment("cuda")
    ceilings = measure_ceilings("cuda")
    print(f"ceilings: copy {ceilings['copy_gbps']:,.0f} GB/s, FP8 mm "
          f"{ceilings['fp8_mm_tflops']:,.1f} TFLOP/s", flush=True)
    rows = compare(entries, lambda problem: KernelRunner(problem, backend="cuda"),
                   rounds=args.rounds, ceilings=ceilings, out_dtype=args.out_dtype,
                   progress=lambda row: print(format_table([row]).splitlines()[1], flush=True))
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "bench/vs_shipped.py", *argv]),
        "device_name": device_name, "gpu_name": env["gpu_name"],
        "compute_capability": env["compute_capability"], "backend": "cuda",
        "versions": {k: env[k] for k in ("torch", "triton", "tuner", "cuda", "driver",
                                         "kernel_hash")},
        "shipped_files": args.shipped_dir.name, "model": args.model, "tp": args.tp,
        "shapes": [list(s) for s in shapes], "m": args.m, "out_dtype": args.out_dtype,
        "block_shape": list(BLOCK_SHAPE), "rounds": args.rounds, "ceilings": ceilings,
        "winners_from": scope,
    }
    print(format_table(rows))
    doc = result_doc(rows, meta)
    print(f"summary: {doc['summary']}")
    out = args.out or OUT_DIR / f"vs_shipped_{device_name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and run; a usage problem is one line on stderr and exit status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    try:
        return run(args, argv)
    except UsageError as exc:
        print(f"vs_shipped: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
