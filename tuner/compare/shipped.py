"""Our configs vs vLLM's shipped ones vs vLLM's default, timed side by side: the core of
bench/vs_shipped.py, with no store and no device (the caller passes winners and a runner factory).

Per (shape, M) of a shipped file, three roles: "ours" (what our merged file would make vLLM run
at M: winners with tuner.files.merge's no-regression rule, looked up by vLLM's nearest-key rule),
"shipped" (the shipped file's entry for M) and "default" (vLLM's default config). Each distinct
config is checked against the reference, then the passing ones are re-timed interleaved
(tuner.measure.noise.retime_interleaved), so drift hits them alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

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
    ceilings: Mapping[str, float] | None,
    out_dtype: str = OUT_DTYPE,
    block_shape: tuple[int, int] = BLOCK_SHAPE,
) -> dict:
    """Check each distinct config of one entry, then re-time the passing ones interleaved.

    Args:
        entry: the (shape, M) and its configs.
        runner: `check(config)` and `sample_us(config)` for this entry's Problem.
        retime: `tuner.measure.noise.retime_interleaved` or a stand-in.
        rounds: samples per config.
        ceilings: {"copy_gbps", "fp8_mm_tflops"} or None.
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
    row["roofline"] = (
        _roofline_figures(entry, ours_us, ceilings, out_dtype, block_shape) if ours_us else None
    )
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
    ceilings: Mapping[str, float] | None,
    out_dtype: str,
    block_shape: tuple[int, int],
) -> dict[str, Any]:
    """Our config's roofline figures (`tuner.measure.roofline.roofline`), rounded for JSON."""
    r = roofline(
        entry.M, entry.N, entry.K, ours_us, ceilings, block_shape=block_shape, out_dtype=out_dtype
    )
    return {
        "gbps": round(r.gbps, 1),
        "tflops": round(r.tflops, 2),
        "copy_ratio": None if r.copy_ratio is None else round(r.copy_ratio, 4),
        "fp8_mm_ratio": None if r.fp8_mm_ratio is None else round(r.fp8_mm_ratio, 4),
        "bound": r.bound,
    }


def compare(
    entries: Sequence[Entry],
    runner_factory: RunnerFactory,
    *,
    rounds: int = ROUNDS,
    ceilings: Mapping[str, float] | None = None,
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
        ceilings: {"copy_gbps", "fp8_mm_tflops"} measured in this run, or None.
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
            ceilings=ceilings,
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
    latencies in microseconds, our key, the speedups and our % of each ceiling."""
    head = (
        f"{'N':>6} {'K':>6} {'M':>5} {'ours_us':>9} {'key':>5} {'shipped_us':>10} "
        f"{'default_us':>10} {'vs_default':>10} {'vs_shipped':>10} {'%copy':>6} {'%fp8':>6}"
    )
    lines = [head]
    for r in rows:
        fig = r["roofline"] or {}
        pct = [
            ("-" if fig.get(k) is None else f"{fig[k] * 100:.1f}")
            for k in ("copy_ratio", "fp8_mm_ratio")
        ]
        key = "-" if r["ours"] is None else str(r["ours"]["key_M"])
        lines.append(
            f"{r['N']:>6} {r['K']:>6} {r['M']:>5} {_us(r['ours']):>9} {key:>5} "
            f"{_us(r['shipped']):>10} {_us(r['default']):>10} {_x(r['speedup_vs_default']):>10} "
            f"{_x(r['speedup_vs_shipped']):>10} {pct[0]:>6} {pct[1]:>6}"
        )
    return "\n".join(lines)


def result_doc(rows: Sequence[dict], meta: Mapping[str, Any]) -> dict:
    """The JSON document of a run.

    Args:
        rows: `compare`'s rows.
        meta: device, versions, date, command, settings and ceilings, copied to the top level.

    Returns:
        {"benchmark": "vs_shipped", **meta, "summary": `summarize(rows)`, "rows": rows}.
    """
    return {"benchmark": "vs_shipped", **meta, "summary": summarize(rows), "rows": list(rows)}
