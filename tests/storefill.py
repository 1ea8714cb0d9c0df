"""Fill a store through db.repo with a planned sweep: per (N, K, M), the trials to record."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping, Sequence
from dataclasses import replace

from sqlalchemy import MetaData, text

import tuner
from db import repo
from db.connection import connect, open_store, session_scope
from tuner.core import CONFIG_KEYS
from tuner.files.provenance import current_kernel_hash
from tuner.files.release import publish as publish_files
from tuner.kernels.dense.family import DENSE
from tuner.kernels.dense.space import default_config
from tuner.kernels.source import kernel_label

# Trials as this machine records them: the current kernel and Triton (export keeps only those).
TRITON = importlib.metadata.version("triton")

DEFAULT = default_config().as_dict()
FAST = dict(zip(CONFIG_KEYS, (16, 64, 128, 1, 4, 3), strict=True))
SLOW = dict(zip(CONFIG_KEYS, (128, 256, 128, 64, 8, 5), strict=True))
# What `tuner.run.plan.SweepRequest.sweep_spec` gives a dense GEMM sweep beyond its parameters:
# its family, no shape params, and a key without the family.
DENSE_SWEEP = {"family": "dense", "shape_params": "", "family_in_key": False}
# A dense sweep as `fill` makes it; `replace` the rest.
SPEC = repo.SweepSpec(
    **{"device_name": "NVIDIA_L20", "model": "test-model", "tp": 2, "strategy": "grid"},
    **{"budget": 8, "space": "vllm", "seed": 0, "m_values": (1, 16, 32), "shapes": ()},
    **{"out_dtype": "bfloat16", "block_shape": (128, 128), **DENSE_SWEEP},
)
# (N, K, M) -> [(config, is_default, status, latency_us)]
Plan = Mapping[tuple[int, int, int], Sequence[tuple[dict, bool, str, float | None]]]
TABLES = ("devices", "environments", "sweeps", "tasks", "trials", "imports")


def reset_postgresql(url: str) -> None:
    """Drop every table of the scratch database at `url`, those of an older schema too."""
    engine = connect(url)
    try:
        with engine.begin() as connection:
            tables = MetaData()
            tables.reflect(connection)
            tables.drop_all(connection)
    finally:
        engine.dispose()


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
        source = {"kernel_hash": dense.kernel_hash, "kernel_source": dense.name}
        source["vllm"] = dense.version
    shapes = sorted({(n, k) for n, k, _ in plan})
    spec = replace(SPEC, device_name=device_name, model=model, space=space, shapes=shapes)
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            sweep, _ = repo.create_sweep(session, replace(spec, m_values=list(m_values)))
            environment_id = repo.get_or_create_environment(
                session,
                **{"device_name": device_name, "gpu_name": device_name.replace("_", " ")},
                **{"compute_capability": "8.9", "driver": "580.1", "cuda": "12.9"},
                **{"torch": "2.11.0", "triton": TRITON, "tuner": tuner.__version__, **source},
            )
        while True:
            with session_scope(engine) as session:
                task = repo.claim_task(session, sweep_id=sweep.sweep_id, worker_id="w", lease_s=600)
                if task is None:
                    break
                trials = plan.get((task.N, task.K, task.M))
                for config, is_default, status, latency_us in trials or ():
                    repo.record_trial(
                        session,
                        task_id=task.task_id,
                        environment_id=environment_id,
                        **{"config": config, "is_default": is_default, "status": status},
                        latency_us=latency_us,
                    )
                if trials is not None or task.M in fail_m:
                    state = "failed" if task.M in fail_m else "done"
                    repo.finish_task(session, task_id=task.task_id, worker_id="w", state=state)
        with session_scope(engine) as session:  # hand unplanned tasks back: pending
            repo.release_tasks(session, worker_id="w")
        return sweep.sweep_id
    finally:
        engine.dispose()


def row_counts(url: str) -> dict[str, int]:
    """Rows per table of the store, to show a refused write changed nothing."""
    engine = open_store(url)
    try:
        with engine.connect() as connection:
            count = "SELECT count(*) FROM {}"
            return {name: connection.scalar(text(count.format(name))) for name in TABLES}
    finally:
        engine.dispose()


def publish(url: str, device_name: str = "NVIDIA_L20", **scope) -> int:
    """Publish a device's files as `tuner publish` does; return the release number."""
    engine = open_store(url)
    try:
        with session_scope(engine) as session:
            return publish_files(session, device_name, reason="test", **scope).release.number
    finally:
        engine.dispose()
