"""`tuner recipe sweep`: the docker line survives the shell's quoting, and the Kubernetes Job is
valid against Kubernetes' published schema (kubernetes-validate, offline)."""

from __future__ import annotations

import shlex

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli.app import app

runner = CliRunner()
IMAGE = "vllm/vllm-openai:v0.33.0"


def recipe(*args: str):
    return runner.invoke(app, ["recipe", "sweep", "--image", IMAGE, "--device", "L20",
                               "--model", "qwen3.8-27b", *args])


def test_the_docker_line_round_trips_through_shell_quoting() -> None:
    run = recipe("--tp", "2")
    assert run.exit_code == 0, run.output
    comment, line = run.stdout.splitlines()
    assert comment.startswith("# Once, on a host with a package index: pip wheel -w wheels")
    argv = shlex.split(line)
    assert argv[:9] == ["docker", "run", "--rm", "--gpus", "all", "--ipc=host", "-v",
                        "$PWD/wheels:/wheels:ro", "-v"]
    assert argv[9:16] == ["$PWD/tuner-store:/store", "-e",
                          "TUNER_DB_URL=sqlite:////store/tuner.db", "--entrypoint", "bash",
                          IMAGE, "-c"]
    pins, install, rest = argv[16].split(" && ")
    doctor, sweep = rest.split(" ; ")
    # Every package of the image held at its version: nothing of the engine's moves.
    assert pins == "pip list --format=freeze > /tmp/engine-pins.txt"
    assert shlex.split(install) == ["pip", "install", "--no-index", "--find-links", "/wheels",
                                    "--constraint", "/tmp/engine-pins.txt",
                                    "blockfp8-tuner[postgres]"]
    assert shlex.split(doctor) == ["tuner", "doctor", "--no-compile"]
    assert shlex.split(sweep) == ["tuner", "sweep", "--device", "L20", "--model",
                                  "qwen3.8-27b", "--tp", "2", "--kernel", "vllm"]
    assert len(argv) == 17


def test_shell_characters_in_the_image_stay_one_word() -> None:
    tricky = "registry.local/v'llm:$(touch${IFS}x)`y`\\"
    run = runner.invoke(app, ["recipe", "sweep", "--image", tricky, "--device", "L20",
                              "--model", "tiny"])
    assert run.exit_code == 0, run.output
    argv = shlex.split(run.stdout.splitlines()[-1])
    assert argv[argv.index("--entrypoint") + 2] == tricky


def test_a_postgres_store_is_passed_by_variable_never_printed() -> None:
    run = recipe("--db", "postgresql+psycopg://tuner:s3cret@db:5432/tuner")
    assert run.exit_code == 0, run.output
    assert "s3cret" not in run.stdout
    argv = shlex.split(run.stdout.splitlines()[-1])
    assert argv[argv.index("-e") + 1] == "TUNER_DB_URL"


def test_the_kubernetes_job_is_valid_against_the_published_schema() -> None:
    run = recipe("--format", "k8s", "--nodes", "3", "--gpus", "2", "--db",
                 "postgresql+psycopg://tuner:pw@db/tuner")
    assert run.exit_code == 0, run.output
    assert "pw@" not in run.stdout
    job = yaml.safe_load(run.stdout)
    assert kubernetes_validate.validate(job, "1.33", strict=True) == "1.33"
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == (
        "Indexed", 3, 3)
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    assert container["env"] == [{"name": "TUNER_DB_URL", "valueFrom": {"secretKeyRef": {
        "name": "blockfp8-store", "key": "url"}}}]
    assert container["command"][:2] == ["bash", "-c"]
    pins, install, work = container["command"][2].split(" && ")
    assert pins == "pip list --format=freeze > /tmp/engine-pins.txt"
    assert shlex.split(install) == ["pip", "install", "--no-index", "--find-links", "/wheels",
                                    "--constraint", "/tmp/engine-pins.txt",
                                    "blockfp8-tuner[postgres]"]
    assert shlex.split(work) == ["tuner", "worker", "--device", "L20", "--kernel", "vllm"]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    created = [line for line in run.stdout.splitlines() if "--no-run" in line]
    assert created == ["#   TUNER_DB_URL=... tuner sweep --device L20 --model qwen3.8-27b "
                       "--kernel vllm --no-run"]


def test_a_broken_job_fails_the_schema() -> None:
    job = yaml.safe_load(recipe("--format", "k8s").stdout)
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = "2 GPUs"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, "1.33", strict=True)


def test_k8s_needs_postgres_and_words_must_be_words() -> None:
    run = recipe("--format", "k8s", "--db", "sqlite:///t.db")
    assert run.exit_code == 2
    assert run.stderr.strip() == ("error: --format k8s needs a PostgreSQL store (--db "
                                  "postgresql+psycopg://...)")
    bad = runner.invoke(app, ["recipe", "sweep", "--image", "a b", "--device", "L20",
                              "--model", "m"])
    assert bad.exit_code == 2
    assert bad.stderr.strip() == "error: --image must be one word, got 'a b'"


@pytest.mark.parametrize(("args", "line"), [
    (("--device", "L20", "--model", "nosuchmodel"),
     "error: unknown model 'nosuchmodel'; known: "),
    (("--device", "NoSuchGPU", "--model", "qwen3.8-27b"),
     "error: 'NoSuchGPU' is not a GPU model name such as L20"),
    (("--device", "L20", "--model", "qwen3.8-27b", "--tp", "3"),
     "error: model 'qwen3.8-27b' has no shapes for TP 3; listed: 2"),
])
def test_what_the_sweep_would_refuse_is_refused_before_printing(args, line) -> None:
    run = runner.invoke(app, ["recipe", "sweep", "--image", IMAGE, *args])
    assert (run.exit_code, run.stdout) == (2, "")
    assert run.stderr.startswith(line) and len(run.stderr.strip().splitlines()) == 1
