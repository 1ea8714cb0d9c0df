"""The flow of `tuner verify`, apart from the store and the terminal: which M each file is
checked at, the check of each model shape's file, and `--fix`'s tune-and-check passes. The
caller reads the files, prints, and maps the outcome to an exit code."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from tuner.compare.verify import (
    PointResult,
    RunnerFactory,
    ShapeVerification,
    Verdict,
    check_points,
    timed_points,
    verify_shape,
)
from tuner.core import VLLM_M_GRID
from tuner.files.merge import DeviceFiles
from tuner.inputs.shapes import ModelShapes
from tuner.kernels.registry import DEFAULT_FAMILY
from tuner.kernels.shape import FamilyShape, Shape

# Tune-and-check passes of `--fix`: each new key adds midpoints and neighbours to check.
MAX_FIX_PASSES = 3
# `--m all`: vLLM's 18 batch sizes on top of the sweeps' grid.
M_ALL = "all"
WHERE_PICK_SWITCHES = (
    "the midpoint of each pair of neighbouring keys (where vLLM's nearest-key "
    "pick switches) and key - 1, key + 1"
)
# `--m`: None (the sweeps' grid), M_ALL, or the listed M values.
MChoice = str | tuple[int, ...] | None


def shape_label(N: int, K: int) -> str:
    """`N=5120,K=3072`, as vLLM's file names write a shape."""
    return f"N={N},K={K}"


def shape_grid(choice: MChoice, sweep_grid: Sequence[int]) -> list[int]:
    """The grid M checked for one file besides its keys, midpoints and neighbours.

    Args:
        choice: None (the default): the M grid of the sweeps that made the file; `M_ALL`: that
            and vLLM's 18 batch sizes (`tuner.files.format.VLLM_M_GRID`); a tuple: `--m`'s list.
        sweep_grid: the M the shape's sweeps requested.

    Returns:
        Ascending M values.

    Raises:
        ValueError: a word other than `M_ALL`.
    """
    if choice is None:
        return sorted(set(sweep_grid))
    if choice == M_ALL:
        return sorted(set(sweep_grid) | set(VLLM_M_GRID))
    if isinstance(choice, str):
        raise ValueError(f"--m: {choice!r} is neither {M_ALL!r} nor a list of M values")
    return sorted(set(choice))


def m_set_line(choice: MChoice) -> str:
    """One line: which M values verify checks per shape, and why."""
    if choice is None:
        return (
            f"M checked per shape: its keys, the M grid of the sweeps that made it, "
            f"{WHERE_PICK_SWITCHES}, up to {VLLM_M_GRID[-1]} or the largest key; "
            f"`--m all` adds vLLM's {len(VLLM_M_GRID)} batch sizes"
        )
    if choice == M_ALL:
        return (
            f"M checked per shape (--m all): vLLM's {len(VLLM_M_GRID)} batch sizes, the M "
            f"grid of the sweeps that made it, its keys, {WHERE_PICK_SWITCHES}"
        )
    return (
        f"M checked per shape (--m): {', '.join(map(str, choice))}, its keys, {WHERE_PICK_SWITCHES}"
    )


def summary_line(results: Sequence[ShapeVerification]) -> str:
    """e.g. "2 shapes, 12 M values: 10 ok (7 run the default config), 2 slower, 0 failed"."""
    points = [point for result in results for point in result.points]
    counts = {verdict: sum(point.verdict is verdict for point in points) for verdict in Verdict}
    untimed = sum(point.verdict is Verdict.OK and not point.timed for point in points)
    return (
        f"{len(results)} shape(s), {len(points)} M values: {counts[Verdict.OK]} ok "
        f"({untimed} run the default config), {counts[Verdict.SLOWER]} slower, "
        f"{counts[Verdict.FAILED]} failed"
    )


def offending_lines(results: Sequence[ShapeVerification]) -> list[str]:
    """One line per shape with slower or failed M, naming them."""
    lines = []
    for result in results:
        for what, values in (("slower than the default", result.slower), ("failed", result.failed)):
            if values:
                lines.append(
                    f"{shape_label(result.N, result.K)}: {what} at M={', '.join(map(str, values))}"
                )
    return lines


def no_file_line(
    model_shapes: ModelShapes, files: DeviceFiles, device_name: str, family: str = DEFAULT_FAMILY
) -> str | None:
    """The error line when none of the model's GEMM shapes (`ModelShapes.shapes`, of the
    default family unless `family` says otherwise) has a file to check, else None."""
    group_n, group_k = model_shapes.block_shape
    shapes = set(model_shapes.shapes)
    wanted = {FamilyShape(family, Shape(N, K, (group_n, group_k))) for N, K in shapes}
    if any(f.key in wanted for f in files.files):
        return None
    reasons = (
        "; ".join(
            f"{shape_label(item.N, item.K)}: {item.reason}"
            for item in files.skipped
            if (item.N, item.K) in shapes
        )
        or "no trials of its shapes"
    )
    return (
        f"no file of {model_shapes.model} TP {model_shapes.tp} on {device_name} "
        f"to check ({reasons})"
    )


@dataclass(frozen=True)
class PlannedShape:
    """One shape's file and the M values it is checked at; `timed`: those where a kernel runs."""

    N: int
    K: int
    configs: Mapping[int, Mapping[str, int]]
    m_points: tuple[int, ...]
    timed: frozenset[int]


