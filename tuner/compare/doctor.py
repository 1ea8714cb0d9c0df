"""`tuner doctor`'s findings: whether tuning on this machine changes what vLLM runs. The GPUs,
versions, vLLM's default kernels per family on the architecture, whether the tuned files are
read and what makes them read, the kernel source a sweep here would time, and whether each
family's builtin kernel compiles to vLLM's code. Facts, not a GPU run: works with --arch alone.
What is said of each family is the family's (`tuner.kernels.family.VllmServing`: its advice and
comparison hooks, in the family's folder, on `tuner.kernels.serving`)."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from tuner.compare.vllm_select import ask_vllm
from tuner.files.provenance import installed_triton_minor
from tuner.inputs.backends import VLLM_TORCH_PIN, VLLM_TRITON_PIN
from tuner.kernels.family import KernelFamily
from tuner.kernels.gpus import gpu_model, known_capability
from tuner.kernels.registry import FAMILIES
from tuner.kernels.serving import DEFAULT_MODEL, TABLE, Answer, Asked, Diagnosis, ModelAsked
from tuner.kernels.source import PLACEHOLDER_FIX, vllm_triton_problem, vllm_version
from tuner.kernels.vllm_table import (
    ARCH_BACKENDS,
    TRITON_FLAG,
    VLLM_VERSION,
    arch_of,
    capability_number,
    capability_text,
)


@dataclass(frozen=True)
class Question:
    """What doctor answers for.

    Attributes:
        arch: "sm90", "sm89", ...: the visible GPU's or --arch; None when neither is known.
        device_name: vLLM's key of the GPU (visible or --device); None when unknown.
        arch_from: where `arch` came from ("--arch", "the visible GPU"), for the warning when
            `device_name`'s GPU model is another architecture.
        model: the model vLLM serves (--model, --tp); None asks about one DeepSeek-V3 layer.
        linear_backend_triton: the server runs with `--linear-backend triton`.
        compare: compile the builtin kernels and vLLM's for the arch (needs triton).
    """

    arch: str | None
    device_name: str | None = None
    arch_from: str = "--arch"
    model: ModelAsked | None = None
    linear_backend_triton: bool = False
    compare: bool = True


def required_version(requires: list[str] | None, name: str) -> str | None:
    """The version specifier a distribution's `Requires-Dist` lines give `name` ("==2.14.0",
    "any" for none), or None when they do not name it."""
    for line in requires or ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if requirement.name.lower().replace("_", "-") == name:
            return str(requirement.specifier) or "any"
    return None


def vllm_triton_requirement() -> tuple[str | None, str]:
    """The Triton the importable vLLM needs and where that is stated: vLLM's own metadata
    when it names triton, else the metadata of the torch it pins, when that torch is the
    installed one (vLLM 0.33.0 pins torch`VLLM_TORCH_PIN`, whose wheel requires
    triton`VLLM_TRITON_PIN`)."""
    try:
        requires = importlib.metadata.requires("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None, "vLLM's metadata is missing"
    direct = required_version(requires, "triton")
    if direct is not None:
        return direct, "vLLM's metadata"
    torch_pin = required_version(requires, "torch") or ""
    try:
        installed = importlib.metadata.version("torch")
        spec = required_version(importlib.metadata.requires("torch"), "triton")
    except importlib.metadata.PackageNotFoundError:
        return None, f"vLLM pins torch{torch_pin}, which is not installed"
    if spec is None:
        return None, f"the installed torch {installed} names no triton"
    return spec, f"torch {installed}'s metadata (vLLM pins torch{torch_pin})"


def spec_minor(spec: str) -> str | None:
    """The major.minor a version specifier pins ("~=3.8.0" -> "3.8"); None for none."""
    try:
        versions = [Version(item.version) for item in SpecifierSet(spec)]
    except (InvalidSpecifier, ValueError):
        return None
    return f"{versions[0].major}.{versions[0].minor}" if versions else None


def arch_mismatch(arch: str, device_name: str, arch_from: str) -> str | None:
    """One line when the GPU model of `device_name` is, by the table of known GPUs
    (`tuner.kernels.gpus.KNOWN_GPUS`), another architecture than `arch`; None when they agree
    or the model is not in the table."""
    model, capability = gpu_model(device_name), known_capability(device_name)
    if capability is None or f"sm{capability}" == arch:
        return None
    drop = " (or drop --arch)" if arch_from == "--arch" else ""
    return (
        f"{model} is sm{capability} (compute capability {capability_text(capability)}, "
        f"from the table of known GPUs), not {arch} ({arch_from}): this answers for "
        f"{arch}; pass --arch sm{capability}{drop} to answer for {model}"
    )


def pinned_triton_mismatch(installed_minor: str | None) -> str | None:
    """One line when the installed Triton's major.minor is not the one vLLM `VLLM_VERSION`
    runs with (`VLLM_TRITON_PIN`, through its torch pin); None when it is, or when no triton
    is installed. For a host where vLLM is not importable."""
    wanted = spec_minor(VLLM_TRITON_PIN)
    if installed_minor is None or installed_minor == wanted:
        return None
    return (
        f"triton {installed_minor} is installed here, but vLLM {VLLM_VERSION} runs with "
        f"triton {wanted} (it pins torch{VLLM_TORCH_PIN}, which requires "
        f"triton{VLLM_TRITON_PIN}): configs timed here may not be the fastest there; tune "
        "inside the serving image (`tuner recipe sweep`), or install "
        f"triton{VLLM_TRITON_PIN} here"
    )


def diagnose(question: Question, gpus: list[str], versions: dict[str, str]) -> Diagnosis:
    """The findings for one architecture: `gpus`, one line per visible GPU ([] when none);
    `versions`, torch's, triton's and cuda's ("" when not installed)."""
    out = Diagnosis()
    say, arch = out.lines.append, question.arch
    say("GPUs: " + ("; ".join(gpus) if gpus else "none visible"))
    say(f"architecture: {arch or 'unknown'}, device_name: {question.device_name or 'unknown'}")
    say(
        f"torch {versions.get('torch') or 'not installed'}, triton "
        f"{versions.get('triton') or 'not installed'}, CUDA {versions.get('cuda') or 'none'}"
    )
    if arch is None:
        out.reasons.append(
            "no GPU visible, no --arch and no --device of a known GPU model: say "
            "which GPU vLLM serves on"
        )
        return out
    if question.device_name:
        out.warnings += filter(
            None, [arch_mismatch(arch, question.device_name, question.arch_from)]
        )
    version, problem = _say_vllm(out, versions)
    capability, table_arch = capability_number(arch) or 0, arch_of(arch)
    table = next((a for a in ARCH_BACKENDS if a.arch == table_arch), None)
    if table is None or table_arch is None:
        say(
            "dense block-FP8 linear: vLLM runs no FP8 block kernel (FP8 needs sm89 or newer) "
            f"({TABLE})"
        )
        out.reasons.append(f"{arch} has no FP8 dot: the block-FP8 kernels cannot run")
        return out
    _say_model(out, question.model, table_arch)
    served = [family for family in FAMILIES.values() if family.serving is not None]
    asked = Asked(
        arch, capability, table_arch, table, question.model, question.linear_backend_triton
    )
    _advise(out, served, asked, version)
    if question.compare:
        _compare_kernels(out, served, capability, version, problem, bool(versions.get("triton")))
    if not out.helps:
        out.reasons.append(
            f"vLLM on {arch} reads no tuned file with default settings; "
            f"start it with {TRITON_FLAG} (and pass --linear-backend triton "
            "here) if tuner compare shows Triton wins"
        )
    return out


