"""`tuner doctor` without a GPU (--arch), with and without a stand-in vLLM: what vLLM runs,
whether the files are read, the Triton vLLM needs, the compiled-code check and the exit code."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.standin_vllm import build_standin
from tuner.compare.doctor import required_version
from tuner.files.provenance import installed_triton_minor


def doctor(*args, vllm=None):
    # No TRITON_INTERPRET: doctor compiles for the architecture as on a user's machine.
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "TRITON_INTERPRET")}
    if vllm is not None:
        env["PYTHONPATH"] = str(vllm)
    return subprocess.run([sys.executable, "-m", "tuner.cli", "doctor", *args], env=env,
                          capture_output=True, text=True, timeout=600)


def _reasons(run) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.startswith("tuning here")]


def test_sm89_without_vllm_says_marlin_runs_and_exits_1() -> None:
    run = doctor("--arch", "sm89", "--device", "L20", "--no-compile")
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == ["GPUs: none visible", "architecture: sm89, device_name: NVIDIA_L20"]
    assert ("dense block-FP8 linear: vLLM runs Marlin (weight-only FP8, W8A16) by default "
            "(the tuner's table of vLLM 0.33.0)") in lines
    assert lines[3].startswith("vLLM: not importable here; a sweep here times the builtin")
    assert _reasons(run) == [
        "tuning here will not change what vLLM runs: vLLM on sm89 reads no tuned file with "
        "default settings; start it with --linear-backend triton (and pass --linear-backend "
        "triton here) if tuner compare shows Triton wins"]
    flagged = doctor("--arch", "sm89", "--linear-backend", "triton", "--no-compile")
    assert flagged.returncode == 0, flagged.stderr
    assert flagged.stdout.splitlines()[-1] == ("tuning here changes what vLLM runs: its dense "
                                               "files")


def test_sm90_inside_a_vllm_environment_compares_the_code_and_exits_0(tmp_path) -> None:
    vllm = build_standin(tmp_path / "site", triton_pin=f"{installed_triton_minor()}.0")
    run = doctor("--arch", "sm90", "--device", "H200", vllm=vllm)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert (f"vLLM 0.33.0: requires triton =={installed_triton_minor()}.0 (vLLM's metadata); "
            "a sweep here times vLLM's installed kernels (--kernel auto)") in lines
    assert ("fused-MoE block-FP8: vLLM runs Triton (fused_moe_kernel) by default with 128x128 "
            "weights and ep_size 1") in lines
    same = [line for line in lines if line.startswith("builtin vs vLLM's dense kernel on sm90")]
    assert len(same) == 1 and ": same code (shared " in same[0], same
    assert lines[-1] == "tuning here changes what vLLM runs: its moe files"


def test_a_triton_other_than_vllms_is_the_reason_to_exit_1(tmp_path) -> None:
    vllm = build_standin(tmp_path / "site", triton_pin="2.9.0")
    run = doctor("--arch", "sm90", "--no-compile", vllm=vllm)
    assert run.returncode == 1
    assert _reasons(run) == [
        f"tuning here will not change what vLLM runs: triton {installed_triton_minor()} is "
        "installed but vLLM 0.33.0 runs with triton 2.9: tune inside the serving image"]


def test_no_gpu_and_no_arch_and_a_bad_arch() -> None:
    run = doctor("--no-compile")
    assert run.returncode == 1
    assert _reasons(run) == ["tuning here will not change what vLLM runs: no GPU visible and "
                             "no --arch: say which GPU vLLM serves on"]
    bad = doctor("--arch", "hopper")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("error: --arch 'hopper' is not an architecture such as sm89 "
                                  "or sm90")


def test_required_version_reads_requires_dist_lines() -> None:
    lines = ["numpy", "triton~=3.8.0; platform_system == 'Linux'", "torch==2.14.0"]
    assert required_version(lines, "triton") == "~=3.8.0"
    assert required_version(lines, "torch") == "==2.14.0"
    assert required_version(lines, "numpy") == "any"
    assert required_version(lines, "vllm") is None
    assert required_version(None, "triton") is None
