"""`tuner landscape record`: write a device's stored trials as a landscape file for replay;
`tuner landscape stats`: what a landscape's problems offer a search."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from statistics import geometric_mean, median_high
from typing import Annotated

import typer

from db import repo
from db.repo import DeviceTrialRow, session_scope
from tuner.cli.errors import fail
from tuner.cli.options import DbOpt, DeviceOpt
from tuner.cli.output import console, plain
from tuner.cli.store import device_in_store, open_db
from tuner.cli.tables import Column, print_table
from tuner.core import OutDtype, TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape, block_shape_text, block_sort_key
from tuner.measure.landscape import (
    Landscape,
    RecordedTimings,
    landscape_from_results,
    load_landscape,
)
from tuner.measure.trial import TrialResult


def _one_kind(rows: Sequence[DeviceTrialRow]) -> tuple[list[DeviceTrialRow], list[str]]:
    """The trials of the environment with the most trials (ties: the newest), and of its
    block_shape and out_dtype with the most; notes on what was left out."""
    counts = Counter(row.environment_id for row in rows)
    environment_id = max(counts, key=lambda env: (counts[env], env))
    kept = [row for row in rows if row.environment_id == environment_id]
    kinds = Counter((row.block_shape, row.out_dtype) for row in kept)
    kind = max(kinds, key=lambda k: (kinds[k], block_sort_key(k[0]), k[1]))
    notes = []
    if len(counts) > 1:
        notes.append(
            f"kept the {len(kept)} trials of environment {environment_id}; left out "
            f"{len(rows) - len(kept)} of {len(counts) - 1} other environment(s)"
        )
    if len(kinds) > 1:
        notes.append(
            f"kept block_shape {block_shape_text(kind[0])} {kind[1]}; left out "
            f"{len(kept) - kinds[kind]} trials of other kinds"
        )
    return [row for row in kept if (row.block_shape, row.out_dtype) == kind], notes


def _complete(results: list, spaces: list[str], notes: list[str]) -> list:
    """The results of the (N, K, M) with every config (all of vLLM's for space "vllm", else as
    many as the fullest has); a note on those left out."""
    configs = Counter((n, k, m) for n, k, m, _, _ in results)
    full = len(get_family(DEFAULT_FAMILY).space()) if spaces == ["vllm"] else None
    expected = full or max(configs.values())
    partial = sorted(problem for problem, count in configs.items() if count < expected)
    if len(partial) == len(configs):
        raise ValueError(
            f"no (N, K, M) has all {expected} configs; the fullest has {max(configs.values())}"
        )
    if partial:
        notes.append(
            f"left out {len(partial)} partial (N, K, M) (fewer than {expected} configs): "
            + ", ".join(f"{n},{k},{m} ({configs[(n, k, m)]})" for n, k, m in partial)
        )
    return [row for row in results if row[:3] not in partial]


def build_landscape(
    rows: Sequence[DeviceTrialRow],
    *,
    device_name: str,
    recorded_at: str,
    complete_only: bool = False,
) -> tuple[Landscape, list[str]]:
    """One landscape from a device's trials (`repo.device_trials`), and notes on what was left
    out. A landscape has one environment, block_shape and out_dtype (`_one_kind`); a config
    tried again for the same (N, K, M) keeps its latest trial. complete_only keeps only the
    (N, K, M) with a trial of every config: all of vLLM's 1,280 for space "vllm", else as many
    as the fullest (N, K, M) has (a grid sweep cut short by a time limit leaves its last task
    partial).

    Raises:
        ValueError: no trials, or none complete when complete_only.
    """
    if not rows:
        raise ValueError(f"no trials of {device_name} in the store")
    kept, notes = _one_kind(rows)
    latest = {
        (row.N, row.K, row.M, tuple(row.config.values())): row
        for row in sorted(kept, key=lambda row: row.trial_id)
    }
    results = [
        (
            row.N,
            row.K,
            row.M,
            KernelConfig.from_dict(row.config),
            TrialResult(TrialStatus(row.status), row.latency_us, row.p20_us, row.p80_us),
        )
        for row in latest.values()
    ]
    spaces = sorted({row.space for row in kept})
    if complete_only:
        results = _complete(results, spaces, notes)
    landscape = landscape_from_results(
        device_name=device_name,
        environment=kept[0].environment,
        recorded_at=recorded_at,
        space="+".join(spaces),
        out_dtype=kept[0].out_dtype,
        block_shape=kept[0].block_shape,
        results=results,
    )
    return landscape, notes


def landscape_record(
    device: DeviceOpt,
    out: Annotated[Path, typer.Option(help="Landscape file to write (JSON).")],
    out_dtype: Annotated[
        OutDtype | None, typer.Option(help="Only sweeps with this output dtype [default: all].")
    ] = None,
    complete_only: Annotated[
        bool,
        typer.Option(
            "--complete-only",
            help="Keep only the (N, K, M) with a trial of every config of the space.",
        ),
    ] = False,
    db: DbOpt = None,
) -> None:
    """Write every stored trial of a device (all its sweeps) as a landscape file.

    Record one after a full-grid sweep (--strategy grid); then
    bench/search_quality.py --landscape FILE measures search strategies against it.
    """

    _, store = open_db(db, must_exist=True)
    with session_scope(store) as session:
        device_name = device_in_store(session, device)
        rows = repo.device_trials(
            session, device_name=device_name, out_dtype=out_dtype.value if out_dtype else None
        )
    try:
        landscape, notes = build_landscape(
            rows,
            device_name=device_name,
            recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
            complete_only=complete_only,
        )
    except ValueError as exc:
        raise fail(str(exc), 1) from None
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(landscape.to_json(), encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc.strerror or exc}") from None
    trials = sum(len(problem) for problem in landscape.problems.values())
    ok = sum(result.ok for problem in landscape.problems.values() for result in problem.values())
    plain(
        f"wrote {out}: {device_name}, {len(landscape.problems)} (N, K, M), {trials} "
        f"trials ({ok} ok), triton {landscape.environment.get('triton', '?')}"
    )


def _fractions(ratios: str) -> list[float]:
    """--ratios, largest first; exit 2 unless each is in (0, 1]."""
    try:
        fractions = sorted({float(text) for text in ratios.split(",")}, reverse=True)
    except ValueError:
        fractions = []
    if not fractions or not all(0 < r <= 1 for r in fractions):
        raise fail(f"--ratios {ratios!r}: give fractions in (0, 1], e.g. 0.98,0.95")
    return fractions


StatsFileOpt = Annotated[
    Path,
    typer.Argument(
        help="Landscape file (JSON), e.g. from `tuner landscape record` or bench/landscapes/."
    ),
]
RatiosOpt = Annotated[
    str,
    typer.Option(
        metavar="R,R,...",
        help="Count the configs at least these fractions of the optimum's speed, each in (0, 1].",
    ),
]


def landscape_stats(file: StatsFileOpt, ratios: RatiosOpt = "0.98,0.97,0.95") -> None:
    """Per (N, K, M) of a landscape: the optimum, how much faster it is than vLLM's default
    config, and how many configs come near it.

    A problem with one or two configs near its optimum is a needle: a search of a few dozen
    trials finds it by luck, whatever the strategy, so read search results on it with that in
    mind.
    """
    fractions = _fractions(ratios)
    try:
        landscape = load_landscape(file)
    except ValueError as exc:
        raise fail(str(exc)) from None
    default_config = get_family(DEFAULT_FAMILY).default_config
    rows, speedups, nearest = [], [], []
    for (n, k, m), trials in sorted(landscape.problems.items()):
        best = RecordedTimings(trials).optimum()
        if best is None:
            continue
        optimum, optimum_us = best[0], best[1].ok_latency_us
        speeds = [optimum_us / result.ok_latency_us for result in trials.values() if result.ok]
        default = trials.get(default_config(Shape(n, k, landscape.block_shape), m))
        speedup = default.ok_latency_us / optimum_us if default and default.ok else None
        speedups += [] if speedup is None else [speedup]
        near = [sum(speed >= fraction for speed in speeds) for fraction in fractions]
        nearest.append((near[-1], n, k, m))
        vs_default = "cannot run" if speedup is None else f"{speedup:.2f}x"
        rows.append(
            [*map(str, (n, k, m)), f"{len(speeds)}/{len(trials)}", optimum.short()]
            + [f"{optimum_us:.2f}", vs_default, *map(str, near)]
        )
    if not rows:
        raise fail(f"{file}: no (N, K, M) has an ok config", 1)
    names = ["N", "K", "M", "ok", "optimum", "optimum_us", "vs default"]
    columns = [Column(name, text=name == "optimum") for name in names]
    columns += [Column(f">= {r:g}") for r in fractions]
    print_table(console, columns, rows, title=f"{landscape.device_name} ({file.name})")
    gain = (
        f"the optimum is {geometric_mean(speedups):.2f}x vLLM's default (geomean of the "
        f"{len(speedups)} where it runs)"
        if speedups
        else "vLLM's default runs on none of them"
    )
    fewest = min(nearest)
    plain(
        f"{len(rows)} (N, K, M): {gain}; configs at >= {fractions[-1]:g} of the optimum: "
        f"median {median_high(near for near, *_ in nearest)}, "
        f"fewest {fewest[0]} ({','.join(map(str, fewest[1:]))})"
    )
