"""`tuner landscape stats`: a landscape's optima, what they gain over vLLM's
default, and how many configs come near them."""

from typer.testing import CliRunner

from tests.tuner.measure.test_landscape import landscape_of
from tuner.cli.app import app
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.kernels.dense.space import default_config
from tuner.measure.trial import TrialResult

DEFAULT = default_config()  # 64x128x128 g32 w4 s2
A = KernelConfig(16, 64, 128, 1, 4, 3)
B = KernelConfig(32, 64, 128, 1, 4, 3)
C = KernelConfig(32, 128, 128, 1, 4, 3)
D = KernelConfig(256, 256, 128, 1, 8, 5)


def ok(latency_us: float) -> TrialResult:
    return TrialResult(TrialStatus.OK, latency_us, latency_us, latency_us)


FAILED = TrialResult(TrialStatus.OUT_OF_RESOURCES, error="shared memory")
RESULTS = [
    # 256,384,1: A is the optimum, B at 10/10.2 = 0.980 of its speed, C at 0.962, the default
    # 2x slower, D cannot run
    (256, 384, 1, DEFAULT, ok(20.0)),
    (256, 384, 1, A, ok(10.0)),
    (256, 384, 1, B, ok(10.2)),
    (256, 384, 1, C, ok(10.4)),
    (256, 384, 1, D, FAILED),
    # 256,384,16: the default cannot run; B at 0.909
    (256, 384, 16, DEFAULT, FAILED),
    (256, 384, 16, A, ok(5.0)),
    (256, 384, 16, B, ok(5.5)),
    # 576,256,1: nothing ran: left out
    (576, 256, 1, D, FAILED),
]


def run(*args):
    return CliRunner().invoke(app, ["landscape", "stats", *args], env={"COLUMNS": "200"})


def test_the_command_prints_a_row_per_problem_and_a_summary_and_bad_input_one_line(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "l20.json").write_text(landscape_of(RESULTS).to_json())
    done = run("l20.json")
    assert done.exit_code == 0, done.output
    assert run("l20.json", "--ratios", "0.95,0.97,0.98,0.97").stdout == done.stdout
    rows = [line.split() for line in done.stdout.splitlines()]
    assert rows[1] == "N K M ok optimum optimum_us vs default >= 0.98 >= 0.97 >= 0.95".split()
    assert rows[3:5] == [
        "256 384 1 4/5 16x64x128 g1 w4 s3 10.00 2.00x 2 2 3".split(),
        "256 384 16 2/3 16x64x128 g1 w4 s3 5.00 cannot run 1 1 1".split(),
    ]
    assert done.stdout.splitlines()[-1] == (
        "2 (N, K, M): the optimum is 2.00x vLLM's default (geomean of the 1 where it runs); "
        "configs at >= 0.95 of the optimum: median 3, fewest 1 (256,384,16)"
    )
    ratios = "error: --ratios '{}': give fractions in (0, 1], e.g. 0.98,0.95\n"
    for args, message in [
        (("l20.json", "--ratios", "0.9,1.5"), ratios.format("0.9,1.5")),
        (("l20.json", "--ratios", "x"), ratios.format("x")),
        (("missing.json",), "error: missing.json: No such file or directory\n"),
    ]:
        done = run(*args)
        assert (done.exit_code, done.stderr, done.stdout) == (2, message, "")
