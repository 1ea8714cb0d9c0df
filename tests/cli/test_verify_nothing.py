"""`tuner verify` where every pick is the default config: one line says there is nothing to
time, no progress bar, no tables, exit 0."""

import pytest

from tests.cli.test_verify_cli import BIG, SMALL, FakeRunner, sections, verify
from tests.storefill import DEFAULT, fill
from tuner.cli import verify as cli_verify


@pytest.fixture
def fake_runner(monkeypatch):
    """What `FakeRunner` ran, in order (as in tests/cli/test_verify_cli.py)."""
    log: list = []
    monkeypatch.setattr(
        cli_verify, "_runner_factory", lambda runner, **_: lambda N, K, M: FakeRunner(M, log)
    )
    return log


def test_nothing_to_time_is_one_line_and_exit_0(tmp_path, fake_runner):
    url = f"sqlite:///{tmp_path}/tuner.db"
    ok_default = [(DEFAULT, True, "ok", 100.0)]
    fill(
        url,
        {(*shape, M): ok_default for shape in (SMALL, BIG) for M in (1, 16)},
        device_name="TRITON_INTERPRETER",
        model="tiny",
        m_values=(1, 16),
    )
    result = verify(url)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        "nothing to time: at all 12 M value(s) of 2 shape(s) vLLM's pick from "
        "TRITON_INTERPRETER's files is its default config, the baseline itself (the sweeps "
        "found no faster config there; `tuner winners` shows them); nothing is slower"
    )
    assert sections(result.stdout) == {}  # no table of "ok (default)" rows
    assert result.stderr == ""  # no "0/0 timed M" bar
    assert fake_runner == []  # nothing ran
