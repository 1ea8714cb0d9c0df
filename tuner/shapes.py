"""Typed loader for the GEMM shapes of each model, stored as TOML files in the `shapes` package."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from importlib import resources


class UnknownModelError(LookupError):
    """A model or tensor-parallel size that `shapes/` does not list."""


@dataclass(frozen=True)
class ModelShapes:
    """The (N, K) of a model's block-FP8 linear layers at one tensor-parallel size.

    Attributes:
        model: the model's key, e.g. "qwen3.8-27b".
        description: one line about the model.
        tp: tensor-parallel size.
        block_shape: [group_n, group_k] of the weight scales.
        shapes: (N, K) pairs; weights are [N, K].
        source: where the shapes come from.
    """

    model: str
    description: str
    tp: int
    block_shape: tuple[int, int]
    shapes: tuple[tuple[int, int], ...]
    source: str


def _read(model: str) -> dict:
    path = resources.files("shapes") / f"{model}.toml"
    if not path.is_file():
        raise UnknownModelError(f"unknown model '{model}'; known: {', '.join(known_models())}")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"shapes/{model}.toml: {exc}") from exc


def known_models() -> list[str]:
    """Model keys with a file in `shapes/`, sorted."""
    names = (entry.name for entry in resources.files("shapes").iterdir())
    return sorted(name.removesuffix(".toml") for name in names if name.endswith(".toml"))


def tp_sizes(model: str) -> list[int]:
    """Tensor-parallel sizes listed for a model, ascending.

    Raises:
        UnknownModelError: no such model.
    """
    return sorted(int(tp) for tp in _read(model).get("tp", {}))


def load_shapes(model: str, tp: int | None = None) -> ModelShapes:
    """The shapes of a model at a tensor-parallel size.

    Args:
        model: a key from `known_models()`.
        tp: tensor-parallel size; None picks the only one listed, or fails if several are.

    Raises:
        UnknownModelError: unknown model, or a TP size it does not list (the message names those
            it does).
        ValueError: the shapes file is malformed.
    """
    data = _read(model)
    entries = data.get("tp", {})
    sizes = sorted(int(size) for size in entries)
    if tp is None:
        if len(sizes) != 1:
            raise UnknownModelError(
                f"model '{model}' lists TP sizes {sizes}; choose one with --tp"
            )
        tp = sizes[0]
    if tp not in sizes:
        raise UnknownModelError(
            f"model '{model}' has no shapes for TP {tp}; listed: {', '.join(map(str, sizes))}"
        )
    entry = entries[str(tp)]
    try:
        shapes = tuple((int(n), int(k)) for n, k in entry["shapes"])
        group_n, group_k = data["block_shape"]
        return ModelShapes(
            model=data["model"],
            description=data.get("description", ""),
            tp=tp,
            block_shape=(int(group_n), int(group_k)),
            shapes=shapes,
            source=entry["source"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"shapes/{model}.toml, TP {tp}: malformed entry ({exc})") from exc
