"""Read a vLLM or SGLang server log: the block-FP8 GEMM shapes that ran without a config file,
and what `tuner shapes from-log` makes of them (a known model that covers them, or a key to save
them under).

Both engines warn once per missing file and process (so once per rank):

- vLLM (`get_w8a8_block_fp8_configs`, model_executor/layers/quantization/utils/fp8_utils.py):
  `Using default W8A8 Block FP8 kernel config. Performance might be sub-optimal! Config file not
  found at <site-packages>/vllm/model_executor/layers/quantization/utils/configs/N=..,K=..,
  device_name=..,dtype=fp8_w8a8,block_shape=[128,128].json`
- SGLang (`get_w8a8_block_fp8_configs`, python/sglang/srt/layers/quantization/fp8_kernel.py): the
  same sentence, the folder `sglang/srt/layers/quantization/configs/` and
  `block_shape=[128, 128]` with a space.

vLLM's fused-MoE kernel warns likewise (`get_moe_configs`,
model_executor/layers/fused_moe/fused_moe.py): `Using default MoE config. Performance might be
sub-optimal! Config file not found at <folder>/E=..,N=..,device_name=..,dtype=fp8_w8a8,
block_shape=[128,128].json`. Each family says which line names its missing file
(`KernelFamily.log_line`) and the scan keeps each family's files apart (`LogScan.files`); any
other MoE file (per-tensor `dtype=fp8_w8a8.json`, BF16 without a dtype, int8, ...) is out of
scope and only listed by name (`LogScan.out_of_scope`). TP size and model name are taken from the
engine's start-up lines when the log has them (vLLM: `non-default args: {..., 'model': '...',
'tensor_parallel_size': 2}`, where no tensor_parallel_size means vLLM's default 1, and the
engine's `with config: model='...', tensor_parallel_size=2`; SGLang: `tp_size=2`,
`model_path='...'`).
"""

from __future__ import annotations

import gzip
import io
import itertools
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TypeVar

from tuner.core import FP8_DTYPE
from tuner.inputs.backends import kernel_verdict, linear_backend_arg, selected_kernel
from tuner.inputs.shapes import (
    MODEL_KEY_RE,
    ShapesFileError,
    UnknownModelError,
    _read,
    known_models,
)
from tuner.kernels.family import EXPERTS, LINEAR_LAYERS, KernelFamily, VllmLogLine
from tuner.kernels.registry import DEFAULT_FAMILY, FAMILIES, family_of_part
from tuner.kernels.shape import Shape

_NOT_FOUND_RE = re.compile(r"Config file not found at\s+(?P<rest>.*)$")
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# `tensor_parallel_size=2` (config line) or `'tensor_parallel_size': 2` (vLLM's non-default args).
_TP_RE = re.compile(r"\b(?:tensor_parallel_size|tp_size)'?\s*[=:]\s*(\d+)")
# vLLM logs its command-line arguments that differ from the defaults at start-up as a Python dict
# repr: `logger.info("non-default args: %s", non_default_args)` (log_non_default_args,
# vllm/entrypoints/utils.py), e.g. `non-default args: {'model_tag': 'Qwen/Qwen3-8B-FP8', 'model':
# 'Qwen/Qwen3-8B-FP8', 'tensor_parallel_size': 2}`.
_NON_DEFAULT = "non-default args: {"
_MODEL_RE = re.compile(r"\b(?:model|model_path)'?\s*[=:]\s*'([^']+)'")
_BINARY_PROBE_BYTES = 8192
_T = TypeVar("_T")


@dataclass(frozen=True)
class MissingConfig:
    """One config file an engine looked for and did not find.

    Attributes:
        family: the kernel family whose warning named it (`tuner.kernels.registry`).
        engine: "vllm" or "sglang" (the family's log line's engine, else from the path, else
            from the block_shape spelling).
        path: the full path the engine looked at.
        device_name: the engine's device key in the file name, e.g. `NVIDIA_L20`.
        shape: what the file name says of the shape (`FamilyFiles.parse_file_name`: a MoE
            name gives K = 0 and params (("E", E),)).
    """

    family: str
    engine: str
    path: str
    device_name: str
    shape: Shape

    @property
    def folder(self) -> str:
        """The folder the engine reads its config files from (the path without the name)."""
        cut = max(self.path.rfind("/"), self.path.rfind("\\"))
        return self.path[:cut] if cut > 0 else ""


