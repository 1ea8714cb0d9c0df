"""Compile-for-target pruning and the precompiler: real compiles for sm89 and sm90, no GPU."""

import multiprocessing as mp

import pytest

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config, specialization_key
from tuner.kernels.gpus import MAX_SHARED_BYTES
from tuner.kernels.shape import Shape
from tuner.measure import launch_check
from tuner.measure.compile import (
    CompileCache,
    CompileInfo,
    compile_infos,
    compile_pool,
    launch_problem,
)
from tuner.measure.runner import Problem
from tuner.measure.trial import TrialResult
from tuner.run import worker
from tuner.run.worker import CompileAhead, WorkerShared

triton = pytest.importorskip("triton")
if "nvidia" not in triton.backends.backends:
    pytest.skip("this Triton has no NVIDIA backend", allow_module_level=True)

DEFAULT = default_config()
BIG = KernelConfig(128, 128, 128, 16, 8, 9)  # 32 KiB x 9 stages (8 buffers on sm89): > 227 KiB
MID = KernelConfig(128, 128, 128, 16, 8, 5)  # 32 KiB a stage: fits sm90's 227 KiB, not sm89's
SAMPLE = [DEFAULT, BIG]
SHAPE = {"M": 4096, "shape": Shape(5120, 3072, (128, 128)), "out_dtype": "bfloat16"}


def info(config=DEFAULT, arch=89, shared=50_000, regs=128, spills=0, error=None):
    return CompileInfo(arch, config, "spec", "bfloat16", shared, regs, spills, 1.0, error)


def test_specializations_of_m():
    assert specialization_key(1, 5120, 3072, (128, 128)) == "M=1,N=d16,K=d16,gn=d16,gk=d16,kg=any"
    assert specialization_key(4096, 5120, 3072, (128, 128)).startswith("M=d16,")
    assert specialization_key(33, 5120, 3072, (128, 128)).startswith("M=any,")
    assert specialization_key(16, 5120, 4096, (128, 128)).endswith("kg=d16")
    assert specialization_key(2**31, 16, 16, (128, 128)).startswith("M=d16:i64,")


def test_launch_problem_reasons_at_the_cuda_programming_guides_limits():
    assert MAX_SHARED_BYTES[89] == 101376 and MAX_SHARED_BYTES[90] == 232448
    assert MAX_SHARED_BYTES[80] == 166912 and MAX_SHARED_BYTES[120] == 101376
    assert launch_problem(info(shared=101376)) is None
    over = launch_problem(info(shared=101377))
    assert over.status is TrialStatus.OUT_OF_RESOURCES
    assert over.error == (
        "pruned before launch: shared memory 101377 bytes > 101376 bytes per block on sm89"
    )
    assert launch_problem(info(arch=90, shared=101377)) is None
    # 255 registers round up to 8,192 per warp: 8 warps just fit 65,536, 16 warps do not.
    wide = KernelConfig(64, 128, 128, 32, 16, 2)
    assert launch_problem(info(config=KernelConfig(64, 128, 128, 32, 8, 2), regs=255)) is None
    assert launch_problem(info(config=wide, regs=255)).error == (
        "pruned before launch: 255 registers x 16 warps = 131072 > 65536 registers per block"
    )
    assert launch_problem(info(spills=4096)) is None  # spills are slow, not fatal
    broken = launch_problem(info(shared=None, regs=None, error="compile error: boom"))
    assert broken == TrialResult(
        TrialStatus.COMPILE_ERROR, error="compile error: boom", measure_s=0
    )
    assert over == TrialResult(TrialStatus.OUT_OF_RESOURCES, error=over.error, measure_s=0.0)


def test_cache_round_trip_and_toolchain_key(tmp_path):
    cache = CompileCache(tmp_path)
    entry = CompileInfo(90, BIG, "spec-a", "bfloat16", 328704, 255, 2296, 3.5)
    cache.put(entry)
    got = cache.get_many([BIG, DEFAULT], arch=90, specialization="spec-a", out_dtype="bfloat16")
    assert got == {BIG: CompileInfo(90, BIG, "spec-a", "bfloat16", 328704, 255, 2296, 0.0)}
    assert cache.get_many([BIG], arch=89, specialization="spec-a", out_dtype="bfloat16") == {}
    assert cache.get_many([BIG], arch=90, specialization="spec-b", out_dtype="bfloat16") == {}
    other = CompileCache(tmp_path)
    other.toolchain = "triton-0.0:kernel-0"
    assert other.get_many([BIG], arch=90, specialization="spec-a", out_dtype="bfloat16") == {}
    assert len(list(tmp_path.glob("*/*.json"))) == 1  # one file per entry


