"""`tuner recipe sweep`: print a ready-to-run sweep inside the serving image, for one host
(`docker run`) or a cluster (an Indexed Kubernetes Job of `tuner worker`s)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from tuner.cli.errors import fail
from tuner.cli.output import plain
from tuner.cli.store import masked


class RecipeFormat(StrEnum):
    docker = "docker"
    k8s = "k8s"


def recipe_sweep(
    image: Annotated[
        str,
        typer.Option(
            help="The serving image, e.g. "
            "vllm/vllm-openai:v0.33.0: the sweep times its vLLM's "
            "kernels with its Triton."
        ),
    ],
    device: Annotated[str, typer.Option(help="GPU model as `tuner sweep --device` takes it.")],
    model: Annotated[str, typer.Option(help="Model key from `tuner shapes list`.")],
    tp: Annotated[int | None, typer.Option(help="Tensor-parallel size.")] = None,
    fmt: Annotated[
        RecipeFormat,
        typer.Option(
            "--format", help="docker: one host; k8s: an Indexed Job, one pod per GPU node."
        ),
    ] = RecipeFormat.docker,
    nodes: Annotated[int, typer.Option(min=1, help="k8s: GPU nodes (pods).")] = 1,
    gpus: Annotated[int, typer.Option(min=1, help="k8s: GPUs per pod.")] = 1,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="The store's URL (PostgreSQL for k8s); it is passed through "
            "TUNER_DB_URL, never printed [default for docker: a SQLite file in ./tuner-store].",
        ),
    ] = None,
) -> None:
    """Print the commands that sweep inside the serving image: the tuner is installed from a
    wheels folder (no internet needed) without touching the image's torch or Triton."""
    from tuner.inputs.devices import device_key
    from tuner.inputs.shapes import UnknownModelError, load_shapes
    from tuner.run.recipe import DB_VARIABLE, SweepRecipe, wheels_lines

    k8s_db = _k8s_store(db) if fmt == RecipeFormat.k8s else None
    try:  # and what the sweep in the container would refuse, refused here
        recipe = SweepRecipe(
            image=image, device=device, model=model, tp=tp, db=db, nodes=nodes, gpus=gpus
        )
        device_name = device_key(device)
        load_shapes(model, tp)
    except UnknownModelError as exc:  # a KeyError: its str() is quoted
        raise fail(str(exc).strip("'\"")) from None
    except ValueError as exc:
        raise fail(str(exc)) from None
    served = _served_lines(device_name, recipe.device)
    if k8s_db is not None:
        text = recipe.k8s(masked(k8s_db))
        at = text.index("\napiVersion:") + 1  # the advice after the steps, before the Job
        plain((text[:at] + "\n".join(served) + "\n" + text[at:]).rstrip("\n"))
        return
    for line in wheels_lines(image) + served:
        plain(line)
    if db is not None:
        plain(f"# export {DB_VARIABLE}='{masked(db)}'  (with its password)")
    plain(recipe.docker())


def _k8s_store(db: str | None) -> str:
    """The --db of `--format k8s`: a PostgreSQL URL, since the pods of a Kubernetes sweep share
    one store; exit 2 with one line otherwise. postgres:// and postgresql:// open with psycopg
    as postgresql+psycopg:// does (db.repo.normalized_url, where the pods open the store)."""
    if db is None or not db.startswith(("postgresql", "postgres://")):
        raise fail(
            "--format k8s needs --db postgresql+psycopg://...: the pods of a "
            "Kubernetes sweep share one PostgreSQL store (a SQLite file is one host's)"
        )
    return db


def _served_lines(device_name: str, device: str) -> list[str]:
    """What to do with the sweep's files, and the device's advice (`tuner.files.mounts.
    advice_comments`, from the table of known GPUs: the sweep has not run yet)."""
    from tuner.files.mounts import advice_comments

    return [
        f"# After the sweep: tuner mounts --device {device} (or tuner pull) hands out the "
        "files. Serving them:"
    ] + advice_comments(device_name, [], "vllm")
