"""Every form that hands out files says what makes vLLM 0.33.0 read them on the device, from one
source (`tuner.files.mounts.advice_comments` / `tuner.inputs.backends.device_advice`), and puts
`--linear-backend triton` where vLLM needs it, added to the user's own server arguments: `tuner
mounts` in each --format (the pull recipes from the store here, without reaching the server;
GET /devices/{d}/mounts serves the same text: tests/cli/test_cli_import.py), `tuner pull`
and the download README (`tuner recipe sweep`'s: in
tests/cli/test_recipe.py; the pods' validity: tests/tuner/files/test_mounts.py); for an sm89
device (NVIDIA_L20: Marlin by default) and an sm90 one (NVIDIA_H200: DeepGEMM by default). The
flag is absent for SGLang and for the CPU interpreter. What each format's YAML holds:
tests/tuner/files/test_mounts.py."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from tests.cli.common import invoke, ok, query, service
from tests.storefill import DEFAULT, FAST, fill
from tuner.cli import serving as pull_module
from tuner.kernels.engines import SGLANG_NOTE

SERVER = "http://tuner:8000"  # a name only the cluster resolves
PLAN = {(576, 7168, 1): [(DEFAULT, True, "ok", 10.0), (FAST, False, "ok", 6.0)]}
FLAG_SENTENCE = (
    "vLLM 0.33.0 reads the dense files only with --linear-backend triton or "
    'linear_backend_per_quant={"fp8_block_w8a8": "triton"}; VLLM_BATCH_INVARIANT=1 ignores them.'
)
ADVICE = {
    "NVIDIA_L20": [
        "NVIDIA_L20 is sm89 (compute capability 8.9, from its trials in the store).",
        "vLLM's default kernel there is Marlin (weight-only FP8, W8A16).",
        FLAG_SENTENCE,
    ],
    "NVIDIA_H200": [
        "NVIDIA_H200 is sm90 (compute capability 9.0, from its trials in the store).",
        "vLLM's default kernel there is DeepGEMM (FlashInfer DeepGEMM where FlashInfer's "
        "kernels are installed or can be built), or CUTLASS where DeepGEMM cannot run.",
        FLAG_SENTENCE,
        "Fused-MoE files (E=...) are read by default here: vLLM moves its Triton MoE kernel "
        "first on sm90 with 128x128 FP8 weights and ep_size 1.",
    ],
}
INTERPRETER_ADVICE = [
    "TRITON_INTERPRETER is Triton's CPU interpreter: its files hold CPU timings, read by no "
    "vLLM server."
]
# The flag, in each format's syntax, as the text's last lines, appended to the user's
# arguments, never a `command:`/`args:` key.
DOCKER_FLAG = [
    "# After the image name, with the server's other arguments:",
    "  --linear-backend triton",
]
K8S_FLAG = [
    "# vLLM reads the files only with --linear-backend triton: append to the serving "
    "container's args:",
    "#   - --linear-backend",
    "#   - triton",
]
COMPOSE_FLAG = [K8S_FLAG[0].replace("container's args", "service's command"), *K8S_FLAG[1:]]
FLAG = {"docker": DOCKER_FLAG, "compose": COMPOSE_FLAG, "k8s": K8S_FLAG}
FLAG |= {"k8s-pull": K8S_FLAG, "compose-pull": COMPOSE_FLAG}
FORMATS = tuple(FLAG)
DEVICES = {"NVIDIA_L20": "L20", "NVIDIA_H200": "H200"}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """L20 trials on compute capability 8.9, H200's on 9.0, interpreter trials; release 1 of
    each."""
    folder = tmp_path_factory.mktemp("deploy")
    db = f"sqlite:///{folder / 'tuner.db'}"
    for device in ("NVIDIA_L20", "NVIDIA_H200", "TRITON_INTERPRETER"):
        fill(db, PLAN, m_values=(1,), device_name=device)
    for device, capability in (("NVIDIA_H200", "9.0"), ("TRITON_INTERPRETER", "")):
        query(
            folder / "tuner.db",
            "UPDATE environments SET compute_capability = ? WHERE device_id IN "
            "(SELECT device_id FROM devices WHERE device_name = ?)",
            *(capability, device),
        )
    for device in ("L20", "H200", "interpreter"):
        assert invoke("publish", "--device", device, "--db", db).exit_code == 0
    return db


def comments(text: str) -> list[str]:
    """The comment lines' text without "#" and the one space after it."""
    return [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("# ")]


@pytest.mark.parametrize("fmt", FORMATS)
def test_tuner_mounts_every_format_with_the_flag_only_for_vllm_on_a_gpu(
    store: str, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pull_module, "fetch", lambda url: pytest.fail(f"asked the server: {url}"))
    mounts = ["mounts", "--format", fmt, "--db", store]
    if fmt.endswith("-pull"):  # pinned: made from the store here, the server never asked
        mounts += ["--server", SERVER, "--release", "1"]
    for device_name, device in DEVICES.items():
        run = ok(*mounts, "--device", device)
        found, advice = comments(run.stdout), ADVICE[device_name]
        at = found.index(advice[0])
        assert found[at : at + len(advice)] == advice
        lines = run.stdout.splitlines()
        assert lines[-len(FLAG[fmt]) :] == FLAG[fmt]
        assert sum("--linear-backend" in line for line in lines) == (2 if fmt == "docker" else 3)
    sglang = ok(*mounts, "--device", "L20", "--engine", "sglang")
    assert "--linear-backend" not in sglang.stdout and "Marlin" not in sglang.stdout
    assert f"# {SGLANG_NOTE}" in sglang.stdout.splitlines()
    cpu = ok(*mounts, "--device", "interpreter")
    assert "--linear-backend" not in cpu.stdout
    assert " ".join(INTERPRETER_ADVICE) in " ".join(comments(cpu.stdout))


@pytest.mark.parametrize("device_name", DEVICES)
def test_tuner_pull_and_the_download_readme(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device_name: str
) -> None:
    with service(store) as client:
        monkeypatch.setattr(
            pull_module, "fetch", lambda url: client.get(url[len(SERVER) :]).content
        )
        out = ["--out", str(tmp_path / "configs")]
        run = ok("pull", "--server", SERVER, "--device", DEVICES[device_name], *out)
        readme = zipfile.ZipFile(
            io.BytesIO(client.get(f"/devices/{DEVICES[device_name]}/configs.zip").content)
        ).read("README.txt")
    # `tuner pull` prints the same sentences, after its one line on what it wrote.
    pulled, ab, *advice = run.stdout.splitlines()
    assert ab == "no A/B of this release yet: `tuner ab --release` measures it in your server"
    assert advice == ADVICE[device_name]
    lines = readme.decode().splitlines()
    at = lines.index("Does vLLM read them") + 1
    assert lines[at : at + len(advice)] == ADVICE[device_name]
    assert "`" not in readme.decode()
