"""Model keys for saved shapes (`--save` names) and the known models whose shapes cover a log's."""

from __future__ import annotations

import re
from collections.abc import Sequence

from tuner.inputs.shapes import (
    MODEL_KEY_RE,
    ShapesFileError,
    UnknownModelError,
    _read,
    known_models,
)
from tuner.kernels.family import EXPERTS, LINEAR_LAYERS
from tuner.kernels.registry import family_of_part


def suggest_model_key(name: str) -> str:
    """A model key made from a model name or path, e.g. "Qwen/Qwen3-8B-FP8" -> "qwen3-8b-fp8".

    Args:
        name: a Hugging Face repo id or a local model folder.

    Returns:
        A key matching `MODEL_KEY_RE` ("model" when nothing usable is left).
    """
    last = name.rstrip("/\\").replace("\\", "/").split("/")[-1].lower()
    key = re.sub(r"[^a-z0-9._\-]+", "-", last).strip("-._")[:64]
    return key if key and MODEL_KEY_RE.fullmatch(key) else "model"


def free_model_key(base: str) -> str:
    """A model key `--save` will accept that names no packaged or saved model yet.

    Args:
        base: a model key (`MODEL_KEY_RE`), e.g. from `suggest_model_key`.

    Returns:
        `base` if no model has it, else `<base>-log`, then `<base>-log-2`, `-3`, ... (base cut
        so that the key stays within 64 characters), the first one free.
    """
    taken = set(known_models())
    if base not in taken:
        return base
    for number in range(1, len(taken) + 2):
        suffix = "-log" if number == 1 else f"-log-{number}"
        key = base[: 64 - len(suffix)].rstrip("-._") + suffix
        if key not in taken:
            return key
    raise AssertionError("unreachable: more candidates than taken names")


def find_covering(
    shapes: Sequence[tuple[int, int]],
    block_shape: tuple[int, int],
    tp: int | None,
    experts: Sequence[tuple[int, int]] = (),
) -> list[tuple[str, int]]:
    """Known (model, TP) entries whose shapes include all of `shapes` and whose MoE shapes
    include all of `experts`, with this block_shape.

    Malformed files are skipped (they fail loudly where they are loaded by name).

    Args:
        shapes: (N, K) pairs, as the file names of the family of the model's linear layers
            carry them (`file_key`).
        block_shape: [group_n, group_k].
        tp: only this TP size; None for any.
        experts: (E, N) of fused-MoE files (a log names no K or top_k): `file_key` of the
            shapes of the family of the model's experts (`tuner.kernels.registry.
            family_of_part`).

    Returns:
        (model key, TP size) pairs, sorted.
    """
    wanted, wanted_experts = set(shapes), set(experts)
    layers, experts_of = family_of_part(LINEAR_LAYERS), family_of_part(EXPERTS)
    found = []
    for name in known_models():
        try:
            doc = _read(name)
        except (UnknownModelError, ShapesFileError):
            continue
        if doc.block_shape != tuple(block_shape):
            continue
        for size, (_, groups) in doc.entries.items():
            listed = {layers.files.file_key(s) for s in groups.get(layers.name, ())}
            listed_experts = {experts_of.files.file_key(s) for s in groups.get(experts_of.name, ())}
            if (tp is None or size == tp) and wanted <= listed and wanted_experts <= listed_experts:
                found.append((name, size))
    return sorted(found)
