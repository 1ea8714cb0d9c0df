"""`tuner doctor` without a GPU (--arch), with and without a stand-in vLLM: what vLLM runs,
whether the files are read, the Triton vLLM needs, the compiled-code check and the exit code."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.standin_vllm import build_standin
from tuner.compare.doctor import required_version
from tuner.files.provenance import installed_triton_minor

# doctor takes its default arch and device from the visible GPUs (tuner.run.gpus.visible_gpus):
# the child sees none, as on CI, whatever GPU the machine running the tests has.
NO_GPU_TUNER = (
    "import sys; import tuner.run.gpus as gpus; gpus.visible_gpus = lambda: []; "
    "sys.argv[0] = 'tuner'; from tuner.cli.app import main; main()"
)


def doctor(*args, vllm=None, extra=None, **standin):
    """Run `tuner doctor`; `standin` sets the stand-in's answers (`capability="9.0"`, ...),
    `extra` more environment variables."""
    # No TRITON_INTERPRET: doctor compiles for the architecture as on a user's machine.
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES")
        and not key.startswith("STANDIN_")
    }
    if vllm is not None:
        env["PYTHONPATH"] = str(vllm)
    env.update({f"STANDIN_VLLM_{key.upper()}": value for key, value in standin.items()})
    env.update(extra or {})
    return subprocess.run(
        [sys.executable, "-c", NO_GPU_TUNER, "doctor", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _reasons(run) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.startswith("tuning here")]


def test_known_gpu_models_give_the_architecture() -> None:
    from tuner.cli.doctor import _known_arch

    assert [
        _known_arch(name)
        for name in (
            "NVIDIA_L20",
            "NVIDIA_H200",
            "NVIDIA_A100-SXM4-80GB",
            "NVIDIA_A10",
            "NVIDIA_B9",
        )
    ] == ["sm89", "sm90", "sm80", "sm86", None]


def test_sm89_without_vllm_says_marlin_runs_and_exits_1() -> None:
    # No GPU and no --arch: L20 is in the table of known GPUs, so sm89.
    run = doctor("--device", "L20", "--no-compile")
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:2] == ["GPUs: none visible", "architecture: sm89, device_name: NVIDIA_L20"]
    assert (
        "dense block-FP8 linear: by default vLLM runs Marlin (weight-only FP8, W8A16) "
        "(the tuner's table of vLLM 0.33.0)"
    ) in lines
    assert lines[3].startswith("vLLM: not importable here; a sweep here times the builtin")
    assert _reasons(run) == [
        "tuning here will not change what vLLM runs: vLLM on sm89 reads no tuned file with "
        "default settings; start it with --linear-backend triton (and pass --linear-backend "
        "triton here) if tuner compare shows Triton wins"
    ]
    flagged = doctor("--arch", "sm89", "--linear-backend", "Triton")  # vLLM lower-cases it
    assert flagged.returncode == 0, flagged.stderr
    assert flagged.stdout.splitlines()[-2:] == [
        "builtin vs vLLM's compiled code (dense and fused-MoE): no vLLM here to compare with "
        "(bench/vllm_equivalence.py compares with a vLLM wheel's files)",
        "tuning here changes what vLLM runs: its dense files",
    ]


def test_sm90_inside_a_vllm_environment_compares_the_code_and_exits_0(tmp_path) -> None:
    vllm = build_standin(tmp_path / "site", triton_pin=f"{installed_triton_minor()}.0")
    run = doctor("--arch", "sm90", "--device", "H200", vllm=vllm)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert (
        f"vLLM 0.33.0: requires triton =={installed_triton_minor()}.0 (vLLM's metadata); "
        "a sweep here times vLLM's installed kernels (--kernel auto)"
    ) in lines
    assert (
        "vLLM's own selection code answers only for the GPU it sees, and it sees no CUDA "
        "GPU here: the tuner's table of vLLM 0.33.0 answers"
    ) in lines
    assert (
        "fused-MoE block-FP8: vLLM runs Triton (fused_moe_kernel) by default with 128x128 "
        "weights and ep_size 1 (the tuner's table of vLLM 0.33.0)"
    ) in lines
    same = [line for line in lines if line.startswith("builtin vs vLLM's dense kernel on sm90")]
    assert len(same) == 1 and ": same code (shared " in same[0], same
    moe = [line for line in lines if line.startswith("builtin vs vLLM's fused-MoE kernel on")]
    assert len(moe) == 1, lines
    assert lines[-1] == "tuning here changes what vLLM runs: its moe files"


def _moe_line(arch: str, vllm) -> str:
    run = doctor("--arch", arch, vllm=vllm)
    (line,) = [
        line
        for line in run.stdout.splitlines()
        if line.startswith("builtin vs vLLM's fused-MoE kernel on")
    ]
    return line


def test_the_moe_kernel_launched_as_vllm_launches_it_compiles_to_the_builtins_code(
    tmp_path,
) -> None:
    # The stand-in's fused_moe_kernel is the builtin's body under vLLM 0.33.0's parameters,
    # launched as vLLM's invoke_fused_moe_triton_kernel launches it: on sm89 (no A/B swap) the
    # same code.
    vllm = build_standin(tmp_path / "site", triton_pin=f"{installed_triton_minor()}.0")
    line = _moe_line("sm89", vllm)
    assert line.startswith(
        "builtin vs vLLM's fused-MoE kernel on sm89: same code (shared 30720 bytes, "
    ), line
    assert line.endswith(
        " PTX instructions in the gate_up GEMM at M=1, default configs at M=1 and 256)"
    ), line


def test_on_sm90_both_moe_launches_swap_a_and_b_and_compile_alike(tmp_path) -> None:
    # vLLM swaps A and B on sm90 for BLOCK_SIZE_M < 64 (M = 1's default); the builtin's launch
    # for the target must too.
    vllm = build_standin(tmp_path / "site", triton_pin=f"{installed_triton_minor()}.0")
    line = _moe_line("sm90", vllm)
    assert line.startswith("builtin vs vLLM's fused-MoE kernel on sm90: same code"), line


def test_vllms_own_selection_code_answers_for_the_gpu_it_sees(tmp_path) -> None:
    vllm = build_standin(tmp_path / "site", triton_pin=f"{installed_triton_minor()}.0")
    run = doctor("--arch", "sm90", "--no-compile", vllm=vllm, capability="9.0")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    # Asked with a model config, as a server asks, vLLM's DeepGEMM takes the layer on sm90;
    # the kernels it tried first are listed in its order, with its reasons.
    at = lines.index(
        "dense block-FP8 linear: vLLM runs DeepGEMM (DeepGemmFp8BlockScaledMMKernel) "
        "by default (vLLM's own selection code)"
    )
    assert lines[at - 1].startswith(
        "no --model: vLLM's kernel choice is asked for one "
        "DeepSeek-V3 layer (model type deepseek_v3, N=7168, "
        "K=18432); it depends on the model's type and weight shapes"
    )
    assert lines[at + 1] == (
        "  passed over first: FlashInferFp8DeepGEMMDynamicBlockScaledKernel "
        "its base is not supported: has no usable FlashInfer block-scale "
        "FP8 GEMM here"
    )
    assert lines[at + 2].startswith("  files read: no; --linear-backend triton makes vLLM")
    assert lines[at + 3 : at + 5] == [
        "fused-MoE block-FP8: vLLM runs TRITON (TritonExperts) by default with 128x128 weights "
        "and ep_size 1 (vLLM's own selection code)",
        "  files read: yes, from $VLLM_TUNED_CONFIG_FOLDER or vLLM's fused_moe/configs/",
    ]
    assert lines[-1] == "tuning here changes what vLLM runs: its moe files"
    assert not [line for line in lines if line.startswith("builtin vs")]  # --no-compile
    # vLLM picks Triton for dense layers and Marlin for MoE: the dense files are read.
    triton = doctor(
        "--arch",
        "sm89",
        "--no-compile",
        vllm=vllm,
        capability="8.9",
        moe_backend="MARLIN",
        dense_kernel="TritonFp8BlockScaledMMKernel",
    )
    assert triton.returncode == 0, triton.stderr
    assert (
        "  files read: yes, by default (from vllm/model_executor/layers/quantization/utils/"
        "configs/ in the image)" in triton.stdout.splitlines()
    )
    assert (
        "fused-MoE block-FP8: vLLM runs MARLIN by default with 128x128 weights and "
        "ep_size 1 (vLLM's own selection code)"
    ) in triton.stdout.splitlines()
    assert triton.stdout.splitlines()[-1] == ("tuning here changes what vLLM runs: its dense files")


def _user_model(folder, name: str, model_type: str, shapes: str) -> dict:
    """A user shapes file (as `tuner shapes from-config --save` writes one) and the
    environment that finds it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.toml").write_text(
        f'model = "{name}"\nblock_shape = [128, 128]\nmodel_type = "{model_type}"\n\n'
        f'[tp.1]\nsource = "test"\nshapes = {shapes}\n'
    )
    return {"TUNER_SHAPES_DIR": str(folder)}


