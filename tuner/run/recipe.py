"""Ready-to-run text for sweeps inside the serving image: a `docker run` for one host, and an
Indexed Kubernetes Job whose pods (one per GPU node) run `tuner worker` against a PostgreSQL
store, so the distributed engine is Kubernetes plus PostgreSQL. Pure text; imports no torch.

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
from dataclasses import dataclass

from tuner import __version__
from tuner.files.mounts import dump_yaml

# Where the wheels and the SQLite store are mounted inside the container.
WHEELS_DIR = "/wheels"
STORE_DIR = "/store"
# The store's URL reaches the workers through this variable (`tuner.cli.options.DbOpt`).
DB_VARIABLE = "TUNER_DB_URL"
# The image's packages and versions, written just before the install and passed as constraints.
PINS_FILE = "/tmp/engine-pins.txt"
_NAME = re.compile(r"[^a-z0-9-]+")
# The vLLM image's interpreter and platform (vllm/vllm-openai:v0.33.0: CPython 3.12 on glibc
# x86_64, site-packages /usr/local/lib/python3.12/dist-packages). pip expands a legacy
# manylinux2014 tag to manylinux2010 and manylinux1, never a manylinux_2_28 one to older
# tags: both are named, so that wheels tagged only manylinux_2_17 (manylinux2014) match too.
IMAGE_PYTHON = "3.12"
IMAGE_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux2014_x86_64")


def wheels_lines(indent: str = "") -> list[str]:
    """Comment lines saying how to fill the wheels folder once, for the image's Python and
    platform: `pip wheel` of the tuner alone (pure Python), then `pip download
    --only-binary=:all:` of its dependencies for CPython `IMAGE_PYTHON` on `IMAGE_PLATFORMS`
    (wheels built by another Python, e.g. 3.11's cp311 psycopg-binary or pydantic-core, do not
    install in the image: `pip install --no-index` finds no match).

    Args:
        indent: put after each line's "#" (a numbered step's indent).
    """
    platforms = " ".join(f"--platform {p}" for p in IMAGE_PLATFORMS)
    lines = [
        f" The wheels folder, once, on a host with a package index, for the image's CPython "
        f"{IMAGE_PYTHON} on glibc x86_64:",
        "   pip wheel --no-deps -w wheels <tuner source>",
        f"   pip download --only-binary=:all: --python-version {IMAGE_PYTHON} {platforms} "
        f"--find-links wheels -d wheels 'blockfp8-tuner[postgres]=={__version__}'",
    ]
    return [f"#{indent}{line}" for line in lines]


@dataclass(frozen=True)
class SweepRecipe:
    """What to print.

    Attributes:
        image: the serving image, e.g. "vllm/vllm-openai:v0.33.0".
        device: the GPU model as `tuner sweep --device` takes it, e.g. "L20".
        model: a `shapes/` key.
        tp: tensor-parallel size, or None for the model's default.
        db: the store's URL; None for a SQLite file in a mounted folder (docker only).
        nodes: GPU nodes of the Kubernetes Job (one pod each).
        gpus: GPUs each pod requests (`nvidia.com/gpu`).
        secret: the Kubernetes Secret holding the store's URL under the key "url".
        wheels_claim: the PersistentVolumeClaim holding the wheels folder (Kubernetes).
    """

    image: str
    device: str
    model: str
    tp: int | None = None
    db: str | None = None
    nodes: int = 1
    gpus: int = 1
    secret: str = "blockfp8-store"
    wheels_claim: str = "blockfp8-wheels"

    def __post_init__(self) -> None:
        for name, value in (("image", self.image), ("device", self.device), ("model", self.model)):
            if not value or any(ch.isspace() for ch in value):
                raise ValueError(f"--{name} must be one word, got {value!r}")

    def _sweep_args(self) -> list[str]:
        args = ["--device", self.device, "--model", self.model]
        return args + (["--tp", str(self.tp)] if self.tp is not None else [])

    def install(self) -> str:
        """The shell commands that put the tuner into the image from the wheels folder, every
        package the image has held at its version (`PINS_FILE`)."""
        extra = "[postgres]" if self.db is None or self.db.startswith("postgresql") else ""
        install = ["pip", "install", "--no-index", "--find-links", WHEELS_DIR]
        install += ["--constraint", PINS_FILE, f"blockfp8-tuner{extra}"]
        return f"pip list --format=freeze > {PINS_FILE} && {shlex.join(install)}"

    def docker(self) -> str:
        """One `docker run --gpus all` line: install, `tuner doctor`, then `tuner sweep` with
        vLLM's kernels against the store (a mounted SQLite folder, or `db` via the variable)."""
        sweep = shlex.join(["tuner", "sweep", *self._sweep_args(), "--kernel", "vllm"])
        script = f"{self.install()} && tuner doctor ; {sweep}"
        argv = "docker run --rm --gpus all --ipc=host -v $PWD/wheels:/wheels:ro".split()
        if self.db is None:
            store = f"sqlite:///{STORE_DIR}/tuner.db"
            argv += ["-v", f"$PWD/tuner-store:{STORE_DIR}", "-e", f"{DB_VARIABLE}={store}"]
        else:
            argv += ["-e", DB_VARIABLE]  # passed from the caller's environment, not the line
        argv += ["--entrypoint", "bash", self.image, "-c", script]
        # $PWD expands in the caller's shell: those words are double-quoted, the rest shlex'd.
        return " ".join(
            f'"{word}"' if word.startswith("$PWD/") else shlex.quote(word) for word in argv
        )

    def job_name(self) -> str:
        """A DNS-1123 name for the Job, from the device and model."""
        return _NAME.sub("-", f"tuner-{self.device}-{self.model}".lower()).strip("-")[:63]

    def container(self) -> dict:
        """The Job's container: the image running `tuner worker` with vLLM's kernels, after the
        install, the store's URL from the Secret."""
        worker = shlex.join(["tuner", "worker", "--device", self.device, "--kernel", "vllm"])
        secret = {"secretKeyRef": {"name": self.secret, "key": "url"}}
        return {
            "name": "tuner-worker",
            "image": self.image,
            "command": ["bash", "-c", f"{self.install()} && {worker}"],
            "env": [{"name": DB_VARIABLE, "valueFrom": secret}],
            "resources": {"limits": {"nvidia.com/gpu": self.gpus}},
            "volumeMounts": [
                {"name": "wheels", "mountPath": WHEELS_DIR, "readOnly": True},
                {"name": "shm", "mountPath": "/dev/shm"},
            ],
        }

    def job(self) -> dict:
        """The Indexed Job: `nodes` pods, one per node (required anti-affinity on the node
        name), each requesting `gpus` GPUs and running `tuner worker` with vLLM's kernels on
        the sweeps `tuner sweep --no-run` created, the store's URL from the Secret."""
        name, container = self.job_name(), self.container()
        one_per_node = {
            "labelSelector": {"matchLabels": {"app": name}},
            "topologyKey": "kubernetes.io/hostname",
        }
        wheels = {"claimName": self.wheels_claim, "readOnly": True}
        pod = {
            "restartPolicy": "OnFailure",
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [one_per_node]
                }
            },
            "containers": [container],
            "volumes": [
                {"name": "wheels", "persistentVolumeClaim": wheels},
                {"name": "shm", "emptyDir": {"medium": "Memory"}},
            ],
        }
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {
                "completionMode": "Indexed",
                "completions": self.nodes,
                "parallelism": self.nodes,
                "backoffLimit": 4 * self.nodes,
                "template": {"metadata": {"labels": {"app": name}}, "spec": pod},
            },
        }

    def k8s(self, masked_db: str) -> str:
        """The cluster recipe (comments): the Secret made from the store's URL, the wheels,
        the sweep created inside the image, the Job applied, and how to read the results;
        then the Job as YAML. The URL reaches the pods only through the Secret.

        Args:
            masked_db: the store's URL with its password masked (`tuner.cli.store.masked`):
                the only form of it printed.
        """
        create = shlex.join(["tuner", "sweep", *self._sweep_args(), "--kernel", "vllm", "--no-run"])
        inside = (
            f'docker run --rm -e {DB_VARIABLE} -v "$PWD/wheels:/wheels:ro" --entrypoint bash '
            f"{shlex.quote(self.image)} -c {shlex.quote(f'{self.install()} && {create}')}"
        )
        device = shlex.quote(self.device)
        head = [
            "# 1. The store's URL (PostgreSQL, reachable from the pods and from here), with "
            "its password, as a Secret:",
            f"#   export {DB_VARIABLE}='{masked_db}'",
            f'#   kubectl create secret generic {self.secret} --from-literal=url="${DB_VARIABLE}"',
            "# 2." + wheels_lines()[0][1:],
            *wheels_lines("   ")[1:],
            f"#    then copy the folder into the PersistentVolumeClaim {self.wheels_claim}.",
            "# 3. The sweep and its tasks, created once inside the image, from here:",
            f"#   {inside}",
            "# 4. kubectl apply -f this file; kubectl wait --for=condition=complete "
            f"--timeout=24h job/{self.job_name()}",
            f'# 5. The results: tuner status --db "${DB_VARIABLE}"; tuner publish --device '
            f'{device} --db "${DB_VARIABLE}"; tuner serve --db "${DB_VARIABLE}".',
        ]
        return "\n".join(head + dump_yaml(self.job())) + "\n"
