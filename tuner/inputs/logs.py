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
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
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
from tuner.kernels.family import KernelFamily, VllmLogLine
from tuner.kernels.registry import FAMILIES, get_family
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


def _engine_of(path: str, name: str) -> str:
    parts = re.split(r"[/\\]", path)
    return next((e for e in ("sglang", "vllm") if e in parts), "sglang" if ", " in name else "vllm")


def _one(values: set[_T]) -> _T | None:
    return next(iter(values)) if len(values) == 1 else None


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
        args = _NON_DEFAULT in line
        if args or "tensor_parallel_size=" in line or "tp_size=" in line:
            # vLLM's default TP is 1: its non-default args leave tensor_parallel_size out then.
            found_tp = _TP_RE.findall(line) or (["1"] if args else [])
            self.tps.update(int(v) for v in found_tp if 0 < int(v) <= 1024)
            self.models.update(_MODEL_RE.findall(line)[:1])
            self.backends.update(filter(None, [linear_backend_arg(line) if args else None]))


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
        name_match = re.search(log_line.file_re, hit["rest"]) if hit else None
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
    logged = [(f, f.log_line) for f in FAMILIES.values() if f.log_line is not None]
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


def free_model_key(name: str) -> str:
    """A model key `--save` accepts, made from a model name or path ("Qwen/Qwen3-8B-FP8" ->
    "qwen3-8b-fp8"; "model" when nothing usable is left), that names no packaged or saved model
    yet: else `<key>-log`, then `<key>-log-2`, `-3`, ... (cut to stay within 64 characters).
    """
    last = name.rstrip("/\\").replace("\\", "/").split("/")[-1].lower()
    base = re.sub(r"[^a-z0-9._\-]+", "-", last).strip("-._")[:64]
    base = base if base and MODEL_KEY_RE.fullmatch(base) else "model"
    taken = set(known_models())
    suffixes = itertools.chain(["", "-log"], (f"-log-{n}" for n in itertools.count(2)))
    return next(
        key
        for suffix in suffixes
        if (key := base[: 64 - len(suffix)].rstrip("-._") + suffix if suffix else base) not in taken
    )


def find_covering(
    keys: Mapping[str, Collection[tuple[int, ...]]], block_shape: tuple[int, int], tp: int | None
) -> list[tuple[str, int]]:
    """Known (model, TP) entries that list, for each family of `keys`, all of its file keys
    (`FamilyFiles.file_key`, what a file name names of a shape), with this block_shape.
    Malformed files are skipped (they fail loudly where they are loaded by name).

    Args:
        keys: family name -> file keys, e.g. {"dense": {(7168, 5120)}, "moe": {(128, 768)}}.
        block_shape: [group_n, group_k].
        tp: only this TP size; None for any.

    Returns:
        (model key, TP size) pairs, sorted.
    """
    found = []
    for name in known_models():
        try:
            doc = _read(name)
        except (UnknownModelError, ShapesFileError):
            continue
        for size, (_, groups) in doc.entries.items():
            if doc.block_shape == tuple(block_shape) and (tp is None or size == tp):
                listed = {
                    f: {get_family(f).files.file_key(s) for s in groups.get(f, ())} for f in keys
                }
                if all(set(wanted) <= listed[f] for f, wanted in keys.items()):
                    found.append((name, size))
    return sorted(found)


@dataclass(frozen=True)
class LogShapes:
    """The shapes a log's warnings ask for.

    Attributes:
        tp: tensor-parallel size (`--tp`, else the log's); None when neither states it.
        shapes: family name -> its distinct missing shapes (families with some only).
        block_shapes: their distinct [group_n, group_k], ascending.
        engines: "sglang" and/or "vllm", whose warnings these are.
    """

    tp: int | None
    shapes: Mapping[str, list[Shape]]
    block_shapes: list[tuple[int, int]]
    engines: list[str]

    def keys(self, families: Collection[str] | None = None) -> dict[str, list[tuple[int, ...]]]:
        """Family name -> the distinct file keys of its shapes, in order of first appearance (of
        `families` only, when given)."""
        return {
            name: list(dict.fromkeys(get_family(name).files.file_key(s) for s in shapes))
            for name, shapes in self.shapes.items()
            if families is None or name in families
        }

    @property
    def whole(self) -> list[str]:
        """The families whose file names hold their shapes' whole rows (`VllmLogLine.key_names`
        are `FamilyShapes.shapes_row`, as the dense GEMM's N and K): only theirs can be saved
        from a log."""
        return [
            name
            for name in self.shapes
            if (line := get_family(name).log_line) is not None
            and get_family(name).shapes.shapes_row == f"[{', '.join(line.key_names)}]"
        ]


