"""`tuner recipe sweep`: print a ready-to-run sweep inside the serving image, for one host
(`docker run`) or a cluster (an Indexed Kubernetes Job whose pods, one per GPU node, run `tuner
worker` against a PostgreSQL store, so the distributed engine is Kubernetes plus PostgreSQL).

The tuner gets into the image without internet access from a folder of wheels (the tuner's and
its pure-Python dependencies, `pip wheel`ed once on a host with a package index). Its own
dependencies name no torch or triton, and every package already in the image is held at its
version by a constraints file written from the image's own `pip list` just before: pip adds only
what is missing (SQLAlchemy, Alembic, Optuna, psycopg, ...) and, were a new package to need
another version of one of the engine's, stops with its resolver's error and changes nothing
rather than moving the engine's pins (vLLM 0.33.0 pins fastapi<0.137, for one). `--no-deps` is
not used: it would leave out what the image lacks and the sweep needs.
"""

from __future__ import annotations

import re
import shlex
from typing import Annotated, Literal

import typer

from tuner import __version__
from tuner.cli.errors import fail
from tuner.cli.options import DeviceOpt, ModelOpt, TpOpt
from tuner.cli.output import plain
from tuner.cli.store import masked
from tuner.files.mounts import advice_comments, dump_yaml
from tuner.inputs.devices import device_among
from tuner.inputs.shapes import UnknownModelError, load_shapes

# Where the wheels and the SQLite store are mounted inside the container.
WHEELS_DIR = "/wheels"
STORE_DIR = "/store"
# The store's URL reaches the workers through this variable (`tuner.cli.options.DbOpt`).
DB_VARIABLE = "TUNER_DB_URL"
# The image's packages and versions, written just before the install and passed as constraints.
PINS_FILE = "/tmp/engine-pins.txt"
# The Kubernetes Secret holding the store's URL (key "url"), the claim holding the wheels.
SECRET = "blockfp8-store"
WHEELS_CLAIM = "blockfp8-wheels"
# The vLLM image's interpreter and platform (vllm/vllm-openai:v0.33.0: CPython 3.12 on glibc
# x86_64, site-packages /usr/local/lib/python3.12/dist-packages). pip expands a legacy
# manylinux2014 tag to manylinux2010 and manylinux1, never a manylinux_2_28 one to older
# tags: both are named, so that wheels tagged only manylinux_2_17 (manylinux2014) match too.
IMAGE_PYTHON = "3.12"
IMAGE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64")

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


def wheels_lines(indent: str = "") -> list[str]:
    """Comment lines saying how to fill the wheels folder once, for the image's Python and
    platform: `pip wheel` of the tuner alone (pure Python), then `pip download
    --only-binary=:all:` of its dependencies for CPython `IMAGE_PYTHON` on `IMAGE_PLATFORMS`
    (wheels built by another Python, e.g. 3.11's cp311 psycopg-binary or pydantic-core, do not
    install in the image: `pip install --no-index` finds no match). `indent` goes after each
    line's "#" (a numbered step's indent)."""
    platforms = " ".join(f"--platform {p}" for p in IMAGE_PLATFORMS)
    lines = [
        f" The wheels folder, once, on a host with a package index, for the image's CPython "
        f"{IMAGE_PYTHON} on glibc x86_64:",
        "   pip wheel --no-deps -w wheels <tuner source>",
        f"   pip download --only-binary=:all: --python-version {IMAGE_PYTHON} {platforms} "
        f"--find-links wheels -d wheels 'blockfp8-tuner[postgres]=={__version__}'",
    ]
    return [f"#{indent}{line}" for line in lines]


def install(db: str | None) -> str:
    """The shell commands that put the tuner into the image from the wheels folder, every
    package the image has held at its version (`PINS_FILE`)."""
    extra = "[postgres]" if db is None or db.startswith("postgresql") else ""
    argv = ["pip", "install", "--no-index", "--find-links", WHEELS_DIR]
    argv += ["--constraint", PINS_FILE, f"blockfp8-tuner{extra}"]
    return f"pip list --format=freeze > {PINS_FILE} && {shlex.join(argv)}"


def docker(image: str, sweep: list[str], db: str | None) -> str:
    """One `docker run --gpus all` line: install, `tuner doctor`, then `sweep` against the
    store (a mounted SQLite folder, or `db` through the variable)."""
    script = f"{install(db)} && tuner doctor ; {shlex.join(sweep)}"
    argv = "docker run --rm --gpus all --ipc=host -v $PWD/wheels:/wheels:ro".split()
    if db is None:
        store = f"sqlite:///{STORE_DIR}/tuner.db"
        argv += ["-v", f"$PWD/tuner-store:{STORE_DIR}", "-e", f"{DB_VARIABLE}={store}"]
    else:
        argv += ["-e", DB_VARIABLE]  # passed from the caller's environment, not the line
    argv += ["--entrypoint", "bash", image, "-c", script]
    # $PWD expands in the caller's shell: those words are double-quoted, the rest shlex'd.
    return " ".join(f'"{word}"' if word.startswith("$PWD/") else shlex.quote(word) for word in argv)


