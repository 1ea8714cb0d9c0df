"""The dense W8A8 block-FP8 GEMM (vLLM's `w8a8_triton_block_scaled_mm`) as a kernel family: its
config space (`tuner.kernels.dense.space`), the file names vLLM and SGLang read, how a model's
shapes file lists its shapes, and what `tuner doctor` says of it.

Pure: the kernel, its workload and vLLM are imported when a hook is called.
"""

from __future__ import annotations

from typing import Any

from tuner.core import FP8_DTYPE
from tuner.kernels.dense.space import (
    DEFAULT_BLOCK_SHAPE,
    default_config,
    vllm_space,
    why_invalid,
)
from tuner.kernels.engines import EngineFolder
from tuner.kernels.family import (
    LINEAR_LAYERS,
    FamilyFiles,
    FamilyReport,
    FamilyShapes,
    KernelFamily,
    VllmLogLine,
    block_fp8_name,
    lazy,
    parse_block_fp8_name,
)
from tuner.kernels.serving import TABLE, Asked, Diagnosis
from tuner.kernels.shape import Shape, int_rows
from tuner.kernels.source import VllmKernel
from tuner.kernels.vllm_table import (
    FP8_BLOCK_KERNELS,
    TRITON_FLAG,
    table_dense_kernel,
)

# The dtype labels vLLM puts in block-scaled W8A8 file names (get_w8a8_block_configs, fp8_utils).
DTYPES: tuple[str, ...] = (FP8_DTYPE, "int8_w8a8")


def config_file_name(
    N: int,
    K: int,
    device_name: str,
    block_shape: tuple[int, int] = DEFAULT_BLOCK_SHAPE,
    dtype: str = FP8_DTYPE,
    engine: str = "vllm",
) -> str:
    """The name vLLM 0.33.0 looks up for weight B [N, K] on a device (`get_w8a8_block_configs`,
    fp8_utils.py): `N={N},K={K},device_name={device_name},dtype={dtype},block_shape=[{bn},{bk}]`
    and `.json`; SGLang's (`engine` "sglang") has `block_shape=[{bn}, {bk}]`.

    Raises:
        ValueError: a part that would make a name vLLM never reads or we cannot parse back, or
            an unknown engine.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return block_fp8_name({"N": N, "K": K}, device_name, block_shape, engine, dtype)


def engine_file_name(name: str, engine: str) -> str:
    """A dense config file name respelled for an engine: `block_shape=[a,b]` (vLLM) or
    `block_shape=[a, b]` (SGLang); its device and dtype are kept.

    Raises:
        ValueError: an unknown engine, or a name `_parse_file_name` rejects.
    """
    shape, device_name, dtype = _parse_file_name(name)
    block_shape = shape.block_pair("dense")
    return config_file_name(shape.N, shape.K, device_name, block_shape, dtype, engine)


def _parse_file_name(name: str) -> tuple[Shape, str, str]:
    """(shape, device_name, dtype) of a dense config file name (SGLang's `block_shape=[128, 128]`
    too).

    Raises:
        ValueError: the name is not a block-scaled W8A8 GEMM config file name.
    """
    example = config_file_name(1024, 512, "NVIDIA_L20")
    (N, K), device, dtype, block_shape = parse_block_fp8_name(name, ("N", "K"), example, DTYPES)
    return Shape(N, K, block_shape), device, dtype


# vLLM 0.33.0 reads dense files only from its package's quantization/utils/configs/
# (fp8_utils.py, get_w8a8_block_fp8_configs).
FILES_FOLDER = "vllm/model_executor/layers/quantization/utils/configs/"


def _say_table_shapes(out: Diagnosis, capability: int, model: Any) -> None:
    """The table's dense kernel per shape of the model (`table_dense_kernel`), one line."""
    by_kernel: dict[str, list[str]] = {}
    for N, K in model.shapes:
        name = table_dense_kernel(capability, N, K, "bfloat16", model.model_type)
        label = dict(FP8_BLOCK_KERNELS)[name].split(" (")[0] if name else "not known here"
        by_kernel.setdefault(label, []).append(f"N={N},K={K}")
    n = len(model.shapes)
    if by_kernel:
        parts = [
            f"{label} for {len(shapes)} of {n} shapes"
            + (f" ({', '.join(shapes)})" if len(shapes) < n else "")
            for label, shapes in by_kernel.items()
        ]
        out.lines.append(f"  {model.model} TP {model.tp}: " + "; ".join(parts) + f" ({TABLE})")


