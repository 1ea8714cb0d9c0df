"""Write a device's stored trials as a landscape file, for `tuner sweep --replay`,
bench/search_quality.py and bench/peers.py (bench/landscape_stats.py says what a file's
problems offer):

    python bench/record_landscape.py --device H200 [--complete-only] [--db URL] --out FILE
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.landscape_file import landscape_from_results, landscape_json  # noqa: E402
from bench.store_trials import DeviceTrialRow, device_trials  # noqa: E402
from db.repo import session_scope  # noqa: E402
from tuner.cli.errors import fail  # noqa: E402
from tuner.cli.options import DbOpt, DeviceOpt  # noqa: E402
from tuner.cli.output import plain  # noqa: E402
from tuner.cli.store import device_in_store, open_db  # noqa: E402
from tuner.core import OutDtype, TrialStatus  # noqa: E402
from tuner.kernels.config import KernelConfig  # noqa: E402
from tuner.kernels.registry import DEFAULT_FAMILY, get_family  # noqa: E402
from tuner.kernels.shape import block_shape_text, block_sort_key  # noqa: E402
from tuner.measure.landscape import Landscape  # noqa: E402
from tuner.measure.trial import TrialResult  # noqa: E402


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


def _commonest_kind(
    rows: Sequence[DeviceTrialRow],
) -> tuple[tuple, list[DeviceTrialRow], list[str]]:
    """The (environment_id, block_shape, out_dtype) of the most trials (ties: the newest
    environment), its trials, and a note when others were left out."""
    kinds = Counter((row.environment_id, row.block_shape, row.out_dtype) for row in rows)
    kind = max(kinds, key=lambda k: (kinds[k], k[0], block_sort_key(k[1]), k[2]))
    kept = [row for row in rows if (row.environment_id, row.block_shape, row.out_dtype) == kind]
    if len(kinds) == 1:
        return kind, kept, []
    note = (
        f"kept the {kinds[kind]} trials of environment {kind[0]}, block_shape "
        f"{block_shape_text(kind[1])} {kind[2]}; left out {len(rows) - kinds[kind]} of "
        "other environments or kinds"
    )
    return kind, kept, [note]


def build_landscape(
    rows: Sequence[DeviceTrialRow],
    *,
    device_name: str,
    recorded_at: str,
    complete_only: bool = False,
) -> tuple[Landscape, list[str]]:
    """One landscape from a device's trials (`store_trials.device_trials`, by trial_id), and notes
    on what was left out. A landscape has one environment, block_shape and out_dtype: those of the
    most trials (ties: the newest environment); a config tried again for the same (N, K, M)
    keeps its latest trial. complete_only keeps only the (N, K, M) with a trial of every config:
    all of vLLM's 1,280 for space "vllm", else as many as the fullest (N, K, M) has (a grid
    sweep cut short by a time limit leaves its last task partial).

    Raises:
        ValueError: no trials, or none complete when complete_only.
    """
    if not rows:
        raise ValueError(f"no trials of {device_name} in the store")
    kind, kept, notes = _commonest_kind(rows)
    latest = {(row.N, row.K, row.M, tuple(row.config.values())): row for row in kept}
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
        out_dtype=kind[2],
        block_shape=kind[1],
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
        rows = device_trials(
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
        out.write_text(landscape_json(landscape), encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc.strerror or exc}") from None
    trials = sum(len(problem) for problem in landscape.problems.values())
    ok = sum(result.ok for problem in landscape.problems.values() for result in problem.values())
    plain(
        f"wrote {out}: {device_name}, {len(landscape.problems)} (N, K, M), {trials} "
        f"trials ({ok} ok), triton {landscape.environment.get('triton', '?')}"
    )


app = typer.Typer(add_completion=False)
app.command()(landscape_record)

if __name__ == "__main__":
    app()
