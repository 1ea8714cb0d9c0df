"""Provenance without triton: each family's kernel hash from its module's text equals the
module's own, and the Triton rule of a service that has no triton; the modules the service
reads files, families and rooflines with import no torch or triton."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from dataclasses import dataclass

import pytest

from tuner.core import triton_minor
from tuner.files.provenance import (
    Provenance,
    current_kernel_hash,
    current_provenance,
    family_hashes,
    installed_triton_minor,
)
from tuner.kernels.registry import get_family


def dense_hash() -> str:
    return get_family("dense").source("builtin").kernel_hash


def moe_hash() -> str:
    return get_family("moe").source("builtin").kernel_hash


def test_installed_triton_minor(monkeypatch: pytest.MonkeyPatch) -> None:
    assert installed_triton_minor() == triton_minor(importlib.metadata.version("triton"))

    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    assert installed_triton_minor() is None
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "unknown")
    assert installed_triton_minor() is None


@dataclass
class Env:
    triton: str
    kernel_hash: str
    kernel_source: str = "builtin"
    vllm: str = ""


def test_one_hash_per_family_from_its_kernel_module_the_default_first() -> None:
    assert family_hashes() == {"dense": dense_hash(), "moe": moe_hash()}
    assert list(family_hashes()) == ["dense", "moe"] and current_kernel_hash() == dense_hash()
    assert len(current_kernel_hash()) == 64


def test_without_triton_the_newest_triton_of_a_current_kernel_counts(monkeypatch) -> None:
    monkeypatch.setattr("tuner.files.provenance.vllm_version", lambda: None)
    environments = [
        Env("3.5.1", moe_hash()),  # an MoE environment of the current kernel counts
        Env("3.10.0", "old"),
        Env("3.6.2+git", dense_hash()),
        Env("", dense_hash()),
        Env("3.4.0", dense_hash()),
    ]
    builtin = Provenance(dense_hash(), "3.9", (moe_hash(),), "builtin", "")
    assert current_provenance(environments, installed_triton="3.9.0", kernel="builtin") == builtin
    assert current_provenance(environments, installed_triton=None, kernel="builtin") == Provenance(
        dense_hash(), "3.6", (moe_hash(),)
    )
    assert current_provenance([], installed_triton=None, kernel="builtin").triton_minor is None
    # vLLM's kernels where vLLM is not importable: those the newest vLLM recorded
    timed = [Env("3.8.0", "v1", "vllm", "0.9.0"), Env("3.8.0", "v2", "vllm", "0.10.0")]
    assert current_provenance(timed, installed_triton=None, kernel="vllm") == Provenance(
        "v2", "3.8", (), "vllm", "0.10.0"
    )
    assert current_provenance([], installed_triton=None, kernel="vllm").hashes == ("none",)


def test_the_services_file_modules_load_no_torch_triton_or_store() -> None:
    """Hashes and Triton read from text and metadata: the service has neither (api.app as a
    whole: tests/api/test_service.py)."""
    code = (
        "import sys, tuner.files.format, tuner.files.merge, tuner.files.provenance as p; "
        "p.current_kernel_hash(); p.installed_triton_minor(); "
        "assert not {'sqlalchemy', 'fastapi'} & set(sys.modules); "
        "import tuner.kernels.registry, tuner.files.device, tuner.measure.roofline as r; "
        "r.roofline(1, 128, 128, 1.0); bad = {'torch', 'triton'} & set(sys.modules); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
