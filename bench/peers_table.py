"""The tables of bench/peers.py: per-peer summaries, the whole table, the versus table of the
default strategy against the best peer tuners, the targets it meets and the tuners that lead
each budget."""

from __future__ import annotations

import math
from collections.abc import Sequence

OURS = ("guided", "optuna")  # our strategies (tuner.search): not peers
KT = (
    "greedy_ils",
    "genetic_algorithm",
    "dual_annealing",
    "simulated_annealing",
    "bayes_opt",
    "random_sample",
)  # Kernel Tuner 1.5's strategies
OPTUNA = ("tpe", "cmaes", "gp")  # optuna's samplers
PEERS = (*OURS, *(f"kt:{name}" for name in KT), *(f"optuna:{name}" for name in OPTUNA), "random")


def summarize(runs: list[dict]) -> list[dict]:
    """Per (landscape, mode, budget, peer): geomean and min over problems and seeds."""
    table: dict[tuple[str, str, int, str], list[dict]] = {}
    for run in runs:
        table.setdefault((run["landscape"], run["mode"], run["budget"], run["peer"]), []).append(
            run
        )
    rows = []
    for (landscape, mode, budget, peer), group in sorted(table.items()):
        ratios = [r for run in group for r in run["ratios"].values()]
        geomean = math.exp(sum(math.log(max(r, 1e-9)) for r in ratios) / len(ratios))
        rows.append(
            {
                "landscape": landscape,
                "mode": mode,
                "budget": budget,
                "peer": peer,
                "geomean": round(geomean, 4),
                "min": round(min(ratios), 4),
                "below_0.97": sum(r < 0.97 for r in ratios),
                "seeds": len(group),
                "problems_x_seeds": len(ratios),
                "search_s_per_task": round(sum(run["search_s"] for run in group) / len(ratios), 3),
            }
        )
    return rows


def markdown(rows: list[dict]) -> str:
    """One table: a row per (landscape, mode, peer), a column per budget, geomean / min."""
    budgets = sorted({row["budget"] for row in rows})
    cells: dict[tuple[str, str, str], dict[int, dict]] = {}
    for row in rows:
        cells.setdefault((row["landscape"], row["mode"], row["peer"]), {})[row["budget"]] = row
    lines = [
        "| landscape, warm start | peer | seeds | " + " | ".join(map(str, budgets)) + " |",
        "|---|---|---|" + "---|" * len(budgets),
    ]
    for (landscape, mode, peer), by_budget in sorted(
        cells.items(),
        key=lambda item: (
            item[0][0],
            item[0][1],
            PEERS.index(item[0][2]) if item[0][2] in PEERS else 99,
        ),
    ):
        seeds = sorted({row["seeds"] for row in by_budget.values()})
        values = [
            f"{by_budget[b]['geomean']:.4f} / {by_budget[b]['min']:.3f}" if b in by_budget else "-"
            for b in budgets
        ]
        lines.append(
            f"| `{landscape}`, {mode} | `{peer}` | {'/'.join(map(str, seeds))} | "
            + " | ".join(values)
            + " |"
        )
    return "\n".join(lines) + "\n"


def versus(runs: list[dict], ours: str = "guided") -> str:
    """One table: a row per (landscape, mode, budget), `ours` against the best peer that is
    neither one of our strategies nor a variant named after `ours` (highest geomean; highest
    min, apart, each over its own seeds), and the peers that beat `ours` on geomean or on min
    over the same seeds (a peer run at seed 0 only is compared with `ours` at seed 0):
    `ours` is at least as good as every peer where that column says none."""
    rows = summarize(runs)
    lines = [
        "| landscape, warm start | budget | `" + ours + "` | best peer, geomean | "
        "best peer, min | peers ahead at the same seeds (geomean, min) |",
        "|---|---|---|---|---|---|",
    ]
    for (landscape, mode, budget), by_peer in sorted(_by_cell(rows).items()):
        others = [
            row for peer, row in by_peer.items() if peer not in OURS and not peer.startswith(ours)
        ]
        if ours not in by_peer or not others:
            continue
        mine = by_peer[ours]
        top = max(others, key=lambda row: row["geomean"])
        floor = max(others, key=lambda row: row["min"])
        cell = [
            run
            for run in runs
            if (run["landscape"], run["mode"], run["budget"]) == (landscape, mode, budget)
        ]
        ahead = []
        for row in sorted(others, key=lambda row: row["peer"]):
            matched = _at_seeds(cell, ours, row["peer"])
            if matched is None:
                continue
            wins = [
                f"{row['geomean']:.4f}" if row["geomean"] > matched["geomean"] else "",
                f"{row['min']:.3f}" if row["min"] > matched["min"] else "",
            ]
            if any(wins):
                ahead.append(f"`{row['peer']}` ({', '.join(w or '-' for w in wins)})")
        lines.append(
            f"| `{landscape}`, {mode} | {budget} | {mine['geomean']:.4f} / "
            f"{mine['min']:.3f} | `{top['peer']}` {top['geomean']:.4f} | "
            f"`{floor['peer']}` {floor['min']:.3f} | {'; '.join(ahead) or 'none'} |"
        )
    return "\n".join(lines) + "\n"


