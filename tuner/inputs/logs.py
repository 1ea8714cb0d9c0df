"""Read a vLLM or SGLang server log: the block-FP8 GEMM shapes that ran without a config file.

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
block_shape=[128,128].json`. Block-FP8 MoE files are kept apart (`LogScan.moe_missing`); any other
MoE file (per-tensor `dtype=fp8_w8a8.json`, BF16 without a dtype, int8, ...) is out of scope and
only listed by name (`LogScan.moe_out_of_scope`). TP size and model name are taken from the
engine's start-up lines when the log has them (vLLM: `non-default args: {..., 'model': '...',
'tensor_parallel_size': 2}`, where no tensor_parallel_size means vLLM's default 1, and the
engine's `with config: model='...', tensor_parallel_size=2`; SGLang: `tp_size=2`,
`model_path='...'`).
"""

from __future__ import annotations

import gzip
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tuner.inputs.backends import kernel_verdict, linear_backend_arg, selected_kernel
from tuner.kernels.dense.naming import FP8_DTYPE, parse_config_file_name
from tuner.kernels.moe.naming import parse_moe_config_file_name

MARKER = "Using default W8A8 Block FP8 kernel config"
MOE_MARKER = "Using default MoE config"
# Any fused-MoE file name at the end of a path: E=..,N=..,device_name=..[,dtype=..][,block_shape=..]
# (SGLang's `block_shape=[128, 128]` has a space).
_MOE_FILE_RE = re.compile(
    r"(?:^|[/\\'\"\s\[])(?P<name>E=\d+,N=\d+,device_name=[^/\\\s]+?(?: \d+\])?\.json)")
_NOT_FOUND_RE = re.compile(r"Config file not found at\s+(?P<rest>.*)$")
# The file name at the end of a path; SGLang puts a space inside block_shape. The device part
# may hold any character vLLM keeps (',' and '=' too), so it ends at the last ",dtype=".
_FILE_RE = re.compile(
    r"(?:^|[/\\'\"\s\[])(?P<name>N=\d+,K=\d+,device_name=[^/\\\s]+,dtype=[a-z0-9_]+,"
    r"block_shape=\[\d+, ?\d+\]\.json)"
)
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


@dataclass(frozen=True)
class MissingConfig:
    """One config file an engine looked for and did not find.

    Attributes:
        engine: "vllm" or "sglang" (from the path, else from the block_shape spelling).
        path: the full path the engine looked at.
        device_name: the engine's device key in the file name, e.g. `NVIDIA_L20`.
        N: rows of the weight B [N, K].
        K: columns of B [N, K].
        block_shape: [group_n, group_k].
    """

    engine: str
    path: str
    device_name: str
    N: int
    K: int
    block_shape: tuple[int, int]

    @property
    def folder(self) -> str:
        """The folder the engine reads its config files from (the path without the name)."""
        cut = max(self.path.rfind("/"), self.path.rfind("\\"))
        return self.path[:cut] if cut > 0 else ""


@dataclass(frozen=True)
class MissingMoeConfig:
    """One block-FP8 fused-MoE config file vLLM looked for and did not find.

    Attributes:
        path: the full path vLLM looked at.
        device_name: the device part of the file name (every H200 is `NVIDIA_H200` there).
        E: number of experts (on this rank).
        N: per-rank intermediate size (w2's last dimension).
        block_shape: [group_n, group_k].
    """

    path: str
    device_name: str
    E: int
    N: int
    block_shape: tuple[int, int]


@dataclass(frozen=True)
class LogScan:
    """What a log says about missing block-FP8 config files.

    Attributes:
        missing: distinct missing files, in order of first appearance.
        warnings: how many such warnings the log has (one per rank and file).
        tp: tensor-parallel size from the engine's start-up line; None if absent or ambiguous.
        model: the served model's name or path from that line; None if absent or ambiguous.
        lines: lines read.
        linear_kernels: the block-FP8 linear kernel classes vLLM says it selected ("Selected
            <kernel> for <method>", tuner.inputs.backends), in order of first appearance.
        linear_backend: the `linear_backend` of vLLM's non-default args, or None.
        moe_missing: distinct missing block-FP8 fused-MoE files, in order of first appearance.
        moe_out_of_scope: distinct names of other missing fused-MoE files (per-tensor FP8,
            BF16, ...): this tool tunes none of them.
    """

    missing: tuple[MissingConfig, ...]
    warnings: int
    tp: int | None
    model: str | None
    lines: int
    linear_kernels: tuple[str, ...] = ()
    linear_backend: str | None = None
    moe_missing: tuple[MissingMoeConfig, ...] = ()
    moe_out_of_scope: tuple[str, ...] = ()

    @property
    def kernel_line(self) -> str | None:
        """Whether this server reads the tuned files (`tuner.inputs.backends.kernel_verdict`)."""
        return kernel_verdict(self.linear_kernels, self.linear_backend)

    @property
    def device_names(self) -> list[str]:
        """The distinct device_name keys (of the dense files, else of the MoE files), sorted."""
        return sorted({m.device_name for m in self.missing or self.moe_missing})

    def experts(self) -> list[tuple[int, int, tuple[int, int]]]:
        """Distinct (E, N, block_shape) of the missing block-FP8 MoE files, in order."""
        return list(dict.fromkeys((m.E, m.N, m.block_shape) for m in self.moe_missing))

    def shapes(self, device_name: str | None = None) -> list[tuple[int, int, tuple[int, int]]]:
        """Distinct (N, K, block_shape), in order of first appearance.

        Args:
            device_name: only files of this device; None for all.
        """
        keys = (
            (m.N, m.K, m.block_shape) for m in self.missing
            if device_name is None or m.device_name == device_name
        )
        return list(dict.fromkeys(keys))


