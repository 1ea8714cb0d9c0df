"""Typed loader for the GEMM shapes of each model: TOML files in the `shapes` package, then in the
user's shapes folder (`tuner shapes from-log/from-config --save` writes there)."""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tuner.kernels.family import KernelFamily
from tuner.kernels.registry import DEFAULT_FAMILY, FAMILIES, get_family
from tuner.kernels.shape import Shape

# A model key is a file name: lower case, digits, '.', '_' and '-'.
MODEL_KEY_RE = re.compile(r"[a-z0-9][a-z0-9._\-]{0,63}")
MAX_GROUP = 999_999
MAX_TP = 1024
# A Hugging Face model type, e.g. "deepseek_v3" (what vLLM reads as hf_text_config.model_type).
MODEL_TYPE_RE = re.compile(r"[a-z0-9][a-z0-9_]{0,63}")


class UnknownModelError(LookupError):
    """A model or tensor-parallel size that no shapes file lists."""


class ShapesFileError(ValueError):
    """A shapes file that cannot be read or does not follow the format; the message is one line
    that names the file."""


@dataclass(frozen=True)
class ModelShapes:
    """The shapes of a model's block-FP8 layers at one tensor-parallel size, per kernel family.

    Attributes:
        model: the model's key, e.g. "qwen3.8-27b".
        description: one line about the model.
        tp: tensor-parallel size.
        block_shape: [group_n, group_k] of the weight scales.
        source: where the shapes come from.
        groups: kernel family name -> its shapes, in the registry's order, for the families
            the file lists shapes of (each family parses its own key, `FamilyShapes.shapes_key`,
            e.g. the dense GEMM's [N, K] weights under `shapes`, fused-MoE experts under `moe`).
        model_type: the model's Hugging Face model type (its text config's, e.g.
            "deepseek_v3"), which vLLM's kernel selection reads; None when the file names none.
    """

    model: str
    description: str
    tp: int
    block_shape: tuple[int, int]
    source: str
    groups: Mapping[str, tuple[Shape, ...]] = field(default_factory=dict)
    model_type: str | None = None

    def of(self, family: str) -> tuple[Shape, ...]:
        """The shapes of one kernel family (by name), () when the model has none."""
        return tuple(self.groups.get(family, ()))

    def pairs(self, family: str = DEFAULT_FAMILY) -> tuple[tuple[int, int], ...]:
        """The (N, K) of one family's shapes (default: the dense GEMM's weights [N, K])."""
        return tuple((shape.N, shape.K) for shape in self.of(family))

    @property
    def shapes(self) -> tuple[tuple[int, int], ...]:
        """The default family's (N, K) pairs (`pairs()`), for the comparisons that read them
        (`tuner.compare.versus`, `tuner.cli.doctor`)."""
        return self.pairs()

    def family_label(self, family: str) -> str:
        """The model, TP and one family's shapes in one phrase, e.g. "tiny-moe TP 1: E=4 N=64"
        (`KernelFamily.shape_brief`)."""
        kind = get_family(family)
        briefs = ", ".join(kind.shape_brief(shape) for shape in self.of(family))
        title = kind.report.short_title or family
        return f"{self.model} TP {self.tp}: {briefs or f'no {title} shapes'}"


def _keyed_families() -> dict[str, KernelFamily]:
    """Shapes-file key -> the registered family that lists its shapes under it (the first one
    registered, should two name the same key)."""
    keyed: dict[str, KernelFamily] = {}
    for family in FAMILIES.values():
        if family.shapes.shapes_key is not None and family.shapes.parse_shapes is not None:
            keyed.setdefault(family.shapes.shapes_key, family)
    return keyed


def user_shapes_dir() -> Path:
    """The folder of the user's own shapes files.

    Returns:
        `$TUNER_SHAPES_DIR` when set and non-empty, else
        `$XDG_CONFIG_HOME/blockfp8-tuner/shapes` (`~/.config/blockfp8-tuner/shapes` by default).
    """
    explicit = os.environ.get("TUNER_SHAPES_DIR")
    if explicit:
        return Path(explicit).expanduser()
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "blockfp8-tuner" / "shapes"


