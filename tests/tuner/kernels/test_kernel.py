"""The block-FP8 kernel against the float64 reference, and its input checks; the Triton < 3.8
interpreter shim: applied exactly where it is needed, and a launch that indexes with a scalar
tensor (our K loop) computes the right value and leaves Triton as it was."""

from __future__ import annotations

import dataclasses
import math
import os
import random

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.jit import JITFunction

from tuner.kernels import interpreter
from tuner.kernels.accuracy import relative_error
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.kernel import w8a8_block_fp8_matmul, w8a8_block_fp8_matmul_kernel
from tuner.kernels.dense.space import VLLM_AXES, default_config
from tuner.kernels.dense.workload import DenseWorkload
from tuner.kernels.interpreter import fix_interpreter_index
from tuner.kernels.shape import Shape

BLOCK_SHAPE = (128, 128)
TOLERANCE = 1e-2  # relative Frobenius error, as tuner/measure/runner.py checks a bf16 output

# tests/conftest.py turns the interpreter on unless TRITON_INTERPRET was set; with it off the
# kernel is compiled and these tests run on the GPU.
INTERPRETED = not isinstance(w8a8_block_fp8_matmul_kernel, JITFunction)
DEVICE = "cpu" if INTERPRETED else "cuda"
needs_device = pytest.mark.skipif(
    not INTERPRETED and not torch.cuda.is_available(),
    reason="TRITON_INTERPRET is off and no CUDA device is visible",
)

# A fixed default seed, so a run is repeatable; KERNEL_TEST_SEED=<seed> draws other random cases
# (the seed is in every case's id, so a failure replays with it).
SEED = int(os.environ.get("KERNEL_TEST_SEED", "20261202"))


BF16, FP16 = torch.bfloat16, torch.float16

# (M, N, K, BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, out dtype): the must-haves,
# present whatever the seed. The comment says what each adds.
FIXED = [
    (1, 576, 200, 16, 64, 64, 1, BF16),  # M = 1; N = 4.5 groups; K tail of 8 in a 64-tile
    (1, 2112, 256, 64, 256, 128, 32, FP16),  # M = 1; N = 16.5 groups
    (33, 576, 300, 32, 128, 128, 16, BF16),  # M % BLOCK_SIZE_M; K tail of 44 in a 128-tile
    (100, 2112, 192, 128, 256, 64, 64, FP16),  # K % 128 != 0, K % 64 == 0
    (300, 320, 128, 256, 32, 128, 1, BF16),  # 10 column tiles, 2 row tiles of 256
    (530, 96, 72, 16, 32, 64, 32, FP16),  # 34 row tiles: one full group of 32 and a partial one
    (1050, 40, 64, 16, 64, 64, 64, BF16),  # 66 row tiles: a full group of 64 and a partial one
    (250, 130, 130, 64, 128, 128, 16, FP16),  # group larger than the 4 row tiles; N just past 128
    (17, 64, 1, 16, 32, 64, 1, BF16),  # K = 1: unit scale strides become constants
    (48, 48, 128, 32, 256, 128, 1, FP16),  # N < BLOCK_SIZE_N and < group_n: columns wrap
    (290, 60, 100, 16, 32, 64, 16, BF16),  # 19 row tiles: a full group of 16 and a partial one
]
MAX_PROGRAMS = 16  # keeps one interpreted random launch short


def make_inputs(M: int, N: int, K: int, *, seed: int, device: str = "cpu") -> DenseWorkload:
    return DenseWorkload.make(Shape(N, K, BLOCK_SHAPE), M, seed=seed, device=device)


def random_cases(seed: int, count: int) -> list[tuple]:
    """`count` cases from vLLM's config grid and shapes with awkward M, N, K, small enough to
    run in the interpreter."""
    rng = random.Random(seed)
    cases: list[tuple] = []
    while len(cases) < count:
        config = KernelConfig(**{key: rng.choice(values) for key, values in VLLM_AXES.items()})
        M = 1 if rng.random() < 0.2 else rng.randint(2, 320)
        N, K = rng.randint(1, 700), rng.randint(1, 520)
        if math.ceil(M / config.BLOCK_SIZE_M) * math.ceil(N / config.BLOCK_SIZE_N) <= MAX_PROGRAMS:
            cases.append((M, N, K, config, rng.choice((BF16, FP16))))
    return cases