@dataclass(frozen=True)
class LogScan:
    """What a log says about missing block-FP8 config files.

    Attributes:
        files: family name -> its distinct missing files, in order of first appearance (every
            registered family with a `log_line`, () when the log names none).
        warnings: how many warnings of the counted families (`VllmLogLine.counted`) the log
            has (one per rank and file).
        tp: tensor-parallel size from the engine's start-up line; None if absent or ambiguous.
        model: the served model's name or path from that line; None if absent or ambiguous.
        lines: lines read.
        linear_kernels: the block-FP8 linear kernel classes vLLM says it selected ("Selected
            <kernel> for <method>", tuner.inputs.backends), in order of first appearance.
        linear_backend: the `linear_backend` of vLLM's non-default args, or None.
        out_of_scope: family name -> distinct names of its other missing files (per-tensor FP8,
            BF16, ...): this tool tunes none of them.
    """

    files: Mapping[str, tuple[MissingConfig, ...]]
    warnings: int
    tp: int | None
    model: str | None
    lines: int
    linear_kernels: tuple[str, ...] = ()
    linear_backend: str | None = None
    out_of_scope: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def kernel_line(self) -> str | None:
        """Whether this server reads the tuned files (`tuner.inputs.backends.kernel_verdict`)."""
        return kernel_verdict(self.linear_kernels, self.linear_backend)

    @property
    def any_missing(self) -> bool:
        """The log names a missing file of some family."""
        return any(self.files.values())

    @property
    def device_names(self) -> list[str]:
        """The distinct device_name keys of the first family (registry order) with missing
        files, sorted."""
        found = next((files for files in self.files.values() if files), ())
        return sorted({m.device_name for m in found})

    def shapes_of(self, family: str, device_name: str | None = None) -> list[Shape]:
        """A family's distinct missing shapes, in order of first appearance.

        Args:
            family: the family's name.
            device_name: only files of this device; None for all.
        """
        return list(
            dict.fromkeys(
                m.shape
                for m in self.files.get(family, ())
                if device_name is None or m.device_name == device_name
            )
        )

    # The default family's views that `tuner.cli.shapes` and `log_shapes` read.
    @property
    def missing(self) -> tuple[MissingConfig, ...]:
        """The default family's (the dense GEMM's) missing files."""
        return tuple(self.files.get(DEFAULT_FAMILY, ()))

    def shapes(self, device_name: str | None = None) -> list[tuple[int, int, tuple[int, int]]]:
        """Distinct (N, K, block_shape) of the dense GEMM's files, in order of first appearance.

        Args:
            device_name: only files of this device; None for all.
        """
        return [
            (s.N, s.K, s.block_pair(DEFAULT_FAMILY))
            for s in self.shapes_of(DEFAULT_FAMILY, device_name)
        ]


def _engine_of(path: str, name: str) -> str:
    parts = re.split(r"[/\\]", path)
    if "sglang" in parts:
        return "sglang"
    if "vllm" in parts:
        return "vllm"
    return "sglang" if ", " in name else "vllm"


def _one(values: set[_T]) -> _T | None:
    return next(iter(values)) if len(values) == 1 else None


@cache
def _file_re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _logged() -> list[tuple[KernelFamily, VllmLogLine]]:
    """The registered families whose missing files a log names, in registry order."""
    return [
        (family, family.log_line) for family in FAMILIES.values() if family.log_line is not None
    ]


