"""Prometheus metrics: trials by status, tasks by state, downloads by route."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

router = APIRouter(tags=["metrics"])


@router.get("/metrics", response_class=Response, response_model=None,
            responses={200: {"content": {"text/plain": {}}}})
def read_metrics(request: Request) -> Response:
    """The app's metrics in Prometheus' text format (the store is read at each scrape).

    Args:
        request: The request (the app's metrics registry).

    Returns:
        `tuner_trials{status}`, `tuner_tasks{state}`, `tuner_sweeps`, `tuner_imports`,
        `tuner_store_up` and `tuner_downloads_total{route,status}`.
    """
    body, content_type = request.app.state.metrics.render()
    return Response(content=body, media_type=content_type)
