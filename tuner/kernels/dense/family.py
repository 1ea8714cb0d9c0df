"""The dense W8A8 block-FP8 GEMM as a kernel family (`tuner.kernels.family.KernelFamily`).

Pure: the kernel, its workload and its compile-for-target are imported when first called.
"""

from __future__ import annotations

from typing import Any

from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.naming import config_file_name, engine_file_name, parse_config_file_name
from tuner.kernels.dense.space import default_config, vllm_space, why_invalid
from tuner.kernels.dense.specialization import specialization_key
from tuner.kernels.engines import EngineFolder
from tuner.kernels.family import (
    LINEAR_LAYERS,
    FamilyFiles,
    FamilyReport,
    FamilyShapes,
    KernelFamily,
    VllmLogLine,
    VllmServing,
    Workload,
)
from tuner.kernels.shape import Shape
from tuner.kernels.shapes_rows import int_rows
from tuner.kernels.source import VllmKernel


def _why_invalid(config: KernelConfig, shape: Shape) -> str | None:
    return why_invalid(config, shape.block_pair("dense"))


def _default_config(shape: Shape, M: int) -> KernelConfig:
    """vLLM runs one default for every M of the dense GEMM (`space.default_config`)."""
    return default_config(shape.block_pair("dense"))


def _file_name(shape: Shape, device_name: str, engine: str = "vllm") -> str:
    return engine_file_name(
        config_file_name(shape.N, shape.K, device_name, shape.block_pair("dense")), engine
    )


def _parse_file_name(name: str) -> tuple[Shape, str, str]:
    parsed = parse_config_file_name(name)
    return Shape(parsed.N, parsed.K, parsed.block_shape), parsed.device_name, parsed.dtype


def _respell(name: str, engine: str, device_name: str | None) -> str:
    """The dense name keeps its own device and dtype (`engine_file_name`)."""
    return engine_file_name(name, engine)


def _workload(shape: Shape, M: int, *, seed: int, device: str) -> Workload:
    from tuner.kernels.dense.workload import DenseWorkload

    return DenseWorkload.make(shape, M, seed=seed, device=device)


def _vllm_workload(shape: Shape, M: int, *, seed: int, device: str) -> Workload:
    from tuner.kernels.dense.vllm_workload import VllmDenseWorkload

    return VllmDenseWorkload.from_vllm(
        shape, M, seed=seed, device=device, module=VLLM_DENSE.module, function=VLLM_DENSE.function
    )


# vLLM 0.33.0 keeps the kernel in fp8_utils.py and launches it from w8a8_triton_block_scaled_mm
# (`tuner.kernels.dense.vllm_workload` follows that launch).
VLLM_DENSE = VllmKernel(
    module="vllm.model_executor.layers.quantization.utils.fp8_utils",
    function="_w8a8_triton_block_scaled_mm",
    launcher="w8a8_triton_block_scaled_mm",
    workload=_vllm_workload,
)


def _compile_for_target(
    config: KernelConfig, arch: int, *, shape: Shape, M: int, out_dtype: Any
) -> Any:
    from tuner.kernels.dense.target import compile_for_target

    return compile_for_target(
        config.as_dict(),
        arch,
        M=M,
        N=shape.N,
        K=shape.K,
        block_shape=shape.block_pair("dense"),
        out_dtype=out_dtype,
    )


def _specialization(shape: Shape, M: int) -> str:
    return specialization_key(M, shape.N, shape.K, shape.block_pair("dense"))


def _parse_shapes(rows: object, where: str, block_shape: tuple[int, int]) -> tuple[Shape, ...]:
    """A shapes file's `shapes = [[N, K], ...]`: one GEMM weight [N, K] each."""
    pairs = int_rows(
        rows,
        where,
        names=("N", "K"),
        row_label="shape",
        not_a_list="shapes must be a non-empty list of [N, K]",
    )
    return tuple(Shape(N, K, block_shape) for N, K in pairs)