@dataclass
class _StartUp:
    """What the engine's start-up lines say: TP sizes, model names, linear kernel and backend."""

    tps: set[int] = field(default_factory=set)
    models: set[str] = field(default_factory=set)
    kernels: dict[str, None] = field(default_factory=dict)
    backends: set[str] = field(default_factory=set)

    def read(self, line: str) -> None:
        """Take what one line (not a missing-file warning) says."""
        selected = selected_kernel(line)
        if selected is not None:
            self.kernels.setdefault(selected[0], None)
        if _NON_DEFAULT in line:
            self.backends.update(filter(None, [linear_backend_arg(line)]))
            # vLLM's default TP is 1: the dict leaves tensor_parallel_size out then.
            found_tp = _TP_RE.findall(line) or ["1"]
            self.tps.update(int(v) for v in found_tp if 0 < int(v) <= 1024)
            self.models.update(_MODEL_RE.findall(line)[:1])
        elif "tensor_parallel_size=" in line or "tp_size=" in line:
            self.tps.update(int(v) for v in _TP_RE.findall(line) if 0 < int(v) <= 1024)
            self.models.update(_MODEL_RE.findall(line)[:1])


@dataclass
class _Missing:
    """A family's missing files, keyed to drop repeats (one warning per rank), and the names
    of its files out of scope."""

    found: dict[tuple[str, Shape, str], MissingConfig] = field(default_factory=dict)
    other: dict[str, None] = field(default_factory=dict)

    def read(self, line: str, family: KernelFamily, log_line: VllmLogLine) -> bool:
        """Record the file of one of the family's warning lines; whether the line counts as a
        warning (a block-FP8 file the family parses)."""
        hit = _NOT_FOUND_RE.search(line)
        name_match = _file_re(log_line.file_re).search(hit["rest"]) if hit else None
        if hit is None or name_match is None:
            return False
        name = name_match["name"]
        try:
            shape, device_name, dtype = family.files.parse_file_name(name)
        except ValueError:
            dtype = ""
        if dtype != FP8_DTYPE:
            if log_line.out_of_scope:
                self.other.setdefault(name[:200], None)
            return False
        path = hit["rest"][: name_match.end("name")].strip().strip("'\"[")
        self.found.setdefault(
            (device_name, shape, path),
            MissingConfig(
                family=family.name,
                engine=log_line.engine or _engine_of(path, name),
                path=path,
                device_name=device_name,
                shape=shape,
            ),
        )
        return True


def scan_lines(lines: Iterable[str]) -> LogScan:
    """Find the missing-config warnings of the block-FP8 kernels in log lines.

    Args:
        lines: the log's lines (line endings and ANSI colour codes are tolerated).

    Returns:
        The distinct missing files per family and what the start-up line says about TP and
        model.
    """
    logged = _logged()
    missing = {family.name: _Missing() for family, _ in logged}
    start_up = _StartUp()
    warnings = 0
    count = 0
    for raw in lines:
        count += 1
        line = _ANSI_RE.sub("", raw).rstrip("\r\n")
        family, log_line = next(((f, ll) for f, ll in logged if ll.marker in line), (None, None))
        if family is None or log_line is None:
            start_up.read(line)
        elif missing[family.name].read(line, family, log_line) and log_line.counted:
            warnings += 1
    return LogScan(
        files={name: tuple(m.found.values()) for name, m in missing.items()},
        warnings=warnings,
        tp=_one(start_up.tps),
        model=_one(start_up.models),
        lines=count,
        linear_kernels=tuple(start_up.kernels),
        linear_backend=_one(start_up.backends),
        out_of_scope={name: tuple(m.other) for name, m in missing.items()},
    )


def _open_lines(path: Path) -> Iterable[str]:
    raw: io.BufferedIOBase = path.open("rb")
    if raw.read(2) == b"\x1f\x8b":
        raw.close()
        raw = gzip.open(path, "rb")
    else:
        raw.seek(0)
    with raw:
        head = raw.read(_BINARY_PROBE_BYTES)
        if not head.strip():
            raise ValueError(f"{path}: empty file, not a server log")
        if b"\x00" in head:
            raise ValueError(f"{path}: binary file, not a text log")
        raw.seek(0)
        for line in raw:
            yield line.decode("utf-8", errors="replace")


