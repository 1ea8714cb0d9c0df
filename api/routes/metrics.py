"""Prometheus metrics: trials by status, tasks by state, downloads by route."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

router = APIRouter(tags=["metrics"])


@router.get(
    "/metrics",
    response_class=Response,
    response_model=None,
    responses={200: {"content": {"text/plain": {}}}},
    description=(
        "The app's metrics in Prometheus' text format (the store is read at each scrape): "
        "`tuner_trials{status}`, `tuner_tasks{state}`, `tuner_sweeps`, `tuner_imports`, "
        "`tuner_store_up` and `tuner_downloads_total{route,status}`."
    ),
)
def read_metrics(request: Request) -> Response:
    """Render the app's metrics in Prometheus' text format."""
    body, content_type = request.app.state.metrics.render()
    return Response(content=body, media_type=content_type)
