"""The sweeps `tuner verify --fix` runs: planned and run as `tuner sweep` does, so an
interrupted `--fix` resumes like any sweep."""

from __future__ import annotations

from collections.abc import Sequence

from tuner.cli.devices import resolve_kernel_choice
from tuner.cli.errors import fail
from tuner.cli.options import KernelChoice
from tuner.cli.output import console, plain, print_sweep_summary
from tuner.compare.verify_run import shape_label
from tuner.inputs.shapes import ModelShapes
from tuner.kernels.config import KernelConfig
from tuner.kernels.shape import as_block_shape
from tuner.run.options import RunOptions


class Fixer:
    """Runs `--fix` trials: sweeps planned and run as `tuner sweep` does, so they resume alike."""

    def __init__(
        self,
        store,
        url: str,
        model_shapes: ModelShapes,
        *,
        device_name: str,
        runner,
        visible: Sequence[str | None],
        strategy: str,
        trials: int,
        configs: tuple[KernelConfig, ...] | None,
        seed: int,
        out_dtype: str,
        options: RunOptions,
    ) -> None:
        # Whose kernels verify times and --fix tunes: vLLM's where vLLM is importable (whose
        # trials' files are then read), as `tuner sweep --kernel auto` resolves it.
        self.kernel, self.kernel_label = resolve_kernel_choice(KernelChoice.auto)
        self.store, self.url, self.model_shapes = store, url, model_shapes
        self.device_name, self.runner, self.visible = device_name, runner, visible
        self.strategy, self.trials, self.configs, self.seed = strategy, trials, configs, seed
        self.out_dtype, self.options = out_dtype, options

    def _request(self, shapes, m_values, *, strategy: str, trials: int, seed: int):
        from tuner.run.plan import SweepRequest

        return SweepRequest(
            device_name=self.device_name,
            model=self.model_shapes.model,
            tp=self.model_shapes.tp,
            shapes=tuple(shapes),
            block_shape=as_block_shape(self.model_shapes.block_shape),
            m_values=tuple(m_values),
            strategy=strategy,
            trials=trials,
            seed=seed,
            out_dtype=self.out_dtype,
            configs=self.configs,
            kernel=self.kernel,
            kernel_label=self.kernel_label,
        )

    def _run(self, request, sweep_id: int) -> None:
        from tuner.run.interrupt import interrupted_exit
        from tuner.run.sweep import run_workers

        try:
            summary = run_workers(
                self.store,
                self.url,
                request,
                sweep_id,
                runner=self.runner,
                visible_devices=self.visible,
                console=console,
                options=self.options,
            )
        except KeyboardInterrupt as exc:  # Ctrl-C exits 130, SIGTERM 143
            code, what = interrupted_exit(exc)
            raise fail(
                f"{what}; finished trials are stored: run the same command to resume", code
            ) from None
        print_sweep_summary(summary)

    def finish_unfinished(self) -> None:
        """Run the unfinished tasks of this device's sweeps of the model and TP over the same
        config space first: an interrupted `--fix` (or sweep) resumes, and its files are whole."""
        from db import repo
        from db.repo import session_scope
        from tuner.run.plan import space_name

        space = space_name(self.configs, None, self.kernel_label)
        shapes = self.model_shapes
        with session_scope(self.store) as session:
            found = [
                repo.get_sweep(session, sweep_id=row.sweep_id)
                for row in repo.list_sweeps(session)
                if (row.device_name, row.model, row.tp)
                == (self.device_name, shapes.model, shapes.tp)
                and row.tasks.get("pending", 0) + row.tasks.get("running", 0)
            ]
        for info in found:
            if info is None:  # deleted since it was listed
                continue
            if info.space != space:
                plain(
                    f"sweep {info.sweep_id} has unfinished tasks over config space "
                    f"{info.space}: `tuner worker --sweep {info.sweep_id}` with its "
                    "--configs finishes them"
                )
                continue
            plain(f"resuming sweep {info.sweep_id} (M={','.join(map(str, info.m_values))})")
            request = self._request(
                shapes.pairs(),
                info.m_values,
                strategy=info.strategy,
                trials=info.budget,
                seed=info.seed,
            )
            self._run(request, info.sweep_id)

    def tune(self, offending: dict[tuple[int, int], list[int]]) -> None:
        """One sweep per set of offending M, over the shapes that share it."""
        from tuner.run.plan import opened_label, plan

        groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for shape, m_values in sorted(offending.items()):
            groups.setdefault(tuple(m_values), []).append(shape)
        for group_m, shapes in sorted(groups.items()):
            request = self._request(
                shapes, group_m, strategy=self.strategy, trials=self.trials, seed=self.seed
            )
            opened = plan(self.store, request)
            info = opened.info
            plain(
                f"--fix: sweep {info.sweep_id} ({opened_label(opened)}): "
                f"{' '.join(shape_label(N, K) for N, K in shapes)} at "
                f"M={','.join(map(str, group_m))}, {self.strategy}, "
                f"{len(self.visible)} worker(s)"
            )
            self._run(request, info.sweep_id)
