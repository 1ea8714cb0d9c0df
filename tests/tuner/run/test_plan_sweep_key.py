"""A sweep's key as `tuner sweep` makes it (`SweepRequest.sweep_spec` into `db.repo.sweep_key`):
the family decides whether its name enters it. A dense sweep keeps the key stores made before
families, so such a sweep resumes; any other family's key holds its name."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from db import repo
from tests.storefill import DENSE_SWEEP
from tests.toyfamily.family import TOY
from tuner.kernels.dense.family import DENSE
from tuner.kernels.registry import FAMILIES
from tuner.run.plan import SweepRequest

# A dense GEMM sweep key pinned as stores made it before the store knew kernel families.
DENSE_KEY = "ba69a67249c3faa8984c075384abecfde62d1a22b573413a458c4911f78aec4b"


def _request(**changes) -> SweepRequest:
    fields = {"device_name": "NVIDIA_H200", "model": "m", "tp": 1, "seed": 0, "trials": 30}
    fields |= {"shapes": ((512, 256), (1024, 512)), "block_shape": (128, 128), "m_values": (16, 64)}
    return SweepRequest(**fields | {"strategy": "optuna", "out_dtype": "bfloat16"} | changes)


def _canonical(r: SweepRequest, **family) -> str:
    """The key `db.repo.sweep_key` hashes: the parameters, plus `family` when given."""
    params = {"device_name": r.device_name, "model": r.model, "tp": r.tp, "seed": r.seed}
    params |= {"strategy": r.strategy, "budget": r.budget, "space": "vllm"}
    params |= {"m_values": sorted(r.m_values), "out_dtype": r.out_dtype, **family}
    params |= {"block_shape": list(r.block_shape), "shapes": sorted(r.shapes)}
    text = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_dense_sweep_keeps_the_key_made_before_families() -> None:
    request = _request()
    spec = request.sweep_spec()
    assert {name: getattr(spec, name) for name in DENSE_SWEEP} == DENSE_SWEEP
    assert repo.sweep_key(spec) == DENSE_KEY == _canonical(request)


def test_a_moe_sweep_key_holds_the_family_and_its_params() -> None:
    params = (("E", 8), ("top_k", 2))
    request = _request(shapes=((512, 256),), m_values=(16,), family="moe", params=params)
    key = repo.sweep_key(request.sweep_spec())
    assert key == _canonical(request, family="moe", shape_params="E=8,top_k=2")
    assert key == "c9f655e316845723cbd6a20829a616c420abc0f6656df1a8f42111511e39290d"


@pytest.mark.parametrize(
    ("family", "params"),
    [
        (TOY, (("G", 4),)),
        (replace(DENSE, name="plain", shapes=replace(DENSE.shapes, sweep_key_has_family=True)), ()),
    ],
)
def test_a_registered_familys_key_holds_its_name(family, params, monkeypatch) -> None:
    """A family made from the dense one that says its sweeps are keyed by name, with shape
    params (TOY) or without (`plain`: its key differs from the dense GEMM's by the name
    alone)."""
    monkeypatch.setitem(FAMILIES, family.name, family)
    request = _request(family=family.name, params=params)
    key = repo.sweep_key(request.sweep_spec())
    params_text = ",".join(f"{name}={value}" for name, value in params)
    assert key == _canonical(request, family=family.name, shape_params=params_text)
    assert key != DENSE_KEY
