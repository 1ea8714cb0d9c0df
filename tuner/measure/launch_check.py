"""Whether imported entries can launch on their device, with no GPU: the device's architecture
(from its trials, else from a table of known GPUs) and each distinct config compiled for it.

An entry tuned on one architecture can need more shared memory than another has: vLLM's sm90
entry 128x256x128 with 4 stages needs about 148 KB, and an sm89 GPU such as the L20 allows
101,376 bytes per block, so vLLM fails with Triton's OutOfResources when it first runs that M.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from tuner.kernels.config import KernelConfig
from tuner.kernels.gpus import KNOWN_GPUS, MAX_SHARED_BYTES, gpu_model
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.kernels.shape import Shape, as_block_shape
from tuner.kernels.vllm_table import capability_number
from tuner.measure.compile import (
    CompileCache,
    CompileInfo,
    compile_infos,
    launch_problem,
)

# Output dtype compiled for: vLLM's block-FP8 models run in bfloat16 (float16 takes the same
# bytes per element, so the same shared memory).
CHECK_OUT_DTYPE = "bfloat16"
_AMD_KEYS = frozenset({"kpack", "matrix_instr_nonkdim", "waves_per_eu"})


@dataclass(frozen=True)
class DeviceArch:
    """A device's architecture and where it was learned (for the user's line)."""

    arch: int
    source: str

    @property
    def shared_bytes(self) -> int | None:
        """Most shared memory per block on this architecture; None when not known."""
        return MAX_SHARED_BYTES.get(self.arch)


def device_arch(device_name: str, capabilities: Sequence[str]) -> DeviceArch | None:
    """The architecture to check a device's (vLLM key) imported entries for: from the first of
    its trials' compute `capabilities` ("8.9"; "" for the interpreter) that names one, else from
    KNOWN_GPUS; None when neither knows the device."""
    for capability in capabilities:
        arch = capability_number(capability)
        if arch is not None:
            return DeviceArch(
                arch, f"from its trials in the store, compute capability {capability.strip()}"
            )
    model = gpu_model(device_name)
    if model in KNOWN_GPUS:
        return DeviceArch(KNOWN_GPUS[model], f"from the table of known GPUs, {model}")
    return None


@dataclass(frozen=True)
class LaunchVerdict:
    """What compiling a file's entries for an architecture found.

    Attributes:
        arch: the compute capability compiled for.
        cannot_launch: M -> why its entry cannot launch (config, what it needs, the limit).
        unchecked: M -> why its entry was not checked (an AMD entry, a compiler error).
        configs: distinct configs checked (one compile each, or the cache's answer).
    """

    arch: int
    cannot_launch: dict[int, str]
    unchecked: dict[int, str]
    configs: int


def check_entries(
    configs: Mapping[int, Mapping[str, int]],
    *,
    arch: int,
    device_name: str,
    N: int,
    K: int,
    block_shape: tuple[int, int] | None,
    cache: CompileCache | None = None,
    pool: ProcessPoolExecutor | None = None,
    family: str = DEFAULT_FAMILY,
    params: tuple[tuple[str, int], ...] = (),
) -> LaunchVerdict:
    """Compile each distinct config of a file for `arch` and say which entries cannot launch.

    One compile per distinct config (cached on disk), at the launch specialization of the first
    M that uses it: shared memory depends on the tiles and stages, not on M.

    Args:
        configs: M -> entry as imported (entries with AMD keys are not checked).
        arch: compute capability as an int; must be in MAX_SHARED_BYTES.
        device_name: named in the reasons.
        N, K, block_shape, params: the file's shape (`tuner.kernels.shape.Shape`).
        cache: the compile cache; pool: a `compile_pool` (one is made when None).
        family: the kernel family of the file, whose kernel is compiled.

    Raises:
        ValueError: an architecture without known limits, an unknown family, or a shape
            without a dimension the family's kernel is compiled for (a fused-MoE file's name
            gives E and N, not top_k).
    """
    limit = MAX_SHARED_BYTES.get(arch)
    if limit is None:
        raise ValueError(f"no resource limits known for sm{arch}")
    unchecked = {M: _AMD_LINE for M in sorted(configs) if configs[M].keys() & _AMD_KEYS}
    by_m = {M: KernelConfig.from_dict(configs[M]) for M in sorted(configs) if M not in unchecked}
    shape = Shape(N, K, as_block_shape(block_shape), params)
    infos = _compile_first_uses(by_m, shape, arch, cache, pool, family)
    where, cannot_launch = f"{device_name} (sm{arch})", {}
    for M, config in by_m.items():
        info, short, problem = infos[config], config.short(), launch_problem(infos[config])
        if problem is not None and info.error is not None:
            unchecked[M] = f"config {short} did not compile here: {info.error}"
        elif problem is not None and (info.shared_bytes or 0) > limit:
            needs = f"needs {info.shared_bytes} bytes of shared memory"
            cannot_launch[M] = f"config {short} {needs}; {where} has {limit} per block"
        elif problem is not None:
            reason = str(problem.error).removeprefix("pruned before launch: ")
            cannot_launch[M] = f"config {short}: {reason} on {where}"
    return LaunchVerdict(arch, cannot_launch, dict(sorted(unchecked.items())), len(infos))


_AMD_LINE = "an AMD entry (kpack, waves_per_eu ...): not compiled for NVIDIA"


def _compile_first_uses(
    by_m: Mapping[int, KernelConfig],
    shape: Shape,
    arch: int,
    cache: CompileCache | None,
    pool: ProcessPoolExecutor | None,
    family: str,
) -> dict[KernelConfig, CompileInfo]:
    """Each distinct config compiled for `arch` at the launch specialization of the first M
    that uses it (shared memory depends on the tiles and stages, not on M): one batch per
    specialization, compiled at its first M.

    Raises:
        ValueError: the shape lacks a dimension the family's launch needs (MoE: top_k).
    """
    specialization = get_family(family).specialization
    groups: dict[str, tuple[int, dict[KernelConfig, None]]] = {}
    firsts: dict[KernelConfig, int] = {}
    for M, config in by_m.items():
        firsts.setdefault(config, M)
    try:
        for config, M in firsts.items():
            groups.setdefault(specialization(shape, M), (M, {}))[1][config] = None
    except KeyError as exc:  # a dimension the file's name does not carry (MoE: top_k)
        raise ValueError(
            f"the file's name does not give {exc.args[0]}, which the {family} kernel "
            "is compiled for"
        ) from None
    infos: dict[KernelConfig, CompileInfo] = {}
    for M, group in groups.values():
        infos |= compile_infos(
            list(group),
            arch=arch,
            shape=shape,
            M=M,
            out_dtype=CHECK_OUT_DTYPE,
            family=family,
            cache=cache,
            pool=pool,
        )
    return infos