def _say_vllm(out: Diagnosis, versions: dict[str, str]) -> tuple[str | None, str]:
    """The lines about the vLLM installed here and the triton it requires: (vLLM's version,
    None when not importable; why its Triton kernels cannot be compiled here, "" when they
    can)."""
    version = vllm_version()
    if version is None:
        out.lines.append(
            "vLLM: not importable here; a sweep here times the builtin kernels (copies of "
            f"vLLM {VLLM_VERSION}'s); run `tuner doctor` inside the serving image to check its "
            "vLLM"
        )
        pinned = (
            pinned_triton_mismatch(installed_triton_minor()) if versions.get("triton") else None
        )
        out.warnings += filter(None, [pinned])
        return version, ""
    problem = vllm_triton_problem()
    spec, where = vllm_triton_requirement()
    times = (
        f"times the builtin kernels (--kernel auto): {problem}; for --kernel vllm, "
        + PLACEHOLDER_FIX
        if problem
        else "times vLLM's installed kernels (--kernel auto)"
    )
    out.lines.append(
        f"vLLM {version}: requires triton {spec or 'unstated'} ({where}); a sweep here " + times
    )
    here, wanted = installed_triton_minor(), spec_minor(spec) if spec else None
    if wanted and here and wanted != here:
        out.reasons.append(
            f"triton {here} is installed but vLLM {version} runs with triton {wanted}: tune "
            "inside the serving image"
        )
    return version, problem


