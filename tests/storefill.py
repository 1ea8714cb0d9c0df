"""Fill a store through db.repo with a planned sweep: per (N, K, M), the trials to record."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence

from sqlalchemy import text

import tuner
from db import repo
from db.connection import open_store, session_scope
from tuner.files.provenance import current_kernel_hash
from tuner.kernels.dense.family import DENSE
from tuner.kernels.dense.space import default_config
from tuner.kernels.source import kernel_label

# Trials as this machine records them: the current kernel and Triton (export keeps only those).
TRITON = importlib.metadata.version("triton")

DEFAULT = default_config().as_dict()
FAST = {
    "BLOCK_SIZE_M": 16,
    "BLOCK_SIZE_N": 64,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 1,
    "num_warps": 4,
    "num_stages": 3,
}
SLOW = {
    "BLOCK_SIZE_M": 128,
    "BLOCK_SIZE_N": 256,
    "BLOCK_SIZE_K": 128,
    "GROUP_SIZE_M": 64,
    "num_warps": 8,
    "num_stages": 5,
}
# What `tuner.run.plan.SweepRequest.sweep_fields` passes `repo.create_sweep` of a dense GEMM
# sweep beyond its parameters: its family, no shape params, and a key without the family.
DENSE_SWEEP = {"family": "dense", "shape_params": "", "family_in_key": False}
# (N, K, M) -> [(config, is_default, status, latency_us)]
Plan = Mapping[tuple[int, int, int], Sequence[tuple[dict, bool, str, float | None]]]
TABLES = ("devices", "environments", "sweeps", "tasks", "trials", "imports")


def fill(
    url: str,
    plan: Plan,
    *,
    device_name: str = "NVIDIA_L20",
    model: str = "test-model",
    m_values: Sequence[int] = (1, 16, 32),
    fail_m: Sequence[int] = (),
    kernel: str = "builtin",
) -> int:
    """Create one sweep over the plan's shapes; run its tasks; return the sweep_id.

    Tasks whose (N, K, M) is not in the plan are left pending; M in `fail_m` end failed.
    `kernel` "vllm" records the trials as timed with the importable vLLM's dense kernel (its
    hash, source and version), as a sweep inside the serving image does.
    """
    space, source = "vllm", {"kernel_hash": current_kernel_hash()}
    if kernel != "builtin":  # its own sweep, named as tuner.run.plan names it
        dense = DENSE.source(kernel)
        space = f"vllm@kernel:{kernel_label(dense.name)}"
        source = {
            "kernel_hash": dense.kernel_hash,
            "kernel_source": dense.name,
            "vllm": dense.version,
        }
    shapes = sorted({(n, k) for n, k, _ in plan})
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            sweep, _ = repo.create_sweep(
                session,
                repo.SweepSpec(
                    device_name=device_name,
                    model=model,
                    tp=2,
                    strategy="grid",
                    budget=8,
                    space=space,
                    seed=0,
                    m_values=list(m_values),
                    out_dtype="bfloat16",
                    block_shape=(128, 128),
                    shapes=shapes,
                    **DENSE_SWEEP,
                ),
            )
            environment_id = repo.get_or_create_environment(
                session,
                device_name=device_name,
                gpu_name=device_name.replace("_", " "),
                compute_capability="8.9",
                driver="580.1",
                cuda="12.9",
                torch="2.11.0",
                triton=TRITON,
                tuner=tuner.__version__,
                **source,
            )
        claimed = []
        while True:
            with session_scope(engine) as session:
                task = repo.claim_task(session, sweep_id=sweep.sweep_id, worker_id="w", lease_s=600)
                if task is None:
                    break
                claimed.append(task.task_id)
                trials = plan.get((task.N, task.K, task.M))
                for config, is_default, status, latency_us in trials or ():
                    repo.record_trial(
                        session,
                        task_id=task.task_id,
                        environment_id=environment_id,
                        config=config,
                        is_default=is_default,
                        status=status,
                        latency_us=latency_us,
                    )
                if trials is not None or task.M in fail_m:
                    repo.finish_task(
                        session,
                        task_id=task.task_id,
                        worker_id="w",
                        state="failed" if task.M in fail_m else "done",
                    )
        with session_scope(engine) as session:  # hand unplanned tasks back: pending
            session.execute(
                text(
                    "UPDATE tasks SET state = 'pending', worker_id = NULL, "
                    "lease_expires_at = NULL WHERE state = 'running'"
                )
            )
        return sweep.sweep_id
    finally:
        engine.dispose()


def row_counts(url: str) -> dict[str, int]:
    """Rows per table of the store, to show a refused write changed nothing."""
    engine = open_store(url)
    try:
        with engine.connect() as connection:
            return {
                name: connection.execute(text(f"SELECT count(*) FROM {name}")).scalar_one()
                for name in TABLES
            }
    finally:
        engine.dispose()


def publish(url: str, device_name: str = "NVIDIA_L20", **scope) -> int:
    """Publish a device's files as `tuner publish` does; return the release number."""
    from tuner.files.release import publish as publish_files

    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            return publish_files(session, device_name, reason="test", **scope).release.number
    finally:
        engine.dispose()


def run_one_task(
    url: str,
    *,
    model: str,
    family: str,
    shape_params: str,
    shape: tuple[int, int],
    M: int,
    space: Sequence,
    budget: int = 3,
):
    """Create a one-task sweep of `family` on the interpreter device, claim its task and run it
    with `run_task` over `space`; returns (engine, task). Dispose of the engine when done."""
    from tuner.kernels.registry import get_family
    from tuner.measure.runners import InterpreterRunner
    from tuner.run.task import run_task
    from tuner.run.worker_spec import WorkerSpec

    engine = open_store(url)
    with session_scope(engine) as session:
        sweep, _ = repo.create_sweep(
            session,
            repo.SweepSpec(
                device_name="TRITON_INTERPRETER",
                model=model,
                tp=1,
                strategy="grid",
                budget=budget,
                space=f"custom:{family}",
                seed=0,
                m_values=[M],
                out_dtype="bfloat16",
                block_shape=(128, 128),
                shapes=[shape],
                family=family,
                shape_params=shape_params,
                family_in_key=get_family(family).shapes.sweep_key_has_family,
            ),
        )
        environment_id = repo.get_or_create_environment(
            session,
            device_name="TRITON_INTERPRETER",
            gpu_name="TRITON_INTERPRETER",
            compute_capability="",
            driver="",
            cuda="",
            torch="t",
            triton="t",
            tuner="t",
            kernel_hash="h",
        )
        task = repo.claim_task(session, sweep_id=sweep.sweep_id, worker_id="w", lease_s=600)
    spec = WorkerSpec(
        db_url=url,
        sweep_id=sweep.sweep_id,
        worker_id="w",
        runner=InterpreterRunner("TRITON_INTERPRETER", reps=1),
    )
    run_task(engine, spec, task, environment_id, space)
    return engine, task
