"""Config files as the tuner exports them, laid out in a serving container's folders where
`tuner mounts` puts them, and stand-ins for the few engine modules their loaders read.

A container is a temporary folder (`Container.root`) standing for `/`: each bind mount of the
compose text `tuner mounts --format compose` prints is copied to its target below it, and its
`environment:` entries become the process environment, paths mapped below the root too. The
engine's module under test gets `__file__` at its place in the container's site-packages
(`Container.module_file`), so its own `os.path.dirname(__file__)/configs` lookups land there.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.engines.engine_code import wheel_folder
from tests.storefill import TRITON
from tuner.files.merge import DeviceFile, build_device_files, write_files_atomically
from tuner.files.mounts import DEFAULT_SITE_PACKAGES, MountRequest, render_mounts
from tuner.kernels.registry import get_family

# The container's site-packages, as `tuner mounts --site-packages` is told.
SITE = "/srv/engine/site-packages"
# Variables the engines read their config folders from; unset unless the mounts set them.
ENGINE_VARIABLES = ("VLLM_TUNED_CONFIG_FOLDER", "SGLANG_MOE_CONFIG_DIR")
ENVIRONMENT_ID = 1


@dataclass(frozen=True)
class Winner:
    """One (shape, M)'s winner as db.repo.WinnerRow hands it to the merge: faster than the
    default, so the merge keeps it."""

    family: str
    shape_params: str
    N: int
    K: int
    M: int
    config: dict[str, int]
    device_name: str
    block_shape: tuple[int, int] = (128, 128)
    latency_us: float = 1.0
    default_latency_us: float = 2.0
    is_default: bool = False
    environment_id: int = ENVIRONMENT_ID


@dataclass(frozen=True)
class Coverage:
    """The M grid requested for one shape (db.repo.ShapeCoverage)."""

    family: str
    shape_params: str
    N: int
    K: int
    m_requested: tuple[int, ...]
    block_shape: tuple[int, int] = (128, 128)


def tuned_files(
    device_name: str,
    shapes: Sequence[tuple[str, str, int, int, Sequence[int]]],
    *,
    engine: str = "vllm",
) -> list[DeviceFile]:
    """The files `tuner export --engine ENGINE` writes for winners of these shapes, built by
    the merge (`build_device_files`) with a different config of the family's space at each M,
    so that which entry an engine picks shows.

    Args:
        device_name: the device key, e.g. "NVIDIA_H200_NVL".
        shapes: (family, shape_params, N, K, M values) per shape, e.g.
            ("moe", "E=128,top_k=8", 384, 2048, (1, 16, 64)).
        engine: "vllm" or "sglang" file names.
    """
    winners, coverage = [], []
    for index, (family, params, N, K, m_values) in enumerate(shapes):
        space = get_family(family).space()
        coverage.append(Coverage(family, params, N, K, tuple(m_values)))
        winners += [
            Winner(
                family,
                params,
                N,
                K,
                M,
                space[(97 * (index + 1) * (i + 1)) % len(space)].as_dict(),
                device_name,
            )
            for i, M in enumerate(m_values)
        ]
    built = build_device_files(winners, coverage, engine=engine, triton_of={ENVIRONMENT_ID: TRITON})
    assert not built.skipped, built.skipped
    return built.files


@dataclass
class Container:
    """A container's file system below `root`, and the environment the mounts give it."""

    root: Path
    environment: dict[str, str] = field(default_factory=dict)

    def path(self, container_path: str) -> Path:
        """Where a container path lies here."""
        return self.root / container_path.lstrip("/")

    def module_file(self, member: str) -> str:
        """The `__file__` of an engine module at `member` (e.g. "vllm/.../fp8_utils.py") of
        the container's site-packages."""
        return str(self.path(f"{SITE}/{member}"))

    def install(self, wheel: Path, folder: str) -> None:
        """Copy one folder of the engine's wheel (e.g. its shipped configs), subfolders too,
        into the container's site-packages, as installing the wheel in the image does."""
        for relative, data in wheel_folder(wheel, folder, "", recursive=True).items():
            target = self.path(f"{SITE}/{folder}/{relative}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

    def mount(
        self,
        files: Sequence[DeviceFile],
        device_name: str,
        engine: str,
        host: Path,
        triton_version: str | None = None,
    ) -> dict:
        """Write `files` to the host folder `host`, render compose mounts of them for `engine`
        as `tuner mounts --format compose` does (`triton_version`: the serving image's), and
        apply them: each bind mount's source replaces its target (a folder mount hides what the
        image had there), and the `environment:` entries are kept, paths mapped below the root.

        Returns:
            The serving service of the compose file the mounts printed, parsed.
        """
        write_files_atomically(files, host)
        contents = {file.file_name: file.merged.text for file in files}
        request = MountRequest(
            device_name, engine, "compose", contents, str(host), triton=triton_version
        )
        printed = render_mounts(request)
        compose = yaml.safe_load(printed)["services"][engine]
        for volume in compose.get("volumes", []):
            assert volume["type"] == "bind" and volume["read_only"] is True, volume
            # The image's site-packages is this container's SITE.
            volume["target"] = volume["target"].replace(DEFAULT_SITE_PACKAGES[engine], SITE)
            source, target = Path(volume["source"]), self.path(volume["target"])
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(source, target)
            else:
                shutil.copyfile(source, target)
        for name, value in (compose.get("environment") or {}).items():
            value = str(value)
            self.environment[name] = str(self.path(value)) if value.startswith("/") else value
        return compose

    def apply(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Make the mounts' environment this process's (the engine variables unset else)."""
        for name in ENGINE_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        for name, value in self.environment.items():
            monkeypatch.setenv(name, value)


class Logged:
    """A logger stand-in: every call (`info`, `warning_once`, ...) is kept as (method, text)."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str]] = []

    def __getattr__(self, method: str):
        def log(message: str, *args: object, **_: object) -> None:
            self.records.append((method, message % args if args else message))

        return log


class Platform:
    """vLLM's `current_platform` on a CUDA GPU of this name (what the loaders read of it)."""

    def __init__(self, gpu_name: str) -> None:
        self.gpu_name = gpu_name

    def get_device_name(self, device_id: int = 0) -> str:
        return self.gpu_name

    def is_rocm(self) -> bool:
        return False

    def is_cuda(self) -> bool:
        return True


class VllmEnvs:
    """vllm.envs for the two variables the config loaders read, parsed as vLLM 0.33.0's
    vllm/envs.py parses them."""

    @property
    def VLLM_TUNED_CONFIG_FOLDER(self) -> str | None:
        return os.getenv("VLLM_TUNED_CONFIG_FOLDER", None)

    @property
    def VLLM_BATCH_INVARIANT(self) -> bool:
        return bool(int(os.getenv("VLLM_BATCH_INVARIANT", "0")))
