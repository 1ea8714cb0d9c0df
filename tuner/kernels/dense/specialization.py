"""Which launches of the dense kernel compile to different binaries: Triton specializes integer
arguments equal to 1 and divisible by 16 (JITFunction's specialization, triton/runtime/jit.py),
so one shape has three binaries over M."""

from __future__ import annotations


def _int_class(value: int) -> str:
    """How Triton's launcher specializes an integer argument: 1, divisible by 16, or neither."""
    kind = "1" if value == 1 else ("d16" if value % 16 == 0 else "any")
    return kind if -(2**31) <= value < 2**31 else kind + ":i64"


def specialization_key(M: int, N: int, K: int, block_shape: tuple[int, int]) -> str:
    """The part of (M, N, K, block_shape) that selects a different binary, as a short string.

    The kernel's integer arguments are M, N, K, group_n, group_k and strides that equal K, N or
    ceil(K / group_k) for contiguous tensors (`tuner.kernels.dense.target.launch_specialization`);
    each is specialized as 1, divisible by 16, or neither (and i64 past 2**31). So M = 1,
    M % 16 == 0 and other M are three specializations of one shape.

    Args:
        M: rows of A.
        N: rows of B.
        K: the reduction dimension.
        block_shape: [group_n, group_k].

    Returns:
        e.g. "M=1,N=d16,K=d16,gn=d16,gk=d16,kg=any" for M=1, N=5120, K=3072, [128, 128].
    """
    group_n, group_k = block_shape
    k_groups = -(-K // group_k)
    values = {"M": M, "N": N, "K": K, "gn": group_n, "gk": group_k, "kg": k_groups}
    return ",".join(f"{name}={_int_class(value)}" for name, value in values.items())
