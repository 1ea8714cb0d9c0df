"""The serving engines that read a kernel family's config files, and the row type of where each
release reads them (pure). Each family lists its own rows (`FamilyFiles.engine_folders`);
`tuner.files.engine_folders` looks them up by release."""

from __future__ import annotations

from dataclasses import dataclass

# The engines whose file-name spelling we can write. vLLM: `block_shape=[128,128]`
# (get_w8a8_block_fp8_configs, vLLM 0.33.0 fp8_utils.py); SGLang: `block_shape=[128, 128]`
# (get_w8a8_block_fp8_configs, SGLang 0.5.23 sglang/kernels/ops/gemm/fp8_kernel.py).
ENGINES: tuple[str, ...] = ("vllm", "sglang")

# Said wherever files are handed out in SGLang's spelling: the configs were timed on vLLM's
# kernel. SGLang's `_w8a8_block_fp8_matmul` skips the K mask when K % BLOCK_SIZE_K == 0 (its
# EVEN_K heuristic) and its default config uses 3 stages, not vLLM's 2 (fp8_kernel.py).
SGLANG_NOTE = (
    "SGLang file names: these configs were tuned on vLLM's kernel; SGLang's block-FP8 kernel "
    "differs (unmasked K loads when K divides BLOCK_SIZE_K, a 3-stage default), so a sweep "
    "against SGLang's kernel is the exact answer."
)

# The placeholder of a folder that depends on the serving image's Triton (SGLang's MoE files).
TRITON_PLACEHOLDER = "{triton}"


@dataclass(frozen=True)
class EngineFolder:
    """One row of where an engine reads a family's files: from `first_version` on, `engine`
    reads them from `folder`.

    Attributes:
        engine: one of `ENGINES`.
        first_version: the first release that reads there ("0": every release before the next
            row, as far as was checked; the family's comments beside its rows say which).
        folder: relative to site-packages; `{triton}` (`TRITON_PLACEHOLDER`) stands for
            `tuner.files.engine_folders.triton_folder(version)`.
        env: a variable naming a folder the engine reads the family's files from first, or None.
    """

    engine: str
    first_version: str
    folder: str
    env: str | None = None
