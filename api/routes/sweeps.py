"""Sweeps: create one for remote workers (token-protected), read its progress."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Response

from api import schemas
from api.deps import SessionDep, WriteAccess
from db import repo
from tuner.inputs.devices import device_among
from tuner.inputs.shapes import UnknownModelError, load_shapes
from tuner.run.plan import SweepRequest
from tuner.search.registry import STRATEGIES

router = APIRouter(prefix="/sweeps", tags=["sweeps"])


@router.post(
    "",
    response_model=schemas.SweepStatus,
    status_code=201,
    dependencies=[WriteAccess],
    responses={
        200: {"model": schemas.SweepStatus, "description": "The same sweep existed already"}
    },
)
def create_sweep(body: schemas.SweepCreate, session: SessionDep, response: Response) -> Any:
    """Create a sweep and its pending tasks, or return the same one again.

    A sweep over vLLM's config space for `tuner worker --device <device_name>` on any host to
    run; answers the sweep and its progress (201 when created). The same body again returns the
    same sweep (200); another `trials` is another sweep. 401 without the token
    (403: the service has none); 422 for an unknown strategy or model, a TP size the model does
    not list, or a device_name that is neither a device of the store nor a GPU model name
    (`H200`, `NVIDIA H200` and `nvidia_h200` all name `NVIDIA_H200`).
    """
    if body.strategy not in STRATEGIES:
        known = ", ".join(STRATEGIES)
        raise HTTPException(422, detail=f"unknown strategy '{body.strategy}'; known: {known}")
    try:
        shapes = load_shapes(body.model, body.tp)
    except (UnknownModelError, ValueError) as exc:
        raise HTTPException(422, detail=str(exc).strip("'\"")) from None
    try:  # a device of the store, else a GPU model's key as `tuner sweep --device` makes it
        device_name = device_among(body.device_name, repo.known_device_names(session), new=True)
    except ValueError as exc:
        raise HTTPException(422, detail=f"device_name {exc}") from None
    request = SweepRequest(
        device_name=device_name,
        model=shapes.model,
        tp=shapes.tp,
        shapes=shapes.pairs(),
        block_shape=shapes.block_shape,
        m_values=tuple(sorted(set(body.m_values))),
        **body.model_dump(include={"strategy", "trials", "seed", "out_dtype"}),
    )
    try:
        info, created = repo.create_sweep(session, request.sweep_spec())
    except ValueError as exc:
        raise HTTPException(422, detail=str(exc)) from None
    response.status_code = 201 if created else 200
    return info


@router.get("/{sweep_id}", response_model=schemas.SweepStatus)
def read_sweep(
    sweep_id: Annotated[int, Path(ge=1, le=schemas.MAX_INT32, description="The sweep's id.")],
    session: SessionDep,
) -> Any:
    """A sweep's parameters and progress: tasks by state, trials stored.

    404 when there is no such sweep.
    """
    found = repo.list_sweeps(session, sweep_id=sweep_id)
    if not found:
        raise HTTPException(404, detail=f"no sweep with id {sweep_id}")
    return found[0]