def test_with_a_model_vllm_is_asked_per_weight_shape_with_its_model_type(tmp_path) -> None:
    vllm = build_standin(tmp_path / "site", triton_pin=f"{installed_triton_minor()}.0")
    env = _user_model(tmp_path / "shapes", "mine", "deepseek_v3", "[[7168, 18432], [200, 256]]")
    run = doctor(
        "--arch", "sm90", "--no-compile", "--model", "mine", vllm=vllm, capability="9.0", extra=env
    )
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert not [line for line in lines if line.startswith("no --model")]
    at = lines.index(
        "dense block-FP8 linear: vLLM runs DeepGEMM (DeepGemmFp8BlockScaledMMKernel) "
        "by default (vLLM's own selection code)"
    )
    assert lines[at + 1] == "  other shapes: CutlassFp8BlockScaledMMKernel for N=200,K=256"
    # On Blackwell vLLM turns DeepGEMM off for some model types: CUTLASS, and doctor says why.
    env = _user_model(tmp_path / "shapes", "qwen", "qwen3_5_text", "[[7168, 18432]]")
    run = doctor(
        "--arch",
        "sm100",
        "--no-compile",
        "--model",
        "qwen",
        vllm=vllm,
        capability="10.0",
        extra=env,
    )
    lines = run.stdout.splitlines()
    at = lines.index(
        "dense block-FP8 linear: vLLM runs CUTLASS (CutlassFp8BlockScaledMMKernel) "
        "by default (vLLM's own selection code)"
    )
    assert lines[at + 1] == (
        "  passed over first: FlashInferFp8DeepGEMMDynamicBlockScaledKernel its base is not "
        "supported: has no usable FlashInfer block-scale FP8 GEMM here; "
        "DeepGemmFp8BlockScaledMMKernel is turned off for model type qwen3_5_text here"
    )
    # Without a GPU the table answers, per shape of the model.
    table = doctor(
        "--arch",
        "sm90",
        "--no-compile",
        "--model",
        "mine",
        vllm=vllm,
        extra=_user_model(
            tmp_path / "shapes", "mine", "deepseek_v3", "[[7168, 18432], [200, 256]]"
        ),
    )
    assert (
        "  mine TP 1: DeepGEMM for 1 of 2 shapes (N=7168,K=18432); CUTLASS for 1 of 2 "
        "shapes (N=200,K=256) (the tuner's table of vLLM 0.33.0)"
    ) in table.stdout.splitlines()
    bad = doctor("--arch", "sm90", "--model", "nope", "--no-compile")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown model 'nope'")


