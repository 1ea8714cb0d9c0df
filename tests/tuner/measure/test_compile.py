"""Compile-for-target pruning and the precompiler: real compiles for sm89 and sm90, no GPU."""

import multiprocessing as mp

import pytest

from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.kernels.gpus import MAX_SHARED_BYTES
from tuner.kernels.shape import Shape
from tuner.measure import compile as compile_module
from tuner.measure.compile import CompileInfo, compile_infos, compile_pool, launch_problem
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
SHAPE = {"shape": Shape(5120, 3072, (128, 128)), "out_dtype": "bfloat16"}
FIRSTS = dict.fromkeys(SAMPLE, 4096)  # M = 4096 for each


def info(config=DEFAULT, arch=89, shared=50_000, regs=128, spills=0, error=None):
    return CompileInfo(arch, config, shared, regs, spills, 1.0, error)


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


def test_unknown_arch():
    with pytest.raises(ValueError, match="no resource limits known for sm75; known: sm80"):
        compile_infos(FIRSTS, arch=75, **SHAPE)


@pytest.fixture(scope="module")
def pool(tmp_path_factory):
    """(one spawned pool of 2 for the module's compiles, the Triton cache its processes inherit):
    each pool process imports torch and Triton, so the tests share one."""
    triton_cache = tmp_path_factory.mktemp("triton")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_CACHE_DIR", str(triton_cache))
        with compile_pool(2) as shared:
            yield shared, triton_cache


def test_real_compiles_prune_what_does_not_fit(pool):
    """SAMPLE compiled for sm90 in a spawned pool (TRITON_INTERPRET=1 in this process): the
    default runs, BIG is pruned (MID on sm89: the gate's test)."""
    pool, triton_cache = pool
    infos = compile_infos(FIRSTS, arch=90, pool=pool, **SHAPE)
    problems = {c: launch_problem(infos[c]) for c in SAMPLE}
    assert problems[DEFAULT] is None
    assert problems[BIG].status is TrialStatus.OUT_OF_RESOURCES
    assert problems[BIG].error.startswith("pruned before launch: shared memory ")
    assert problems[BIG].error.endswith(" > 232448 bytes per block on sm90")
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
    assert all(i.error is None and i.shared_bytes > 0 for i in infos)
    assert compiler.shared.compile_s.value > 0


def test_a_file_compiles_each_distinct_config_once_at_its_first_m(monkeypatch):
    """Seven M, four distinct configs: each compiled once, at the first M that uses it; the
    over-sized one cannot launch."""
    batches = []

    def compile_infos(firsts, *, arch, **_):
        batches.append(dict(firsts))
        shared = {c: 300_000 if c == BIG else 40_000 for c in firsts}
        return {c: info(config=c, arch=arch, shared=shared[c]) for c in firsts}

    monkeypatch.setattr(compile_module, "compile_infos", compile_infos)
    small = SMALL_CONFIGS[0]
    by_m = {1: DEFAULT, 3: MID, 5: small, 16: BIG, 32: DEFAULT, 48: MID, 64: BIG}
    configs = {M: config.as_dict() for M, config in by_m.items()}
    shape = Shape(512, 256, (128, 128))
    verdict = compile_module.check_entries(configs, shape, arch=90, device_name="NVIDIA_H200")
    assert batches == [{DEFAULT: 1, MID: 3, small: 5, BIG: 16}]
    assert sorted(verdict.cannot_launch) == [16, 64] and verdict.configs == 4
