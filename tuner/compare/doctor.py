"""`tuner doctor`'s findings: whether tuning on this machine changes what vLLM runs. The GPUs,
versions, vLLM's default kernels per family on the architecture, whether the tuned files are
read and what makes them read, the kernel source a sweep here would time, and whether the
builtin dense and fused-MoE kernels compile to vLLM's code. Facts, not a GPU run: works with
--arch alone."""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass, field

from tuner.compare.vllm_select import DEFAULT_MODEL, Answer, ModelAsked, ask_vllm
from tuner.core import triton_minor
from tuner.files.provenance import installed_triton_minor
from tuner.inputs.backends import (
    ARCH_BACKENDS,
    FP8_BLOCK_KERNELS,
    TRITON_FLAG,
    TRITON_KERNEL,
    VLLM_TORCH_PIN,
    VLLM_TRITON_PIN,
    VLLM_VERSION,
    arch_of,
    table_dense_kernel,
)
from tuner.kernels.registry import FAMILIES
from tuner.kernels.source import PLACEHOLDER_FIX, vllm_triton_problem, vllm_version

# vLLM 0.33.0 reads fused-MoE files from VLLM_TUNED_CONFIG_FOLDER first, then its package's
# fused_moe/configs/ (fused_moe.py, get_moe_configs); dense files only from the package's
# quantization/utils/configs/ (fp8_utils.py, get_w8a8_block_fp8_configs).
MOE_FOLDER_VARIABLE = "VLLM_TUNED_CONFIG_FOLDER"
DENSE_FOLDER = "vllm/model_executor/layers/quantization/utils/configs/"
# vLLM 0.33.0 fused_moe/oracle/fp8.py `_get_priority_backends`: on sm90 with 128x128 FP8
# weights and dynamic 1x128 activations TRITON is moved first when ep_size == 1.
MOE_TRITON_ARCHS = ("sm90",)
TABLE = f"the tuner's table of vLLM {VLLM_VERSION}"
OWN = "vLLM's own selection code"
# A requirement line such as "triton==3.8.0" or "triton~=3.8.0; platform_system == 'Linux'".
_REQUIRES = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)\s*(?P<spec>[^;]*)")


def required_version(requires: list[str] | None, name: str) -> str | None:
    """The version spec a distribution's `Requires-Dist` lines give `name` ("==2.14.0"), or
    None when they do not name it."""
    for line in requires or ():
        match = _REQUIRES.match(line.strip())
        if match and match["name"].lower().replace("_", "-") == name:
            return match["spec"].strip() or "any"
    return None


