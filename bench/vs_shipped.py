"""Our winners vs vLLM's shipped config files vs vLLM's default config, timed side by side per M.

    python bench/vs_shipped.py --db sqlite:///tuner.db            # the visible GPU
    python bench/vs_shipped.py --dry-run --device NVIDIA_H200      # what would be timed; any host
    python bench/vs_shipped.py --shapes 7168,2048 --m 1,16,4096    # a shorter run

For each shape of the model (every TP size it lists) that vLLM ships a file for on the device,
and each M key of that file, three configs: ours (what our merged file would make vLLM run at
M: the store's winners with the no-regression rule of tuner.files.merge, looked up by vLLM's
nearest-key rule), the shipped file's entry for M, and vLLM's default config. Each distinct
config is checked against the float64 reference, then the ones that pass are re-timed
interleaved (A B C A B C ...) in one run (tuner.measure.noise.retime_interleaved), so drift
hits them alike; our latency's GB/s and TFLOP/s come from tuner.measure.roofline. Writes
results/vs_shipped_<device_name>.json with device, versions, date and command.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tuner.core import FP8_DTYPE, TrialStatus, geomean
from tuner.files.format import parse_config_file, vllm_pick_key
from tuner.files.merge import merge_shape
from tuner.kernels.config import KernelConfig
from tuner.kernels.family import KernelFamily
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape, as_block_shape
from tuner.measure.noise import RETIME_ROUNDS, retime_interleaved
from tuner.measure.roofline import roofline
from tuner.measure.runner import Problem
from tuner.measure.trial import TrialResult

OUT_DTYPE = "bfloat16"  # what serving uses
BLOCK_SHAPE = (128, 128)  # [group_n, group_k]; vLLM's shipped block-FP8 files are all 128x128
ROUNDS = RETIME_ROUNDS  # interleaved rounds per (shape, M): samples per config
ROLES = ("ours", "shipped", "default")


def _family() -> KernelFamily:
    """The family whose files vLLM ships beside its GEMM and this comparison times: the default
    family's (`tuner.kernels.registry.DEFAULT_FAMILY`, the dense GEMM): its file names, its
    constraints (`why_invalid`) and vLLM's default config."""
    return get_family(DEFAULT_FAMILY)


# Problem -> a runner with check(config) -> TrialResult and sample_us(config) -> float
# (tuner.measure.runner.KernelRunner on CUDA, a fake in tests).
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


def read_shipped(
    folder: Path, device_name: str, block_shape: tuple[int, int] = BLOCK_SHAPE
) -> dict[tuple[int, int], dict]:
    """vLLM's shipped block-FP8 files of one device.

    Args:
        folder: one subfolder per device_name, holding vLLM's config files (for example
            vllm-0.33.0's `model_executor/layers/quantization/utils/configs`, sorted by device).
        device_name: vLLM's device key, e.g. "NVIDIA_H200".
        block_shape: keep files of this [group_n, group_k] only (fp8_w8a8 files only).

    Returns:
        (N, K) -> {M: config dict with vLLM's six keys}.

    Raises:
        ValueError: no folder for the device (the message lists the devices there), or a file
            that does not parse.
    """
    where = folder / device_name
    if not where.is_dir():
        have = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        raise ValueError(
            f"no shipped files for {device_name} under {folder} "
            f"(devices there: {', '.join(have) or 'none'})"
        )
    files = {}
    parse_file_name = _family().files.parse_file_name
    for path in sorted(where.glob("*.json")):
        shape, _, dtype = parse_file_name(path.name)
        if dtype == FP8_DTYPE and shape.block_shape == tuple(block_shape):
            files[(shape.N, shape.K)] = parse_config_file(path.read_text(), source=path.name)
    return files


def our_files(
    winners: Sequence[Any], block_shape: tuple[int, int] = BLOCK_SHAPE
) -> dict[tuple[int, int], dict[int, dict[str, int]]]:
    """What our merged files would hold, per (N, K).

    Args:
        winners: the store's winners of one device (db.repo.WinnerRow or alike).
        block_shape: keep winners of this [group_n, group_k] only.

    Returns:
        (N, K) -> {M: config}, after `tuner.files.merge.merge_shape`'s no-regression rule (a winner
        not faster than the default becomes the default); any M grid (partial files allowed).
    """
    grouped: dict[tuple[int, int], list[Any]] = {}
    for row in winners:
        if tuple(row.block_shape) == tuple(block_shape):
            grouped.setdefault((row.N, row.K), []).append(row)
    return {
        (N, K): merge_shape(
            rows,
            m_requested=[],
            default=partial(_family().default_config, Shape(N, K, as_block_shape(block_shape))),
            allow_partial=True,
        ).configs
        for (N, K), rows in sorted(grouped.items())
    }


