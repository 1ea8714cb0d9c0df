"""Prometheus metrics of one app: downloads counted in-process, store totals read per scrape.
Each app has its own `CollectorRegistry` (api.app: nothing global at import, so two apps in one
process, as in tests, do not share counters)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.deps import StoreHandle
from db import repo

DEVICE = "/devices/{device_name}/"


def download_label(path: str) -> str | None:
    """The `route` label of a download route's answers, from its path template
    (`/devices/{device_name}/configs/{file_name}`: `configs/file`); None for any other route."""
    if not path.startswith(DEVICE) or not path.endswith((".zip", "/{file_name}")):
        return None
    return path.removeprefix(DEVICE).replace("{file_name}", "file")


class StoreCollector:
    """Counts of the store, queried at every scrape; `tuner_store_up` is 0 when it cannot."""

    def __init__(self, store: StoreHandle) -> None:
        self._store = store

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Trials by status, tasks by state, sweeps and imports, and whether the store answered
        (no `describe`: registering must not touch the store)."""
        try:
            with repo.session_scope(self._store.open()) as session:
                counts = repo.store_counts(session)
        except Exception:  # noqa: BLE001 - a scrape must never fail: report the store as down
            counts = None
        up = counts is not None
        yield GaugeMetricFamily("tuner_store_up", "1 when the store answered this scrape", value=up)
        if counts is None:
            return
        for name, label in (("trials", "status"), ("tasks", "state")):
            family = GaugeMetricFamily(
                f"tuner_{name}", f"{name.title()} in the store, by {label}", labels=[label]
            )
            for key, count in sorted(counts[name].items()):
                family.add_metric([key], count)
            yield family
        yield GaugeMetricFamily("tuner_sweeps", "Sweeps in the store", value=counts["sweeps"])
        yield GaugeMetricFamily(
            "tuner_imports", "Imported files in the store", value=counts["imports"]
        )


class CountDownloads:
    """ASGI middleware that counts every answer of a download route (`download_label`) by its
    status, the error handlers' 404, 422 and 503 too; an exception that escapes the app is
    counted as the 500 that Starlette then sends."""

    def __init__(self, app: ASGIApp, *, registry: CollectorRegistry) -> None:
        self.app = app
        self.downloads = Counter(
            "tuner_downloads",
            "Config downloads served, by route and HTTP status",
            labelnames=["route", "status"],
            registry=registry,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass one ASGI connection on, noting the status it answers with."""
        status = 500

        async def noting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noting_send)
        finally:  # the router records the route it matched in the scope (FastAPI's APIRoute)
            label = download_label(getattr(scope.get("route"), "path", None) or "")
            if label is not None:
                self.downloads.labels(route=label, status=str(status)).inc()
