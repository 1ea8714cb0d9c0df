"""`python -m tests.cli.hooked ARGS...`: the `tuner` command whose runners inject the faults
(`tests.faults.FaultyRunner`) the test's environment variables ask for, which only this module
reads:

    TUNER_FAULT_CRASH: `os.abort()` instead of measuring a config whose `KernelConfig.short()`
        label is listed (labels separated by ';'), like a kernel that kills its process.
    TUNER_FAULT_HANG: never return from measuring such a config, like a hung kernel.
    TUNER_TEST_MEASURE_LOG: a file that gets `pid, start|done, task_id, label` lines.
    TUNER_TEST_TRIAL_SLEEP_S: seconds slept before each measurement.
    TUNER_TEST_SQLITE_MAX_PAGES: `PRAGMA max_page_count` of every SQLite connection, a store
        that fills up ("database or disk is full") where no small filesystem can be mounted.

Every backend's name is registered again (`tuner.measure.runner.RUNNERS`) with a
factory that wraps the product's runner; the runner reaches the spawned workers in their spec
(`tuner.run.worker.WorkerSpec.runner`, pickled); the SQLite limit through this module
itself, which multiprocessing's spawn imports again in every worker as the parent's main
module.
"""

from __future__ import annotations

import os
import sqlite3

from sqlalchemy import event
from sqlalchemy.engine import Engine

from tests.faults import FaultyRunner
from tuner.measure.runner import RUNNERS


def _labels(variable: str) -> frozenset[str]:
    return frozenset(
        label.strip() for label in os.environ.get(variable, "").split(";") if label.strip()
    )


_FAULTS = dict(
    crash=_labels("TUNER_FAULT_CRASH"),
    hang=_labels("TUNER_FAULT_HANG"),
    measure_log=os.environ.get("TUNER_TEST_MEASURE_LOG") or None,
    sleep_s=float(os.environ.get("TUNER_TEST_TRIAL_SLEEP_S") or 0.0),
)
for _name in ("cuda", "interpreter", "replay"):
    RUNNERS[_name] = FaultyRunner.wrapping(RUNNERS[_name], **_FAULTS)

_MAX_PAGES = os.environ.get("TUNER_TEST_SQLITE_MAX_PAGES")
if _MAX_PAGES:

    @event.listens_for(Engine, "connect")
    def _cap_pages(dbapi_connection, _connection_record) -> None:
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.execute(f"PRAGMA max_page_count={int(_MAX_PAGES)}")


if __name__ == "__main__":
    from tuner.cli.app import main

    main()