def test_a_driverless_host_times_the_builtin_and_says_why(tmp_path) -> None:
    vllm = build_standin(tmp_path / "site", triton_pin=f"{installed_triton_minor()}.0")
    run = doctor("--arch", "sm89", vllm=vllm, no_gpu_driver="1")
    lines = run.stdout.splitlines()
    assert (
        f"vLLM 0.33.0: requires triton =={installed_triton_minor()}.0 (vLLM's metadata); a "
        "sweep here times the builtin kernels (--kernel auto): vLLM 0.33.0 replaces triton "
        "with a placeholder here (vllm/triton_utils/importing.py finds no single active GPU "
        "driver), so its kernels cannot run; for --kernel vllm, run where a GPU driver is "
        "active (inside the serving image, on its GPU), or, on the CPU interpreter (--device "
        'interpreter), with CUDA_VISIBLE_DEVICES="" set, under which vLLM keeps the real '
        "Triton"
    ) in lines
    assert (
        "builtin vs vLLM's compiled code (dense and fused-MoE): not compared: vLLM 0.33.0 "
        "replaces triton with a placeholder here (vllm/triton_utils/importing.py finds no "
        'single active GPU driver), so its kernels cannot run; with CUDA_VISIBLE_DEVICES="" '
        "set vLLM keeps the real Triton, and doctor compares them"
    ) in lines
    kept = doctor(
        "--arch",
        "sm89",
        "--no-compile",
        vllm=vllm,
        no_gpu_driver="1",
        extra={"CUDA_VISIBLE_DEVICES": ""},
    )
    assert (
        f"vLLM 0.33.0: requires triton =={installed_triton_minor()}.0 (vLLM's metadata); a "
        "sweep here times vLLM's installed kernels (--kernel auto)"
    ) in kept.stdout.splitlines()


