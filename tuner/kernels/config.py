"""A Triton GEMM launch config in vLLM's keys, shared by every kernel family vLLM tunes that way
(the dense block-FP8 GEMM, the fused-MoE experts)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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

    @classmethod
    def runnable(
        cls,
        values: Mapping[str, object],
        block_shape: tuple[int, int],
        why_invalid: Callable[[KernelConfig, tuple[int, int]], str | None],
    ) -> KernelConfig:
        """`from_dict(values)` that a family's rule `why_invalid` (its space's) lets run with
        `block_shape` [group_n, group_k].

        Raises:
            ValueError: as `from_dict`, or the config cannot run (the rule's reason).
        """
        parsed = cls.from_dict(values)
        reason = why_invalid(parsed, block_shape)
        if reason is not None:
            raise ValueError(f"config {parsed.short()} cannot run: {reason}")
        return parsed

    def short(self) -> str:
        """Compact label, e.g. `64x128x128 g32 w4 s2`."""
        return (
            f"{self.BLOCK_SIZE_M}x{self.BLOCK_SIZE_N}x{self.BLOCK_SIZE_K} "
            f"g{self.GROUP_SIZE_M} w{self.num_warps} s{self.num_stages}"
        )
