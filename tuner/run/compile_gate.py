"""The compile gate of a CUDA worker: compile each config for the GPU's architecture before it
is launched, reject what cannot launch, and precompile what the search will likely ask next."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.kernels.config import KernelConfig
from tuner.kernels.gpus import MAX_SHARED_BYTES
from tuner.measure.compile import (
    Precompiler,
    compile_pool,
    launch_problem,
)
from tuner.measure.trial import TrialResult
from tuner.search.axes import neighbours, space_axes


class CompileGate:
    """What a CUDA worker asks before it launches a config: compile it for the GPU's
    architecture (ahead of time where the search is predictable), reject it without a launch
    when it cannot run there, and precompile what the search will likely ask next.

    Args:
        precompiler: compiles the task's launch (`tuner.measure.compile.Precompiler`).
        space: the task's candidates (for `likely_next`).
        first: configs the search will measure first, whatever their results (its warm
            starts, and for `grid` the space: `Strategy.planned`); queued for compiling at
            once, in order.
        ahead: how many likely-next configs to queue after each new incumbent.
    """

    def __init__(
        self,
        precompiler: Precompiler,
        space: Sequence[KernelConfig],
        first: Sequence[KernelConfig] = (),
        ahead: int = 8,
    ) -> None:
        self.precompiler, self.space, self.ahead = precompiler, list(space), ahead
        self._best: float | None = None
        precompiler.submit(first)

    def before(self, config: KernelConfig) -> TrialResult | None:
        """Compile (or wait for) a config; its trial when it cannot launch, else None.

        Returns:
            An out_of_resources or compile_error TrialResult to record instead of launching,
            or None when the config may be launched (its binary is in Triton's cache).
        """
        return launch_problem(self.precompiler.wait(config))

    def after(self, config: KernelConfig, result: TrialResult) -> None:
        """Queue the neighbours of a new incumbent for compiling while the GPU measures."""
        if result.ok and (self._best is None or result.ok_latency_us < self._best):
            self._best = result.ok_latency_us
            self.precompiler.submit(likely_next(config, self.space)[: self.ahead])


def likely_next(incumbent: KernelConfig, space: Sequence[KernelConfig]) -> list[KernelConfig]:
    """Configs a search is likely to ask for after `incumbent`, to precompile while it measures.

    Args:
        incumbent: the fastest config so far.
        space: the task's candidates.

    Returns:
        Its one-step neighbours on the ordered axes, then the two-axis diagonal ones, those of
        the space only (what `guided`'s best-first steps measure next; TPE also samples near
        the best configs).
    """
    allowed = set(space)
    axes = space_axes(space)
    singles = [c for c in neighbours(incumbent, axes) if c in allowed]
    diagonals = [c for c in neighbours(incumbent, axes, pairs=True) if c in allowed]
    return list(dict.fromkeys([*singles, *diagonals]))


class WorkerCompiler:
    """A CUDA worker's precompile pool, shared by its tasks: one `CompileGate` per task.

    A pool that lost a process (`Precompiler.broken`) takes no more work; it is replaced when
    the task that saw it ends, so one dead compile process does not leave every later task
    without precompiling and pruning.
    """

    def __init__(self, workers: int, arch: int) -> None:
        self.arch = arch
        self.workers = workers
        self.pool = compile_pool(workers)

    @classmethod
    def for_this_gpu(cls, workers: int) -> WorkerCompiler | None:
        """The compiler for the visible GPU, or None (with a line saying so) when its
        architecture has no known resource limits (`tuner.kernels.gpus.MAX_SHARED_BYTES`):
        pruning would then fail every task, so Triton compiles at first launch instead."""
        import torch

        major, minor = torch.cuda.get_device_capability()
        arch = 10 * major + minor
        if arch not in MAX_SHARED_BYTES:
            print(f"no precompiling for sm{arch}: its resource limits are not known", flush=True)
            return None
        return cls(workers, arch)

    def gate(self, problem, space, first) -> CompileGate:
        """A gate for one task (a `tuner.measure.runner.Problem`) over its candidates, `first`
        queued for compiling (see `CompileGate`)."""
        dims = ("M", "N", "K", "block_shape", "out_dtype", "family", "params")
        launch = {name: getattr(problem, name) for name in dims}
        precompiler = Precompiler(arch=self.arch, pool=self.pool, workers=self.workers, **launch)
        return CompileGate(precompiler, space, first)

    def closed(self, gate: CompileGate, shared) -> None:
        """Close a task's gate and add its compile and wait seconds to the shared counters;
        replace the pool when it lost a process."""
        stats = gate.precompiler.stats()
        gate.precompiler.close()
        if shared is not None:
            shared.compile_s.value += stats.compile_s
            shared.compile_wait_s.value += stats.wait_s
        if gate.precompiler.broken:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = compile_pool(self.workers)
