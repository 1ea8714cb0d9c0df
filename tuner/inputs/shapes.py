"""Typed loader for the GEMM shapes of each model: TOML files in the `shapes` package, then in the
user's shapes folder (`tuner shapes from-log/from-config --save` writes there)."""

from __future__ import annotations

import json
import os
import re
import tempfile
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from tuner.inputs.suggest import did_you_mean

# A model key is a file name: lower case, digits, '.', '_' and '-'.
MODEL_KEY_RE = re.compile(r"[a-z0-9][a-z0-9._\-]{0,63}")
MAX_DIM = 999_999_999  # the largest N or K a config file name can carry (tuner.files.format)
MAX_GROUP = 999_999
MAX_TP = 1024
_TOP_KEYS = ("model", "description", "block_shape", "tp", "model_type")
# A Hugging Face model type, e.g. "deepseek_v3" (what vLLM reads as hf_text_config.model_type).
MODEL_TYPE_RE = re.compile(r"[a-z0-9][a-z0-9_]{0,63}")
_TP_KEYS = ("source", "shapes", "moe")


class UnknownModelError(LookupError):
    """A model or tensor-parallel size that no shapes file lists."""


class ShapesFileError(ValueError):
    """A shapes file that cannot be read or does not follow the format; the message is one line
    that names the file."""


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
        moe: fused-MoE expert shapes (E, N, K, top_k): E experts, N = moe_intermediate_size / TP
            (vLLM's w2_shape[2]), K = hidden size, top_k experts per token.
        model_type: the model's Hugging Face model type (its text config's, e.g.
            "deepseek_v3"), which vLLM's kernel selection reads; None when the file names none.
    """

    model: str
    description: str
    tp: int
    block_shape: tuple[int, int]
    shapes: tuple[tuple[int, int], ...]
    source: str
    moe: tuple[tuple[int, int, int, int], ...] = ()
    model_type: str | None = None

    @property
    def moe_label(self) -> str:
        """The model, TP and MoE shapes in one phrase, e.g. "tiny-moe TP 1: E=4 N=64"."""
        experts = ", ".join(f"E={e} N={n}" for e, n, _, _ in self.moe)
        return f"{self.model} TP {self.tp}: {experts or 'no MoE shapes'}"


@dataclass(frozen=True)
class _ShapesDoc:
    model: str
    description: str
    block_shape: tuple[int, int]
    entries: dict[int, tuple[str, tuple[tuple[int, int], ...]]]  # tp -> (source, shapes)
    moe: dict[int, tuple[tuple[int, int, int, int], ...]]  # tp -> (E, N, K, top_k)
    model_type: str | None = None


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


def _packaged_names() -> list[str]:
    names = (entry.name for entry in resources.files("shapes").iterdir())
    return sorted(name.removesuffix(".toml") for name in names if name.endswith(".toml"))


def _user_names() -> list[str]:
    folder = user_shapes_dir()
    try:
        paths = list(folder.glob("*.toml"))
    except OSError:
        return []
    return sorted(p.stem for p in paths if MODEL_KEY_RE.fullmatch(p.stem))


def known_models() -> list[str]:
    """Model keys with a shapes file, packaged or in `user_shapes_dir()`, sorted and unique."""
    return sorted(set(_packaged_names()) | set(_user_names()))


def _positive(value: object, where: str, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ShapesFileError(f"{where} = {value!r:.40} is not an integer")
    if value > limit:  # not printed: a huge integer may not even convert to text
        raise ShapesFileError(f"{where} is larger than {limit}")
    if value < 1:
        raise ShapesFileError(f"{where} = {value} is not positive")
    return value


def _parse(data: dict, label: str, key: str) -> _ShapesDoc:
    """Check a parsed shapes document strictly; errors name `label`."""
    unknown = [k for k in data if k not in _TOP_KEYS]
    if unknown:
        raise ShapesFileError(f"{label}: unknown key(s) {', '.join(map(repr, unknown))}; "
                              f"allowed: {', '.join(_TOP_KEYS)}")
    model = data.get("model")
    if model != key:
        raise ShapesFileError(f"{label}: model = {model!r:.70} differs from the file name "
                              f"({key}.toml)")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ShapesFileError(f"{label}: description must be a string")
    model_type = data.get("model_type")
    if model_type is not None and (not isinstance(model_type, str)
                                   or not MODEL_TYPE_RE.fullmatch(model_type)):
        raise ShapesFileError(f"{label}: model_type = {model_type!r:.70} is not a Hugging Face "
                              "model type such as \"deepseek_v3\"")
    block = data.get("block_shape")
    if not isinstance(block, list) or len(block) != 2:
        raise ShapesFileError(f"{label}: block_shape = {block!r:.40} is not [group_n, group_k]")
    block_shape = (_positive(block[0], f"{label}: group_n", MAX_GROUP),
                   _positive(block[1], f"{label}: group_k", MAX_GROUP))
    tables = data.get("tp")
    if not isinstance(tables, dict) or not tables:
        raise ShapesFileError(f"{label}: needs at least one [tp.<size>] table")
    entries: dict[int, tuple[str, tuple[tuple[int, int], ...]]] = {}
    moe: dict[int, tuple[tuple[int, int, int, int], ...]] = {}
    for size, table in tables.items():
        if not size.isdigit() or not 1 <= int(size) <= MAX_TP:
            raise ShapesFileError(f"{label}: [tp.{size}] is not a TP size in 1..{MAX_TP}")
        where = f"{label}, TP {size}"
        if not isinstance(table, dict):
            raise ShapesFileError(f"{where}: expected a table with source and shapes")
        extra = [k for k in table if k not in _TP_KEYS]
        if extra:
            raise ShapesFileError(f"{where}: unknown key(s) {', '.join(map(repr, extra))}; "
                                  f"allowed: {', '.join(_TP_KEYS)}")
        source, pairs = table.get("source"), table.get("shapes", [])
        if not isinstance(source, str) or not source.strip():
            raise ShapesFileError(f"{where}: source must be a non-empty string")
        moe[int(size)] = _parse_moe(table.get("moe", []), where)
        if not isinstance(pairs, list) or not (pairs or moe[int(size)]):
            raise ShapesFileError(f"{where}: shapes must be a non-empty list of [N, K]")
        shapes = []
        for pair in pairs:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ShapesFileError(f"{where}: shape {pair!r:.60} is not [N, K]")
            shapes.append((_positive(pair[0], f"{where}: N", MAX_DIM),
                           _positive(pair[1], f"{where}: K", MAX_DIM)))
        entries[int(size)] = (source, tuple(shapes))
    return _ShapesDoc(model, description, block_shape, entries, moe, model_type)


def _parse_moe(rows: object, where: str) -> tuple[tuple[int, int, int, int], ...]:
    """The `moe = [[E, N, K, top_k], ...]` list of a TP table."""
    if not isinstance(rows, list):
        raise ShapesFileError(f"{where}: moe must be a list of [E, N, K, top_k]")
    parsed = []
    for row in rows:
        if not isinstance(row, list) or len(row) != 4:
            raise ShapesFileError(f"{where}: moe shape {row!r:.60} is not [E, N, K, top_k]")
        E, N, K, top_k = (_positive(value, f"{where}: moe {label}", MAX_DIM)
                          for value, label in zip(row, ("E", "N", "K", "top_k"), strict=True))
        if top_k > E:
            raise ShapesFileError(f"{where}: moe top_k = {top_k} is more than E = {E}")
        parsed.append((E, N, K, top_k))
    return tuple(parsed)


def _load_text(text: str, label: str, key: str) -> _ShapesDoc:
    try:
        data = tomllib.loads(text)
    except ValueError as exc:  # TOMLDecodeError, or an integer too long to convert
        raise ShapesFileError(f"{label}: invalid TOML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise ShapesFileError(f"{label}: invalid TOML: nested too deeply") from None
    return _parse(data, label, key)


def _read(model: str) -> _ShapesDoc:
    packaged = resources.files("shapes") / f"{model}.toml"
    if MODEL_KEY_RE.fullmatch(model) and packaged.is_file():
        return _load_text(packaged.read_text(encoding="utf-8"), f"shapes/{model}.toml", model)
    path = user_shapes_dir() / f"{model}.toml"
    if not MODEL_KEY_RE.fullmatch(model) or not path.is_file():
        known = known_models()
        raise UnknownModelError(f"unknown model '{model}'{did_you_mean(model, known)}; known: "
                                f"{', '.join(known)}")
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise ShapesFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ShapesFileError(f"{path}: not UTF-8 text") from None
    return _load_text(text, str(path), model)


def tp_sizes(model: str) -> list[int]:
    """Tensor-parallel sizes listed for a model, ascending.

    Raises:
        UnknownModelError: no such model.
        ShapesFileError: its file is malformed.
    """
    return sorted(_read(model).entries)


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
    doc = _read(model)
    sizes = sorted(doc.entries)
    if tp is None:
        if len(sizes) != 1:
            raise UnknownModelError(
                f"model '{model}' lists TP sizes {sizes}; choose one with --tp"
            )
        tp = sizes[0]
    if tp not in doc.entries:
        raise UnknownModelError(
            f"model '{model}' has no shapes for TP {tp}; listed: {', '.join(map(str, sizes))}"
        )
    source, shapes = doc.entries[tp]
    return ModelShapes(model=doc.model, description=doc.description, tp=tp,
                       block_shape=doc.block_shape, shapes=shapes, source=source,
                       moe=doc.moe.get(tp, ()), model_type=doc.model_type)


def _toml_string(text: str) -> str:
    # A JSON string without \u escapes of non-ASCII text is a valid TOML basic string.
    return json.dumps(text, ensure_ascii=False)


def render_shapes_file(
    model: str, description: str, block_shape: tuple[int, int],
    entries: dict[int, tuple[str, Sequence[tuple[int, int]]]],
    moe: dict[int, Sequence[tuple[int, int, int, int]]] | None = None,
    model_type: str | None = None,
) -> str:
    """A shapes file in the packaged files' layout.

    Args:
        model: the model key (also the file name without `.toml`).
        description: one line about the model.
        block_shape: [group_n, group_k].
        entries: TP size -> (source, (N, K) pairs).
        moe: TP size -> (E, N, K, top_k) expert shapes, for the sizes that have any.
        model_type: the model's Hugging Face model type; None writes none.

    Returns:
        TOML text that `load_shapes` reads back to the same values.
    """
    lines = [
        f"model = {_toml_string(model)}",
        f"description = {_toml_string(description)}",
        f"block_shape = [{int(block_shape[0])}, {int(block_shape[1])}]",
    ]
    if model_type is not None:
        lines.append(f"model_type = {_toml_string(model_type)}")
    for tp in sorted(entries):
        source, shapes = entries[tp]
        lines += ["", f"[tp.{int(tp)}]", f"source = {_toml_string(source)}"]
        if shapes:
            lines += ["shapes = [", *(f"    [{int(n)}, {int(k)}]," for n, k in shapes), "]"]
        experts = (moe or {}).get(tp, ())
        if experts:
            lines += ["moe = [", *(f"    [{', '.join(str(int(v)) for v in row)}],"
                                   for row in experts), "]"]
    return "\n".join(lines) + "\n"


def save_shapes(
    model: str, *, tp: int, shapes: Sequence[tuple[int, int]], block_shape: tuple[int, int],
    source: str, description: str = "", moe: Sequence[tuple[int, int, int, int]] = (),
    model_type: str | None = None,
) -> Path:
    """Write (or add a TP size to) a shapes file in `user_shapes_dir()`.

    An existing user file keeps its other TP sizes; the given TP size is replaced. The file is
    written to a temporary file and renamed into place.

    Args:
        model: the key to save under (`MODEL_KEY_RE`); not a packaged model's.
        tp: tensor-parallel size of the shapes.
        shapes: (N, K) pairs, in order; duplicates are dropped (may be empty when `moe` is not).
        block_shape: [group_n, group_k].
        source: where the shapes come from (a log file, a config.json and rule).
        description: one line about the model (kept from an existing file when empty).
        moe: fused-MoE expert shapes (E, N, K, top_k) at this TP size; duplicates dropped.
        model_type: the model's Hugging Face model type (kept from an existing file when None).

    Returns:
        The file's path.

    Raises:
        ValueError: a bad key, a packaged model's key, a block_shape that differs from the
            existing file's, an empty or out-of-range shape list, or an existing file that is
            malformed (ShapesFileError).
    """
    if not MODEL_KEY_RE.fullmatch(model):
        raise ValueError(f"--save: {model!r} is not a model key (lower case letters, digits, "
                         "'.', '_', '-'; at most 64)")
    if model in _packaged_names():
        raise ValueError(f"--save: '{model}' is a packaged model; choose another name")
    unique = tuple(dict.fromkeys((int(n), int(k)) for n, k in shapes))
    experts = tuple(dict.fromkeys(tuple(int(v) for v in row) for row in moe))
    entries: dict[int, tuple[str, Sequence[tuple[int, int]]]] = {}
    moe_entries: dict[int, Sequence[tuple[int, int, int, int]]] = {}
    folder = user_shapes_dir()
    path = folder / f"{model}.toml"
    if path.is_file():
        existing = _read(model)
        if existing.block_shape != tuple(block_shape):
            raise ValueError(f"{path}: has block_shape {list(existing.block_shape)}, the new "
                             f"shapes {list(block_shape)}; save them under another name")
        entries.update(existing.entries)
        moe_entries.update(existing.moe)
        description = description or existing.description
        model_type = model_type or existing.model_type
    entries[int(tp)] = (source, unique)
    moe_entries[int(tp)] = experts
    text = render_shapes_file(model, description, block_shape, entries, moe_entries,
                              model_type)
    _parse(tomllib.loads(text), str(path), model)  # what we write must load back
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".toml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
