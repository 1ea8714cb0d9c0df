"""`tuner recipe sweep`: print a ready-to-run sweep inside the serving image, for one host
(`docker run`) or a cluster (an Indexed Kubernetes Job of `tuner worker`s)."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from tuner.cli.errors import fail
from tuner.cli.options import DeviceOpt, ModelOpt, TpOpt
from tuner.cli.output import plain
from tuner.cli.store import masked
from tuner.files.mounts import advice_comments
from tuner.inputs.devices import device_among
from tuner.inputs.shapes import UnknownModelError, load_shapes
from tuner.run.recipe import DB_VARIABLE, SweepRecipe, wheels_lines

ImageOpt = Annotated[
    str,
    typer.Option(
        help="The serving image, e.g. vllm/vllm-openai:v0.33.0: the sweep times its vLLM's "
        "kernels with its Triton."
    ),
]
RecipeDbOpt = Annotated[
    str | None,
    typer.Option(
        help="The store's URL (PostgreSQL for k8s), passed through TUNER_DB_URL, never "
        "printed [default for docker: a SQLite file in ./tuner-store]."
    ),
]


def recipe_sweep(
    image: ImageOpt,
    device: DeviceOpt,
    model: ModelOpt,
    tp: TpOpt = None,
    fmt: Annotated[
        Literal["docker", "k8s"],
        typer.Option("--format", help="docker: one host; k8s: an Indexed Job, one pod per node."),
    ] = "docker",
    nodes: Annotated[int, typer.Option(min=1, help="k8s: GPU nodes (pods).")] = 1,
    gpus: Annotated[int, typer.Option(min=1, help="k8s: GPUs per pod.")] = 1,
    db: RecipeDbOpt = None,
) -> None:
    """Print the commands that sweep inside the serving image: the tuner is installed from a
    wheels folder (no internet needed) without touching the image's torch or Triton."""
    # The pods of a Kubernetes sweep share one PostgreSQL store (postgres:// and postgresql://
    # open with psycopg, as db.repo.normalized_url opens them in the pods).
    if fmt == "k8s" and not (db or "").startswith(("postgresql", "postgres://")):
        raise fail(
            "--format k8s needs --db postgresql+psycopg://...: the pods of a "
            "Kubernetes sweep share one PostgreSQL store (a SQLite file is one host's)"
        )
    try:  # and what the sweep in the container would refuse, refused here
        recipe = SweepRecipe(
            image=image, device=device, model=model, tp=tp, db=db, nodes=nodes, gpus=gpus
        )
        device_name = device_among(device, (), new=True)
        load_shapes(model, tp)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc)) from None
    # the advice from the table of known GPUs: the sweep has not run yet
    served = [
        f"# After the sweep: tuner mounts --device {recipe.device} (or tuner pull) hands out "
        "the files. Serving them:",
        *advice_comments(device_name, [], "vllm"),
    ]
    if fmt == "k8s":  # the advice as comments after the Job
        plain(recipe.k8s(masked(db or "")) + "\n".join(served))
        return
    for line in wheels_lines() + served:
        plain(line)
    if db is not None:
        plain(f"# export {DB_VARIABLE}='{masked(db)}'  (with its password)")
    plain(recipe.docker())