def vllm_triton_requirement() -> tuple[str | None, str]:
    """The Triton the importable vLLM needs and where that is stated: vLLM's own metadata
    when it names triton, else the metadata of the torch it pins, when that torch is the
    installed one (vLLM 0.33.0 pins torch`VLLM_TORCH_PIN`, whose wheel requires
    triton`VLLM_TRITON_PIN`, `tuner.inputs.backends`)."""
    try:
        requires = importlib.metadata.requires("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None, "vLLM's metadata is missing"
    direct = required_version(requires, "triton")
    if direct is not None:
        return direct, "vLLM's metadata"
    torch_pin = required_version(requires, "torch")
    try:
        installed = importlib.metadata.version("torch")
        torch_requires = importlib.metadata.requires("torch")
    except importlib.metadata.PackageNotFoundError:
        return None, f"vLLM pins torch{torch_pin or ''}, which is not installed"
    spec = required_version(torch_requires, "triton")
    if spec is None:
        return None, f"the installed torch {installed} names no triton"
    return spec, f"torch {installed}'s metadata (vLLM pins torch{torch_pin or ''})"


def _spec_minor(spec: str) -> str | None:
    try:
        return triton_minor(spec.lstrip("=~<>! "))
    except ValueError:
        return None


@dataclass
class Diagnosis:
    """What `tuner doctor` prints and why it exits as it does.

    Attributes:
        lines: the screen, one finding a line.
        reasons: why tuning here will not change what vLLM runs; [] exits 0.
        helps: the families whose tuned files vLLM will read.
        warnings: facts the answer may not hold for, one line each (printed as `warning:`):
            --arch and --device disagreeing, a Triton other than the serving vLLM's.
    """

    lines: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    helps: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _arch_number(arch: str) -> int:
    return int(arch.removeprefix("sm"))


def arch_mismatch(arch: str, device_name: str, arch_from: str) -> str | None:
    """One line when the GPU model of `device_name` is, by the table of known GPUs
    (`tuner.kernels.gpus.KNOWN_GPUS`), another architecture than `arch`; None when they agree
    or the model is not in the table.

    Args:
        arch: "sm90", ...: the architecture doctor answers for.
        device_name: vLLM's key of the GPU named, e.g. "NVIDIA_L20".
        arch_from: where `arch` came from, e.g. "--arch" or "the visible GPU".
    """
    from tuner.kernels.gpus import gpu_model, known_capability

    model, capability = gpu_model(device_name), known_capability(device_name)
    if capability is None or f"sm{capability}" == arch:
        return None
    return (f"{model} is sm{capability} (compute capability {capability // 10}.{capability % 10}, "
            f"from the table of known GPUs), not {arch} ({arch_from}): this answers for "
            f"{arch}; pass --arch sm{capability}"
            + (" (or drop --arch)" if arch_from == "--arch" else "")
            + f" to answer for {model}")


def pinned_triton_mismatch(installed_minor: str | None) -> str | None:
    """One line when the installed Triton's major.minor is not the one vLLM `VLLM_VERSION`
    runs with (`VLLM_TRITON_PIN`, through its torch pin); None when it is, or when no triton
    is installed. For a host where vLLM is not importable: the serving image's vLLM is taken
    to be `VLLM_VERSION`.

    Args:
        installed_minor: e.g. "3.9" (`installed_triton_minor()`).
    """
    wanted = _spec_minor(VLLM_TRITON_PIN)
    if installed_minor is None or wanted is None or installed_minor == wanted:
        return None
    return (f"triton {installed_minor} is installed here, but vLLM {VLLM_VERSION} runs with "
            f"triton {wanted} (it pins torch{VLLM_TORCH_PIN}, which requires "
            f"triton{VLLM_TRITON_PIN}): configs timed here may not be the fastest there; tune "
            "inside the serving image (`tuner recipe sweep`), or install "
            f"triton{VLLM_TRITON_PIN} here")


def diagnose(*, arch: str | None, device_name: str | None, gpus: list[str],
             versions: dict[str, str], linear_backend_triton: bool,
             compare: bool = True, model: ModelAsked | None = None,
             arch_from: str = "--arch") -> Diagnosis:
    """The findings for one architecture.

    Args:
        arch: "sm90", "sm89", ...: the visible GPU's or --arch; None when neither is known.
        device_name: vLLM's key of the GPU (visible or --device); None when unknown.
        gpus: one line per visible GPU ([] when none).
        versions: torch, triton and cuda versions ("" when not installed).
        linear_backend_triton: the server runs with `--linear-backend triton`.
        compare: compile the builtin dense and fused-MoE kernels and vLLM's for the arch
            (needs triton).
        model: the model vLLM serves (--model, --tp); None asks about one DeepSeek-V3 layer
            and says that the answer depends on the model.
        arch_from: where `arch` came from ("--arch", "the visible GPU", ...), for the
            warning when `device_name`'s GPU model is another architecture.

    Returns:
        The Diagnosis.
    """
    out = Diagnosis()
    say = out.lines.append
    say("GPUs: " + ("; ".join(gpus) if gpus else "none visible"))
    say(f"architecture: {arch or 'unknown'}, device_name: {device_name or 'unknown'}")
    say(f"torch {versions.get('torch') or 'not installed'}, triton "
        f"{versions.get('triton') or 'not installed'}, CUDA {versions.get('cuda') or 'none'}")
    if arch is None:
        out.reasons.append("no GPU visible, no --arch and no --device of a known GPU model: say "
                           "which GPU vLLM serves on")
        return out
    mismatch = arch_mismatch(arch, device_name, arch_from) if device_name else None
    if mismatch is not None:
        out.warnings.append(mismatch)
    version = vllm_version()
    problem = vllm_triton_problem() if version is not None else ""
    if version is None:
        say("vLLM: not importable here; a sweep here times the builtin kernels (copies of "
            f"vLLM {VLLM_VERSION}'s); run `tuner doctor` inside the serving image to check its "
            "vLLM")
        pinned = pinned_triton_mismatch(installed_triton_minor()) if versions.get(
            "triton") else None
        if pinned is not None:
            out.warnings.append(pinned)
    else:
        spec, where = vllm_triton_requirement()
        times = (f"times the builtin kernels (--kernel auto): {problem}; for --kernel vllm, "
                 f"{PLACEHOLDER_FIX}" if problem else
                 "times vLLM's installed kernels (--kernel auto)")
        say(f"vLLM {version}: requires triton {spec or 'unstated'} ({where}); a sweep here "
            + times)
        here = installed_triton_minor()
        wanted = _spec_minor(spec) if spec else None
        if wanted and here and wanted != here:
            out.reasons.append(f"triton {here} is installed but vLLM {version} runs with "
                               f"triton {wanted}: tune inside the serving image")
    family = arch_of(f"{_arch_number(arch) // 10}.{_arch_number(arch) % 10}")
    table = {a.arch: a for a in ARCH_BACKENDS}.get(family or "")
    if table is None:
        say("dense block-FP8 linear: vLLM runs no FP8 block kernel (FP8 needs sm89 or newer) "
            f"({TABLE})")
        out.reasons.append(f"{arch} has no FP8 dot: the block-FP8 kernels cannot run")
        return out
    _say_model(out, model, family)
    asked = model or DEFAULT_MODEL
    dense, moe = ask_vllm(arch, asked) if version is not None else (Answer(None), Answer(None))
    if dense.reason and dense.reason == moe.reason:  # one reason for both: said once
        say(f"{dense.reason}: {TABLE} answers")
        dense, moe = Answer(None), Answer(None)
    _say_dense(out, table.default, dense, linear_backend_triton)
    if dense.kernel is None and model is not None:
        _say_table_shapes(out, _arch_number(arch), model)
    _say_moe(out, family in MOE_TRITON_ARCHS, moe)
    if compare and version is not None and not problem and versions.get("triton"):
        _compare_dense(out, _arch_number(arch))
        _compare_moe(out, _arch_number(arch))
    elif compare and version is not None and versions.get("triton"):
        say(f"builtin vs vLLM's compiled code (dense and fused-MoE): not compared: {problem}; "
            'with CUDA_VISIBLE_DEVICES="" set vLLM keeps the real Triton, and doctor compares '
            "them")
    elif compare and versions.get("triton"):
        say("builtin vs vLLM's compiled code (dense and fused-MoE): no vLLM here to compare "
            "with (bench/vllm_equivalence.py compares with a vLLM wheel's files)")
    if not out.helps:
        out.reasons.append(f"vLLM on {arch} reads no tuned file with default settings; "
                           f"start it with {TRITON_FLAG} (and pass --linear-backend triton "
                           "here) if tuner compare shows Triton wins")
    return out


def _say_model(out: Diagnosis, model: ModelAsked | None, family: str | None) -> None:
    """One line when the answer depends on a model fact doctor was not given."""
    if model is None:
        N, K = DEFAULT_MODEL.dense[0]
        out.lines.append(
            f"no --model: vLLM's kernel choice is asked for {DEFAULT_MODEL.label} (model type "
            f"{DEFAULT_MODEL.model_type}, N={N}, K={K}); it depends on the model's type and "
            "weight shapes (DeepGEMM checks both): pass --model (and --tp) for the model you "
            "serve")
    elif model.model_type is None and family == "sm100/sm120":
        out.lines.append(
            f"model type of {model.label} not known (its shapes file names none; `tuner shapes "
            "from-config config.json --save` records it): vLLM is asked as for a model type "
            "it does not turn DeepGEMM off for")


def _say_table_shapes(out: Diagnosis, capability: int, model: ModelAsked) -> None:
    """The table's dense kernel per shape of the model (`table_dense_kernel`), one line."""
    by_kernel: dict[str, list[str]] = {}
    for N, K in model.dense:
        name = table_dense_kernel(capability, N, K, "bfloat16", model.model_type)
        label = dict(FP8_BLOCK_KERNELS)[name].split(" (")[0] if name else "not known here"
        by_kernel.setdefault(label, []).append(f"N={N},K={K}")
    if by_kernel:
        out.lines.append(f"  {model.label}: " + "; ".join(
            f"{label} for {len(shapes)} of {len(model.dense)} shapes"
            + (f" ({', '.join(shapes)})" if len(shapes) < len(model.dense) else "")
            for label, shapes in by_kernel.items()) + f" ({TABLE})")


def _say_dense(out: Diagnosis, default: str, answer: Answer,
               linear_backend_triton: bool) -> None:
    """The dense kernel vLLM runs, who said so, and whether it reads the dense files."""
    say = out.lines.append
    kernel = answer.kernel
    if kernel is not None:
        label = dict(FP8_BLOCK_KERNELS).get(kernel, kernel)
        say(f"dense block-FP8 linear: vLLM runs {label} ({kernel}) by default ({OWN})")
        if answer.others:
            say(f"  other shapes: {answer.others}")
        if answer.detail:
            say(f"  passed over first: {answer.detail}")
    else:
        say(f"dense block-FP8 linear: by default vLLM runs {default} ({TABLE})")
        if answer.reason:
            say(f"  {answer.reason}: {TABLE} answers")
    if kernel == TRITON_KERNEL or linear_backend_triton:
        how = "by default" if kernel == TRITON_KERNEL else f"with {TRITON_FLAG}"
        say(f"  files read: yes, {how} (from {DENSE_FOLDER} in the image)")
        out.helps.append("dense")
    else:
        say(f"  files read: no; {TRITON_FLAG} makes vLLM run the Triton kernel that reads "
            f"them (mount them at {DENSE_FOLDER}); measure first: tuner compare")


def _say_moe(out: Diagnosis, table_triton: bool, answer: Answer) -> None:
    """The fused-MoE backend vLLM runs, who said so, and whether it reads the MoE files."""
    say = out.lines.append
    if answer.kernel is not None:
        experts = f" ({answer.detail})" if answer.detail else ""
        say(f"fused-MoE block-FP8: vLLM runs {answer.kernel}{experts} by default with 128x128 "
            f"weights and ep_size 1 ({OWN})")
        triton = answer.kernel == "TRITON"
    else:
        say("fused-MoE block-FP8: vLLM runs " + (
            "Triton (fused_moe_kernel) by default with 128x128 weights and ep_size 1"
            if table_triton else "the first of its MoE backends that supports the GPU (not "
            "verified here for this architecture)") + f" ({TABLE})")
        if answer.reason:
            say(f"  {answer.reason}: {TABLE} answers")
        triton = table_triton
    if triton:
        say(f"  files read: yes, from ${MOE_FOLDER_VARIABLE} or vLLM's fused_moe/configs/")
        out.helps.append("moe")
    else:
        say(f"  files read: only where vLLM picks TRITON; ${MOE_FOLDER_VARIABLE} names "
            "their folder")


def _compare_dense(out: Diagnosis, arch: int) -> None:
    """Compile the builtin dense kernel and vLLM's with vLLM's default config at M = 1 and
    M = 64 (two specializations) and say whether the code is the same."""
    from tuner.kernels.dense.space import default_config
    from tuner.kernels.dense.vllm_workload import vllm_kernel
    from tuner.measure.fidelity import compile_dense_pair

    dense = FAMILIES["dense"].vllm
    head = f"builtin vs vLLM's dense kernel on sm{arch}"
    try:
        theirs = vllm_kernel(dense.module, dense.function)
        pairs = [compile_dense_pair(theirs, default_config(), arch, M=M, N=4096, K=4096)
                 for M in (1, 64)]
    except Exception as exc:  # noqa: BLE001 - any import or compile failure is the finding
        out.lines.append(_not_compared(head, exc))
        return
    out.lines.append(_compared(head, pairs, "tune with --kernel vllm here",
                               "at M=1, default config"))


def _not_compared(head: str, exc: Exception) -> str:
    return f"{head}: not compared ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})"


def _compared(head: str, pairs: list, hint: str, where: str) -> str:
    """The line on (builtin, vLLM's) compiled pairs: DIFFERENT code with what differs and
    `hint`, or same code with the first pair's shared memory, registers and PTX count."""
    from tuner.measure.fidelity import same_code

    differ = sorted({phrase for ours, theirs in pairs for phrase in same_code(ours, theirs)})
    if differ:
        return f"{head}: DIFFERENT code (" + "; ".join(differ) + f"): {hint}"
    ours = pairs[0][0]
    return (f"{head}: same code (shared {ours.shared} bytes, {ours.n_regs} registers, "
            f"{ours.instructions} PTX instructions {where})")


# The fused-MoE comparison's layer: DeepSeek-V3 at tensor parallel 8 (shapes/deepseek-v3.toml;
# bench/moe_fidelity.py's "deepseek-v3 tp8"); M = 1 and 256 take vLLM's two default tilings.
MOE_COMPARED = {"E": 256, "N": 256, "K": 7168, "top_k": 8}
MOE_COMPARED_M = (1, 256)


def _compare_moe(out: Diagnosis, arch: int) -> None:
    """Compile the builtin fused-MoE kernel and vLLM's `fused_moe_kernel` with vLLM's default
    config at two M, both GEMMs each, and say whether the code is the same."""
    from tuner.kernels.moe.space import default_config
    from tuner.measure.fidelity import compile_moe_pairs

    moe = FAMILIES["moe"].vllm
    head = f"builtin vs vLLM's fused-MoE kernel on sm{arch}"
    if moe is None:
        out.lines.append(f"{head}: not compared (the family names no vLLM kernel)")
        return
    try:
        pairs = [pair for M in MOE_COMPARED_M for pair in compile_moe_pairs(
            moe.module, moe.function, default_config(M), arch, M=M, **MOE_COMPARED)]
    except Exception as exc:  # noqa: BLE001 - any import or compile failure is the finding
        out.lines.append(_not_compared(head, exc))
        return
    out.lines.append(_compared(
        head, pairs, "tune MoE with --kernel vllm here",
        f"in the gate_up GEMM at M={MOE_COMPARED_M[0]}, default configs at M="
        + " and ".join(map(str, MOE_COMPARED_M))))
