"""tuner.compare.verify_run: the shapes planned from a device's files, the no-file line, and
`--fix`'s passes with fake tuning and checks (no store, no kernel)."""

from types import SimpleNamespace

import pytest

from tuner.compare.verify import PointResult, ShapeVerification, Verdict
from tuner.compare.verify_run import (
    MissingAfterFix,
    PlannedShape,
    VerifyRun,
    fix_passes,
    no_file_line,
    shape_grid,
)
from tuner.files.merge import DeviceFiles, SkippedShape, dense_key
from tuner.inputs.shapes import ModelShapes
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.kernels.shape import Shape

BLOCK = (128, 128)
DEFAULT = default_config(BLOCK)
SMALL = KernelConfig(16, 64, 128, 1, 4, 3)
SHAPES = ModelShapes(
    model="tiny",
    description="",
    tp=1,
    block_shape=BLOCK,
    source="test",
    groups={"dense": (Shape(256, 384, BLOCK), Shape(576, 256, BLOCK))},
)


def _file(N, K, configs):
    return SimpleNamespace(
        key=dense_key(N, K, BLOCK),
        family="dense",
        N=N,
        K=K,
        block_shape=BLOCK,
        merged=SimpleNamespace(configs=configs),
    )


def _files(configs=None):
    configs = configs or {1: SMALL.as_dict(), 16: DEFAULT.as_dict()}
    skipped = SkippedShape(dense_key(576, 256, BLOCK), "M=16 has no trials", [16])
    return DeviceFiles(files=[_file(256, 384, configs)], skipped=[skipped])


def test_plan_checks_keys_grid_and_neighbours_and_names_the_shape_without_a_file():
    run = VerifyRun(SHAPES, None, make_runner=lambda N, K, M: None)
    grids = {dense_key(256, 384, BLOCK): (1, 16)}
    planned, missing = run.plan(_files(), grids)
    # keys 1, 16; midpoint 8; neighbours 2, 15, 17; SMALL (key 1) is vLLM's pick at 1, 2, 8.
    assert planned == [
        PlannedShape(
            256, 384, _files().files[0].merged.configs, (1, 2, 8, 15, 16, 17), frozenset({1, 2, 8})
        )
    ]
    assert missing == [
        "N=576,K=256: no file (M=16 has no trials); vLLM runs its default config there"
    ]
    assert run.plan(_files(), grids, only_shapes={(576, 256)})[0] == []


def test_no_file_line_only_when_no_model_shape_has_one():
    assert no_file_line(SHAPES, _files(), "NVIDIA_L20") is None
    assert no_file_line(SHAPES, DeviceFiles(files=[], skipped=_files().skipped), "NVIDIA_L20") == (
        "no file of tiny TP 1 on NVIDIA_L20 to check (N=576,K=256: M=16 has no trials)"
    )


def _result(N, K, verdicts):
    points = tuple(
        PointResult(M=M, key=M, config=SMALL, verdict=verdict, timed=True)
        for M, verdict in verdicts
    )
    return ShapeVerification(N=N, K=K, block_shape=BLOCK, keys=(1,), points=points)


def test_fix_passes_tune_the_offending_m_and_keep_each_shapes_latest_result():
    first = [
        _result(256, 384, [(1, Verdict.OK), (8, Verdict.SLOWER)]),
        _result(576, 256, [(1, Verdict.OK)]),
    ]
    fixed = _result(256, 384, [(1, Verdict.OK), (8, Verdict.OK)])
    tuned, said = [], []

    def check_again(shapes, fix_pass):
        assert (shapes, fix_pass) == ({(256, 384)}, 1)
        return [fixed], []

    latest = fix_passes(first, tune=tuned.append, check_again=check_again, say=said.append)
    assert tuned == [{(256, 384): [8]}]
    assert said == [
        "after --fix pass 1: 1 shape(s), 2 M values: 2 ok (0 run the default "
        "config), 0 slower, 0 failed"
    ]
    assert latest == [fixed, first[1]]


def test_fix_passes_stop_after_three_and_raise_when_a_file_is_gone():
    slower = [_result(256, 384, [(8, Verdict.FAILED)])]
    passes = []
    latest = fix_passes(
        slower,
        tune=lambda offending: None,
        say=lambda line: None,
        check_again=lambda shapes, n: (passes.append(n) or slower, []),
    )
    assert (passes, latest) == ([1, 2, 3], slower)
    said = []
    with pytest.raises(MissingAfterFix, match=r"^1 shape\(s\) have no file after --fix"):
        fix_passes(
            slower,
            tune=lambda offending: None,
            say=said.append,
            check_again=lambda shapes, n: ([], ["N=256,K=384: no file"]),
        )
    assert said == ["N=256,K=384: no file"]


def test_shape_grid_takes_listed_m_and_refuses_an_unknown_word():
    assert shape_grid((64, 1, 64), [8, 16]) == [1, 64]
    with pytest.raises(ValueError, match="'most'"):
        shape_grid("most", [8, 16])
