"""The on-disk cache of what the compiler said about each config (`CompileInfo`), keyed by
toolchain (Triton's version and the kernel's source), architecture and launch specialization."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import asdict
from importlib import metadata
from pathlib import Path

from tuner.kernels.config import KernelConfig
from tuner.kernels.registry import DEFAULT_FAMILY, get_family
from tuner.measure.resources import CompileInfo

ENV_CACHE_DIR = "TUNER_CACHE_DIR"


def default_cache_dir() -> Path:
    """`$TUNER_CACHE_DIR/compile`, else `$XDG_CACHE_HOME/blockfp8-tuner/compile`, else
    `~/.cache/blockfp8-tuner/compile`."""
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]) / "compile"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "blockfp8-tuner" / "compile"


def toolchain_key(family: str = DEFAULT_FAMILY) -> str:
    """Triton's version and the sha256 of a family's kernel and launch specialization (its
    `compile_modules`, e.g. tuner/kernels/dense/kernel.py and target.py): a cached entry is
    valid for both.

    Read without importing triton (package metadata and the files' bytes).

    Raises:
        ValueError: an unknown family.
    """
    try:
        triton_version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton_version = "none"
    kernel_family = get_family(family)
    source = b"".join(
        kernel_family.module_path(module).read_bytes() for module in kernel_family.compile_modules
    )
    return f"triton-{triton_version}:kernel-{hashlib.sha256(source).hexdigest()[:16]}"


class CompileCache:
    """CompileInfo per (toolchain, arch, specialization, out_dtype, config) in one SQLite file,
    for one kernel family's toolchain.

    Several processes may read and write it at once (WAL, busy timeout); each write is one
    `INSERT OR REPLACE`.
    """

    def __init__(
        self, directory: Path | str | None = None, *, family: str = DEFAULT_FAMILY
    ) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        self.path = self.directory / "compile.sqlite"
        self.toolchain = toolchain_key(family)
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS compile_info (toolchain TEXT, arch INTEGER, "
                "specialization TEXT, out_dtype TEXT, config TEXT, body TEXT, "
                "PRIMARY KEY (toolchain, arch, specialization, out_dtype, config))"
            )

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0)
        db.execute("PRAGMA journal_mode=WAL")
        return db

    def _key(
        self, arch: int, specialization: str, out_dtype: str, config: KernelConfig
    ) -> tuple[str, int, str, str, str]:
        values = ",".join(str(value) for value in config.as_dict().values())
        return (self.toolchain, arch, specialization, out_dtype, values)

    def get_many(
        self, configs: Iterable[KernelConfig], *, arch: int, specialization: str, out_dtype: str
    ) -> dict[KernelConfig, CompileInfo]:
        """The cached entries among `configs` (absent ones are left out)."""
        found: dict[KernelConfig, CompileInfo] = {}
        with contextlib.closing(self._connect()) as db:
            for config in configs:
                row = db.execute(
                    "SELECT body FROM compile_info WHERE toolchain=? AND arch=? AND "
                    "specialization=? AND out_dtype=? AND config=?",
                    self._key(arch, specialization, out_dtype, config),
                ).fetchone()
                if row is not None:
                    body = json.loads(row[0])
                    found[config] = CompileInfo(**{**body, "config": config, "compile_s": 0.0})
        return found

    def put(self, info: CompileInfo) -> None:
        """Store one entry (replacing an older one with the same key)."""
        body = {**asdict(info), "config": None}
        with contextlib.closing(self._connect()) as db, db:
            db.execute(
                "INSERT OR REPLACE INTO compile_info VALUES (?, ?, ?, ?, ?, ?)",
                (
                    *self._key(info.arch, info.specialization, info.out_dtype, info.config),
                    json.dumps(body),
                ),
            )