def known_models() -> list[str]:
    """Model keys with a shapes file, packaged or in `user_shapes_dir()`, sorted and unique."""
    names = [entry.name for entry in resources.files("shapes").iterdir()]
    try:
        names += [path.name for path in user_shapes_dir().glob("*.toml")]
    except OSError:
        pass
    keys = (name.removesuffix(".toml") for name in names if name.endswith(".toml"))
    return sorted({key for key in keys if MODEL_KEY_RE.fullmatch(key)})


_Group = Annotated[int, Field(strict=True, ge=1, le=MAX_GROUP)]


class _TpTable(BaseModel):
    """One [tp.<size>] table: its source, then each family's shapes under the family's key."""

    model_config = ConfigDict(extra="allow")
    source: Annotated[str, Field(strict=True, pattern=r"\S")]


class _ShapesFile(BaseModel):
    """A shapes file's top level, as written (the model key is checked against the file name)."""

    model_config = ConfigDict(extra="forbid")
    model: Annotated[str, Field(strict=True)]
    description: Annotated[str, Field(strict=True)] = ""
    model_type: Annotated[str, Field(strict=True, pattern=f"^{MODEL_TYPE_RE.pattern}$")] | None = (
        None
    )
    block_shape: tuple[_Group, _Group]
    tp: Annotated[dict[Annotated[int, Field(ge=1, le=MAX_TP)], _TpTable], Field(min_length=1)]


def _parse(data: dict, label: str, key: str) -> dict[int, ModelShapes]:
    """Check a parsed shapes document strictly (errors name `label`): its entry per TP size."""
    try:
        doc = _ShapesFile.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(map(str, error["loc"])) or "file"
        raise ShapesFileError(f"{label}: {where}: {error['msg']}") from None
    if doc.model != key:
        raise ShapesFileError(f"{label}: model = {doc.model!r:.70} differs from the file name")
    keyed = _keyed_families()
    entries = {}
    for tp, table in doc.tp.items():
        where = f"{label}, TP {tp}"
        unknown = [name for name in table.model_extra or {} if name not in keyed]
        if unknown:
            allowed = ", ".join(("source", *keyed))
            raise ShapesFileError(
                f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {allowed}"
            )
        groups = {}
        for name, family in keyed.items():
            rows = (table.model_extra or {}).get(name, [])
            shapes = family.shapes.parse_shapes(rows, where, doc.block_shape)  # type: ignore[misc]
            if shapes:
                groups[family.name] = shapes
        if not groups:
            default = get_family(DEFAULT_FAMILY).shapes
            raise ShapesFileError(
                f"{where}: {default.shapes_key} must be a non-empty list of {default.shapes_row}"
            )
        entries[tp] = ModelShapes(
            key, doc.description, tp, doc.block_shape, table.source, groups, doc.model_type
        )
    return entries