def test_a_broken_or_elsewhere_selection_falls_back_to_the_table(tmp_path) -> None:
    vllm = build_standin(tmp_path / "site", triton_pin=f"{installed_triton_minor()}.0")
    run = doctor(
        "--arch",
        "sm90",
        "--no-compile",
        vllm=vllm,
        capability="9.0",
        dense_kernel="raise:no kernel for you",
    )
    lines = run.stdout.splitlines()
    at = lines.index(
        "dense block-FP8 linear: by default vLLM runs DeepGEMM (FlashInfer DeepGEMM "
        "where FlashInfer's kernels are installed or can be built), or CUTLASS "
        "where DeepGEMM cannot run (the tuner's table of vLLM 0.33.0)"
    )
    assert lines[at + 1] == (
        "  vLLM's selection code failed (RuntimeError: no kernel for "
        "you): the tuner's table of vLLM 0.33.0 answers"
    )
    assert run.returncode == 0, run.stderr  # MoE still answered by vLLM: TRITON
    elsewhere = doctor("--arch", "sm90", "--no-compile", vllm=vllm, capability="8.9")
    assert (
        "vLLM's own selection code answers only for the GPU it sees (sm89), not sm90: the "
        "tuner's table of vLLM 0.33.0 answers"
    ) in elsewhere.stdout.splitlines()
    broken = doctor(
        "--arch",
        "sm90",
        "--no-compile",
        vllm=vllm,
        capability="9.0",
        moe_backend="raise:oracle down",
    )
    assert broken.returncode == 0, broken.stderr  # the table: Triton on sm90
    assert (
        "  vLLM's selection code failed (RuntimeError: oracle down): the tuner's table of "
        "vLLM 0.33.0 answers"
    ) in broken.stdout.splitlines()


def test_a_triton_other_than_vllms_is_the_reason_to_exit_1(tmp_path) -> None:
    vllm = build_standin(tmp_path / "site", triton_pin="2.9.0")
    run = doctor("--arch", "sm90", "--no-compile", vllm=vllm)
    assert run.returncode == 1
    assert _reasons(run) == [
        f"tuning here will not change what vLLM runs: triton {installed_triton_minor()} is "
        "installed but vLLM 0.33.0 runs with triton 2.9: tune inside the serving image"
    ]


