"""Worker supervision: start one process per slot, pin crashes and hangs on their config, restart.

A worker that dies while measuring a config had that config marked in flight in the memory it
shares with its supervisor (`WorkerShared.mark_in_flight`). The supervisor, which saw it die,
records the config as `crashed` (error: the signal or exit code) and hands the task back; a
config in flight for longer than the trial timeout gets its worker killed and is recorded as
`timeout`. Either way the slot gets a fresh
worker process that continues the task. A worker killed from outside (SIGKILL, SIGTERM, SIGINT,
SIGHUP: a person, the OOM killer, a container stop) is not the config's fault: its trial in
flight is lost and measured again. Only deaths this supervisor observes count: when the
supervisor itself is killed its workers hand their tasks back and exit (`_Worker.watch_parent`),
and nothing is recorded against their configs.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from db import repo
from db.repo import Outage, StoreUnavailable, retry_store, session_scope, url_of
from tuner.core import TrialStatus
from tuner.kernels.config import KernelConfig
from tuner.run.worker import (
    EXIT_PARENT_GONE,
    EXIT_RESTART,
    EXIT_STORE,
    InFlight,
    WorkerShared,
    WorkerSpec,
    worker_log_path,
    worker_main,
)

# Deaths in a row with no trial stored before a slot is given up (a worker that cannot start).
MAX_IDLE_RESTARTS = 3
POLL_S = 0.5
# Signals that come from outside the worker, not from the config it was measuring.
EXTERNAL_SIGNALS = frozenset({signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP})


class Terminated(KeyboardInterrupt):
    """SIGTERM reached the process while workers ran (`docker stop`, `kubectl delete pod`,
    systemd): handled as Ctrl-C, but the command exits 143 (128 + SIGTERM) instead of 130."""


def interrupted(exc: KeyboardInterrupt) -> tuple[str, int]:
    """The one line of a command an interrupt stopped, and its exit code: 143 for `Terminated`
    (128 + SIGTERM), 130 for Ctrl-C (128 + SIGINT)."""
    how, code = "interrupted", 128 + signal.SIGINT
    if isinstance(exc, Terminated):
        how, code = "terminated (SIGTERM)", 128 + signal.SIGTERM
    return f"{how}; finished work is stored: run the same command to resume", code


def describe_exit(exitcode: int) -> str:
    """How a worker ended, for the console and for a crashed trial's error.

    Args:
        exitcode: `Process.exitcode`: negative for a signal.

    Returns:
        e.g. `killed by SIGABRT`, `exited with code 1`.
    """
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    if exitcode == EXIT_RESTART:
        return "exited after a crashed trial, for a fresh CUDA context"
    if exitcode == EXIT_STORE:
        return "stopped: the store stayed unavailable"
    return f"exited with code {exitcode}"


def blames_config(exitcode: int) -> bool:
    """Whether a worker's death is pinned on the config it was measuring.

    Args:
        exitcode: `Process.exitcode`: negative for a signal.

    Returns:
        False for a clean exit, a kill from outside (EXTERNAL_SIGNALS), Ctrl-C (130), a worker
        that left because its supervisor was gone, or one that asked for a restart after
        recording its crash itself; True for every other signal (SIGSEGV, SIGABRT, ...) and
        non-zero exit code.
    """
    if exitcode < 0:
        return -exitcode not in EXTERNAL_SIGNALS
    return exitcode not in (0, 130, EXIT_PARENT_GONE, EXIT_RESTART, EXIT_STORE)


@dataclass
class _Slot:
    """One worker position (one GPU); its process is replaced after each death."""

    label: str
    template: WorkerSpec
    process: mp.process.BaseProcess | None = None
    spec: WorkerSpec | None = None
    shared: WorkerShared | None = None
    idle_deaths: int = 0
    overdue_config: dict[str, int] | None = None


class Supervisor:
    """Runs worker processes (spawn) and keeps them going until no task in their scope is left;
    then says what happened (`restarts`, trials recorded as `crashed` and `timeouts`, the slots
    `given_up`, and `total` of the counters of `WorkerShared`).

    Args:
        store: the store (its Engine).
        specs: one template per slot; each start gets a fresh worker_id and parent_pid.
        trial_timeout_s: seconds one config may stay in flight before its worker is killed.
        on_event: called with one line per crash, timeout, restart or abandoned slot.
    """

    def __init__(
        self,
        store,
        specs: Sequence[WorkerSpec],
        *,
        trial_timeout_s: float,
        on_event: Callable[[str], None] = lambda line: None,
    ) -> None:
        self.store = store
        self.slots = [_Slot(label=spec.visible_device or "cpu", template=spec) for spec in specs]
        self.trial_timeout_s = trial_timeout_s
        self.on_event = on_event
        self.context = mp.get_context("spawn")
        self.worker_ids: list[str] = []
        self.shared: list[WorkerShared] = []  # of every process started, for the totals
        self.restarts = self.crashed = self.timeouts = 0
        self.given_up: list[str] = []

    def total(self, counter: str) -> float:
        """A `WorkerShared` counter ("trials_stored", "measure_s", ...) summed over the
        processes this supervisor started."""
        return sum(getattr(shared, counter).value for shared in self.shared)

    def run(self, on_tick: Callable[[], None] = lambda: None) -> Supervisor:
        """Start every slot and wait until all workers have exited for good; itself.

        SIGTERM is handled as Ctrl-C while this runs: the workers are stopped and their tasks
        handed back, then `Terminated` (a KeyboardInterrupt) propagates. A store that stays
        unavailable (down, locked, its disk full) for longer than `db.connection.store_timeout_s()`,
        here or in a worker (EXIT_STORE), stops every worker the same way and raises
        StoreUnavailable.

        Args:
            on_tick: called about every POLL_S seconds (progress display).

        Raises:
            KeyboardInterrupt: Ctrl-C; `Terminated`, its subclass, for SIGTERM.
            StoreUnavailable: the store stayed unavailable; its str() is the one line to print.
        """
        previous = signal.signal(signal.SIGTERM, _interrupt)
        outage = Outage(url_of(self.store))
        try:
            for slot in self.slots:
                self._start(slot)
            live = list(self.slots)
            while live:
                time.sleep(POLL_S)
                try:
                    on_tick()
                    live = [slot for slot in live if self._poll(slot)]
                    outage.ok()
                except (DBAPIError, PoolTimeoutError) as exc:  # down or busy: next tick
                    if outage.failed(exc):
                        self.on_event(
                            f"store unavailable ({type(exc).__name__}: {first_line(exc)}); "
                            f"retrying for up to {outage.deadline_s:g} s"
                        )
        except (KeyboardInterrupt, StoreUnavailable):
            self._stop_all()
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
        return self

    def _poll(self, slot: _Slot) -> bool:
        """Kill the worker if overdue, account for it if it exited; False once the slot is
        finished."""
        assert slot.process and slot.shared and slot.spec
        entry = slot.shared.in_flight()
        deadline = time.time() - self.trial_timeout_s
        if entry is not None and entry.since < deadline and slot.process.is_alive():
            slot.overdue_config = entry.config
            slot.process.kill()
            slot.process.join()
        if slot.process.is_alive():
            return True
        if slot.process.exitcode == EXIT_STORE:  # its line is in its log
            log = worker_log_path(slot.spec.worker_id)
            raise StoreUnavailable(log.read_text() if log.exists() else "the store is down")
        return self._handle_exit(slot)

    def _start(self, slot: _Slot) -> None:
        # host:supervisor pid:device:random suffix, e.g. gpu7:4242:0:1f2e3d4c
        worker_id = f"{socket.gethostname()}:{os.getpid()}:{slot.label}:{uuid.uuid4().hex[:8]}"
        spec = replace(slot.template, worker_id=worker_id, parent_pid=os.getpid())
        slot.spec, slot.shared, slot.overdue_config = spec, WorkerShared(self.context), None
        self.shared.append(slot.shared)
        slot.process = self.context.Process(target=worker_main, args=(spec, slot.shared))
        self.worker_ids.append(spec.worker_id)
        slot.process.start()

    def _handle_exit(self, slot: _Slot) -> bool:
        """Account for a worker that exited: record its config in flight as TIMEOUT when this
        supervisor killed it as overdue, as CRASHED when the exit blames the config; say what
        became of it; restart it if work is left. True if restarted."""
        assert slot.process is not None and slot.spec is not None and slot.shared is not None
        exitcode = slot.process.exitcode
        if not exitcode:  # 0: no task left (None: cannot be, the worker has exited)
            return False
        how, status, error = describe_exit(exitcode), None, None
        if slot.overdue_config is not None:
            status = TrialStatus.TIMEOUT
            error = f"no result after {self.trial_timeout_s:g} s (trial timeout); worker killed"
        elif blames_config(exitcode):
            status, error = TrialStatus.CRASHED, f"worker {how} while measuring this config"
        blamed, unfinished = self._record_exit(slot, status, error)
        if blamed is None:
            log = worker_log_path(slot.spec.worker_id)
            where = f" (traceback in {log})" if exitcode == 1 and log.exists() else ""
            self.on_event(f"worker {slot.label} {how}{where}; its task goes back to the queue")
        else:
            self.crashed += status is TrialStatus.CRASHED
            self.timeouts += status is TrialStatus.TIMEOUT
            self.on_event(
                f"worker {slot.label} {how} while measuring "
                f"{KernelConfig.from_dict(blamed.config).short()} for N={blamed.N}, "
                f"K={blamed.K}, M={blamed.M}: recorded as {status}"
            )
        progressed = blamed or slot.shared.trials_stored.value > 0 or exitcode == EXIT_RESTART
        slot.idle_deaths = 0 if progressed else slot.idle_deaths + 1
        if not unfinished:
            return False
        if slot.idle_deaths >= MAX_IDLE_RESTARTS:
            self.given_up.append(slot.label)
            self.on_event(
                f"worker {slot.label} died {slot.idle_deaths} times in a row without "
                "storing a trial; giving up on it"
            )
            return False
        self.restarts += 1
        self._start(slot)
        return True

    def _record_exit(
        self, slot: _Slot, status: TrialStatus | None, error: str | None
    ) -> tuple[InFlight | None, int]:
        """In one transaction: record the config in flight as `status` (if any, and only while
        the worker held its task and had not stored it yet), hand the worker's tasks back,
        count the unfinished tasks; (the in-flight entry recorded or None, that count)."""
        assert slot.spec is not None and slot.shared is not None
        spec, entry = slot.spec, slot.shared.in_flight()
        if status is TrialStatus.TIMEOUT and entry and entry.config != slot.overdue_config:
            entry = None  # it finished that config just before the kill
        environment_id = slot.shared.environment_id.value
        with session_scope(self.store) as session:
            if not (
                status is not None
                and environment_id
                and entry is not None
                and repo.end_trial(session, task_id=entry.task_id, worker_id=spec.worker_id)
                and repo.record_trial(
                    session,
                    task_id=entry.task_id,
                    environment_id=environment_id,
                    config=entry.config,
                    status=status,
                    error=error,
                    is_default=entry.is_default,
                )
            ):
                entry = None
            repo.release_tasks(session, worker_id=spec.worker_id)
            unfinished = repo.unfinished_tasks(session, **spec.scope)
        return entry, unfinished

    def _stop_all(self) -> None:
        """Stop every worker and hand their tasks back, if the store answers within a few
        seconds (else the leases expire: `lease_s` after the last heartbeat)."""
        running = [slot.process for slot in self.slots if slot.process is not None]
        for process in running:
            if process.is_alive():
                process.terminate()
        for process in running:
            process.join(10)

        def release() -> None:
            with session_scope(self.store) as session:
                for worker_id in self.worker_ids:
                    repo.release_tasks(session, worker_id=worker_id)

        try:
            retry_store(release, url=url_of(self.store), deadline_s=5.0)
        except (StoreUnavailable, DBAPIError, PoolTimeoutError):
            self.on_event(
                "the store did not answer: the claimed tasks go back to the queue "
                "when their leases expire"
            )


def first_line(exc: BaseException | str | None, width: int = 160) -> str:
    """The first line of an error (a store error's driver message), at most `width` long."""
    text = str(getattr(exc, "orig", None) or exc or "")
    return (text.strip().splitlines() or [""])[0][:width]


def _interrupt(signum, frame) -> None:
    raise Terminated