class VerifyObserver(Protocol):
    """What the caller shows while shapes are checked (a progress bar and tables)."""

    def shape_started(self, shape: PlannedShape) -> None:
        """Before the first M of a shape."""
        ...

    def point_done(self, shape: PlannedShape, point: PointResult) -> None:
        """After each M of a shape."""
        ...

    def shape_done(self, result: ShapeVerification) -> None:
        """After the last M of a shape."""
        ...


class MissingAfterFix(Exception):
    """`--fix` left a shape it touched without a file; `count`: how many."""

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} shape(s) have no file after --fix; see above")
        self.count = count


@dataclass(frozen=True)
class VerifyRun:
    """Checks a model's dense files at the M of `check_points` over `shape_grid(choice, ...)`.

    Attributes:
        model_shapes: the model's shapes (`tuner.inputs.shapes.load_shapes`); its GEMM shapes
            (`ModelShapes.shapes`) are checked.
        choice: `--m`: None, M_ALL or a tuple of M values.
        make_runner: (N, K, M) -> a runner (`tuner.compare.verify.SamplingRunner`).
        rounds: interleaved rounds per M; None for tuner.measure.noise.RETIME_ROUNDS.
        noise_floor: the least noise `judge` assumes, as a fraction of the default's median.
        family: the kernel family of the model's GEMM shapes and of their files.
    """

    model_shapes: ModelShapes
    choice: MChoice
    make_runner: RunnerFactory
    rounds: int | None = None
    noise_floor: float = 0.0
    family: str = DEFAULT_FAMILY

    @property
    def block_shape(self) -> tuple[int, int]:
        """[group_n, group_k] of the model's weight scales, as a tuple."""
        group_n, group_k = self.model_shapes.block_shape
        return (group_n, group_k)

    def plan(
        self,
        files: DeviceFiles,
        grids: Mapping[FamilyShape, Sequence[int]],
        *,
        only_shapes: set[tuple[int, int]] | None = None,
    ) -> tuple[list[PlannedShape], list[str]]:
        """The shapes to check (each model shape, or those of `only_shapes`, in model order)
        and one line per shape without a file (vLLM runs its default config there)."""
        block_shape = self.block_shape
        by_shape = {file.key: file for file in files.files}
        skipped = {item.key: item.reason for item in files.skipped}
        planned, missing = [], []
        for N, K in self.model_shapes.shapes:
            if only_shapes is not None and (N, K) not in only_shapes:
                continue
            key = FamilyShape(self.family, Shape(N, K, block_shape))
            file = by_shape.get(key)
            if file is None:
                reason = skipped.get(key, "no trials in the store")
                missing.append(
                    f"{shape_label(N, K)}: no file ({reason}); vLLM runs its default config there"
                )
                continue
            configs = file.merged.configs
            m_points = check_points(configs, shape_grid(self.choice, grids.get(key, ())))
            planned.append(
                PlannedShape(
                    N,
                    K,
                    configs,
                    tuple(m_points),
                    frozenset(
                        timed_points(
                            configs, m_points, block_shape, family=self.family, shape=key.shape
                        )
                    ),
                )
            )
        return planned, missing

    def check(
        self, planned: Sequence[PlannedShape], observer: VerifyObserver
    ) -> list[ShapeVerification]:
        """Time each planned shape (`tuner.compare.verify.verify_shape`), in order."""
        results = []
        for shape in planned:
            observer.shape_started(shape)
            result = verify_shape(
                N=shape.N,
                K=shape.K,
                block_shape=self.block_shape,
                configs=shape.configs,
                m_points=shape.m_points,
                make_runner=self.make_runner,
                rounds=self.rounds,
                noise_floor=self.noise_floor,
                family=self.family,
                on_point=partial(observer.point_done, shape),
            )
            observer.shape_done(result)
            results.append(result)
        return results


def fix_passes(
    results: Sequence[ShapeVerification],
    *,
    tune: Callable[[dict[tuple[int, int], list[int]]], None],
    check_again: Callable[[set[tuple[int, int]], int], tuple[list[ShapeVerification], list[str]]],
    say: Callable[[str], None],
) -> list[ShapeVerification]:
    """`--fix`: tune the offending M of each shape, then check the shapes it touched again in
    full (new keys make new midpoints and neighbours), up to MAX_FIX_PASSES times.

    Args:
        results: the first check of every shape.
        tune: runs the trials of {(N, K): offending M values}.
        check_again: (shapes, pass number) -> their new results and lines of shapes without
            a file.
        say: prints one line.

    Returns:
        The latest result of every shape.

    Raises:
        MissingAfterFix: a touched shape has no file afterwards.
    """
    latest = {(result.N, result.K): result for result in results}
    for fix_pass in range(1, MAX_FIX_PASSES + 1):
        offending = {
            shape: result.offending for shape, result in latest.items() if result.offending
        }
        if not offending:
            break
        tune(offending)
        again, missing = check_again(set(offending), fix_pass)
        for line in missing:
            say(line)
        if missing:
            raise MissingAfterFix(len(missing))
        latest.update({(result.N, result.K): result for result in again})
        say(f"after --fix pass {fix_pass}: " + summary_line(again))
    return list(latest.values())
