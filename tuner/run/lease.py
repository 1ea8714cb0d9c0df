"""A worker's hold on its claimed task: renewed in the store by a heartbeat, asked before each
measurement without a store round trip while the last renewal is recent.

A task's lease ends `lease_s` after its last renewal (`repo.heartbeat`, stamped with the clock
at the renewal); another worker can claim it only after that. So while less than `lease_s / 2`
has passed since the start of the last successful renewal, the task is still this worker's
unless its own sweep released it (a clean stop, or a dead supervisor: the worker is then being
ended) or a sweep extension handed it back (at finish only). `holds` answers from memory then,
and renews in the store first otherwise; a renewal that finds the task taken is final.
"""

from __future__ import annotations

import threading
import time

from db import repo
from db.repo import session_scope


class Lease:
    """The lease of one claimed task.

    Args:
        store: the store (its Engine).
        task_id: the claimed task.
        worker_id: the worker that claimed it.
        lease_s: seconds a renewal holds the task.
    """

    def __init__(self, store, task_id: int, worker_id: str, lease_s: float) -> None:
        self.store, self.task_id = store, task_id
        self.worker_id, self.lease_s = worker_id, lease_s
        self._renewed_at: float | None = None  # time.monotonic() before the last renewal
        self._lost = False
        self._lock = threading.Lock()

    def renew(self, session=None) -> bool:
        """Extend the lease in the store (in `session` when given, else in a transaction of its
        own) and remember when.

        Returns:
            True while the worker holds the task; False once it was taken (then always False).

        Raises:
            sqlalchemy.exc.DBAPIError: the store could not be reached.
        """

        if self._lost:
            return False
        started = time.monotonic()
        if session is None:
            with session_scope(self.store) as own:
                held = repo.heartbeat(
                    own, task_id=self.task_id, worker_id=self.worker_id, lease_s=self.lease_s
                )
        else:
            held = repo.heartbeat(
                session, task_id=self.task_id, worker_id=self.worker_id, lease_s=self.lease_s
            )
        with self._lock:
            if not held:
                self._lost = True
            elif self._renewed_at is None or started > self._renewed_at:
                self._renewed_at = started
        return held

    def holds(self) -> bool:
        """Whether the worker may measure for the task now: from memory while the last renewal
        started less than lease_s / 2 ago, else after a renewal in the store.

        Raises:
            sqlalchemy.exc.DBAPIError: a renewal was needed and the store could not be reached.
        """
        with self._lock:
            if self._lost:
                return False
            fresh = (
                self._renewed_at is not None
                and time.monotonic() - self._renewed_at < self.lease_s / 2
            )
        return True if fresh else self.renew()


class Heartbeat(threading.Thread):
    """Renews a lease every lease_s / 4 while the worker measures its task; a missed beat (the
    store busy or down) is retried at the next one, the lease has slack."""

    def __init__(self, lease: Lease) -> None:
        super().__init__(daemon=True)
        self.lease = lease
        self.stopped = threading.Event()

    def run(self) -> None:
        """Renew every lease_s / 4 until stopped or a renewal finds the task taken."""
        while not self.stopped.wait(self.lease.lease_s / 4):
            try:
                if not self.lease.renew():
                    return
            except Exception:  # noqa: BLE001 - retried at the next beat
                continue
