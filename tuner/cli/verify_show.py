"""What `tuner verify` shows while it checks: a progress bar on stderr counting the timed M,
each shape's line and its table of verdicts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from tuner.cli.output import console, err_console
from tuner.cli.tables import Column, print_table
from tuner.compare.verify import PointResult, ShapeVerification, Verdict
from tuner.compare.verify_run import PlannedShape, shape_label

# Seconds of progress the ETA averages over: all of it (a timed M can take minutes on the
# interpreter; rich's 30 s default would leave the ETA blank there).
ETA_WINDOW_S = 7 * 24 * 3600.0


def _verdict_text(point: PointResult) -> str:
    if point.verdict is Verdict.FAILED:
        return f"[red]failed[/red]: {point.error}"
    if point.verdict is Verdict.SLOWER:
        return "[red]slower[/red]"
    return "ok" if point.timed else "ok (default)"


def print_shape_table(result: ShapeVerification, *, title: str, out=console) -> None:
    """One row per checked M: vLLM's key and config there, both medians, speedup, verdict;
    on the rich console `out`."""
    columns = [
        Column("M"),
        Column("key"),
        Column("config", text=True),
        Column("chosen_us"),
        Column("default_us"),
        Column("noise_us", optional=True),
        Column("speedup"),
        Column("verdict", text=True),
    ]
    rows = [
        [
            str(point.M),
            str(point.key),
            point.config.short(),
            *(
                "-" if us is None else f"{us:.1f}"
                for us in (point.chosen_us, point.default_us, point.noise_us)
            ),
            "-" if point.speedup is None else f"{point.speedup:.2f}x",
            _verdict_text(point),
        ]
        for point in result.points
    ]
    print_table(out, columns, rows, title=title)


class _Shown:
    """A `tuner.compare.verify_run.VerifyObserver` drawing on a rich progress bar."""

    def __init__(self, bar, task, out, title: str) -> None:
        self.bar, self.task, self.out, self.title = bar, task, out, title

    def shape_started(self, shape: PlannedShape) -> None:
        self.bar.update(self.task, description=f"verify {shape_label(shape.N, shape.K)}")
        self.out.print(
            f"{shape_label(shape.N, shape.K)}: keys "
            f"{', '.join(map(str, shape.configs))}; checking {len(shape.m_points)} "
            "M values",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )

    def point_done(self, shape: PlannedShape, point: PointResult) -> None:
        self.bar.advance(self.task, int(point.M in shape.timed))

    def shape_done(self, result: ShapeVerification) -> None:
        print_shape_table(
            result, title=f"{shape_label(result.N, result.K)} {self.title}", out=self.out
        )


@contextmanager
def shown(planned: Sequence[PlannedShape], *, title: str) -> Iterator[_Shown]:
    """An observer for `VerifyRun.check` of `planned`, its progress bar open while in use;
    `title` follows each table's shape label."""
    from rich.progress import Progress

    from tuner.run.sweep import progress_columns

    # With stdout on the same terminal the tables go through the bar's console, above the bar;
    # otherwise (a pipe or file) stdout gets them as they are and rich draws the bar only on a
    # terminal (elsewhere it writes its last state once, at the end).
    out = err_console if console.is_terminal and err_console.is_terminal else console
    with Progress(
        *progress_columns("timed M"),
        console=err_console,
        transient=False,
        speed_estimate_period=ETA_WINDOW_S,
        redirect_stdout=console.is_terminal,
    ) as bar:
        task = bar.add_task("verify", total=sum(len(shape.timed) for shape in planned))
        bar.advance(task, 0)  # the ETA's first sample: now
        yield _Shown(bar, task, out, title)
        bar.update(task, description="verify")