# vLLM 0.33.0: get_w8a8_block_configs (model_executor/layers/quantization/utils/fp8_utils.py)
# reads the `configs` folder beside that module. Only 0.33.0's sources were read: the release
# that first used this folder is not known, so the row starts at "0" (older releases are assumed
# to read there, unchecked).
# SGLang: get_w8a8_block_fp8_configs reads the `configs` folder beside its fp8_kernel.py, found
# in the released wheels at sglang/srt/layers/quantization/ (0.5.5 to 0.5.15.post1),
# sglang/kernels/ops/quantization/ (0.5.16 to 0.5.20) and sglang/kernels/ops/gemm/ (0.5.21 to
# 0.5.23). Releases before 0.5.5 were not checked ("0" assumes the oldest folder).
DENSE_ENGINE_FOLDERS = (
    EngineFolder("vllm", "0", "vllm/model_executor/layers/quantization/utils/configs"),
    EngineFolder("sglang", "0", "sglang/srt/layers/quantization/configs"),
    EngineFolder("sglang", "0.5.16", "sglang/kernels/ops/quantization/configs"),
    EngineFolder("sglang", "0.5.21", "sglang/kernels/ops/gemm/configs"),
)

DENSE = KernelFamily(
    name="dense",
    title="W8A8 block-FP8 GEMM",
    kernel_module="tuner.kernels.dense.kernel",
    kernel_function="w8a8_block_fp8_matmul_kernel",
    compile_modules=("tuner.kernels.dense.kernel", "tuner.kernels.dense.target"),
    space=vllm_space,
    why_invalid=_why_invalid,
    default_config=_default_config,
    files=FamilyFiles(
        file_name=_file_name,
        parse_file_name=_parse_file_name,
        file_name_start="N=",
        respell_file_name=_respell,
        engine_folders=DENSE_ENGINE_FOLDERS,
        # get_w8a8_block_fp8_configs raises BLOCK_SIZE_K to block_k (SGLang 0.5.12 on).
        sglang_clamps_block_k=True,
    ),
    workload=_workload,
    compile_for_target=_compile_for_target,
    specialization=_specialization,
    vllm=VLLM_DENSE,
    shapes=FamilyShapes(
        shapes_key="shapes",
        shapes_row="[N, K]",
        parse_shapes=_parse_shapes,
        shape_row=lambda shape: (shape.N, shape.K),
        model_part=LINEAR_LAYERS,
        # Dense sweeps were keyed before the store knew families: their keys hash no family.
        sweep_key_has_family=False,
    ),
    report=FamilyReport(
        label=lambda shape: f"N={shape.N}, K={shape.K}",
        anchor=lambda shape: f"{shape.N}x{shape.K}",
        roofline_gemm=lambda shape, M: (M, shape.N, shape.K),
    ),
    serving=VllmServing(
        label="dense",
        select="tuner.kernels.dense.serving:select",
        advice="tuner.kernels.dense.serving:advise",
        compare="tuner.kernels.dense.serving:compare",
        # vLLM 0.33.0 reads dense files only from its package's quantization/utils/configs/
        # (fp8_utils.py, get_w8a8_block_fp8_configs).
        files_folder="vllm/model_executor/layers/quantization/utils/configs/",
    ),
    # vLLM's and SGLang's get_w8a8_block_fp8_configs (fp8_utils.py, fp8_kernel.py); SGLang
    # puts a space inside block_shape. The device part may hold any character vLLM keeps
    # (',' and '=' too), so it ends at the last ",dtype=".
    log_line=VllmLogLine(
        marker="Using default W8A8 Block FP8 kernel config",
        file_re=(
            r"(?:^|[/\\'\"\s\[])(?P<name>N=\d+,K=\d+,device_name=[^/\\\s]+,"
            r"dtype=[a-z0-9_]+,block_shape=\[\d+, ?\d+\]\.json)"
        ),
        counted=True,
    ),
)