def test_no_gpu_and_no_arch_and_a_bad_arch() -> None:
    run = doctor("--no-compile")
    assert run.returncode == 1
    assert _reasons(run) == [
        "tuning here will not change what vLLM runs: no GPU visible, no "
        "--arch and no --device of a known GPU model: say which GPU vLLM "
        "serves on"
    ]
    bad = doctor("--arch", "hopper")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "error: --arch 'hopper' is not an architecture such as sm89 or sm90"
    )
    typo = doctor("--arch", "sm89", "--linear-backend", "trition")
    assert typo.returncode == 2
    assert typo.stderr.strip().startswith(
        "error: --linear-backend 'trition' is not one of vLLM 0.33.0's: auto, cutlass, "
    )


def test_linear_backend_values_are_read_as_vllm_reads_them() -> None:
    from tuner.inputs.backends import linear_backend_value

    assert [linear_backend_value(v) for v in ("Triton", "deep-gemm", "auto")] == [
        "triton",
        "deep_gemm",
        "auto",
    ]


def test_required_version_reads_requires_dist_lines() -> None:
    lines = ["numpy", "triton~=3.8.0; platform_system == 'Linux'", "torch==2.14.0"]
    assert required_version(lines, "triton") == "~=3.8.0"
    assert required_version(lines, "torch") == "==2.14.0"
    assert required_version(lines, "numpy") == "any"
    assert required_version(lines, "vllm") is None
    assert required_version(None, "triton") is None


def _warnings(run) -> list[str]:
    return [line for line in run.stderr.splitlines() if line.startswith("warning: ")]


PINNED_WARNING = (
    "warning: triton {here} is installed here, but vLLM 0.33.0 runs with triton 3.8 (it pins "
    "torch==2.14.0, which requires triton~=3.8.0): configs timed here may not be the fastest "
    "there; tune inside the serving image (`tuner recipe sweep`), or install triton~=3.8.0 here"
)


def test_an_arch_other_than_the_devices_is_one_warning_line() -> None:
    run = doctor("--arch", "sm90", "--device", "L20", "--no-compile")
    assert run.stdout.splitlines()[1] == "architecture: sm90, device_name: NVIDIA_L20"
    here = installed_triton_minor()
    assert _warnings(run) == [
        "warning: L20 is sm89 (compute capability 8.9, from the table of known GPUs), not sm90 "
        "(--arch): this answers for sm90; pass --arch sm89 (or drop --arch) to answer for L20",
        *([] if here == "3.8" else [PINNED_WARNING.format(here=here)]),
    ]
    agreeing = doctor("--arch", "sm89", "--device", "NVIDIA L20", "--no-compile")
    assert not [w for w in _warnings(agreeing) if "table of known GPUs" in w]


def test_the_mismatch_lines_name_the_table_and_vllms_pins() -> None:
    from tuner.compare.doctor import arch_mismatch, pinned_triton_mismatch

    assert arch_mismatch("sm90", "NVIDIA_H200", "--arch") is None
    assert arch_mismatch("sm90", "NVIDIA_B9", "--arch") is None  # not in the table
    assert arch_mismatch("sm90", "NVIDIA_L40S", "the visible GPU") == (
        "L40S is sm89 (compute capability 8.9, from the table of known GPUs), not sm90 (the "
        "visible GPU): this answers for sm90; pass --arch sm89 to answer for L40S"
    )
    assert pinned_triton_mismatch("3.8") is None
    assert pinned_triton_mismatch(None) is None
    assert "warning: " + pinned_triton_mismatch("3.9") == PINNED_WARNING.format(here="3.9")


def test_an_importable_vllm_answers_for_its_triton_not_the_pinned_one(tmp_path) -> None:
    # The stand-in vLLM requires the installed Triton: no warning, even where it is not 3.8.
    vllm = build_standin(tmp_path / "site", triton_pin=f"{installed_triton_minor()}.0")
    run = doctor("--arch", "sm90", "--no-compile", vllm=vllm)
    assert run.returncode == 0, run.stderr
    assert _warnings(run) == []
