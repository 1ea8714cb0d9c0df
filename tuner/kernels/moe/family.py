"""The fused-MoE W8A8 block-FP8 experts as a kernel family (`tuner.kernels.family.KernelFamily`).

A shape is (N = per-rank intermediate size, K = hidden size, block_shape) with params E and top_k.
Pure: the kernel, its workload and its compile-for-target are imported when first called.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tuner.kernels.config import KernelConfig
from tuner.kernels.engines import EngineFolder
from tuner.kernels.family import (
    EXPERTS,
    FamilyFiles,
    FamilyReport,
    FamilyShapes,
    KernelFamily,
    VllmLogLine,
    VllmServing,
    Workload,
)
from tuner.kernels.moe.naming import (
    any_engine_file_name,
    moe_config_file_name,
    moe_device_name,
    parse_moe_config_file_name,
    sglang_moe_config_file_name,
)
from tuner.kernels.moe.space import default_config, vllm_space, why_invalid
from tuner.kernels.moe.specialization import moe_specialization_key
from tuner.kernels.shape import Shape
from tuner.kernels.shapes_rows import int_rows
from tuner.kernels.source import VllmKernel


def _why_invalid(config: KernelConfig, shape: Shape) -> str | None:
    return why_invalid(config, shape.block_pair("moe"))


def _default_config(shape: Shape, M: int) -> KernelConfig:
    return default_config(M, shape.block_pair("moe"))


def _file_name(shape: Shape, device_name: str, engine: str = "vllm") -> str:
    """The name the engine reads: vLLM's (`moe_config_file_name`) or SGLang's
    (`sglang_moe_config_file_name`)."""
    name = sglang_moe_config_file_name if engine == "sglang" else moe_config_file_name
    return name(shape.param("E"), shape.N, device_name, shape.block_pair("moe"))


def _parse_file_name(name: str) -> tuple[Shape, str, str]:
    """The name holds E and N only: K (the hidden size) and top_k are not in it, so the shape
    comes back with K = 0 and params (("E", E),)."""
    E, N, device, dtype, block_shape = parse_moe_config_file_name(name)
    return Shape(N, 0, block_shape, (("E", E),)), device, dtype


def _workload(shape: Shape, M: int, *, seed: int, device: str) -> Workload:
    from tuner.kernels.moe.workload import MoeWorkload

    return MoeWorkload.make(shape, M, seed=seed, device=device)


def _vllm_workload(shape: Shape, M: int, *, seed: int, device: str) -> Workload:
    from tuner.kernels.moe.vllm_workload import VllmMoeWorkload

    return VllmMoeWorkload.from_vllm(shape, M, seed=seed, device=device, module=VLLM_MOE.module)


# vLLM 0.33.0's fused_experts_impl runs each expert GEMM through dispatch_fused_moe_kernel,
# which launches fused_moe_kernel (`tuner.kernels.moe.vllm_workload` follows that call).
VLLM_MOE = VllmKernel(
    module="vllm.model_executor.layers.fused_moe.fused_moe",
    function="fused_moe_kernel",
    launcher="dispatch_fused_moe_kernel",
    workload=_vllm_workload,
)


def _compile_for_target(
    config: KernelConfig, arch: int, *, shape: Shape, M: int, out_dtype: Any
) -> Any:
    from tuner.kernels.moe.target import compile_for_target

    return compile_for_target(
        config.as_dict(),
        arch,
        M=M,
        N=shape.N,
        K=shape.K,
        E=shape.param("E"),
        top_k=shape.param("top_k"),
        block_shape=shape.block_pair("moe"),
        out_dtype=out_dtype,
    )


def _specialization(shape: Shape, M: int) -> str:
    return moe_specialization_key(
        M, shape.N, shape.K, shape.param("E"), shape.param("top_k"), shape.block_pair("moe")
    )


def expert_shape(
    E: int, N: int, K: int, top_k: int, block_shape: tuple[int, int] = (128, 128)
) -> Shape:
    """The shape of fused-MoE experts: E experts of weight [N, K] (N = moe_intermediate_size /
    TP, vLLM's w2_shape[2]; K = hidden size), top_k experts per token."""
    return Shape(N, K, block_shape, (("E", E), ("top_k", top_k)))


def _parse_shapes(rows: object, where: str, block_shape: tuple[int, int]) -> tuple[Shape, ...]:
    """A shapes file's `moe = [[E, N, K, top_k], ...]`."""
    shapes = []
    for E, N, K, top_k in int_rows(
        rows,
        where,
        names=("E", "N", "K", "top_k"),
        not_a_list="moe must be a list of [E, N, K, top_k]",
        row_label="moe shape",
        value_label="moe",
    ):
        if top_k > E:
            raise ValueError(f"{where}: moe top_k = {top_k} is more than E = {E}")
        shapes.append(expert_shape(E, N, K, top_k, block_shape))
    return tuple(shapes)


def _shape_row(shape: Shape) -> tuple[int, int, int, int]:
    return (shape.param("E"), shape.N, shape.K, shape.param("top_k"))


def _describe(shapes: Sequence[Shape]) -> str:
    return "; ".join("MoE E={} N={} K={} top_k={}".format(*_shape_row(shape)) for shape in shapes)


def _label(shape: Shape) -> str:
    if "top_k" not in dict(shape.params):  # an imported file's shape: its name has E and N
        return f"MoE E={shape.param('E')}, N={shape.N} (imported file)"
    return "MoE E={}, N={}, K={} (top_k={})".format(*_shape_row(shape))


# vLLM 0.33.0: get_moe_configs (model_executor/layers/fused_moe/fused_moe.py) reads
# VLLM_TUNED_CONFIG_FOLDER first, then the `configs` folder beside it. Only 0.33.0's sources were
# read: the release that first used this folder is not known, so the row starts at "0" (older
# releases are assumed to read there, unchecked).
# SGLang: get_moe_configs (fused_moe_triton_config.py) reads `configs/triton_<triton version, '.'
# as '_'>/` beside that module (or under $SGLANG_MOE_CONFIG_DIR, which then replaces the
# package's folder whole): sglang/srt/layers/moe/fused_moe_triton/ in the wheels 0.5.5 to
# 0.5.10.post1, sglang/srt/layers/moe/moe_runner/triton_utils/ in 0.5.11 to 0.5.23.
MOE_ENGINE_FOLDERS = (
    EngineFolder(
        "vllm", "0", "vllm/model_executor/layers/fused_moe/configs", env="VLLM_TUNED_CONFIG_FOLDER"
    ),
    EngineFolder("sglang", "0", "sglang/srt/layers/moe/fused_moe_triton/configs/{triton}"),
    EngineFolder(
        "sglang", "0.5.11", "sglang/srt/layers/moe/moe_runner/triton_utils/configs/{triton}"
    ),
)

MOE = KernelFamily(
    name="moe",
    title="fused-MoE W8A8 block-FP8 experts",
    kernel_module="tuner.kernels.moe.kernel",
    kernel_function="fused_moe_fp8_block_kernel",
    compile_modules=("tuner.kernels.moe.kernel", "tuner.kernels.moe.target"),
    space=vllm_space,
    why_invalid=_why_invalid,
    default_config=_default_config,
    files=FamilyFiles(
        file_name=_file_name,
        parse_file_name=_parse_file_name,
        # benchmark_moe.py writes it (vLLM PR #24769); get_moe_configs pops it (fused_moe.py).
        file_triton_version=True,
        file_name_start="E=",
        file_device=moe_device_name,
        # get_moe_configs reads VLLM_TUNED_CONFIG_FOLDER before fused_moe/configs/ (fused_moe.py).
        respell_file_name=any_engine_file_name,
        engine_folders=MOE_ENGINE_FOLDERS,
        file_key=lambda shape: (shape.param("E"), shape.N),
    ),
    workload=_workload,
    compile_for_target=_compile_for_target,
    specialization=_specialization,
    vllm=VLLM_MOE,
    report=FamilyReport(
        short_title="MoE",
        brief_shape=lambda shape: f"E={shape.param('E')} N={shape.N}",
        label=_label,
    ),
    shapes=FamilyShapes(
        shapes_key="moe",
        shapes_row="[E, N, K, top_k]",
        parse_shapes=_parse_shapes,
        shape_row=_shape_row,
        model_part=EXPERTS,
        sweep_per_shape=True,
        describe_shapes=_describe,
    ),
    serving=VllmServing(
        label="fused-MoE",
        select="tuner.kernels.moe.serving:select",
        advice="tuner.kernels.moe.serving:advise",
        compare="tuner.kernels.moe.serving:compare",
        # vLLM 0.33.0 fused_moe/oracle/fp8.py `_get_priority_backends`: on sm90 with 128x128
        # FP8 weights and dynamic 1x128 activations TRITON is moved first when ep_size == 1.
        triton_archs=("sm90",),
    ),
    # vLLM's get_moe_configs (fused_moe/fused_moe.py): any fused-MoE file name, E=..,N=..,
    # device_name=..[,dtype=..][,block_shape=..]; the tuner tunes the block-FP8 ones only.
    log_line=VllmLogLine(
        marker="Using default MoE config",
        file_re=(
            r"(?:^|[/\\'\"\s\[])"
            r"(?P<name>E=\d+,N=\d+,device_name=[^/\\\s]+?(?: \d+\])?\.json)"
        ),
        engine="vllm",
        out_of_scope=True,
        what="fused-MoE expert shape(s)",
        key_names=("E", "N"),
        out_of_scope_why=(
            "a fused-MoE file that is not block FP8 'dtype=fp8_w8a8,block_shape=[...]'; "
            "this tool does not tune it"
        ),
    ),
)