def advise(out: Diagnosis, asked: Asked) -> None:
    """Doctor's lines: the dense kernel vLLM runs by default and whether it reads the files."""
    say = out.lines.append
    say(f"dense block-FP8 linear: by default vLLM runs {asked.table.default} ({TABLE})")
    if asked.linear_backend_triton:
        say(f"  files read: yes, with {TRITON_FLAG} (from {FILES_FOLDER} in the image)")
        out.helps.append(DENSE.name)
    else:
        say(
            f"  files read: no; {TRITON_FLAG} makes vLLM run the Triton kernel that reads "
            f"them (mount them at {FILES_FOLDER}); measure first: tuner compare"
        )
    if asked.model is not None:
        _say_table_shapes(out, asked.capability, asked.model)


def _parse_shapes(rows: object, where: str, block_shape: tuple[int, int]) -> tuple[Shape, ...]:
    """A shapes file's `shapes = [[N, K], ...]`: one GEMM weight [N, K] each."""
    not_a_list = "shapes must be a non-empty list of [N, K]"
    pairs = int_rows(rows, where, names=("N", "K"), row_label="shape", not_a_list=not_a_list)
    return tuple(Shape(N, K, block_shape) for N, K in pairs)


# vLLM 0.33.0 keeps the kernel in fp8_utils.py and launches it from w8a8_triton_block_scaled_mm
# (`tuner.kernels.dense.workload.vllm_workload` follows that launch).
VLLM_DENSE = VllmKernel(
    module="vllm.model_executor.layers.quantization.utils.fp8_utils",
    function="_w8a8_triton_block_scaled_mm",
    workload=lazy("tuner.kernels.dense.workload:vllm_workload"),
)

DENSE = KernelFamily(
    name="dense",
    title="W8A8 block-FP8 GEMM",
    kernel_module="tuner.kernels.dense.kernel",
    kernel_function="w8a8_block_fp8_matmul_kernel",
    space=vllm_space,
    why_invalid=lambda config, shape: why_invalid(config, shape.block_pair("dense")),
    default_config=lambda shape, M: default_config(shape.block_pair("dense")),
    files=FamilyFiles(
        file_name=lambda shape, device_name, engine: config_file_name(
            shape.N, shape.K, device_name, shape.block_pair("dense"), engine=engine
        ),
        parse_file_name=_parse_file_name,
        respell_file_name=lambda name, engine, device_name: engine_file_name(name, engine),
        # vLLM 0.33.0: get_w8a8_block_configs (fp8_utils.py) reads the `configs` folder beside
        # it (earlier releases assumed, unchecked: "0"). SGLang: get_w8a8_block_fp8_configs
        # reads the `configs` folder beside its fp8_kernel.py, found in the wheels at
        # sglang/srt/layers/quantization/ (0.5.5 to 0.5.15.post1; older unchecked),
        # sglang/kernels/ops/quantization/ (0.5.16 to 0.5.20), sglang/kernels/ops/gemm/ (0.5.21
        # to 0.5.23).
        engine_folders=(
            EngineFolder("vllm", "0", FILES_FOLDER.rstrip("/")),
            EngineFolder("sglang", "0", "sglang/srt/layers/quantization/configs"),
            EngineFolder("sglang", "0.5.16", "sglang/kernels/ops/quantization/configs"),
            EngineFolder("sglang", "0.5.21", "sglang/kernels/ops/gemm/configs"),
        ),
        # get_w8a8_block_fp8_configs raises BLOCK_SIZE_K to block_k (SGLang 0.5.12 on).
    ),
    workload=lazy("tuner.kernels.dense.workload:DenseWorkload.make"),
    compile_for_target=lazy("tuner.kernels.dense.workload:compile_for_target"),
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
    advice=advise,
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