def plan(
    shipped: Mapping[tuple[int, int], Mapping[int, Mapping[str, int]]],
    ours: Mapping[tuple[int, int], Mapping[int, Mapping[str, int]]],
    shapes: Sequence[tuple[int, int]],
    *,
    m_values: Sequence[int] | None = None,
    block_shape: tuple[int, int] = BLOCK_SHAPE,
) -> list[Entry]:
    """The (shape, M) to time.

    Args:
        shipped: `read_shipped`'s files.
        ours: `our_files`' configs ({} for none).
        shapes: (N, K) in the order to time them; those without a shipped file are skipped.
        m_values: only these M keys of the shipped files; None for all.
        block_shape: [group_n, group_k], for the default config.

    Returns:
        One Entry per (shape, shipped M key), shapes in the given order, M ascending; `ours` is
        the config of our key that vLLM picks for M (nearest, ties to the smaller).
    """
    entries = []
    default_config = _family().default_config
    for N, K in shapes:
        if (N, K) not in shipped:
            continue
        mine = ours.get((N, K), {})
        for M in sorted(shipped[(N, K)]):
            if m_values is not None and M not in m_values:
                continue
            key = vllm_pick_key(mine, M) if mine else None
            entries.append(
                Entry(
                    N=N,
                    K=K,
                    M=M,
                    shipped=KernelConfig.from_dict(shipped[(N, K)][M]),
                    default=default_config(Shape(N, K, as_block_shape(block_shape)), M),
                    ours_key=key,
                    ours=None if key is None else KernelConfig.from_dict(mine[key]),
                )
            )
    return entries


def _roles(entry: Entry) -> dict[str, KernelConfig]:
    roles = {"ours": entry.ours, "shipped": entry.shipped, "default": entry.default}
    return {role: config for role, config in roles.items() if config is not None}


def _ratio(numerator: dict | None, denominator: dict | None) -> float | None:
    if (
        not numerator
        or not denominator
        or numerator.get("latency_us") is None
        or denominator.get("latency_us") is None
    ):
        return None
    return round(numerator["latency_us"] / denominator["latency_us"], 4)


def _check(runner: Any, config: KernelConfig, shape: Shape) -> TrialResult:
    """The runner's correctness check, or `invalid` without a launch for a config our kernel's
    constraints refuse (the family's `why_invalid`; a shipped file may hold one)."""
    reason = _family().why_invalid(config, shape)
    if reason is not None:
        return TrialResult(TrialStatus.INVALID, error=reason)
    return runner.check(config)


def compare_entry(
    entry: Entry,
    runner: Any,
    retime: Retime,
    *,
    rounds: int,
    out_dtype: str = OUT_DTYPE,
    block_shape: tuple[int, int] = BLOCK_SHAPE,
) -> dict:
    """Check each distinct config of one entry, then re-time the passing ones interleaved.

    Args:
        entry: the (shape, M) and its configs.
        runner: `check(config)` and `sample_us(config)` for this entry's Problem.
        retime: `tuner.measure.noise.retime_interleaved` or a stand-in.
        rounds: samples per config.
        out_dtype: output dtype of C (for the bytes of the roofline).
        block_shape: [group_n, group_k].

    Returns:
        A JSON-ready row: N, K, M; per role ("ours", "shipped", "default") None or its config,
        key_M, status and latency_us / p20_us / p80_us (microseconds, 3 decimals) and rounds,
        or latency_us None and the error; noise_us (the largest p80 - p20 of the configs
        timed); speedup_vs_default and speedup_vs_shipped (the other's latency over ours, >1:
        ours faster), shipped_vs_default; and our roofline figures (None if ours was not
        timed). A config that is in two roles is timed once.
    """
    roles = _roles(entry)
    distinct = list(dict.fromkeys(roles.values()))
    shape = Shape(entry.N, entry.K, as_block_shape(block_shape))
    checked = {config: _check(runner, config, shape) for config in distinct}
    passing = [c for c in distinct if str(checked[c].status) == "ok"]
    timed, failure = _time_passing(runner, retime, passing, rounds)
    row: dict[str, Any] = {"N": entry.N, "K": entry.K, "M": entry.M}
    for role in ROLES:
        config = roles.get(role)
        row[role] = (
            None
            if config is None
            else _cell(entry, role, config, checked[config], timed.get(config), failure)
        )
    spreads = [t.p80_us - t.p20_us for t in timed.values()]
    row["noise_us"] = round(max(spreads), 3) if spreads else None
    row["speedup_vs_default"] = _ratio(row["default"], row["ours"])
    row["speedup_vs_shipped"] = _ratio(row["shipped"], row["ours"])
    row["shipped_vs_default"] = _ratio(row["default"], row["shipped"])
    ours_us = (row["ours"] or {}).get("latency_us")
    row["roofline"] = _roofline_figures(entry, ours_us, out_dtype, block_shape) if ours_us else None
    return row