WARPS, STAGES = VLLM_AXES["num_warps"], VLLM_AXES["num_stages"]
CASES = [
    (M, N, K, KernelConfig(bm, bn, bk, g, WARPS[i % 2], STAGES[i % 4]), dtype)
    for i, (M, N, K, bm, bn, bk, g, dtype) in enumerate(FIXED)
] + random_cases(SEED, 6)


def run_case(inputs: DenseWorkload, config: KernelConfig, out_dtype, out_shape) -> torch.Tensor:
    """Launch with C pre-filled with NaN, so unwritten elements stay NaN. On a GPU, a config
    whose shared memory the device cannot give (Triton's OutOfResources) is skipped: the
    interpreter has no such limit."""
    from triton.runtime.errors import OutOfResources

    out = torch.full(out_shape, math.nan, dtype=out_dtype, device=DEVICE)
    try:
        result = w8a8_block_fp8_matmul(
            inputs.A,
            inputs.B,
            inputs.As,
            inputs.Bs,
            BLOCK_SHAPE,
            config.as_dict(),
            out_dtype=out_dtype,
            out=out,
        )
    except OutOfResources as exc:
        if INTERPRETED:
            raise
        pytest.skip(f"the GPU cannot run {config.short()}: {exc}")
    assert result is out and bool(torch.isfinite(out).all())
    return out


@needs_device
@pytest.mark.parametrize(
    ("M", "N", "K", "config", "out_dtype"),
    CASES,
    ids=[f"seed{SEED}-M{c[0]}-N{c[1]}-K{c[2]}-{c[3].short()}" for c in CASES],
)
def test_kernel_matches_float64_reference(M, N, K, config, out_dtype) -> None:
    inputs = make_inputs(M, N, K, seed=SEED, device=DEVICE)
    out = run_case(inputs, config, out_dtype, (M, N))
    assert relative_error(out, inputs.reference()) < TOLERANCE


@needs_device
def test_kernel_takes_leading_dims_allocates_its_output_and_handles_empty_m() -> None:
    """A [2, 5, K] is an M = 10 problem; C comes back as [2, 5, N]."""
    flat = make_inputs(10, 192, 160, seed=SEED, device=DEVICE)
    inputs = dataclasses.replace(flat, A=flat.A.view(2, 5, 160), As=flat.As.view(2, 5, 2))
    out = run_case(inputs, default_config(), BF16, (2, 5, 192))
    assert relative_error(out, inputs.reference()) < TOLERANCE
    config = default_config().as_dict()
    out = w8a8_block_fp8_matmul(
        flat.A, flat.B, flat.As, flat.Bs, BLOCK_SHAPE, config, out_dtype=FP16
    )
    assert out.shape == (10, 192) and out.dtype == FP16
    empty = make_inputs(0, 64, 128, seed=SEED, device=DEVICE)
    out = w8a8_block_fp8_matmul(empty.A, empty.B, empty.As, empty.Bs, BLOCK_SHAPE, config)
    assert out.shape == (0, 64)