def log_shapes(scan: LogScan, tp: int | None) -> LogShapes:
    """The shapes of `scan` (`read_log`), at `tp` or else the log's TP."""
    shapes = {name: found for name in scan.files if (found := scan.shapes_of(name))}
    return LogShapes(
        tp=tp if tp is not None else scan.tp,
        shapes=shapes,
        block_shapes=sorted({s.block_pair(n) for n, found in shapes.items() for s in found}),
        engines=sorted({m.engine for files in scan.files.values() for m in files}),
    )


def partial_shapes_line(family: str, tp: int | None, save: str) -> str:
    """The line that sends a family whose file names hold only part of its shapes (fused-MoE
    experts: E and N) to `from-config`."""
    kind = get_family(family)
    what, names = (kind.log_line.what, kind.log_line.key_names) if kind.log_line else ("", ())
    return (
        f"the log names {what} by {', '.join(names)} only, not their rows "
        f"{kind.shapes.shapes_row}: derive them with `tuner shapes from-config config.json "
        f"--tp {tp or '<TP>'} --save {save}`"
    )


def save_problem(found: LogShapes, save: str) -> str | None:
    """Why `--save NAME` cannot save these shapes (one line), or None when it can."""
    if found.tp is None:
        return "the log does not state the tensor-parallel size: pass --tp with --save"
    if len(found.block_shapes) != 1:
        return "the log has shapes of several block_shapes; a shapes entry has one"
    if not found.whole:
        return partial_shapes_line(next(iter(found.shapes)), found.tp, save)
    return None


@dataclass(frozen=True)
class NextStep:
    """Lines to print, then (when `model` is set) the `tuner sweep` commands of `model` at `tp`
    (`--engine sglang` export too when `sglang`)."""

    lines: tuple[str, ...]
    model: str | None = None
    tp: int | None = None
    sglang: bool = False


def next_step(scan: LogScan, found: LogShapes, log: Path) -> NextStep:
    """Without `--save`: the known model whose shapes cover the log's (`find_covering`; else
    the one that covers the families whose shapes a log names whole, the others derived from
    a config), or the command that saves them under a free name first.

    Args:
        scan: the log's scan.
        found: `log_shapes(scan, tp)`.
        log: the log's path, as the user gave it (it goes into the suggested command).
    """
    block = found.block_shapes[0] if len(found.block_shapes) == 1 else None
    covering = find_covering(found.keys(), block, found.tp) if block else []
    parts = [n for n in found.shapes if n not in found.whole]
    lines = () if covering else tuple(partial_shapes_line(n, found.tp, "NAME") for n in parts)
    if not covering and found.whole and parts and block:
        covering = find_covering(found.keys(found.whole), block, found.tp)
    sglang = "sglang" in found.engines
    if covering:
        model, size = covering[0]
        return NextStep(
            (*lines, f"these are shapes of model '{model}' TP {size}; next:"), model, size, sglang
        )
    if not found.whole:
        return NextStep(lines)
    # A name `--save` accepts: not a packaged model's, nor one saved before (whose shapes
    # differ, or find_covering would have named it).
    name = free_model_key(scan.model or log.stem)
    tp_flag = "" if found.tp is not None and found.tp == scan.tp else f" --tp {found.tp or '<TP>'}"
    save = f"tuner shapes from-log {shlex.quote(str(log))} --save {name}{tp_flag}"
    return NextStep((*lines, f"save them first ({save}), then:"), name, found.tp, sglang)
