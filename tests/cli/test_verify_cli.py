"""`tuner verify`: bad input, verdicts from a fake runner on a filled store, `--fix`, and one
end-to-end run on the interpreter after a real sweep of a one-shape model."""

import json
import re

import pytest

from tests.cli.common import CELL_SPLIT, invoke, ok, one_line_error, query
from tests.standin_vllm import VERSION, build_standin, importable
from tests.storefill import DEFAULT, FAST, fill
from tuner.cli import compare as cli_verify
from tuner.cli import output
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.measure.trial import TrialResult
from tuner.run import gpus

SHAPE_LINE = re.compile(r"^(N=\d+,K=\d+): keys ([\d, ]+); checking (\d+) M values$")
SMALL, BIG = (256, 384), (576, 256)  # the two shapes of `tiny`


def sections(stdout: str) -> dict[str, list[list[str]]]:
    """Table rows per shape line, in order; a shape verified twice (--fix) gets a second key.
    A row starts with its M and two spaces; no other line of stdout does."""
    found: dict[str, list[list[str]]] = {}
    for line in stdout.splitlines():
        if match := SHAPE_LINE.match(line):
            current = match[1] + (" again" if match[1] in found else "")
            found[current] = []
        elif found and re.match(r"\s*\d+ {2,}", line):
            found[current].append(CELL_SPLIT.split(line.strip()))
    return found


def column(rows: list[list[str]], index: int) -> list[str]:
    return [row[index] for row in rows]


class FakeRunner:
    """Timings that depend only on (config, M): FAST beats the default below M=8, loses from
    M=8 on; the default config is 100 us with a spread; every other config 80 us."""

    def __init__(self, M: int, log: list) -> None:
        self.M = M
        self.log = log
        self.default_samples = iter([99.0, 100.0, 101.0] * 100)

    def check(self, candidate) -> TrialResult:
        self.log.append(("check", self.M, candidate.config.short()))
        return TrialResult(TrialStatus.OK, rel_error=1e-3)

    def sample_us(self, candidate) -> float:
        config = candidate.config
        if config == KernelConfig.from_dict(DEFAULT):
            return next(self.default_samples)
        if config == KernelConfig.from_dict(FAST):
            return 50.0 if self.M < 8 else 150.0
        return 80.0


@pytest.fixture
def fake_runner(monkeypatch):
    """What the fake runners ran, in order; each entry's kernel source in `kernels`."""
    log: list = []

    def make(self, N, K, M):
        assert self.runner.name == "interpreter"
        log.append(("kernel", self.kernel))
        return FakeRunner(M, log)

    monkeypatch.setattr(cli_verify._Verify, "make_runner", make)
    monkeypatch.setattr(output.console, "_width", 220)  # one table row per line
    return log


def ran(log):
    return [entry for entry in log if entry[0] == "check"]


def _fill(url, fast=FAST, kernel="builtin"):
    """TRITON_INTERPRETER with keys 1 and 16 for both tiny shapes: `fast` won M=1 of
    (256, 384), the default config everything else."""
    ok_default = [(DEFAULT, True, "ok", 100.0)]
    trials = {(*shape, M): ok_default for shape in (SMALL, BIG) for M in (1, 16)}
    if fast is not None:
        trials[(*SMALL, 1)] = [*ok_default, (fast, False, "ok", 50.0)]
    fill(
        url, trials, device_name="TRITON_INTERPRETER", model="tiny", m_values=(1, 16), kernel=kernel
    )


@pytest.fixture
def store(tmp_path, db):
    """`_fill`'s store, its trials timed by another kernel (hash "abc123": stale)."""
    _fill(db)
    query(tmp_path / "tuner.db", "UPDATE environments SET kernel_hash = 'abc123'")
    return db, tmp_path


def verify(url, *args, code=None):
    args = ["--device", "interpreter", "--model", "tiny", "--rounds", "3", "--db", url, *args]
    return invoke("verify", *args, code=code)