def _engine_of(path: str, name: str) -> str:
    parts = re.split(r"[/\\]", path)
    if "sglang" in parts:
        return "sglang"
    if "vllm" in parts:
        return "vllm"
    return "sglang" if ", " in name else "vllm"


def _one(values: set) -> object | None:
    return next(iter(values)) if len(values) == 1 else None


def scan_lines(lines: Iterable[str]) -> LogScan:
    """Find the missing-config warnings of the block-FP8 GEMM in log lines.

    Args:
        lines: the log's lines (line endings and ANSI colour codes are tolerated).

    Returns:
        The distinct missing files and what the start-up line says about TP and model.
    """
    found: dict[str, MissingConfig] = {}
    warnings = 0
    count = 0
    tps: set[int] = set()
    models: set[str] = set()
    kernels: dict[str, None] = {}
    backends: set[str] = set()
    moe: dict[str, MissingMoeConfig] = {}
    moe_other: dict[str, None] = {}
    for raw in lines:
        count += 1
        line = _ANSI_RE.sub("", raw).rstrip("\r\n")
        if MOE_MARKER in line:
            _moe_warning(line, moe, moe_other)
            continue
        if MARKER not in line:
            selected = selected_kernel(line)
            if selected is not None:
                kernels.setdefault(selected[0], None)
            if _NON_DEFAULT in line:
                backends.update(filter(None, [linear_backend_arg(line)]))
                # vLLM's default TP is 1: the dict leaves tensor_parallel_size out then.
                found_tp = _TP_RE.findall(line) or ["1"]
                tps.update(int(v) for v in found_tp if 0 < int(v) <= 1024)
                models.update(_MODEL_RE.findall(line)[:1])
            elif "tensor_parallel_size=" in line or "tp_size=" in line:
                tps.update(int(v) for v in _TP_RE.findall(line) if 0 < int(v) <= 1024)
                models.update(_MODEL_RE.findall(line)[:1])
            continue
        hit = _NOT_FOUND_RE.search(line)
        name_match = _FILE_RE.search(hit["rest"]) if hit else None
        if name_match is None:
            continue
        try:
            parsed = parse_config_file_name(name_match["name"])
        except ValueError:
            continue
        if parsed.dtype != FP8_DTYPE:
            continue
        warnings += 1
        path = hit["rest"][: name_match.end("name")].strip().strip("'\"[")
        key = f"{parsed.device_name}|{parsed.N}|{parsed.K}|{parsed.block_shape}|{path}"
        if key not in found:
            found[key] = MissingConfig(
                engine=_engine_of(path, name_match["name"]), path=path,
                device_name=parsed.device_name, N=parsed.N, K=parsed.K,
                block_shape=parsed.block_shape,
            )
    return LogScan(missing=tuple(found.values()), warnings=warnings, tp=_one(tps),
                   model=_one(models), lines=count, linear_kernels=tuple(kernels),
                   linear_backend=_one(backends), moe_missing=tuple(moe.values()),
                   moe_out_of_scope=tuple(moe_other))


def _moe_warning(line: str, found: dict[str, MissingMoeConfig], other: dict[str, None]) -> None:
    """Record the file of one fused-MoE 'Config file not found' warning line."""
    hit = _NOT_FOUND_RE.search(line)
    name_match = _MOE_FILE_RE.search(hit["rest"]) if hit else None
    if name_match is None:
        return
    name = name_match["name"]
    try:
        E, N, device_name, _, block_shape = parse_moe_config_file_name(name)
    except ValueError:
        other.setdefault(name[:200], None)
        return
    path = hit["rest"][: name_match.end("name")].strip().strip("'\"[")
    found.setdefault(f"{device_name}|{E}|{N}|{block_shape}|{path}", MissingMoeConfig(
        path=path, device_name=device_name, E=E, N=N, block_shape=block_shape))


def _open_lines(path: Path) -> Iterable[str]:
    raw = path.open("rb")
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