def read_log(path: Path) -> LogScan:
    """Scan a log file (plain or gzip) line by line.

    Args:
        path: the log file.

    Returns:
        What `scan_lines` finds.

    Raises:
        ValueError: one line naming the file: it cannot be read, is a folder, is empty, or is
            binary (NUL bytes near the start).
    """
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, not a log file")
    try:
        return scan_lines(_open_lines(path))
    except OSError as exc:  # missing, unreadable, a corrupt gzip stream
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ValueError(f"{path}: cannot read: {reason}") from None
    except EOFError:
        raise ValueError(f"{path}: truncated gzip file") from None


def suggest_model_key(name: str) -> str:
    """A model key made from a model name or path, e.g. "Qwen/Qwen3-8B-FP8" -> "qwen3-8b-fp8".

    Args:
        name: a Hugging Face repo id or a local model folder.

    Returns:
        A key matching `MODEL_KEY_RE` ("model" when nothing usable is left).
    """
    last = name.rstrip("/\\").replace("\\", "/").split("/")[-1].lower()
    key = re.sub(r"[^a-z0-9._\-]+", "-", last).strip("-._")[:64]
    return key if key and MODEL_KEY_RE.fullmatch(key) else "model"


def free_model_key(base: str) -> str:
    """A model key `--save` will accept that names no packaged or saved model yet.

    Args:
        base: a model key (`MODEL_KEY_RE`), e.g. from `suggest_model_key`.

    Returns:
        `base` if no model has it, else `<base>-log`, then `<base>-log-2`, `-3`, ... (base cut
        so that the key stays within 64 characters), the first one free.
    """
    taken = set(known_models())
    suffixes = itertools.chain(["", "-log"], (f"-log-{n}" for n in itertools.count(2)))
    return next(
        key
        for suffix in suffixes
        if (key := base[: 64 - len(suffix)].rstrip("-._") + suffix if suffix else base) not in taken
    )


def find_covering(
    shapes: Sequence[tuple[int, int]],
    block_shape: tuple[int, int],
    tp: int | None,
    experts: Sequence[tuple[int, int]] = (),
) -> list[tuple[str, int]]:
    """Known (model, TP) entries whose shapes include all of `shapes` and whose MoE shapes
    include all of `experts`, with this block_shape.

    Malformed files are skipped (they fail loudly where they are loaded by name).

    Args:
        shapes: (N, K) pairs, as the file names of the family of the model's linear layers
            carry them (`file_key`).
        block_shape: [group_n, group_k].
        tp: only this TP size; None for any.
        experts: (E, N) of fused-MoE files (a log names no K or top_k): `file_key` of the
            shapes of the family of the model's experts (`tuner.kernels.registry.
            family_of_part`).

    Returns:
        (model key, TP size) pairs, sorted.
    """
    wanted, wanted_experts = set(shapes), set(experts)
    layers, experts_of = family_of_part(LINEAR_LAYERS), family_of_part(EXPERTS)
    found = []
    for name in known_models():
        try:
            doc = _read(name)
        except (UnknownModelError, ShapesFileError):
            continue
        if doc.block_shape != tuple(block_shape):
            continue
        for size, (_, groups) in doc.entries.items():
            listed = {layers.files.file_key(s) for s in groups.get(layers.name, ())}
            listed_experts = {experts_of.files.file_key(s) for s in groups.get(experts_of.name, ())}
            if (tp is None or size == tp) and wanted <= listed and wanted_experts <= listed_experts:
                found.append((name, size))
    return sorted(found)


@dataclass(frozen=True)
class LogShapes:
    """The shapes a log's warnings ask for.

    Attributes:
        tp: tensor-parallel size (`--tp`, else the log's); None when neither states it.
        pairs: (N, K) of the dense GEMMs without a config file (weights [N, K]).
        experts: (E, N, block_shape) of the fused-MoE experts without a config file.
        block_shapes: the distinct [group_n, group_k] of both, ascending.
        engines: "sglang" and/or "vllm", whose warnings these are.
    """

    tp: int | None
    pairs: list[tuple[int, int]]
    experts: list[tuple[int, int, tuple[int, int]]]
    block_shapes: list[tuple[int, int]]
    engines: list[str]

    @property
    def sglang(self) -> bool:
        """SGLang's warnings are among them (its files are exported too)."""
        return "sglang" in self.engines