def test_unknown_arch_and_dtype(tmp_path):
    cache = CompileCache(tmp_path)
    with pytest.raises(ValueError, match="no resource limits known for sm75; known: sm80"):
        compile_infos([DEFAULT], arch=75, cache=cache, **SHAPE)
    with pytest.raises(ValueError, match="out_dtype must be bfloat16 or float16"):
        compile_infos([DEFAULT], arch=90, cache=cache, **{**SHAPE, "out_dtype": "fp8"})


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """(one spawned pool of 2 for the module's compiles, the Triton cache its processes inherit):
    each pool process imports torch and Triton, so the tests share one."""
    triton_cache = tmp_path_factory.mktemp("triton")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(triton_cache))
        with compile_pool(2) as shared:
            yield shared, triton_cache


def test_real_compiles_prune_what_does_not_fit_and_are_cached(tmp_path, pool):
    """SAMPLE compiled for sm90 in a spawned pool (TRITON_INTERPRET=1 in this process), then
    again from the cache: the default runs, BIG is pruned (MID on sm89: the gate's test)."""
    pool, triton_cache = pool
    infos = compile_infos(SAMPLE, arch=90, cache=CompileCache(tmp_path), pool=pool, **SHAPE)
    problems = {c: launch_problem(infos[c]) for c in SAMPLE}
    assert problems[DEFAULT] is None
    assert problems[BIG].status is TrialStatus.OUT_OF_RESOURCES
    assert problems[BIG].error.startswith("pruned before launch: shared memory ")
    assert problems[BIG].error.endswith(" > 232448 bytes per block on sm90")
    infos = compile_infos(SAMPLE, arch=90, cache=CompileCache(tmp_path), **SHAPE)
    assert all(i.compile_s == 0.0 for i in infos.values())  # second time: from the cache
    assert all(
        i.error is None and 0 < i.n_regs <= 255 and i.spill_bytes >= 0 for i in infos.values()
    )
    # One stage of A (64 x 128) and B (128 x 128) fp8 tiles is 24 KiB.
    assert 24 * 1024 <= infos[DEFAULT].shared_bytes < 2 * 24 * 1024 + 2048
    assert infos[BIG].shared_bytes > MAX_SHARED_BYTES[90]
    assert any(triton_cache.iterdir())  # the binaries are in Triton's cache


SMALL_CONFIGS = [
    KernelConfig(16, 32, 64, 1, 4, 2),
    KernelConfig(16, 64, 64, 1, 4, 2),
    KernelConfig(32, 32, 64, 1, 4, 2),
    KernelConfig(32, 64, 64, 1, 4, 2),
]
# A task with M = 33 (its own specialization).
SMALL = Problem(33, 512, 256, (128, 128), "float16")


def test_compile_ahead_sends_the_first_configs_and_rejects_before_launch(pool, monkeypatch):
    """Real sm89 compiles: the first configs go to the pool at once, a config asked before
    them jumps the compiles still waiting, MID is pruned."""
    monkeypatch.setattr(worker, "compile_pool", lambda workers: pool[0])
    compiler = CompileAhead(2, 89, WorkerShared(mp.get_context("spawn")))
    compiler.start(SMALL, SMALL_CONFIGS)
    rejected = compiler.check(MID)  # 4 stages of 32 KiB in flight: over sm89's 99 KiB
    assert rejected.status is TrialStatus.OUT_OF_RESOURCES and rejected.latency_us is None
    assert rejected.error.endswith("bytes per block on sm89")
    assert [compiler.check(c) for c in SMALL_CONFIGS] == [None] * 4
    infos = [compiler.futures[c].result() for c in SMALL_CONFIGS]
    assert infos[0].specialization.startswith("M=any,")
    assert all(i.error is None and i.shared_bytes > 0 for i in infos)
    assert compiler.shared.compile_s.value > 0


def test_a_file_is_checked_in_one_batch_per_launch_specialization(monkeypatch):
    """Seven M, four distinct configs: M=1, other M and M % 16 == 0 are three batches (MID
    and SMALL, first used at M=3 and M=5, in one), each config compiled once; the over-sized
    one cannot launch."""
    batches = []

    def compile_infos(configs, *, arch, shape, M, **_):
        batches.append((M, configs))
        shared = {c: 300_000 if c == BIG else 40_000 for c in configs}
        return {c: info(config=c, arch=arch, shared=shared[c]) for c in configs}

    monkeypatch.setattr(launch_check, "compile_infos", compile_infos)
    small = SMALL_CONFIGS[0]
    by_m = {1: DEFAULT, 3: MID, 5: small, 16: BIG, 32: DEFAULT, 48: MID, 64: BIG}
    configs = {M: config.as_dict() for M, config in by_m.items()}
    verdict = launch_check.check_entries(
        configs, arch=90, device_name="NVIDIA_H200", N=512, K=256, block_shape=(128, 128)
    )
    assert batches == [(1, [DEFAULT]), (3, [MID, small]), (16, [BIG])]
    assert sorted(verdict.cannot_launch) == [16, 64] and verdict.configs == 4
