"""The seam a kernel family plugs into: the tensors of one problem (`Workload`) and what the
family provides (`KernelFamily`: its kernel and search space, with its facts grouped by concern
in `FamilyFiles`, `FamilyShapes`, `FamilyReport` and `VllmLogLine`); the shape
it is tuned for is `tuner.kernels.shape`'s. The run, search, measurement and merge code reach a
family only through these; `tuner.kernels.registry` names them.

Importable without torch or triton: a family's kernel, reference and compile-for-target are
imported when first called.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tuner.core import DEVICE_NAME_CHARS, DEVICE_NAME_MAX, FP8_DTYPE, is_device_name
from tuner.kernels.config import KernelConfig
from tuner.kernels.engines import ENGINES, EngineFolder
from tuner.kernels.shape import Shape
from tuner.kernels.source import (
    BUILTIN,
    KernelSource,
    VllmKernel,
    resolve_kernel,
    source_hash,
    vllm_version,
)

# The parts of a model whose shapes a family tunes (`FamilyShapes.model_part`): the weights
# [N, K] of its block-FP8 linear layers, or its fused-MoE experts (E, N, K, top_k).
LINEAR_LAYERS = "linear layers"
EXPERTS = "experts"


def lazy(target: str) -> Callable[..., Any]:
    """A hook named `module:attribute.path`, imported when first called: how a pure family
    module names the parts of it that import torch, triton or vLLM."""
    module, _, path = target.partition(":")

    def call(*args: Any, **kwargs: Any) -> Any:
        found: Any = functools.reduce(getattr, path.split("."), importlib.import_module(module))
        return found(*args, **kwargs)

    return call


def block_fp8_name(
    dims: dict[str, int],
    device_name: str,
    block_shape: tuple[int, int],
    engine: str = "vllm",
    dtype: str = FP8_DTYPE,
) -> str:
    """A block-FP8 config file name as `engine` spells it: `dims` (e.g. N=..,K=..), then
    `device_name=..,dtype=..,block_shape=[bn,bk].json` (SGLang: `[bn, bk]`).

    Raises:
        ValueError: a size that is not a positive integer, a device name we do not store, or
            an engine not in `ENGINES`: a name vLLM never reads or we cannot parse back.
    """
    bn, bk = block_shape
    for label, value in {**dims, "group_n": bn, "group_k": bk}.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{label} must be a positive integer, got {value!r}")
    if not is_device_name(device_name):
        raise ValueError(
            f"device_name {device_name!r} must be 1..{DEVICE_NAME_MAX} printable "
            "ASCII characters without space, '\"', '/', '\\' or '..'"
        )
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    head = "".join(f"{name}={value}," for name, value in dims.items())
    space = " " if engine == "sglang" else ""
    return f"{head}device_name={device_name},dtype={dtype},block_shape=[{bn},{space}{bk}].json"


@functools.cache
def _name_re(dims: tuple[str, ...]) -> re.Pattern[str]:
    """The device part may hold ',', '=' and '['; the dtype holds no ',' or '=', so the split
    after `dims` is unique."""
    return re.compile(
        "".join(rf"{name}=(?P<{name}>[1-9][0-9]{{0,8}})," for name in dims)
        + rf"device_name=(?P<device>[.{DEVICE_NAME_CHARS}]{{1,{DEVICE_NAME_MAX}}}),"
        r"dtype=(?P<dtype>[a-z0-9_]{1,32}),"
        r"block_shape=\[(?P<bn>[1-9][0-9]{0,5}), ?(?P<bk>[1-9][0-9]{0,5})\]\.json"
    )


def parse_block_fp8_name(
    name: str, dims: tuple[str, ...], example: str, dtypes: tuple[str, ...] = (FP8_DTYPE,)
) -> tuple[tuple[int, ...], str, str, tuple[int, int]]:
    """(the values of `dims`, device_name, dtype, block_shape) of a `block_fp8_name` in either
    engine's spelling.

    Raises:
        ValueError: `name` is not one, or its dtype is not in `dtypes` (the message shows
            `example`, a name of the family).
    """
    match = _name_re(dims).fullmatch(name) if len(name) <= 512 else None
    if match is None or match["dtype"] not in dtypes or not is_device_name(match["device"]):
        raise ValueError(f"{name!r} is not a config file name like '{example}'")
    values = tuple(int(match[dim]) for dim in dims)
    return values, match["device"], match["dtype"], (int(match["bn"]), int(match["bk"]))


@dataclass(frozen=True)
class VllmLogLine:
    """The warning an engine logs, once per process, when it finds no config file of the
    family (`tuner.inputs.logs` reads server logs for them).

    Attributes:
        marker: text every such warning line holds (e.g. "Using default MoE config").
        file_re: regular expression whose group `name` is the missing file's name at the end
            of the path the line names after "Config file not found at".
        counted: each such line counts in the log's warning count (`LogScan.warnings`).
        what: what `tuner shapes from-log` calls the shapes of such files, plural, e.g.
            "fused-MoE expert shape(s)".
        key_names: the columns of its table of them: the dimensions a file name carries
            (`FamilyFiles.file_key`), e.g. ("E", "N").
    """

    marker: str
    file_re: str
    counted: bool = False
    what: str = "shape(s)"
    key_names: tuple[str, ...] = ("N", "K")


class Workload(Protocol):
    """The tensors of one problem (a shape at one M) on a device, as a family makes them.

    The runner checks `launch` against `reference()` once, then times it with copies of
    `weights()` rotated so that weights come from memory, as in serving.
    """

    def weights(self) -> tuple[Any, ...]:
        """The weight tensors a launch reads (e.g. B [N, K] and its scales Bs)."""
        ...

    def reference(self, out_dtype: Any = None) -> Any:
        """The float64 result the kernel approximates, of the launch's output shape (e.g. C
        [M, N]); a family whose
        launch stores intermediates in `out_dtype` (the fused-MoE experts) rounds them as the
        launch does."""
        ...

    def launch(self, config: KernelConfig, weights: tuple, *, out: Any, out_dtype: Any) -> Any:
        """Run the kernel once with `config`, reading `weights` (one copy of `weights()`),
        writing `out` (a new tensor when None) in `out_dtype`; returns the output."""
        ...


@dataclass(frozen=True)
class FamilyFiles:
    """How a kernel family's config files are named, read and placed by the engines.

    Attributes:
        file_name: (shape, device_name, engine) -> the config file name the engine reads.
        parse_file_name: file name -> (shape, device_name, dtype label); ValueError if it is
            not one of the family's names.
        file_triton_version: the family's files carry `"triton_version"` (vLLM's MoE loader
            drops the key; its dense loader would choke on it).
        file_device: device_name -> the device part vLLM puts in the family's file names
            (default: the key itself).
        respell_file_name: (name, engine, device_name or None) -> the name as the engine
            spells it; None: `file_name` of what `parse_file_name` gives (see
            `KernelFamily.respell`).
        engine_folders: where each engine release reads the family's files, one row per engine
            and first version (`tuner.files.engine_folders` picks a release's row).
        file_key: shape -> the dimensions its file name carries, which is all a log names of it:
            (N, K) by default; (E, N) for MoE files, which carry no K or top_k.
    """

    file_name: Callable[[Shape, str, str], str]
    parse_file_name: Callable[[str], tuple[Shape, str, str]]
    file_triton_version: bool = False
    file_device: Callable[[str], str] = lambda device_name: device_name
    respell_file_name: Callable[[str, str, str | None], str] | None = None
    engine_folders: tuple[EngineFolder, ...] = ()
    file_key: Callable[[Shape], tuple[int, ...]] = lambda shape: (shape.N, shape.K)


@dataclass(frozen=True)
class FamilyShapes:
    """How a kernel family's shapes are listed in a model's shapes file and become sweeps
    (`tuner.inputs.shapes`, `tuner.run.plan`). Not `tuner.inputs.shapes.ModelShapes`, a
    model's shapes at one TP.

    Attributes:
        shapes_key: the key listing the family's shapes in a model's `[tp.<size>]` tables
            (`tuner.inputs.shapes`), e.g. "shapes" (dense), "moe"; None: not in shapes files.
        shapes_row: a row of that list for messages, e.g. "[N, K]".
        parse_shapes: (rows, where, block_shape) -> the shapes of the key's value (`where`
            names the file and TP table); ValueError, one line naming `where`, if malformed.
        shape_row: shape -> the row a shapes file lists it as (what `parse_shapes` reads).
        model_part: the part of a model whose shapes the family tunes: `LINEAR_LAYERS` (what
            `tuner shapes from-config` derives from a config.json's linear layers and a log's
            files without K name as N, K) or `EXPERTS` (its fused-MoE experts, from the
            config's expert count; a log's `E=...` files); None: neither
            (`tuner.kernels.registry.family_of_part`).
        sweep_per_shape: a model's shapes of this family are tuned one sweep each (fused MoE)
            rather than in one sweep (`tuner.run.plan.model_requests`).
        sweep_key_has_family: the family's name (and its shape params) enter the key of its
            sweeps (`db.repo.sweep_key`), so two families' sweeps of the same parameters
            differ. False only for the dense GEMM, whose sweeps were keyed before the store
            knew families: its keys stay as stored, so those sweeps resume. A family made with
            `dataclasses.replace` of the dense one must set it back to True.
        describe_shapes: shapes of one sweep -> a few words for the plan line (default: "5
            shapes").
    """

    shapes_key: str | None = None
    shapes_row: str = ""
    parse_shapes: Callable[[object, str, tuple[int, int]], tuple[Shape, ...]] | None = None
    shape_row: Callable[[Shape], tuple[int, ...]] | None = None
    model_part: str | None = None
    sweep_per_shape: bool = False
    sweep_key_has_family: bool = True
    describe_shapes: Callable[[Sequence[Shape]], str] = lambda shapes: f"{len(shapes)} shapes"


@dataclass(frozen=True)
class FamilyReport:
    """How labels, notes and the HTML report (`api.report`) name a kernel family's shapes.

    Attributes:
        short_title: how labels name the family (e.g. "MoE"); "" names it by
            `KernelFamily.name`.
        brief_shape: shape -> a short phrase for notes, e.g. "E=4 N=64"; by default "N=.. K=..".
        label: shape -> the heading of its report section; None: the family, its params, N, K.
        anchor: shape -> the report section's id suffix, unique per device; None: from the
            family, params, N and K.
        roofline_gemm: (shape, M) -> the (M, N, K) of the one block-FP8 GEMM a call is, whose
            bytes and FLOPs the roofline counts (`tuner.measure.roofline`); None: no roofline.
    """

    short_title: str = ""
    brief_shape: Callable[[Shape], str] = lambda shape: f"N={shape.N} K={shape.K}"
    label: Callable[[Shape], str] | None = None
    anchor: Callable[[Shape], str] | None = None
    roofline_gemm: Callable[[Shape, int], tuple[int, int, int]] | None = None


@dataclass(frozen=True)
class KernelFamily:
    """What a kernel family gives the tuner. Register one in `tuner.kernels.registry`.

    Attributes:
        name: the family's key, stored with every task (e.g. "dense").
        title: one line for people, e.g. "W8A8 block-FP8 GEMM".
        kernel_module: dotted name of the module holding the Triton kernel.
        kernel_function: the kernel's name there; its source text is the kernel hash that
            winners must match (`tuner.files.provenance`).
        space: vLLM's tuning grid for the family, in its tuning script's order.
        why_invalid: (config, shape) -> the first static constraint the config breaks, or None.
        default_config: (shape, M) -> the config vLLM runs at M when no file exists.
        files: how its config files are named, read and placed (`FamilyFiles`).
        workload: (shape, M, *, seed, device) -> the `Workload` of one problem (imports torch).
        compile_for_target: (config, arch, *, shape, M, out_dtype) -> Triton's CompiledKernel,
            specialized as a launch is, without a GPU (imports triton).
        vllm: where the installed vLLM keeps this family's kernel and the workload that
            launches it as vLLM does; None when vLLM has no such kernel.
        shapes: how a model's shapes file lists its shapes and how they become sweeps
            (`FamilyShapes`; default: in no shapes file, one sweep for all).
        report: how labels, notes and the report name its shapes (`FamilyReport`; default:
            generic labels, no roofline).
        advice: what `tuner doctor` says of the family: (`tuner.kernels.serving.Diagnosis`,
            `tuner.kernels.serving.Asked`) -> None, lines on what vLLM runs for the family on
            the architecture and whether it reads the family's files, appending the family's
            name to `Diagnosis.helps` when it does; None: doctor says nothing of it.
        log_line: the warning a server logs when the family's file is missing
            (`VllmLogLine`); None: logs are not read for the family.
    """

    name: str
    title: str
    kernel_module: str
    kernel_function: str
    space: Callable[[], list[KernelConfig]]
    why_invalid: Callable[[KernelConfig, Shape], str | None]
    default_config: Callable[[Shape, int], KernelConfig]
    files: FamilyFiles
    workload: Callable[..., Workload]
    compile_for_target: Callable[..., Any]
    vllm: VllmKernel | None = None
    # Model shapes and planning (tuner.inputs.shapes, tuner.run.plan)
    shapes: FamilyShapes = FamilyShapes()
    # Labels, notes and the report (api.report)
    report: FamilyReport = FamilyReport()

    def shape_label(self, shape: Shape) -> str:
        """The heading of a shape's report section (`FamilyReport.label`), e.g. "N=512, K=256"
        or "MoE E=4, N=64, K=128 (top_k=2)"; by default the family's short title, its params,
        N and K."""
        if self.report.label is not None:
            return self.report.label(shape)
        params = "".join(f"{name}={value}, " for name, value in shape.params)
        return f"{self.report.short_title or self.name} {params}N={shape.N}, K={shape.K}"

    def shape_anchor(self, shape: Shape) -> str:
        """The report section's id suffix of a shape (`FamilyReport.anchor`), e.g. "512x256";
        by default `<name>-<params>-<N>x<K>`."""
        if self.report.anchor is not None:
            return self.report.anchor(shape)
        params = "".join(f"{name}{value}" for name, value in shape.params)
        return f"{self.name}-{params}-{shape.N}x{shape.K}"

    def shape_brief(self, shape: Shape) -> str:
        """A short phrase for a shape in notes (`FamilyReport.brief_shape`)."""
        return self.report.brief_shape(shape)

    # Doctor, verify and import (tuner.cli.doctor).
    advice: Callable[[Any, Any], None] | None = None
    # vLLM log lines (tuner.inputs.logs)
    log_line: VllmLogLine | None = None

    def respell(self, name: str, engine: str, device_name: str | None = None) -> str:
        """One of the family's file names as `engine` spells it.

        Args:
            name: a file name of this family, in either engine's spelling.
            engine: "vllm" or "sglang".
            device_name: the device key the file belongs to (a name may carry another
                spelling of it, e.g. vLLM's MoE names fold every H200); None keeps the name's.

        Raises:
            ValueError: not one of the family's names, or an unknown engine.
        """
        files = self.files
        if files.respell_file_name is not None:
            return files.respell_file_name(name, engine, device_name)
        shape, named_device, _ = files.parse_file_name(name)
        return files.file_name(shape, device_name or named_device, engine)

    def source(self, choice: str = BUILTIN) -> KernelSource:
        """The kernel this family's trials time for a `--kernel` choice: the builtin copy, or
        the installed vLLM's kernel launched as vLLM launches it (`tuner.kernels.source`).

        Args:
            choice: "auto", "vllm" or "builtin".

        Raises:
            ValueError: a bad choice, or "vllm" where vLLM or this family's kernel in it is
                missing.
        """
        name, vllm = resolve_kernel(choice), self.vllm
        try:
            if name == BUILTIN:
                path, function = self.module_path(self.kernel_module), self.kernel_function
                workload = self.workload
            elif vllm is None:
                raise LookupError("the family has no vLLM kernel: use --kernel builtin")
            else:
                path, function, workload = vllm.path(), vllm.function, vllm.workload
            digest = source_hash(path, function)
        except (LookupError, OSError) as exc:
            raise ValueError(f"--kernel {name} for {self.name}: {exc}") from None
        version = "" if name == BUILTIN else vllm_version() or ""
        return KernelSource(self.name, name, version, digest, path, workload)

    def module_path(self, module: str) -> Path:
        """The source file of one of the family's modules, found without importing it.

        Raises:
            LookupError: the module cannot be found.
        """
        spec = importlib.util.find_spec(module)
        if spec is None or spec.origin is None:
            raise LookupError(f"module {module} of kernel family {self.name} not found")
        return Path(spec.origin)
