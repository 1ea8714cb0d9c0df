"""Prometheus metrics of one app: downloads counted in-process, store totals read per scrape.

Each app gets its own `CollectorRegistry` (nothing global at import, so two apps in one process,
as in tests, do not share counters).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api.deps import StoreHandle
from db import repo
from db.engine import session_scope


class StoreCollector(Collector):
    """Counts of the store, queried at every scrape; `tuner_store_up` is 0 when it cannot."""

    def __init__(self, store: StoreHandle) -> None:
        self._store = store

    def describe(self) -> list:
        """Nothing up front: registering must not touch the store."""
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Trials by status, tasks by state, sweeps and imports, and whether the store answered."""
        up = GaugeMetricFamily("tuner_store_up", "1 when the store answered this scrape")
        try:
            with session_scope(self._store.engine()) as session:
                counts = repo.store_counts(session)
        except Exception:  # noqa: BLE001 - a scrape must never fail: report the store as down
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        trials = GaugeMetricFamily("tuner_trials", "Trials in the store, by status",
                                   labels=["status"])
        for status, count in sorted(counts.trials.items()):
            trials.add_metric([status], count)
        yield trials
        tasks = GaugeMetricFamily("tuner_tasks", "Tasks in the store, by state", labels=["state"])
        for state, count in sorted(counts.tasks.items()):
            tasks.add_metric([state], count)
        yield tasks
        yield GaugeMetricFamily("tuner_sweeps", "Sweeps in the store", value=counts.sweeps)
        yield GaugeMetricFamily("tuner_imports", "Imported files in the store",
                                value=counts.imports)


class Metrics:
    """The app's registry: a download counter and the store collector."""

    def __init__(self, store: StoreHandle) -> None:
        self.registry = CollectorRegistry()
        self._downloads = Counter(
            "tuner_downloads", "Config downloads served, by route and HTTP status",
            labelnames=["route", "status"], registry=self.registry,
        )
        self.registry.register(StoreCollector(store))

    def count_download(self, route: str, status: int) -> None:
        """Count one download answer (200 with a body, or 304 not modified)."""
        self._downloads.labels(route=route, status=str(status)).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
