"""Provenance without triton: the kernel hash from the file's text equals the kernel module's,
Triton major.minor parsing, and the fallback rule of a service that has no triton."""

from __future__ import annotations

import importlib.util
import inspect
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

from tuner.core import triton_minor
from tuner.files.provenance import (
    Provenance,
    current_kernel_hash,
    current_provenance,
    family_hashes,
    family_kernel_hash,
    installed_triton_minor,
    kernel_source,
    split_hashes,
)
from tuner.kernels.dense.family import DENSE

MODULE = '''\
import functools


def wrap(*args):
    def deco(fn):
        return fn
    return deco


# a comment before the decorators
@functools.lru_cache(maxsize=None)
@wrap(
    1,
    2,
)
def target(x,
           y=3):  # trailing comment
    """Docstring."""
    def inner():
        return 1
    # an indented comment inside the body

    return x + y + inner()
    # an indented comment after the last statement
# a column-0 comment after the function


def other():
    return 2
'''


def test_kernel_hash_from_the_text_equals_the_kernel_modules() -> None:
    from tuner.kernels.dense.kernel import kernel_source_hash

    assert current_kernel_hash() == kernel_source_hash()
    assert len(current_kernel_hash()) == 64


def test_kernel_source_cuts_as_inspect_getsource(tmp_path: Path) -> None:
    path = tmp_path / "cut_module.py"
    path.write_text(MODULE)
    spec = importlib.util.spec_from_file_location("cut_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    expected = textwrap.dedent(inspect.getsource(module.target.__wrapped__))
    assert kernel_source(MODULE, "target") == expected
    assert expected.startswith("@functools.lru_cache(maxsize=None)\n")
    assert expected.endswith("    # an indented comment after the last statement\n")
    assert kernel_source(MODULE, "other") == "def other():\n    return 2\n"
    with pytest.raises(LookupError, match="no top-level function inner"):
        kernel_source(MODULE, "inner")


def test_a_changed_kernel_changes_the_hash(tmp_path: Path) -> None:
    text = DENSE.module_path(DENSE.kernel_module).read_text()
    path = tmp_path / "kernel.py"
    path.write_text(text + "\n\ndef unrelated():\n    return 1\n")
    assert current_kernel_hash(path) == current_kernel_hash()
    path.write_text(text.replace("accumulator", "acc"))
    assert current_kernel_hash(path) != current_kernel_hash()


def test_importing_provenance_imports_neither_triton_nor_torch() -> None:
    code = (
        "import sys, tuner.files.provenance as p; p.current_kernel_hash(); "
        "p.installed_triton_minor(); "
        "print(sorted(m for m in ('triton', 'torch') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("version", "minor"),
    [
        ("3.6.0", "3.6"),
        ("3.6", "3.6"),
        ("3.6.1+git3f2a", "3.6"),
        ("3.60.0", "3.60"),
        (" 3.9.0 ", "3.9"),
        ("03.06.0", "3.6"),
        ("3.6rc1", "3.6"),
    ],
)
def test_triton_minor(version: str, minor: str) -> None:
    assert triton_minor(version) == minor


@pytest.mark.parametrize("version", ["", "3", "three.six", "v3.6.0", "3.x", "3 .6"])
def test_triton_minor_refuses_garbage(version: str) -> None:
    with pytest.raises(ValueError, match="is not a version such as 3.6.0"):
        triton_minor(version)


def test_installed_triton_minor(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    real = importlib.metadata.version("triton")
    assert installed_triton_minor() == triton_minor(real)

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


def test_current_provenance_falls_back_to_the_newest_triton_of_the_current_kernel() -> None:
    environments = [
        Env("3.5.1", "k1"),
        Env("3.10.0", "k0"),
        Env("3.6.2+git", "k1"),
        Env("", "k1"),
        Env("3.4.0", "k1"),
    ]
    assert current_provenance(
        environments, installed_triton="3.9.0", kernel_hash="k1"
    ) == Provenance(kernel_hash="k1", triton_minor="3.9")
    assert current_provenance(environments, installed_triton=None, kernel_hash="k1") == Provenance(
        kernel_hash="k1", triton_minor="3.6"
    )
    assert current_provenance(environments, installed_triton=None, kernel_hash="k2") == Provenance(
        kernel_hash="k2", triton_minor=None
    )
    assert current_provenance([], installed_triton=None) == Provenance(
        kernel_hash=current_kernel_hash(),
        triton_minor=None,
        other_hashes=(family_kernel_hash("moe"),),
    )


def test_each_familys_hash_is_its_kernel_modules_and_the_moe_one_is_current() -> None:
    from tuner.kernels.dense.kernel import kernel_source_hash as dense_hash
    from tuner.kernels.moe.kernel import kernel_source_hash as moe_hash

    assert (family_kernel_hash("dense"), family_kernel_hash("moe")) == (dense_hash(), moe_hash())
    assert family_kernel_hash("dense") == current_kernel_hash()
    current = current_provenance([Env("3.6.0", moe_hash())], installed_triton=None)
    assert current.hashes == (dense_hash(), moe_hash())
    assert current.triton_minor == "3.6"  # an MoE environment of the current kernel counts


def test_the_hashes_are_one_per_family_the_default_first() -> None:
    hashes = family_hashes()
    assert list(hashes) == ["dense", "moe"]
    assert hashes == {"dense": current_kernel_hash(), "moe": family_kernel_hash("moe")}
    assert split_hashes(hashes) == (current_kernel_hash(), (family_kernel_hash("moe"),))
    assert split_hashes({"moe": "m"}) == ("none", ("m",))  # no default family's kernel
    with pytest.raises(ValueError, match="source must be builtin or vllm"):
        family_hashes("mine")
