"""Sweep orchestration: plan tasks in the store, start one worker per device, show progress."""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import signal
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tuner.space import KernelConfig, default_config, vllm_space
from tuner.worker import WorkerSpec, worker_main

# Restarts of one worker slot before the sweep gives up on it (a crash kills only its process).
MAX_RESTARTS = 3


@dataclass(frozen=True)
class SweepRequest:
    """What `tuner sweep` was asked to do.

    Attributes:
        device_name: vLLM's key of the device, e.g. "NVIDIA_L20" or "TRITON_INTERPRETER".
        model: key of a `shapes/` file.
        tp: tensor-parallel size.
        shapes: (N, K) of the model at that TP.
        block_shape: [group_n, group_k].
        m_values: batch sizes M to tune, ascending.
        strategy: "grid" or "optuna".
        trials: distinct configs per task for optuna (the default config included).
        seed: seed of every task's search and inputs.
        out_dtype: "bfloat16" or "float16".
        configs: explicit candidates, or None for vLLM's 1,280-config space.
        replay: a landscape file whose recorded timings answer instead of a device.
    """

    device_name: str
    model: str
    tp: int
    shapes: tuple[tuple[int, int], ...]
    block_shape: tuple[int, int]
    m_values: tuple[int, ...]
    strategy: str
    trials: int
    seed: int
    out_dtype: str
    configs: tuple[KernelConfig, ...] | None = None
    replay: str | None = None

    @property
    def space(self) -> list[KernelConfig]:
        """Candidate configs of every task."""
        return list(self.configs) if self.configs is not None else vllm_space()

    @property
    def space_name(self) -> str:
        """"vllm", or "custom:<sha256 prefix>" of an explicit list, with "@replay:<sha256
        prefix>" of the landscape file when replaying (part of the sweep's key)."""
        name = "vllm"
        if self.configs is not None:
            text = json.dumps([config.as_dict() for config in self.configs])
            name = "custom:" + hashlib.sha256(text.encode()).hexdigest()[:16]
        if self.replay is not None:
            digest = hashlib.sha256(Path(self.replay).read_bytes()).hexdigest()[:16]
            name += f"@replay:{digest}"
        return name

    def trials_per_task(self) -> int:
        """Distinct configs each task measures: the budget, plus the default if outside it."""
        space = self.space
        extra = 0 if default_config(self.block_shape) in space else 1
        if self.strategy == "grid":
            return len(space) + extra
        return min(self.trials, len(space)) + extra


def plan(engine, request: SweepRequest):
    """Create the sweep and its tasks in the store, or find them when the same sweep exists.

    Returns:
        (SweepInfo, created): created is False when this resumes an earlier run.
    """
    from db import repo
    from db.engine import session_scope

    budget = len(request.space) + 1 if request.strategy == "grid" else request.trials
    with session_scope(engine) as session:
        return repo.create_sweep(
            session, device_name=request.device_name, model=request.model, tp=request.tp,
            strategy=request.strategy, budget=budget, space=request.space_name,
            seed=request.seed, m_values=list(request.m_values), out_dtype=request.out_dtype,
            block_shape=request.block_shape, shapes=list(request.shapes),
        )


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@dataclass(frozen=True)
class SweepSummary:
    """Outcome of one `tuner sweep` run, counted from the store."""

    sweep_id: int
    tasks_done: int
    tasks_failed: int
    tasks_total: int
    trials_total: int
    trials_ok: int
    trials_run_now: int
    wall_s: float
    worker_failures: int


def run_workers(
    engine,
    db_url: str,
    request: SweepRequest,
    sweep_id: int,
    *,
    backend: str,
    visible_devices: Sequence[str | None],
    console=None,
    interpreter_reps: int = 3,
) -> SweepSummary:
    """Start one spawned worker per visible device and wait, drawing a progress bar.

    `backend` is "cuda", "interpreter" or "replay" (request.replay names the landscape).
    A worker that exits with an error is restarted (up to MAX_RESTARTS times per device) while
    tasks remain; Ctrl-C stops the workers and hands their tasks back for the next run.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from db import repo
    from db.engine import session_scope

    configs = None
    if request.configs is not None:
        configs = tuple(tuple(c.as_dict().items()) for c in request.configs)
    host = socket.gethostname()
    specs = [
        WorkerSpec(db_url=db_url, sweep_id=sweep_id, backend=backend, visible_device=device,
                   worker_id=f"{host}:{os.getpid()}:{device or 'cpu'}:{uuid.uuid4().hex[:8]}",
                   configs=configs, interpreter_reps=interpreter_reps, parent_pid=os.getpid(),
                   landscape_path=request.replay)
        for device in visible_devices
    ]
    ctx = mp.get_context("spawn")
    start = time.perf_counter()
    # SIGTERM (kill, docker stop) takes the same way out as Ctrl-C: stop workers, hand tasks back.
    previous_sigterm = signal.signal(signal.SIGTERM, _interrupt)

    def progress_now():
        with session_scope(engine) as session:
            return repo.sweep_progress(session, sweep_id=sweep_id)

    before = progress_now()
    total = before.tasks_total * request.trials_per_task()
    processes = {}
    restarts = dict.fromkeys(range(len(specs)), 0)
    failures = 0
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("trials"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        bar_id = bar.add_task(f"sweep {sweep_id}", total=total, completed=before.trials_total)
        try:
            for slot, spec in enumerate(specs):
                processes[slot] = ctx.Process(target=worker_main, args=(spec,), daemon=False)
                processes[slot].start()
            while processes:
                time.sleep(0.5)
                now = progress_now()
                label = f"sweep {sweep_id}: {now.tasks_done}/{now.tasks_total} tasks"
                bar.update(bar_id, completed=min(now.trials_total, total), description=label)
                for slot, process in list(processes.items()):
                    if process.is_alive():
                        continue
                    del processes[slot]
                    if process.exitcode == 0:
                        continue
                    with session_scope(engine) as session:  # it is dead: free its task now
                        repo.release_tasks(session, worker_id=specs[slot].worker_id)
                    failures += 1
                    unfinished = now.tasks_pending + now.tasks_running
                    if unfinished and restarts[slot] < MAX_RESTARTS:
                        restarts[slot] += 1
                        processes[slot] = ctx.Process(target=worker_main, args=(specs[slot],))
                        processes[slot].start()
            now = progress_now()
            bar.update(bar_id, completed=min(now.trials_total, total))
        except KeyboardInterrupt:
            for process in processes.values():
                process.terminate()
            for process in processes.values():
                process.join(10)
            with session_scope(engine) as session:
                for spec in specs:
                    repo.release_tasks(session, worker_id=spec.worker_id)
            raise
        finally:
            signal.signal(signal.SIGTERM, previous_sigterm)
    return SweepSummary(
        sweep_id=sweep_id, tasks_done=now.tasks_done, tasks_failed=now.tasks_failed,
        tasks_total=now.tasks_total, trials_total=now.trials_total, trials_ok=now.trials_ok,
        trials_run_now=now.trials_total - before.trials_total,
        wall_s=time.perf_counter() - start, worker_failures=failures,
    )
