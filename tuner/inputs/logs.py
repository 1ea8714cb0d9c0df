"""Read a vLLM or SGLang server log: the block-FP8 GEMM shapes that ran without a config file
(what `tuner shapes from-log` prints and saves).

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
(`KernelFamily.log_line`) and the scan keeps each family's files apart (`LogScan.files`); files
of another dtype (per-tensor FP8, BF16, int8, ...) are not tuned and skipped. TP size and model
name are taken from the engine's start-up lines when the log has them (vLLM: `non-default args:
{..., 'model': '...', 'tensor_parallel_size': 2}`, where no tensor_parallel_size means vLLM's
default 1, and the engine's `with config: model='...', tensor_parallel_size=2`; SGLang:
`tp_size=2`, `model_path='...'`).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from tuner.core import FP8_DTYPE
from tuner.inputs.backends import kernel_verdict, linear_backend_arg, selected_kernel
from tuner.kernels.registry import FAMILIES
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
_T = TypeVar("_T")


@dataclass(frozen=True)
class MissingConfig:
    """One config file an engine looked for and did not find.

    Attributes:
        path: the full path the engine looked at.
        device_name: the engine's device key in the file name, e.g. `NVIDIA_L20`.
        shape: what the file name says of the shape (`FamilyFiles.parse_file_name`: a MoE
            name gives K = 0 and params (("E", E),)).
    """

    path: str
    device_name: str
    shape: Shape


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
        linear_kernels: the block-FP8 linear kernel classes vLLM says it selected ("Selected
            <kernel> for <method>", tuner.inputs.backends), in order of first appearance.
        linear_backend: the `linear_backend` of vLLM's non-default args, or None.
    """

    files: Mapping[str, tuple[MissingConfig, ...]]
    warnings: int
    tp: int | None
    model: str | None
    linear_kernels: tuple[str, ...] = ()
    linear_backend: str | None = None

    @property
    def kernel_line(self) -> str | None:
        """Whether this server reads the tuned files (`tuner.inputs.backends.kernel_verdict`)."""
        return kernel_verdict(self.linear_kernels, self.linear_backend)

    @property
    def device_names(self) -> list[str]:
        """The distinct device_name keys of the missing files, sorted."""
        return sorted({m.device_name for files in self.files.values() for m in files})

    def shapes_of(self, family: str) -> list[Shape]:
        """A family's distinct missing shapes, in order of first appearance."""
        return list(dict.fromkeys(m.shape for m in self.files.get(family, ())))


def _one(values: Iterable[_T]) -> _T | None:
    found = set(values)
    return next(iter(found)) if len(found) == 1 else None


def _missing(line: str, family_name: str) -> MissingConfig | None:
    """The block-FP8 file one of a family's warning lines names, or None (another dtype, or a
    name the family does not parse)."""
    family = FAMILIES[family_name]
    hit = _NOT_FOUND_RE.search(line)
    name_match = (
        re.search(family.log_line.file_re, hit["rest"]) if hit and family.log_line else None
    )
    if hit is None or name_match is None:
        return None
    try:
        shape, device_name, dtype = family.files.parse_file_name(name_match["name"])
    except ValueError:
        return None
    path = hit["rest"][: name_match.end("name")].strip().strip("'\"[")
    return MissingConfig(path, device_name, shape) if dtype == FP8_DTYPE else None


def scan_lines(lines: Iterable[str]) -> LogScan:
    """Find the missing-config warnings of the block-FP8 kernels in log lines.

    Args:
        lines: the log's lines (line endings and ANSI colour codes are tolerated).

    Returns:
        The distinct missing files per family and what the start-up line says about TP and
        model.
    """
    logged = {f.name: f.log_line for f in FAMILIES.values() if f.log_line is not None}
    found: dict[str, dict[MissingConfig, None]] = {name: {} for name in logged}
    tps: list[int] = []
    models: list[str] = []
    backends: list[str | None] = []
    kernels: dict[str, None] = {}
    warnings = 0
    for raw in lines:
        line = _ANSI_RE.sub("", raw).rstrip("\r\n")
        family = next((name for name, ll in logged.items() if ll.marker in line), None)
        if family is not None:
            missing = _missing(line, family)
            if missing is not None:
                found[family].setdefault(missing, None)
                warnings += int(logged[family].counted)
            continue
        if (selected := selected_kernel(line)) is not None:
            kernels.setdefault(selected[0], None)
        args = _NON_DEFAULT in line
        if args or "tensor_parallel_size=" in line or "tp_size=" in line:
            # vLLM's default TP is 1: its non-default args leave tensor_parallel_size out then.
            tps += [int(v) for v in _TP_RE.findall(line) or (["1"] if args else [])]
            models += _MODEL_RE.findall(line)[:1]
            backends += [linear_backend_arg(line)] if args else []
    return LogScan(
        files={name: tuple(files) for name, files in found.items()},
        warnings=warnings,
        tp=_one(tp for tp in tps if 0 < tp <= 1024),
        model=_one(models),
        linear_kernels=tuple(kernels),
        linear_backend=_one(b for b in backends if b),
    )


def _open_lines(path: Path) -> Iterable[str]:
    with path.open("rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    with gzip.open(path, "rb") if gzipped else path.open("rb") as lines:
        for line in lines:
            yield line.decode("utf-8", errors="replace")


def read_log(path: Path) -> LogScan:
    """Scan a log file (plain or gzip) line by line.

    Args:
        path: the log file.

    Returns:
        What `scan_lines` finds.

    Raises:
        ValueError: one line naming the file: it cannot be read, is a folder, or is a
            truncated gzip file (an empty or binary file has no warning lines).
    """
    try:
        return scan_lines(_open_lines(path))
    except OSError as exc:  # missing, unreadable, a folder, a corrupt gzip stream
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise ValueError(f"{path}: cannot read: {reason}") from None
    except EOFError:
        raise ValueError(f"{path}: truncated gzip file") from None