def _bad_call(**changes: object) -> None:
    inputs = make_inputs(4, 256, 256, seed=0)
    args = {**vars(inputs), "config": default_config().as_dict()}
    w8a8_block_fp8_matmul(**{**args, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"config": {**default_config().as_dict(), "BLOCK_SIZE_K": 256}},
            "BLOCK_SIZE_K=256 does not divide group_k=128",
        ),
        ({"config": {**default_config().as_dict(), "BLOCK_SIZE_N": 48}}, "BLOCK_SIZE_N=48"),
        ({"config": {"BLOCK_SIZE_M": 64}}, "config lacks"),
    ],
)
def test_wrapper_rejects_bad_input(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        _bad_call(**changes)


def test_reference_on_hand_computed_case() -> None:
    """block_shape [2, 2], N = 3 and K = 3: the last row of B and the last column of K fall in
    partial blocks."""
    A = torch.tensor([[1.0, 2.0, 3.0], [-4.0, 0.5, 8.0]]).to(torch.float8_e4m3fn)
    B = torch.tensor([[1.0, 1.0, 1.0], [2.0, 0.0, -1.0], [0.25, 16.0, 2.0]]).to(torch.float8_e4m3fn)
    As = torch.tensor([[0.5, 2.0], [1.0, 0.25]])  # row m: k in {0, 1} -> As[m, 0], k = 2 -> [m, 1]
    Bs = torch.tensor([[1.0, 4.0], [0.5, 3.0]])  # rows n in {0, 1} -> Bs[0], n = 2 -> Bs[1]
    ref = DenseWorkload(A=A, B=B, As=As, Bs=Bs, block_shape=(2, 2)).reference()
    expected = torch.tensor(
        [
            # m = 0: 0.5 * (1*1 + 2*1) * 1 + 2 * 3*1 * 4;  0.5 * (1*2 + 0) * 1 + 2 * 3*(-1) * 4;
            #        0.5 * (1*0.25 + 2*16) * 0.5 + 2 * 3*2 * 3
            [1.5 + 24.0, 1.0 - 24.0, 8.0625 + 36.0],
            # m = 1: (-4*1 + 0.5*1) * 1 + 0.25 * 8*1 * 4;  (-4*2 + 0) + 0.25 * 8*(-1) * 4;
            #        (-4*0.25 + 0.5*16) * 0.5 + 0.25 * 8*2 * 3
            [-3.5 + 8.0, -8.0 - 8.0, 3.5 + 12.0],
        ],
        dtype=torch.float64,
    )
    assert ref.dtype == torch.float64
    assert torch.equal(ref, expected)


def test_make_inputs_is_seeded_and_in_range() -> None:
    first, again = (make_inputs(5, 300, 260, seed=7) for _ in range(2))
    other = make_inputs(5, 300, 260, seed=8)  # shapes: the wrapper's checks
    tensors = ("A", "B", "As", "Bs")
    assert all(torch.equal(getattr(first, n).float(), getattr(again, n).float()) for n in tensors)
    assert not torch.equal(first.A.float(), other.A.float())
    values = first.B.float()
    assert values.abs().max() <= 448.0 and values.min() < -300.0 and values.max() > 300.0
    scales = torch.cat([first.As.flatten(), first.Bs.flatten()])
    assert scales.min() >= 1e-3 and scales.max() < 4e-3


def test_relative_error_values() -> None:
    ref = torch.tensor([[3.0, 4.0]], dtype=torch.float64)
    assert relative_error(ref.to(BF16), ref) == 0.0
    assert relative_error(torch.tensor([[3.0, 4.5]]), ref) == pytest.approx(0.1)
    assert relative_error(torch.tensor([[math.nan, 4.0]]), ref) == math.inf
    assert relative_error(torch.tensor([[math.inf, 4.0]]), ref) == math.inf
    with pytest.raises(ValueError):
        relative_error(torch.zeros(3), ref)


@triton.jit
def _k_tiles_kernel(out_ptr, K, BLOCK_SIZE_K: tl.constexpr):
    # The loop header of our kernels: range() over a scalar tensor calls its __index__.
    total = 0
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        total += k + 1
    tl.store(out_ptr, total)


def test_the_fix_is_applied_only_under_the_interpreter_of_an_old_triton(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    for version in ("3.8.0", "3.10rc1", "not a version"):
        monkeypatch.setattr(triton, "__version__", version)
        assert interpreter.needs_index_fix() is False
    monkeypatch.setattr(triton, "__version__", "3.6.0+git1a2b")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert interpreter.needs_index_fix() is False
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert interpreter.needs_index_fix() is True


@pytest.mark.skipif(not triton.knobs.runtime.interpret, reason="needs TRITON_INTERPRET=1")
def test_a_scalar_tensor_indexes_a_range_on_this_numpy() -> None:
    assert fix_interpreter_index() == interpreter.needs_index_fix()
    before = tl.tensor.__dict__.get("__index__")
    out = torch.zeros(1, dtype=torch.int32)
    _k_tiles_kernel[(1,)](out, 200, BLOCK_SIZE_K=64)  # 4 K-tiles: 1 + 2 + 3 + 4
    assert out.item() == 10
    assert tl.tensor.__dict__.get("__index__") is before  # the launch restored Triton's own
    # numpy >= 2.4 refuses int() of a 1-element array: the reason for the shim.
    if tuple(int(part) for part in np.__version__.split(".")[:2]) >= (2, 4):
        with pytest.raises(TypeError):
            int(np.array([3]))