def _by_cell(rows: list[dict]) -> dict[tuple[str, str, int], dict[str, dict]]:
    """`summarize`'s rows by (landscape, mode, budget), then by peer."""
    cells: dict[tuple[str, str, int], dict[str, dict]] = {}
    for row in rows:
        cells.setdefault((row["landscape"], row["mode"], row["budget"]), {})[row["peer"]] = row
    return cells


def _at_seeds(cell: list[dict], peer: str, other: str) -> dict | None:
    """`summarize`'s row of `peer`'s runs in `cell` at the seeds `other` ran, or None."""
    seeds = {run["seed"] for run in cell if run["peer"] == other}
    [row] = summarize([run for run in cell if run["peer"] == peer and run["seed"] in seeds]) or [
        None
    ]
    return row


# The absolute targets for the default strategy, per budget: (geomean at least, min at
# least), None where the budget sets no bound on it.
TARGETS: dict[int, tuple[float | None, float | None]] = {
    32: (0.98, None),
    64: (0.995, 0.95),
    128: (None, 0.97),
}


def _meets(row: dict, budget: int) -> bool:
    geomean, floor = TARGETS[budget]
    return (geomean is None or row["geomean"] >= geomean) and (floor is None or row["min"] >= floor)


def _target(budget: int) -> str:
    geomean, floor = TARGETS[budget]
    return " and ".join(
        [f"geomean >= {geomean}"] * (geomean is not None)
        + [f"min >= {floor}"] * (floor is not None)
    )


def targets(runs: list[dict], ours: str = "guided") -> str:
    """One table: a row per (landscape, mode, budget of `TARGETS`), whether `ours` meets the
    budget's target and which other tuners in `runs` (our other strategies and earlier versions
    of `ours` included, each over its own seeds) meet it, with the best geomean and min any of
    them reached: where that column says none, no tuner run on the landscape meets it."""
    groups = _by_cell([row for row in summarize(runs) if row["budget"] in TARGETS])
    lines = [
        "| landscape, warm start | budget | target | `" + ours + "` | best of the others, "
        "geomean / min | others that meet it |",
        "|---|---|---|---|---|---|",
    ]
    for (landscape, mode, budget), by_peer in sorted(groups.items()):
        others = [row for peer, row in sorted(by_peer.items()) if peer != ours]
        if ours not in by_peer or not others:
            continue
        mine = by_peer[ours]
        met = [
            f"`{row['peer']}` ({row['seeds']} seed{'s' * (row['seeds'] > 1)})"
            for row in others
            if _meets(row, budget)
        ]
        top = max(others, key=lambda row: row["geomean"])
        floor = max(others, key=lambda row: row["min"])
        lines.append(
            f"| `{landscape}`, {mode} | {budget} | {_target(budget)} | "
            f"{mine['geomean']:.4f} / {mine['min']:.3f} "
            f"{'met' if _meets(mine, budget) else '**missed**'} | "
            f"`{top['peer']}` {top['geomean']:.4f} / `{floor['peer']}` "
            f"{floor['min']:.3f} | {', '.join(met) or 'none'} |"
        )
    return "\n".join(lines) + "\n"


def leaders(runs: list[dict], held_out: Sequence[str] = (), ours: str = "guided") -> str:
    """One table: per budget, the tuners at least as good as every other tuner in `runs` on
    both geomean and min (each other tuner compared at its own seeds), and in how many of the
    (landscape, mode) cells, landscapes in `held_out` left out. Earlier versions of `ours`
    (named `ours-...`) are neither leaders nor rivals; our other strategies are both."""
    runs = [
        run
        for run in runs
        if run["landscape"] not in held_out and not run["peer"].startswith(f"{ours}-")
    ]
    cells: dict[tuple[str, str, int], list[dict]] = {}
    for run in runs:
        cells.setdefault((run["landscape"], run["mode"], run["budget"]), []).append(run)
    wins: dict[int, dict[str, int]] = {}
    for (_, _, budget), cell in sorted(cells.items()):
        counts = wins.setdefault(budget, {})
        rows = {row["peer"]: row for row in summarize(cell)}
        for peer in rows:
            if all(_at_least(cell, peer, rows[other]) for other in rows if other != peer):
                counts[peer] = counts.get(peer, 0) + 1
    total = {budget: sum(1 for key in cells if key[2] == budget) for budget in wins}
    lines = ["| budget | cells | at least as good as every other tuner (cells) |", "|---|---|---|"]
    for budget, counts in sorted(wins.items()):
        named = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        lines.append(
            f"| {budget} | {total[budget]} | "
            + (", ".join(f"`{peer}` ({n})" for peer, n in named) or "none")
            + " |"
        )
    return "\n".join(lines) + "\n"


def _at_least(cell: list[dict], peer: str, other: dict) -> bool:
    """Whether `peer`, at `other`'s seeds, has a geomean and a min at least `other`'s."""
    mine = _at_seeds(cell, peer, other["peer"])
    return mine is None or (mine["geomean"] >= other["geomean"] and mine["min"] >= other["min"])
