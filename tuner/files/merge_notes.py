"""What a merged file's notes say about each entry: a winner kept or replaced by the default
config (and why), the sweep whose winner stands, entries kept or left out without a measurement."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from tuner.kernels.config import KernelConfig


class WinnerLike(Protocol):
    """The best trial of one (shape, M), as the merge needs it.

    A winner may also carry `decided` (bool: kept by a decision after interleaved re-timing)
    and `spread_us` (float | None: the noise the decision had to beat, microseconds), as
    db.repo.WinnerRow does; a winner without them counts as undecided (`decided_spread`).
    """

    @property
    def M(self) -> int: ...

    @property
    def config(self) -> Mapping[str, int]: ...

    @property
    def latency_us(self) -> float: ...

    @property
    def default_latency_us(self) -> float | None: ...

    @property
    def is_default(self) -> bool: ...


def _fmt_config(config: Mapping[str, int]) -> str:
    try:
        return KernelConfig.from_dict(config).short()
    except ValueError:
        return json.dumps(dict(config))


def decided_spread(winner: WinnerLike) -> tuple[bool, float | None]:
    """Whether a winner was kept by a decision after interleaved re-timing, and its spread.

    Args:
        winner: db.repo.WinnerRow or alike; `decided` and `spread_us` are optional attributes.

    Returns:
        (decided, spread_us in microseconds or None); (False, None) for a winner without them.
    """
    decided = bool(getattr(winner, "decided", False))
    spread_us = getattr(winner, "spread_us", None) if decided else None
    return decided, None if spread_us is None else float(spread_us)


def runs_note(winner: WinnerLike) -> str | None:
    """Which sweep's winner stands when several sweeps tuned one (shape, M), or None.

    Args:
        winner: db.repo.WinnerRow or alike; `sweep_id`, `other_sweeps` and `decided` are
            optional attributes.

    Returns:
        e.g. "M=16: sweep 3's winner (decided last) stands; sweep 1 also tuned it, not
        compared by latency (another run)"; None when one sweep tuned it.
    """
    others = tuple(getattr(winner, "other_sweeps", ()) or ())
    if not others:
        return None
    how = "decided last" if getattr(winner, "decided", False) else "the newest sweep"
    also = f"sweep {others[0]}" if len(others) == 1 else f"sweeps {', '.join(map(str, others))}"
    return (
        f"M={winner.M}: sweep {getattr(winner, 'sweep_id', '?')}'s winner ({how}) stands; "
        f"{also} also tuned it, not compared by latency (another run)"
    )


def _default_note(winner: WinnerLike) -> str:
    """Why the default config is in the file when it is the winner itself."""
    decided, spread_us = decided_spread(winner)
    if not decided:
        return f"M={winner.M}: the default config was fastest"
    # A decision keeps the default when it is fastest by more than the spread, or when the
    # fastest leads it by no more than the spread (tuner.measure.noise.decide_winner): either way no
    # config beat it by more than the noise, which is all a winner row can tell.
    noise = "" if spread_us is None else f" (spread {spread_us:.2f} us)"
    return (
        f"M={winner.M}: default config kept after interleaved re-timing: no config beat it "
        f"by more than the noise{noise}"
    )


def winner_entry(
    winner: WinnerLike, default_at: Callable[[int], KernelConfig]
) -> tuple[dict, list[str]]:
    """The entry one winner puts in the file (it, or the default config when it is not
    faster), and its notes."""
    M = winner.M
    notes = [note] if (note := runs_note(winner)) else []
    if winner.is_default:
        return default_at(M).as_dict(), [*notes, _default_note(winner)]
    if winner.default_latency_us is None:
        return dict(winner.config), [
            *notes,
            f"M={M}: no default-config baseline measured; winner kept unchecked",
        ]
    if winner.latency_us >= winner.default_latency_us:
        return default_at(M).as_dict(), [
            *notes,
            (
                f"M={M}: best config {_fmt_config(winner.config)} ({winner.latency_us:.2f} us) "
                f"is not faster than the default ({winner.default_latency_us:.2f} us); "
                "emitting the default config"
            ),
        ]
    return dict(winner.config), notes


def unmeasured_notes(
    m_imported: Sequence[int], labels: Mapping[int, str], left_out: Mapping[int, tuple[str, str]]
) -> list[str]:
    """Notes on the entries kept without a measurement, and on imported ones left out."""
    notes = [
        f"M={M}: imported from '{labels[M]}', not measured here (no comparison with the default)"
        if M in labels
        else f"M={M}: kept from the existing file, not measured here"
        for M in m_imported
    ]
    notes.extend(
        f"M={M}: entry imported from '{label}' left out, it cannot launch on this device: {reason}"
        for M, (label, reason) in sorted(left_out.items())
    )
    return notes