def _time_passing(
    runner: Any, retime: Retime, passing: list, rounds: int
) -> tuple[dict, str | None]:
    """Re-time the configs that passed their check interleaved: config -> timing, and the one
    line of a failed timing (None when it ran)."""
    try:
        if passing:
            return {r.config: r for r in retime(runner.sample_us, passing, rounds=rounds)}, None
    except Exception as exc:  # noqa: BLE001 - a failed timing is recorded, the run goes on
        return {}, f"timing failed: {type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
    return {}, None


def _cell(
    entry: Entry, role: str, config: Any, checked: Any, timing: Any, failure: str | None
) -> dict[str, Any]:
    """One role's cell of a `compare_entry` row: its config, key_M, status and timing or error."""
    cell: dict[str, Any] = {
        "config": config.as_dict(),
        "key_M": entry.ours_key if role == "ours" else (entry.M if role == "shipped" else None),
        "status": str(checked.status),
    }
    if timing is not None:
        cell.update(
            latency_us=round(timing.latency_us, 3),
            p20_us=round(timing.p20_us, 3),
            p80_us=round(timing.p80_us, 3),
            rounds=timing.rounds,
        )
    else:
        cell.update(latency_us=None, error=checked.error or failure)
    return cell


def _roofline_figures(
    entry: Entry,
    ours_us: float,
    out_dtype: str,
    block_shape: tuple[int, int],
) -> dict[str, Any]:
    """Our config's roofline figures (`tuner.measure.roofline.roofline`), rounded for JSON."""
    r = roofline(entry.M, entry.N, entry.K, ours_us, block_shape=block_shape, out_dtype=out_dtype)
    return {"gbps": round(r.gbps, 1), "tflops": round(r.tflops, 2)}


