"""The fused-MoE W8A8 block-FP8 experts (vLLM's `fused_moe_kernel`, fp8_w8a8 block path) as a
kernel family: vLLM's tuning grid, the kernel's constraints, vLLM's per-M default, the file names
vLLM and SGLang read, and what `tuner doctor` says of it. A shape is (N = per-rank intermediate
size, K = hidden size, block_shape) with params E and top_k.

Pure: the kernel, its workload and vLLM are imported when a hook is called.
"""

from __future__ import annotations

from collections.abc import Sequence

from tuner.core import is_device_name
from tuner.kernels.dense.space import DEFAULT_BLOCK_SHAPE
from tuner.kernels.engines import EngineFolder
from tuner.kernels.family import (
    EXPERTS,
    FamilyFiles,
    FamilyReport,
    FamilyShapes,
    KernelFamily,
    VllmLogLine,
    block_fp8_name,
    lazy,
    parse_block_fp8_name,
)
from tuner.kernels.moe.space import (
    default_config,
    vllm_space,
    why_invalid,
)
from tuner.kernels.serving import TABLE, Asked, Diagnosis
from tuner.kernels.shape import Shape, int_rows
from tuner.kernels.source import VllmKernel


def moe_device_name(device_name: str) -> str:
    """The device part vLLM 0.33.0 puts in MoE file names: `get_config_file_name` in
    fused_moe.py names every device whose `_`-split name contains `H200` `NVIDIA_H200`."""
    return "NVIDIA_H200" if "H200" in device_name.split("_") else device_name


def moe_config_file_name(
    E: int,
    N: int,
    device_name: str,
    block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE,
    engine: str = "vllm",
) -> str:
    """The name an engine reads the experts' configs from (N: the per-rank intermediate size).

    vLLM 0.33.0's `get_moe_configs`: `E={E},N={N},device_name={dev},dtype=fp8_w8a8,
    block_shape=[{bn},{bk}].json` with `moe_device_name`'s H200 rule. SGLang 0.5.23's
    `get_config_file_name` (fused_moe_triton_config.py): `block_shape=[{bn}, {bk}]` and the
    device key as given.

    Raises:
        ValueError: a non-positive size, a device name we do not store, an unknown engine.
    """
    if engine == "vllm" and is_device_name(device_name):
        device_name = moe_device_name(device_name)
    return block_fp8_name({"E": E, "N": N}, device_name, block_shape, engine)


def _parse_file_name(name: str) -> tuple[Shape, str, str]:
    """(shape, device_name, dtype) of an MoE block-FP8 file name (SGLang's `[128, 128]`
    spelling too). The name holds E and N only: the shape comes back with K = 0 and params
    (("E", E),).

    Raises:
        ValueError: not such a name; a per-tensor `dtype=fp8_w8a8.json` file (no block_shape)
            is out of scope and refused too.
    """
    example = moe_config_file_name(128, 384, "NVIDIA_H200")
    (E, N), device_name, dtype, block_shape = parse_block_fp8_name(name, ("E", "N"), example)
    return Shape(N, 0, block_shape, (("E", E),)), device_name, dtype


def _respell(name: str, engine: str, device_name: str | None = None) -> str:
    """An MoE file name as `engine` spells it; SGLang's carries `device_name` (vLLM's folds
    every H200 into NVIDIA_H200), vLLM's the device the name has."""
    shape, named_device, _ = _parse_file_name(name)
    device = named_device if engine == "vllm" else device_name or named_device
    return moe_config_file_name(shape.param("E"), shape.N, device, shape.block_pair("moe"), engine)


def advise(out: Diagnosis, asked: Asked) -> None:
    """Doctor's lines: the fused-MoE backend vLLM runs by default and whether it reads the
    files."""
    say = out.lines.append
    runs = "the first of its MoE backends that supports the GPU (not verified here for this arch)"
    if asked.table_arch in MOE_TRITON_ARCHS:
        runs = "Triton (fused_moe_kernel) by default with 128x128 weights and ep_size 1"
    say(f"fused-MoE block-FP8: vLLM runs {runs} ({TABLE})")
    if asked.table_arch in MOE_TRITON_ARCHS:
        say(f"  files read: yes, from ${MOE_ENV} or vLLM's fused_moe/configs/")
        out.helps.append(MOE.name)
    else:
        say(f"  files read: only where vLLM picks TRITON; ${MOE_ENV} names their folder")


def expert_shape(
    E: int, N: int, K: int, top_k: int, block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE
) -> Shape:
    """The shape of fused-MoE experts: E experts of weight [N, K] (N = moe_intermediate_size /
    TP, vLLM's w2_shape[2]; K = hidden size), top_k experts per token."""
    return Shape(N, K, block_shape, (("E", E), ("top_k", top_k)))