def log_shapes(scan: LogScan, tp: int | None) -> LogShapes:
    """The shapes of `scan` (`tuner.inputs.logs.read_log`), at `tp` or else the log's TP."""

    experts_family = family_of_part(EXPERTS)
    shapes = scan.shapes()
    experts: list[tuple[int, int, tuple[int, int]]] = []
    for shape in scan.shapes_of(experts_family.name):
        E, N = experts_family.files.file_key(shape)  # what a log's file name names of an expert
        experts.append((E, N, shape.block_pair(experts_family.name)))
    return LogShapes(
        tp=tp if tp is not None else scan.tp,
        pairs=[(n, k) for n, k, _ in shapes],
        experts=experts,
        block_shapes=sorted({b for _, _, b in shapes} | {b for _, _, b in experts}),
        engines=sorted({m.engine for files in scan.files.values() for m in files}),
    )


def save_problem(found: LogShapes, save: str) -> str | None:
    """Why `--save NAME` cannot save these shapes (one line), or None when it can."""
    if found.tp is None:
        return "the log does not state the tensor-parallel size: pass --tp with --save"
    if len(found.block_shapes) != 1:
        return "the log has shapes of several block_shapes; a shapes entry has one"
    if not found.pairs:
        return (
            "the log names the MoE experts' E and N but not their K (hidden size) or "
            f"top_k: save them with `tuner shapes from-config config.json --tp {found.tp} "
            f"--save {save}`"
        )
    return None


@dataclass(frozen=True)
class NextStep:
    """Lines to print, then (when `model` is set) the `tuner sweep` commands of `model` at `tp`
    (`--engine sglang` export too when `sglang`)."""

    lines: tuple[str, ...]
    model: str | None = None
    tp: int | None = None
    sglang: bool = False


def _moe_step(found: LogShapes) -> NextStep:
    """The MoE experts' lines; a next step when a known model covers them and no dense shapes
    are left, else only lines (`model` None)."""
    covering = (
        find_covering([], found.block_shapes[0], found.tp, [(e, n) for e, n, _ in found.experts])
        if len(found.block_shapes) == 1
        else []
    )
    if covering:
        model, size = covering[0]
        if not found.pairs:
            return NextStep(
                (f"these are MoE experts of model '{model}' TP {size}; next:",), model, size
            )
        return NextStep((f"the MoE experts are those of model '{model}' TP {size}",))
    return NextStep(
        (
            "no known model lists these MoE experts; derive them (E, N, K, top_k) with: "
            f"tuner shapes from-config config.json --tp {found.tp or '<TP>'} "
            "--save NAME",
        )
    )


def next_step(scan: LogScan, found: LogShapes, log: Path) -> NextStep:
    """Without `--save`: the known model whose shapes cover the log's (`find_covering`), or the
    command that saves them under a free name first.

    Args:
        scan: the log's scan.
        found: `log_shapes(scan, tp)`.
        log: the log's path, as the user gave it (it goes into the suggested command).
    """
    lines: tuple[str, ...] = ()
    if found.experts:
        moe = _moe_step(found)
        if moe.model is not None or not found.pairs:
            return moe
        lines = moe.lines
    covering = (
        find_covering(found.pairs, found.block_shapes[0], found.tp)
        if len(found.block_shapes) == 1
        else []
    )
    if covering:
        model, size = covering[0]
        return NextStep(
            (*lines, f"these are shapes of model '{model}' TP {size}; next:"),
            model,
            size,
            found.sglang,
        )
    # A name `--save` accepts: not a packaged model's, nor one saved before (whose shapes
    # differ, or find_covering would have named it).
    name = free_model_key(suggest_model_key(scan.model or log.stem))
    tp_flag = "" if found.tp is not None and found.tp == scan.tp else f" --tp {found.tp or '<TP>'}"
    return NextStep(
        (
            *lines,
            f"save them first (tuner shapes from-log {shlex.quote(str(log))} "
            f"--save {name}{tp_flag}), then:",
        ),
        name,
        found.tp,
        found.sglang,
    )