def compare(
    entries: Sequence[Entry],
    runner_factory: RunnerFactory,
    *,
    rounds: int = ROUNDS,
    retime: Retime | None = None,
    out_dtype: str = OUT_DTYPE,
    block_shape: tuple[int, int] = BLOCK_SHAPE,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Time every entry; one runner (inputs, reference) per (shape, M).

    Args:
        entries: from `plan`.
        runner_factory: Problem -> runner with `check` and `sample_us` (KernelRunner on CUDA).
        rounds: interleaved rounds per entry.
        retime: tuner.measure.noise.retime_interleaved (None) or a stand-in with its signature.
        out_dtype: output dtype of C.
        block_shape: [group_n, group_k].
        progress: called with each finished row.

    Returns:
        One row per entry (`compare_entry`).
    """
    retime = retime or retime_interleaved
    rows = []
    for entry in entries:
        runner = runner_factory(
            Problem(
                entry.M,
                entry.N,
                entry.K,
                as_block_shape(block_shape),
                out_dtype,
                family=_family().name,
            )
        )
        row = compare_entry(
            entry,
            runner,
            retime,
            rounds=rounds,
            out_dtype=out_dtype,
            block_shape=block_shape,
        )
        del runner  # frees the inputs and the reference before the next M
        rows.append(row)
        if progress is not None:
            progress(row)
    return rows


def _rounded_geomean(values: Sequence[float]) -> float | None:
    return round(geomean(values), 4) if values else None


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
        "geomean_speedup_vs_default": _rounded_geomean(have("speedup_vs_default")),
        "geomean_speedup_vs_shipped": _rounded_geomean(have("speedup_vs_shipped")),
        "geomean_shipped_vs_default": _rounded_geomean(have("shipped_vs_default")),
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
    """The rows as a plain-text table: a header, then one line per (shape, M) with the three
    latencies in microseconds, our key, the speedups and our GB/s and TFLOP/s."""
    head = (
        f"{'N':>6} {'K':>6} {'M':>5} {'ours_us':>9} {'key':>5} {'shipped_us':>10} "
        f"{'default_us':>10} {'vs_default':>10} {'vs_shipped':>10} {'GB/s':>8} {'TFLOP/s':>8}"
    )
    lines = [head]
    for r in rows:
        fig = r["roofline"] or {}
        rates = [str(fig.get(k, "-")) for k in ("gbps", "tflops")]
        key = "-" if r["ours"] is None else str(r["ours"]["key_M"])
        lines.append(
            f"{r['N']:>6} {r['K']:>6} {r['M']:>5} {_us(r['ours']):>9} {key:>5} "
            f"{_us(r['shipped']):>10} {_us(r['default']):>10} {_x(r['speedup_vs_default']):>10} "
            f"{_x(r['speedup_vs_shipped']):>10} {rates[0]:>8} {rates[1]:>8}"
        )
    return "\n".join(lines)


def result_doc(rows: Sequence[dict], meta: Mapping[str, Any]) -> dict:
    """The JSON document of a run.

    Args:
        rows: `compare`'s rows.
        meta: device, versions, date, command and settings, copied to the top level.

    Returns:
        {"benchmark": "vs_shipped", **meta, "summary": `summarize(rows)`, "rows": rows}.
    """
    return {"benchmark": "vs_shipped", **meta, "summary": summarize(rows), "rows": list(rows)}


REPO = Path(__file__).resolve().parents[1]
# vLLM 0.33.0's shipped dense files, one folder per device: bench/fetch_wheels.sh lays them out
# there from the wheel.
SHIPPED_DIR = REPO / ".shipped" / "vllm-0.33.0"
MODEL = "deepseek-v3"  # shapes/<MODEL>.toml, all TP sizes unless --tp
OUT_DIR = REPO / "bench" / "results"  # where the JSON result goes


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
        raise argparse.ArgumentTypeError(
            f"expected integers like 1,16,4096, got {text!r}"
        ) from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="device_name (default: the visible GPU's)")
    parser.add_argument(
        "--db", help="store URL with our winners (default: $TUNER_DB_URL or sqlite:///tuner.db)"
    )
    parser.add_argument(
        "--shipped-dir",
        type=Path,
        default=SHIPPED_DIR,
        help="folder of vLLM's files, one subfolder per device_name [default: "
        ".shipped/vllm-0.33.0, made by bench/fetch_wheels.sh]",
    )
    parser.add_argument("--model", default=MODEL, help="shapes/<model>.toml")
    parser.add_argument(
        "--tp",
        type=int,
        action="append",
        help="only this TP size's shapes (repeat); default every TP size",
    )
    parser.add_argument(
        "--shapes",
        type=_pair,
        action="append",
        metavar="N,K",
        help="only these shapes (repeat); default: the model's",
    )
    parser.add_argument("--m", type=_ints, help="only these M keys, e.g. 1,16,4096")
    parser.add_argument("--out-dtype", choices=("bfloat16", "float16"), default=OUT_DTYPE)
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="interleaved rounds per M")
    parser.add_argument(
        "--out", type=Path, help="JSON path (default: bench/results/vs_shipped_<device_name>.json)"
    )
    parser.add_argument(
        "--allow-stale",
        action="store_true",
        help="our winners from any kernel hash and Triton version (default: the current ones only)",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would be timed")
    return parser


def _model_shapes(model: str, tps: Sequence[int] | None) -> list[tuple[int, int]]:
    from tuner.inputs.shapes import ShapesFileError, UnknownModelError, load_shapes, tp_sizes

    try:
        seen = {}
        for tp in tps or tp_sizes(model):
            for shape in load_shapes(model, tp).pairs():
                seen.setdefault(tuple(shape), None)
    except (UnknownModelError, ShapesFileError) as exc:
        raise UsageError(str(exc)) from None
    return list(seen)


def _device_name(device: str | None, shipped_dir: Path, dry_run: bool) -> tuple[str, Any]:
    """(device_name, GpuInfo or None); a real run needs a visible GPU of that name."""
    from tuner.inputs.devices import device_among, matches
    from tuner.run.gpus import visible_gpus

    gpus = visible_gpus()
    if device is None:
        if not gpus:
            raise UsageError(
                "no CUDA GPU visible: pass --device NAME (with --dry-run to see "
                "the plan on this host)"
            )
        return gpus[0].device_name, gpus[0]
    gpu = next((g for g in gpus if matches(device, g.device_name)), None)
    if gpu is not None:
        return gpu.device_name, gpu
    if not dry_run:
        seen = ", ".join(g.device_name for g in gpus) or "none"
        raise UsageError(f"no visible GPU is {device} (visible: {seen}); timing needs one")
    known = [p.name for p in shipped_dir.iterdir() if p.is_dir()] if shipped_dir.is_dir() else []
    return device_among(device, known, new=True), None


def _winner_filter(allow_stale: bool) -> dict[str, str | None]:
    """db.repo.winners' provenance filter: this kernel's hash and the installed Triton's
    major.minor, or no filter with --allow-stale."""
    from tuner.files.provenance import current_kernel_hash, installed_triton_minor

    if allow_stale:
        return {"kernel_hash": None, "triton_minor": None}
    return {"kernel_hash": current_kernel_hash(), "triton_minor": installed_triton_minor()}


def _scope_text(scope: Mapping[str, str | None]) -> str:
    if scope["kernel_hash"] is None:
        return "any kernel and Triton: --allow-stale"
    return f"kernel {scope['kernel_hash'][:12]}, Triton {scope['triton_minor'] or 'any'}"


def _store_winners(
    url: str | None, device_name: str, out_dtype: str, scope: Mapping[str, str | None]
) -> list[Any]:
    """The store's winners of the device within `scope` (`_winner_filter`); none, with a
    warning, when no --db was given and the default SQLite file does not exist."""
    from sqlalchemy.engine import make_url

    from db import repo
    from db.connection import SchemaError, default_db_url, open_store, session_scope

    given = url is not None
    url = url or default_db_url()
    parsed = make_url(url)
    if (
        parsed.get_backend_name() == "sqlite"
        and parsed.database
        and not Path(parsed.database).exists()
    ):
        if given:
            raise UsageError(f"no store at {parsed.database}")
        print(
            f"vs_shipped: no store at {parsed.database} (pass --db URL): timing the shipped "
            "and default configs only",
            file=sys.stderr,
        )
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
    return (
        f"N={entry.N} K={entry.K} M={entry.M}: ours {ours}; shipped {entry.shipped.short()}; "
        f"default {entry.default.short()}"
    )


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
    print(
        f"{device_name}: {len(entries)} (shape, M) in {len({(e.N, e.K) for e in entries})} "
        f"shape(s) with shipped files; no shipped file for {', '.join(missing) or 'none'}; "
        f"our winners for {len(ours)} shape(s) ({_scope_text(scope)})",
        flush=True,
    )
    if args.dry_run:
        for entry in entries:
            print(_describe(entry))
        return 0
    if not entries:
        raise UsageError("nothing to time")
    import torch

    from tuner.measure.runner import GpuRunner, KernelRunner

    torch.cuda.set_device(gpu.index)
    env = GpuRunner(gpu.device_name).environment("builtin", DEFAULT_FAMILY)
    rows = compare(
        entries,
        lambda problem: KernelRunner(problem, device="cuda"),
        rounds=args.rounds,
        out_dtype=args.out_dtype,
        progress=lambda row: print(format_table([row]).splitlines()[1], flush=True),
    )
    meta = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(["python", "bench/vs_shipped.py", *argv]),
        "device_name": device_name,
        "gpu_name": env["gpu_name"],
        "compute_capability": env["compute_capability"],
        "backend": "cuda",
        "versions": {
            k: env[k] for k in ("torch", "triton", "tuner", "cuda", "driver", "kernel_hash")
        },
        "shipped_files": args.shipped_dir.name,
        "model": args.model,
        "tp": args.tp,
        "shapes": [list(s) for s in shapes],
        "m": args.m,
        "out_dtype": args.out_dtype,
        "block_shape": list(BLOCK_SHAPE),
        "rounds": args.rounds,
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