def _parse_shapes(rows: object, where: str, block_shape: tuple[int, int]) -> tuple[Shape, ...]:
    """A shapes file's `moe = [[E, N, K, top_k], ...]`."""
    shapes = []
    names = ("E", "N", "K", "top_k")
    not_a_list = "moe must be a list of [E, N, K, top_k]"
    for E, N, K, top_k in int_rows(
        rows, where, names=names, not_a_list=not_a_list, row_label="moe shape", value_label="moe"
    ):
        if top_k > E:
            raise ValueError(f"{where}: moe top_k = {top_k} is more than E = {E}")
        shapes.append(expert_shape(E, N, K, top_k, block_shape))
    return tuple(shapes)


def _shape_row(shape: Shape) -> tuple[int, int, int, int]:
    return (shape.param("E"), shape.N, shape.K, shape.param("top_k"))


def _label(shape: Shape) -> str:
    if "top_k" not in dict(shape.params):  # an imported file's shape: its name has E and N
        return f"MoE E={shape.param('E')}, N={shape.N} (imported file)"
    return "MoE E={}, N={}, K={} (top_k={})".format(*_shape_row(shape))


def _describe(shapes: Sequence[Shape]) -> str:
    return "; ".join("MoE E={} N={} K={} top_k={}".format(*_shape_row(shape)) for shape in shapes)


# vLLM 0.33.0's get_moe_configs (fused_moe/fused_moe.py) reads this variable's folder before its
# package's fused_moe/configs/.
MOE_ENV = "VLLM_TUNED_CONFIG_FOLDER"
# vLLM 0.33.0 fused_moe/oracle/fp8.py `_get_priority_backends`: on sm90 with 128x128 FP8 weights
# and dynamic 1x128 activations TRITON is moved first when ep_size == 1.
MOE_TRITON_ARCHS = ("sm90",)

# vLLM 0.33.0's fused_experts_impl runs each expert GEMM through dispatch_fused_moe_kernel,
# which launches fused_moe_kernel (`tuner.kernels.moe.workload.vllm_moe_gemm` follows that call).
VLLM_MOE = VllmKernel(
    module="vllm.model_executor.layers.fused_moe.fused_moe",
    function="fused_moe_kernel",
    workload=lazy("tuner.kernels.moe.workload:vllm_workload"),
)

MOE = KernelFamily(
    name="moe",
    title="fused-MoE W8A8 block-FP8 experts",
    kernel_module="tuner.kernels.moe.kernel",
    kernel_function="fused_moe_fp8_block_kernel",
    space=vllm_space,
    why_invalid=lambda config, shape: why_invalid(config, shape.block_pair("moe")),
    default_config=lambda shape, M: default_config(M, shape.block_pair("moe")),
    files=FamilyFiles(
        file_name=lambda shape, device_name, engine: moe_config_file_name(
            shape.param("E"), shape.N, device_name, shape.block_pair("moe"), engine
        ),
        parse_file_name=_parse_file_name,
        # benchmark_moe.py writes it (vLLM PR #24769); get_moe_configs pops it (fused_moe.py).
        file_triton_version=True,
        file_device=moe_device_name,
        respell_file_name=_respell,
        # vLLM 0.33.0: get_moe_configs reads $VLLM_TUNED_CONFIG_FOLDER first, then the `configs`
        # folder beside it (earlier releases assumed, unchecked: "0"). SGLang: get_moe_configs
        # (fused_moe_triton_config.py) reads `configs/triton_<triton version, '.' as '_'>/`
        # beside that module (or under $SGLANG_MOE_CONFIG_DIR, which replaces it whole):
        # sglang/srt/layers/moe/fused_moe_triton/ in 0.5.5 to 0.5.10.post1,
        # sglang/srt/layers/moe/moe_runner/triton_utils/ in 0.5.11 to 0.5.23.
        engine_folders=(
            EngineFolder("vllm", "0", "vllm/model_executor/layers/fused_moe/configs", env=MOE_ENV),
            EngineFolder("sglang", "0", "sglang/srt/layers/moe/fused_moe_triton/configs/{triton}"),
            EngineFolder(
                "sglang", "0.5.11", "sglang/srt/layers/moe/moe_runner/triton_utils/configs/{triton}"
            ),
        ),
        file_key=lambda shape: (shape.param("E"), shape.N),
    ),
    workload=lazy("tuner.kernels.moe.workload:MoeWorkload.make"),
    compile_for_target=lazy("tuner.kernels.moe.workload:compile_for_target"),
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
    advice=advise,
    # vLLM's get_moe_configs (fused_moe/fused_moe.py): any fused-MoE file name, E=..,N=..,
    # device_name=..[,dtype=..][,block_shape=..]; the tuner tunes the block-FP8 ones only.
    log_line=VllmLogLine(
        marker="Using default MoE config",
        file_re=(
            r"(?:^|[/\\'\"\s\[])"
            r"(?P<name>E=\d+,N=\d+,device_name=[^/\\\s]+?(?: \d+\])?\.json)"
        ),
        what="fused-MoE expert shape(s)",
        key_names=("E", "N"),
    ),
)