def _load_text(text: str, label: str, key: str) -> dict[int, ModelShapes]:
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer too long to convert
        raise ShapesFileError(f"{label}: invalid TOML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise ShapesFileError(f"{label}: invalid TOML: nested too deeply") from None
    try:
        return _parse(data, label, key)
    except ValueError as exc:  # a family's or a number's check: one line naming the file
        raise ShapesFileError(str(exc)) from None


def read_text(path: Path, error: type[ValueError] = ValueError) -> str:
    """A UTF-8 file's text; `error` with one line naming the file where it is unreadable or
    not UTF-8."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None


def _read(model: str) -> dict[int, ModelShapes]:
    packaged = resources.files("shapes") / f"{model}.toml"
    if MODEL_KEY_RE.fullmatch(model) and packaged.is_file():
        return _load_text(packaged.read_text(encoding="utf-8"), f"shapes/{model}.toml", model)
    path = user_shapes_dir() / f"{model}.toml"
    if not MODEL_KEY_RE.fullmatch(model) or not path.is_file():
        known = known_models()
        raise UnknownModelError(f"unknown model '{model}'; known: {', '.join(known)}")
    return _load_text(read_text(path, ShapesFileError), str(path), model)


def tp_sizes(model: str) -> list[int]:
    """Tensor-parallel sizes listed for a model, ascending.

    Raises:
        UnknownModelError: no such model.
        ShapesFileError: its file is malformed.
    """
    return sorted(_read(model))


def load_shapes(model: str, tp: int | None = None) -> ModelShapes:
    """The shapes of a model at a tensor-parallel size.

    Packaged files (`shapes/`) are looked up first, then `user_shapes_dir()`.

    Args:
        model: a key from `known_models()`.
        tp: tensor-parallel size; None picks the only one listed, or fails if several are.

    Raises:
        UnknownModelError: unknown model, or a TP size it does not list (the message names those
            it does).
        ShapesFileError: the shapes file is unreadable or malformed (one line naming the file).
    """
    entries = _read(model)
    sizes = sorted(entries)
    if tp is None:
        if len(sizes) != 1:
            raise UnknownModelError(f"model '{model}' lists TP sizes {sizes}; choose one with --tp")
        tp = sizes[0]
    if tp not in entries:
        raise UnknownModelError(
            f"model '{model}' has no shapes for TP {tp}; listed: {', '.join(map(str, sizes))}"
        )
    return entries[tp]


def _toml_string(text: str) -> str:
    # A JSON string without \u escapes of non-ASCII text is a valid TOML basic string.
    return json.dumps(text, ensure_ascii=False)


def render_shapes_file(entries: Sequence[ModelShapes]) -> str:
    """A shapes file in the packaged files' layout: the first entry's model key (also the file
    name without `.toml`), description, block_shape and model type (none written when None),
    then each entry's TP table, by TP size; each family's shapes are written under its key
    (`FamilyShapes.shapes_key`) as its rows (`FamilyShapes.shape_row`), in the registry's
    order. `load_shapes` reads it back to the same values."""
    first = entries[0]
    lines = [
        f"model = {_toml_string(first.model)}",
        f"description = {_toml_string(first.description)}",
        f"block_shape = [{int(first.block_shape[0])}, {int(first.block_shape[1])}]",
    ]
    if first.model_type is not None:
        lines.append(f"model_type = {_toml_string(first.model_type)}")
    for entry in sorted(entries, key=lambda e: e.tp):
        lines += ["", f"[tp.{int(entry.tp)}]", f"source = {_toml_string(entry.source)}"]
        for family in FAMILIES.values():
            shapes = entry.groups.get(family.name, ())
            if shapes and family.shapes.shape_row is not None:
                lines += [
                    f"{family.shapes.shapes_key} = [",
                    *(
                        f"    [{', '.join(str(int(v)) for v in family.shapes.shape_row(shape))}],"
                        for shape in shapes
                    ),
                    "]",
                ]
    return "\n".join(lines) + "\n"


def save_shapes(
    model: str,
    *,
    tp: int,
    groups: Mapping[str, Sequence[Shape]],
    block_shape: tuple[int, int],
    source: str,
    description: str = "",
    model_type: str | None = None,
) -> Path:
    """Write (or add a TP size to) the shapes file of `model` in `user_shapes_dir()`, atomically.

    An existing user file keeps its other TP sizes, and its description and model type when
    none is given. `groups`: kernel family name -> its shapes at this TP size (duplicates
    dropped); `source`: where they come from.

    Raises:
        ValueError: a bad or packaged model key, another block_shape than the existing file's,
            no or out-of-range shapes, a malformed existing file (ShapesFileError).
    """
    if not MODEL_KEY_RE.fullmatch(model):
        raise ValueError(f"--save: {model!r} is not a model key (a-z, 0-9, '.', '_', '-')")
    if (resources.files("shapes") / f"{model}.toml").is_file():
        raise ValueError(f"--save: '{model}' is a packaged model; choose another name")
    unique = {name: tuple(dict.fromkeys(shapes)) for name, shapes in groups.items()}
    folder = user_shapes_dir()
    path = folder / f"{model}.toml"
    entries = _read(model) if path.is_file() else {}
    for existing in list(entries.values())[:1]:
        if existing.block_shape != tuple(block_shape):
            raise ValueError(
                f"{path}: has block_shape {list(existing.block_shape)}, the new "
                f"shapes {list(block_shape)}; save them under another name"
            )
        description = description or existing.description
        model_type = model_type or existing.model_type
    new = ModelShapes(model, description, tp, block_shape, source, unique, model_type)
    text = render_shapes_file([new, *(e for size, e in entries.items() if size != tp)])
    _parse(tomllib.loads(text), str(path), model)  # what we write must load back
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / f".{model}.toml.part-{os.getpid()}"  # renamed whole into place
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)
    return path