def test_bad_input_is_one_line_and_exit_2(store, fake_runner, monkeypatch):
    """A visible GPU's vLLM key, not the typed name, must be in the store, so the files checked
    are those of the GPU that times them."""
    url, _ = store
    l20 = gpus.GpuInfo(0, "0", "NVIDIA L20", "NVIDIA_L20", "8.9")
    monkeypatch.setattr(gpus, "visible_gpus", lambda: [l20])
    one_line_error(
        verify(url, "--device", "L20"),
        "no device in the store matches 'NVIDIA_L20'; known: TRITON_INTERPRETER; "
        "`tuner sweep --device NVIDIA_L20` on that GPU, or `tuner import` of its files, adds it",
    )
    monkeypatch.setattr(gpus, "visible_gpus", lambda: [])
    cases = [
        (["--model", "llama9"], "unknown model"),
        (["--device", "L20"], "no visible GPU matches --device L20; visible: no CUDA GPU"),
    ]
    for args, text in cases:
        result = verify(url, *args, code=2)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], lines
    # every trial is of another kernel: export's note, then one error line with the reasons
    stale = verify(url, code=2)
    note, error = stale.stderr.strip().splitlines()
    assert note.startswith(
        "note: left out 5 ok trial(s) of TRITON_INTERPRETER timed with "
        "another kernel or Triton than the current"
    )
    assert error == (
        "error: TRITON_INTERPRETER: no file of tiny TP 1 to check (N=256,K=384: no M has a "
        "winner: nothing to write; M=1, 16 only have trials of another kernel or Triton "
        "(--allow-stale uses them); N=576,K=256: no M has a winner: nothing to write; M=1, 16 "
        "only have trials of another kernel or Triton (--allow-stale uses them))"
    )
    assert ran(fake_runner) == []


def test_off_grid_loss_is_flagged_and_default_picks_are_not_timed(store, fake_runner):
    url, _ = store
    result = verify(url, "--allow-stale", code=1)
    found = sections(result.stdout)
    assert list(found) == ["N=256,K=384", "N=576,K=256"]
    small = found["N=256,K=384"]
    assert column(small, 0) == ["1", "2", "8", "15", "16", "17"]
    assert column(small, 1) == ["1", "1", "1", "16", "16", "16"]
    fast, default = KernelConfig.from_dict(FAST).short(), KernelConfig.from_dict(DEFAULT).short()
    assert column(small, 2) == [fast, fast, fast, default, default, default]
    # chosen_us, default_us, noise_us, speedup, verdict: 3 rounds, default samples 99 100 101
    # (spread 1.2 us); on the interpreter the noise is at least 30% of the default's 100 us.
    assert [row[3:] for row in small[:3]] == [
        ["50.0", "100.0", "30.0", "2.00x", "ok"],
        ["50.0", "100.0", "30.0", "2.00x", "ok"],
        ["150.0", "100.0", "30.0", "0.67x", "slower"],
    ]
    assert {tuple(row[3:]) for row in small[3:]} == {("-", "-", "-", "1.00x", "ok (default)")}
    assert column(found["N=576,K=256"], 7) == ["ok (default)"] * 6
    assert "2 shape(s), 12 M values: 11 ok (9 run the default config), 1 slower, 0 failed" in (
        result.stdout
    )
    one_line_error(
        result, "vLLM's pick is slower than its default config or failed at N=256,K=384 M=8", 1
    )
    assert ran(fake_runner) == [("check", M, s) for M in (1, 2, 8) for s in (fast, default)]


def test_wrong_result_is_a_failure(store, fake_runner, monkeypatch):
    url, _ = store
    wrong = TrialResult(TrialStatus.WRONG_RESULT, error="relative error 0.5 >= 0.01")
    monkeypatch.setattr(FakeRunner, "check", lambda self, candidate: wrong)
    result = verify(url, "--allow-stale", code=1)
    rows = sections(result.stdout)["N=256,K=384"]
    assert [row[7] for row in rows[:3]] == ["failed: wrong_result: relative error 0.5 >= 0.01"] * 3
    assert [row[6] for row in rows[:3]] == ["-"] * 3
    assert "failed at N=256,K=384 M=1, 2, 8\n" in result.stderr


def test_an_interrupt_exits_130(store, fake_runner, monkeypatch):
    def interrupt(self, candidate):
        raise KeyboardInterrupt

    monkeypatch.setattr(FakeRunner, "check", interrupt)
    one_line_error(verify(store[0], "--allow-stale", code=130), "interrupted", 130)


