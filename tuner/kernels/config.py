"""A Triton GEMM launch config in vLLM's keys, shared by every kernel family vLLM tunes that way
(the dense block-FP8 GEMM, the fused-MoE experts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tuner.core import CONFIG_KEYS


@dataclass(frozen=True, order=True)
class KernelConfig:
    """One Triton launch config of the block-FP8 GEMM, field names spelled as vLLM's keys."""

    BLOCK_SIZE_M: int
    BLOCK_SIZE_N: int
    BLOCK_SIZE_K: int
    GROUP_SIZE_M: int
    num_warps: int
    num_stages: int

    def as_dict(self) -> dict[str, int]:
        """The config as vLLM's dict, keys in vLLM's order."""
        # Not dataclasses.asdict: its deep copy cost 80 us a call, in every search step.
        return {key: getattr(self, key) for key in CONFIG_KEYS}

    @classmethod
    def from_dict(cls, values: Mapping[str, object]) -> KernelConfig:
        """Build a config from a mapping with vLLM's six keys.

        Extra keys (AMD files carry `kpack`, `matrix_instr_nonkdim`) are ignored here; readers
        that must keep them do so themselves.

        Raises:
            ValueError: a key is missing, or a value is not a positive integer.
        """
        missing = [key for key in CONFIG_KEYS if key not in values]
        if missing:
            raise ValueError(f"config lacks {', '.join(missing)}")
        for key in CONFIG_KEYS:
            value = values[key]
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"config key {key} must be a positive integer, got {value!r}")
        return cls(**{key: values[key] for key in CONFIG_KEYS})  # type: ignore[arg-type]

    def short(self) -> str:
        """Compact label, e.g. `64x128x128 g32 w4 s2`."""
        return (
            f"{self.BLOCK_SIZE_M}x{self.BLOCK_SIZE_N}x{self.BLOCK_SIZE_K} "
            f"g{self.GROUP_SIZE_M} w{self.num_warps} s{self.num_stages}"
        )
