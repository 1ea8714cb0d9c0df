"""A device's files as one deterministic zip, with a README on how vLLM finds them."""

from __future__ import annotations

import io
import zipfile

import tuner
from tuner.files.engine_folders import DEFAULT_ENGINE_VERSIONS, engine_folder
from tuner.files.merge import DeviceFiles
from tuner.files.mounts import DEFAULT_SITE_PACKAGES, FIND_SITE
from tuner.inputs.backends import device_advice
from tuner.kernels.engines import SGLANG_NOTE, TRITON_PLACEHOLDER
from tuner.kernels.registry import FAMILIES, get_family

# 1980-01-01 is the earliest time a zip entry can carry; a fixed time keeps the bytes stable.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def where_lines(engine: str) -> list[str]:
    """Where the engine's newest checked release reads each family's files (its rows)."""
    release, site = DEFAULT_ENGINE_VERSIONS[engine], DEFAULT_SITE_PACKAGES[engine]
    lines = [
        f"Where {engine} {release} reads these files (restart it after changing them)",
        f"- site-packages: {site} in its usual image; in yours: {FIND_SITE.format(engine)}",
    ]
    for family in FAMILIES.values():
        row = next((r for r in family.files.engine_folders if r.engine == engine), None)
        if row is not None:
            first = f"the folder named by {row.env} first, then " if row.env else ""
            folder = engine_folder(engine, family.name).folder
            folder = folder.replace(TRITON_PLACEHOLDER, "triton_<X_Y_Z>")
            lines.append(f"- {family.report.short_title or family.name} files: {first}{folder}/")
    return lines


def _files_section(device_files: DeviceFiles, device_name: str, engine: str) -> list[str]:
    """Each file's hash, M keys and merge notes, then the shapes and entries left out."""
    lines = [] if device_files.files else ["- none yet"]
    for device_file in sorted(device_files.files, key=lambda f: f.file_name):
        merged = device_file.merged
        lines += [f"- {device_file.file_name}", f"  sha256 {merged.sha256}"]
        lines.append(f"  M keys: {', '.join(map(str, merged.configs))}")
        if merged.m_imported:
            lines.append(f"  imported, not measured: M={', '.join(map(str, merged.m_imported))}")
        if merged.partial:
            lines.append(f"  PARTIAL: no winner yet for M={', '.join(map(str, merged.m_missing))}")
        lines += [f"  note: {note}" for note in merged.notes]
        lines += [f"  warning: {warning}" for warning in merged.warnings]
    if device_files.skipped or device_files.left_out:
        lines += ["", "Left out"]
        for s in device_files.skipped:
            name = get_family(s.key.family).files.file_name(s.key.shape, device_name, engine)
            lines.append(f"- {name}: {s.reason}")
        lines += [f"- {line}" for line in device_files.left_out]
    return lines


def build_zip(
    device_name: str,
    device_files: DeviceFiles,
    engine: str = "vllm",
    compute_capability: str | None = None,
    tuned_with: str = "",
) -> bytes:
    """Zip a device's files and their README.txt, byte-identical for identical input: whether
    vLLM reads the files on this device (from `compute_capability`, else the table of known
    GPUs; docs/vllm-backends.md), what they were tuned with (`versions_line`), how `engine`
    finds them, and the merge report.

    Entries are sorted by name, stamped 1980-01-01 00:00, mode 0644, deflated.

    Args:
        device_name: vLLM's device key.
        device_files: The device's merged files (named in `engine`'s spelling) and skipped shapes.
        engine: "vllm" or "sglang", for the README.
        compute_capability: the device's, from its trials in the store; None when unknown.
        tuned_with: the README's line on versions.

    Returns:
        The archive's bytes.
    """
    lines = [
        f"Tuned configs of vLLM's W8A8 block-FP8 Triton GEMM for device_name {device_name}",
        f"Merged from the store by blockfp8-tuner {tuner.__version__}.",
    ]
    lines += (
        [f"Tuned with {tuned_with} (serve with the same Triton and vLLM)."] if tuned_with else []
    )
    if engine == "sglang":
        lines += ["", SGLANG_NOTE]
    else:
        advice = device_advice(device_name, [compute_capability or ""]).lines()
        lines += ["", "Does vLLM read them", *advice]
    lines += ["", *where_lines(engine), ""]
    entries = {f.file_name: f.merged.text for f in device_files.files}
    entries["README.txt"] = (
        "\n".join([*lines, "Files", *_files_section(device_files, device_name, engine)]) + "\n"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, so that external_attr carries the mode
            info.external_attr = 0o100644 << 16
            archive.writestr(info, entries[name].encode())
    return buffer.getvalue()