def _advise(out: Diagnosis, served: list[KernelFamily], asked: Asked, version: str | None) -> None:
    """Each served family's advice hook, with what vLLM selects for it (asked when vLLM is
    importable; a reason shared by every family is said once)."""
    answers = (
        ask_vllm(asked.arch, asked.model or DEFAULT_MODEL)
        if version is not None
        else {family.name: Answer(None) for family in served}
    )
    reasons = {answers[family.name].reason for family in served}
    if len(served) > 1 and len(reasons) == 1 and "" not in reasons:  # one for all: said once
        out.lines.append(f"{reasons.pop()}: {TABLE} answers")
        answers = {family.name: Answer(None) for family in served}
    for family in served:
        if family.serving and family.serving.advice:
            family.serving.advice(out, asked, answers.get(family.name, Answer(None)))


def _compare_kernels(
    out: Diagnosis,
    served: list[KernelFamily],
    capability: int,
    version: str | None,
    problem: str,
    triton: bool,
) -> None:
    """Compare the builtin kernels with vLLM's compiled code, or say why they are not."""
    compared = {
        f.serving.label: f.serving.compare for f in served if f.serving and f.serving.compare
    }
    head = f"builtin vs vLLM's compiled code ({' and '.join(compared)})"
    if not compared or not triton:
        return
    if version is None:
        out.lines.append(
            f"{head}: no vLLM here to compare with (bench/vllm_equivalence.py compares with a "
            "vLLM wheel's files)"
        )
    elif problem:
        out.lines.append(
            f'{head}: not compared: {problem}; with CUDA_VISIBLE_DEVICES="" set vLLM keeps '
            "the real Triton, and doctor compares them"
        )
    else:
        for hook in compared.values():
            hook(out, capability)


def _say_model(out: Diagnosis, model: ModelAsked | None, table_arch: str) -> None:
    """One line when the answer depends on a model fact doctor was not given."""
    if model is None:
        N, K = DEFAULT_MODEL.dense[0]
        out.lines.append(
            f"no --model: vLLM's kernel choice is asked for {DEFAULT_MODEL.label} (model type "
            f"{DEFAULT_MODEL.model_type}, N={N}, K={K}); it depends on the model's type and "
            "weight shapes (DeepGEMM checks both): pass --model (and --tp) for the model you "
            "serve"
        )
    elif model.model_type is None and table_arch == "sm100/sm120":
        out.lines.append(
            f"model type of {model.label} not known (its shapes file names none; `tuner shapes "
            "from-config config.json --save` records it): vLLM is asked as for a model type "
            "it does not turn DeepGEMM off for"
        )
