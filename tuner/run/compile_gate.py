"""The compile gate of a CUDA worker: compile each config for the GPU's architecture before it
is launched, reject what cannot launch, and precompile what the search will likely ask next,
in a process pool the worker's tasks share."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from tuner.kernels.config import KernelConfig
from tuner.kernels.gpus import MAX_SHARED_BYTES
from tuner.measure.compile import CompileInfo, CompileJob, compile_job, compile_pool, launch_problem
from tuner.measure.runner import Problem
from tuner.measure.trial import TrialResult
from tuner.search.axes import neighbours, space_axes


class CompileGate:
    """What a CUDA worker asks before it launches a config of one task: compile it for the GPU's
    architecture (ahead of time where the search is predictable), and reject it without a
    launch when it cannot run there.

    What the search asks first (`first`) goes to the pool when the task starts, the likely
    next configs (`likely_next`) of each new incumbent when it is found; a config asked before
    them jumps the configs still waiting (they are cancelled and sent again behind it). Each
    compile writes the binary to Triton's cache under the key the measuring process's JIT
    computes for the same launch (`tuner.kernels.target`), so the first launch
    loads instead of compiling; a compile Triton's cache answers costs little, so every task
    asks again rather than keep answers of its own.

    A pool whose process died (`BrokenProcessPool`) is `broken` and takes no more: its configs
    are launched, Triton compiles them in the measuring process, and a config that crashes the
    compiler is recorded as crashed there (the worker replaces the pool after the task).

    Args:
        pool: the worker's `compile_pool`, shared by its tasks.
        arch: compute capability as an int (a key of MAX_SHARED_BYTES).
        problem: the task's launch (its M, shape, out_dtype and family).
        space: the task's candidates (for `likely_next`).
        first: configs the search will measure first, whatever their results (its warm
            starts, and for `grid` the space: `Strategy.planned`), in order.
        ahead: how many likely-next configs to send after each new incumbent.
    """

    def __init__(
        self,
        pool: ProcessPoolExecutor,
        *,
        arch: int,
        problem: Problem,
        space: Sequence[KernelConfig],
        first: Sequence[KernelConfig] = (),
        ahead: int = 8,
    ) -> None:
        self.pool, self.arch, self.problem = pool, arch, problem
        self.space, self.ahead = list(space), ahead
        self.futures: dict[KernelConfig, Future[CompileInfo]] = {}  # in the order sent
        self.compile_s = 0.0
        self.broken = False  # the pool lost a process; nothing more is sent to it
        self.best: float | None = None
        self.submit(first)

    def submit(self, configs: Iterable[KernelConfig]) -> None:
        """Send configs to the pool behind those sent before (ones sent already are skipped)."""
        problem = self.problem
        for config in configs:
            if config in self.futures or self.broken:
                continue
            launch = (problem.shape, problem.M, problem.out_dtype, problem.family)
            job = CompileJob(config, self.arch, *launch, need_info=False)
            try:
                self.futures[config] = self.pool.submit(compile_job, job)
            except RuntimeError:  # BrokenProcessPool, or a pool already shut down
                self.broken = True

    def before(self, config: KernelConfig) -> TrialResult | None:
        """Compile (or wait for) a config, ahead of the configs still waiting.

        Returns:
            An out_of_resources or compile_error TrialResult to record instead of launching,
            or None when the config may be launched.
        """
        if config not in self.futures:
            waiting = [c for c, future in self.futures.items() if future.cancel()]
            for sent_again in waiting:
                del self.futures[sent_again]
            self.submit([config, *waiting])
        future = self.futures.get(config)
        try:
            info = future.result() if future is not None else None
        except Exception as exc:  # noqa: BLE001 - a dead process, or a compile cancelled
            self.broken = self.broken or isinstance(exc, BrokenProcessPool)
            return None
        if info is None:
            return None
        self.compile_s += info.compile_s
        return launch_problem(info)

    def after(self, config: KernelConfig, result: TrialResult) -> None:
        """Send the likely next configs of a new incumbent to the pool while the GPU measures."""
        if result.ok and (self.best is None or result.ok_latency_us < self.best):
            self.best = result.ok_latency_us
            self.submit(likely_next(config, self.space)[: self.ahead])


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
    """A CUDA worker's compile pool, shared by its tasks: one `CompileGate` per task. A pool
    that lost a process is replaced when the task that saw it ends."""

    def __init__(self, workers: int, arch: int) -> None:
        self.arch, self.workers = arch, workers
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

    def gate(self, problem: Problem, space, first) -> CompileGate:
        """A gate for one task over its candidates, `first` sent (see `CompileGate`)."""
        return CompileGate(self.pool, arch=self.arch, problem=problem, space=space, first=first)

    def closed(self, gate: CompileGate, shared) -> None:
        """Add a task's compile seconds to `shared` (the worker's `WorkerShared`), drop its
        compiles still waiting, and replace the pool when it lost a process."""
        shared.compile_s.value += gate.compile_s
        for future in gate.futures.values():
            future.cancel()
        if gate.broken:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.pool = compile_pool(self.workers)
