"""The values of a `tuner` command's arguments read and checked: --m's batch sizes and the
--configs file; bad input is one line and exit 2."""

from __future__ import annotations

from pathlib import Path

from tuner.cli.errors import fail
from tuner.core import VLLM_M_GRID
from tuner.files.format import parse_config_list
from tuner.kernels.config import KernelConfig

# The largest M a command tunes or times: 2**20 tokens in one batch, far past vLLM's grid (4096)
# and its largest batches; a larger M is a typo, whose inputs would not fit a GPU.
MAX_M = 2**20

# vLLM's default batch sizes (benchmarks/kernels/benchmark_w8a8_block_fp8.py), as --m spells them.
DEFAULT_M = ",".join(map(str, VLLM_M_GRID))


def parse_m_values(text: str) -> tuple[int, ...]:
    """`"1,16,32"` -> (1, 16, 32), sorted and unique.

    Raises:
        ValueError: an entry is not a positive integer.
    """
    values = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--m: '{part}' is not a positive integer (expected e.g. 1,16,32)")
        if int(part) > MAX_M:
            raise ValueError(
                f"--m: {part} is larger than {MAX_M:,} tokens in one batch "
                "(vLLM's grid ends at 4096)"
            )
        values.add(int(part))
    return tuple(sorted(values))


def load_configs(path: Path | None) -> tuple[KernelConfig, ...] | None:
    """The `--configs` file's configs (a JSON list of vLLM's six-key dicts) as KernelConfig;
    None when no file is given. Bad files exit 2 with one line (typer.Exit)."""

    if path is None:
        return None
    try:
        items = parse_config_list(path.read_bytes().decode("utf-8"), source=str(path))
        return tuple(dict.fromkeys(KernelConfig.from_dict(item) for item in items))
    except OSError as exc:
        raise fail(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise fail(f"{path}: not UTF-8 text") from None
    except ValueError as exc:  # one line that names the file
        raise fail(str(exc)) from None