def _default_only(tmp_path):
    path = tmp_path / "default.json"
    path.write_text(json.dumps([DEFAULT]))
    return str(path)


def test_nothing_to_time_exits_0(db, fake_runner):
    _fill(db, fast=None)
    result = verify(db, code=0)
    assert result.stdout.splitlines()[-1] == (
        "2 shape(s), 12 M values: 12 ok (12 run the default config), 0 slower, 0 failed"
    )
    assert result.stderr == ""
    assert fake_runner == []  # nothing ran


def test_inside_vllm_fix_tunes_the_offending_m_with_vllms_kernel_and_checks_again(
    tmp_path, db, monkeypatch, fake_runner
):
    """With vLLM importable the files come from its kernel's trials: verify times that kernel,
    --fix's trials time it too, and the shape is checked again in full with the new key."""
    with importable(build_standin(tmp_path / "site"), monkeypatch):
        _fill(db, kernel="vllm")
        result = verify(db, "--fix", "--configs", _default_only(tmp_path), code=0)
    assert {entry[1] for entry in fake_runner if entry[0] == "kernel"} == {"vllm"}
    # one sweep for the one shape with a slower M, at that M only, of vLLM's kernel
    ((space, source, version, *task),) = query(
        tmp_path / "tuner.db",
        "SELECT DISTINCT s.space, e.kernel_source, e.vllm, t.N, t.K, t.M, t.state FROM trials "
        "JOIN tasks t USING (task_id) JOIN sweeps s USING (sweep_id) JOIN environments e "
        "USING (environment_id) WHERE s.sweep_id = 2",
    )
    assert space.startswith("custom:") and space.endswith(f"@kernel:vllm-{VERSION}")
    assert (source, version, task) == ("vllm", VERSION, [256, 384, 8, "done"])
    assert "--fix of N=256,K=384 x 1 M" in result.stdout
    # checked again in full: key 8 brings midpoints 4 and 12 and neighbours 7, 9
    again = sections(result.stdout)["N=256,K=384 again"]
    assert column(again, 0) == ["1", "2", "4", "7", "8", "9", "12", "15", "16", "17"]
    assert column(again, 1) == ["1", "1", "1", "8", "8", "8", "8", "16", "16", "16"]
    default = KernelConfig.from_dict(DEFAULT).short()
    assert again[4][2:] == [default, *"- - - 1.00x".split(), "ok (default)"]
    assert "after --fix: 1 shape(s), 10 M values: 10 ok" in result.stdout


# End to end: a real sweep, then a real check on the interpreter (timings are the CPU's).
CANDIDATE = KernelConfig(16, 256, 128, 1, 4, 2).as_dict()


def test_end_to_end_on_the_interpreter(tmp_path, db, monkeypatch):
    """On a user model of one 128 x 128 shape (one tile: the interpreter's fastest)."""
    configs = tmp_path / "configs.json"
    configs.write_text(json.dumps([CANDIDATE]))
    monkeypatch.setenv("TUNER_SHAPES_DIR", str(tmp_path))
    (tmp_path / "one.toml").write_text(
        'model = "one"\nblock_shape = [128, 128]\n[tp.1]\nsource = "test"\nshapes = [[128, 128]]\n'
    )
    monkeypatch.setattr(output.console, "_width", 220)
    tiny = ["--device", "interpreter", "--model", "one", "--db", db]
    sweep = [*tiny, "--m", "1", "--configs", str(configs)]
    sweep += ["--strategy", "grid", "--interpreter-reps", "1"]
    ok("sweep", *sweep)
    checked = invoke("verify", *tiny, "--rounds", "2")
    found = sections(checked.stdout)
    slower = []
    for rows in found.values():
        assert column(rows, 0) == ["1", "2"] and column(rows, 1) == ["1", "1"]
        for row in rows:
            if row[3] != "-":  # timed: the speedup is the medians' ratio
                chosen_us, default_us = map(float, row[3:5])
                assert abs(float(row[6].rstrip("x")) - default_us / chosen_us) < 0.01
            slower += [row[0]] if row[7] == "slower" else []
    assert checked.exit_code == (1 if slower else 0), checked.output
