"""`tuner recipe sweep`: the docker line survives the shell's quoting, and the Kubernetes Job is
valid against Kubernetes' published schema (kubernetes-validate, offline)."""

from __future__ import annotations

import shlex

import kubernetes_validate
import pytest
import yaml

import tuner
from tests.cli.common import invoke
from tuner.files.mounts import advice_comments

IMAGE = "vllm/vllm-openai:v0.33.0"
INSTALL = (
    "pip install --no-index --find-links /wheels --constraint /tmp/engine-pins.txt "
    "'blockfp8-tuner[postgres]'"
)


RECIPE = ["recipe", "sweep", "--image", IMAGE, "--device", "L20", "--model", "qwen3.8-27b"]


def recipe(*args: str, code: int | None = None):
    """`tuner recipe sweep` of qwen3.8-27b on an L20 in IMAGE, then `args` (a later option
    overrides these)."""
    return invoke(*RECIPE, *args, code=code)


def test_the_docker_line_round_trips_through_shell_quoting() -> None:
    run = recipe("--tp", "2", code=0)
    *comments, line = run.stdout.splitlines()
    assert all(c.startswith("#") for c in comments)
    argv = shlex.split(line)
    assert argv[:9] == "docker run --rm --gpus all --ipc=host -v $PWD/wheels:/wheels:ro -v".split()
    assert argv[9:16] == [
        *"$PWD/tuner-store:/store -e TUNER_DB_URL=sqlite:////store/tuner.db "
        "--entrypoint bash".split(),
        IMAGE,
        "-c",
    ]
    pins, install, rest = argv[16].split(" && ")
    doctor, sweep = rest.split(" ; ")
    # Every package of the image held at its version: nothing of the engine's moves.
    assert pins == "pip list --format=freeze > /tmp/engine-pins.txt"
    assert install == INSTALL
    assert shlex.split(doctor) == ["tuner", "doctor"]
    assert sweep == "tuner sweep --device L20 --model qwen3.8-27b --tp 2 --kernel vllm"
    assert len(argv) == 17
    # Shell characters in the image stay one word.
    tricky = "registry.local/v'llm:$(touch${IFS}x)`y`\\"
    argv = shlex.split(recipe("--image", tricky, code=0).stdout.splitlines()[-1])
    assert argv[argv.index("--entrypoint") + 2] == tricky
    # A PostgreSQL store is passed by variable, never printed.
    run = recipe("--db", "postgresql+psycopg://tuner:s3cret@db:5432/tuner", code=0)
    assert "s3cret" not in run.stdout
    argv = shlex.split(run.stdout.splitlines()[-1])
    assert argv[argv.index("-e") + 1] == "TUNER_DB_URL"


def test_the_kubernetes_job_is_valid_against_the_published_schema() -> None:
    run = recipe(
        *"--format k8s --nodes 3 --gpus 2 --db".split(), "postgresql+psycopg://t:pw@db/t", code=0
    )
    assert "pw@" not in run.stdout
    job = yaml.safe_load(run.stdout)
    assert kubernetes_validate.validate(job, "1.33", strict=True) == "1.33"
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 3, 3)
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    assert container["env"] == [
        {
            "name": "TUNER_DB_URL",
            "valueFrom": {"secretKeyRef": {"name": "blockfp8-store", "key": "url"}},
        }
    ]
    assert container["command"][:2] == ["bash", "-c"]
    pins, install, work = container["command"][2].split(" && ")
    assert pins == "pip list --format=freeze > /tmp/engine-pins.txt"
    assert install == INSTALL
    assert shlex.split(work) == ["tuner", "worker", "--device", "L20", "--kernel", "vllm"]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    (created,) = [line for line in run.stdout.splitlines() if "--no-run" in line]
    # Created inside the image, the store's URL from this shell's variable, never the line.
    argv = shlex.split(created.removeprefix("#   "))
    assert (
        argv[:9]
        == "docker run --rm -e TUNER_DB_URL -v $PWD/wheels:/wheels:ro --entrypoint bash".split()
    )
    assert argv[9:11] == [IMAGE, "-c"] and len(argv) == 12
    assert (
        shlex.split(argv[11].split(" && ")[-1])
        == "tuner sweep --device L20 --model qwen3.8-27b --kernel vllm --no-run".split()
    )
    lines = run.stdout.splitlines()
    assert lines[1:3] == [
        "#   export TUNER_DB_URL='postgresql+psycopg://t:***@db/t'",
        '#   kubectl create secret generic blockfp8-store --from-literal=url="$TUNER_DB_URL"',
    ]


K8S_NEEDS_POSTGRES = (
    "error: --format k8s needs --db postgresql+psycopg://...: the pods of a Kubernetes sweep "
    "share one PostgreSQL store (a SQLite file is one host's)"
)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ("--model nosuchmodel", "error: unknown model 'nosuchmodel'; known: "),
        ("--device NoSuchGPU", "error: 'NoSuchGPU' is not a GPU model name"),
        ("--tp 3", "error: model 'qwen3.8-27b' has no shapes"),
        # a k8s sweep across pods shares a store
        ("--format k8s --db sqlite:///t.db", K8S_NEEDS_POSTGRES),
        ("--format k8s", K8S_NEEDS_POSTGRES),
        ("--image 'a b'", "error: --image must be one word, got 'a b'"),
    ],
)
def test_what_the_sweep_would_refuse_is_refused_before_printing(args, line) -> None:
    run = recipe(*shlex.split(args), code=2)
    assert run.stdout == ""
    assert run.stderr.startswith(line) and len(run.stderr.strip().splitlines()) == 1


WHEELS = [
    "# The wheels folder, once, on a host with a package index, for the image's CPython 3.12 "
    "on glibc x86_64:",
    "#   pip wheel --no-deps -w wheels <tuner source>",
    "#   pip download --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64 "
    "--platform manylinux2014_x86_64 --find-links wheels -d wheels "
    f"'blockfp8-tuner[postgres]=={tuner.__version__}'",
]


def test_the_wheels_are_built_for_the_image_s_python_and_platform() -> None:
    lines = recipe().stdout.splitlines()
    assert lines[:3] == WHEELS
    k8s = recipe("--format", "k8s", "--db", "postgresql+psycopg://tuner@db/tuner")
    steps = k8s.stdout.splitlines()
    assert steps[3] == "# 2." + WHEELS[0][1:]
    assert steps[4:6] == ["#    " + line[2:] for line in WHEELS[1:]]
    for url in ("postgres://tuner@db/tuner", "postgresql://tuner@db/tuner"):  # psycopg's
        recipe("--format", "k8s", "--db", url, code=0)


def test_both_recipes_say_what_makes_vllm_read_the_files_on_the_device() -> None:
    for args in ((), ("--format", "k8s", "--db", "postgresql+psycopg://tuner@db/tuner")):
        lines = recipe(*args).stdout.splitlines()
        at = lines.index(
            "# After the sweep: tuner mounts --device L20 (or tuner pull) hands out "
            "the files. Serving them:"
        )
        advice = advice_comments("NVIDIA_L20", [], "vllm")  # its text: tests/tuner/inputs
        assert lines[at + 1 : at + 1 + len(advice)] == advice