def job(name: str, image: str, device: str, db: str, nodes: int, gpus: int) -> dict:
    """The Indexed Job: `nodes` pods, one per node (required anti-affinity on the node name),
    each requesting `gpus` GPUs and running, after the install, `tuner worker` with vLLM's
    kernels on the sweeps `tuner sweep --no-run` created, the store's URL from the Secret."""
    worker = shlex.join(["tuner", "worker", "--device", device, "--kernel", "vllm"])
    one_per_node = {
        "labelSelector": {"matchLabels": {"app": name}},
        "topologyKey": "kubernetes.io/hostname",
    }
    container = {
        "name": "tuner-worker",
        "image": image,
        "command": ["bash", "-c", f"{install(db)} && {worker}"],
        "env": [
            {"name": DB_VARIABLE, "valueFrom": {"secretKeyRef": {"name": SECRET, "key": "url"}}}
        ],
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
        "volumeMounts": [
            {"name": "wheels", "mountPath": WHEELS_DIR, "readOnly": True},
            {"name": "shm", "mountPath": "/dev/shm"},
        ],
    }
    pod = {
        "restartPolicy": "OnFailure",
        "affinity": {
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [one_per_node]}
        },
        "containers": [container],
        "volumes": [
            {
                "name": "wheels",
                "persistentVolumeClaim": {"claimName": WHEELS_CLAIM, "readOnly": True},
            },
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
        ],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": 4 * nodes,
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
        },
    }


def k8s(image: str, sweep: list[str], masked_db: str, nodes: int, gpus: int) -> str:
    """The cluster recipe (comments): the Secret made from the store's URL (`masked_db`, its
    password masked: the only form of it printed), the wheels, the sweep created inside the
    image, the Job applied, and how to read the results; then the Job (`job`) as YAML."""
    device, model = (sweep[sweep.index(option) + 1] for option in ("--device", "--model"))
    name = re.sub(r"[^a-z0-9-]+", "-", f"tuner-{device}-{model}".lower()).strip("-")[:63]
    create = f"{install(masked_db)} && {shlex.join([*sweep, '--no-run'])}"
    inside = (
        f'docker run --rm -e {DB_VARIABLE} -v "$PWD/wheels:/wheels:ro" --entrypoint bash '
        f"{shlex.quote(image)} -c {shlex.quote(create)}"
    )
    head = [
        "# 1. The store's URL (PostgreSQL, reachable from the pods and from here), with "
        "its password, as a Secret:",
        f"#   export {DB_VARIABLE}='{masked_db}'",
        f'#   kubectl create secret generic {SECRET} --from-literal=url="${DB_VARIABLE}"',
        "# 2." + wheels_lines()[0][1:],
        *wheels_lines("   ")[1:],
        f"#    then copy the folder into the PersistentVolumeClaim {WHEELS_CLAIM}.",
        "# 3. The sweep and its tasks, created once inside the image, from here:",
        f"#   {inside}",
        "# 4. kubectl apply -f this file; kubectl wait --for=condition=complete "
        f"--timeout=24h job/{name}",
        f'# 5. The results: tuner status --db "${DB_VARIABLE}"; tuner publish --device '
        f'{shlex.quote(device)} --db "${DB_VARIABLE}"; tuner serve --db "${DB_VARIABLE}".',
    ]
    return "\n".join(head + dump_yaml(job(name, image, device, masked_db, nodes, gpus))) + "\n"


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
    for option, value in (("image", image), ("device", device), ("model", model)):
        if not value or any(ch.isspace() for ch in value):
            raise fail(f"--{option} must be one word, got {value!r}")
    try:  # and what the sweep in the container would refuse, refused here
        device_name = device_among(device, (), new=True)
        load_shapes(model, tp)
    except (UnknownModelError, ValueError) as exc:
        raise fail(str(exc)) from None
    sweep = ["tuner", "sweep", "--device", device, "--model", model]
    sweep += [*(["--tp", str(tp)] if tp is not None else []), "--kernel", "vllm"]
    # the advice from the table of known GPUs: the sweep has not run yet
    served = [
        f"# After the sweep: tuner mounts --device {device} (or tuner pull) hands out "
        "the files. Serving them:",
        *advice_comments(device_name, [], "vllm"),
    ]
    if fmt == "k8s":  # the advice as comments after the Job
        plain(k8s(image, sweep, masked(db or ""), nodes, gpus) + "\n".join(served))
        return
    for line in wheels_lines() + served:
        plain(line)
    if db is not None:
        plain(f"# export {DB_VARIABLE}='{masked(db)}'  (with its password)")
    plain(docker(image, sweep, db))
