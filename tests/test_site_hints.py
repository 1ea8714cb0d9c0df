"""Every place that tells the user how to find the engine's folders prints the right one: the
README's `SITE=` line, `tuner mounts` (and its HTTP route) and the archive's README, each run
against a fake site-packages."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.files.archive import _HOW_TO
from tuner.files.mounts import MountRequest, render_mounts

README = Path(__file__).resolve().parents[1] / "README.md"
A = "N=5120,K=3072,device_name=NVIDIA_L20,dtype=fp8_w8a8,block_shape=[128,128].json"


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages folder holding empty vllm and sglang packages."""
    for package in ("vllm", "sglang"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    return tmp_path


def run_hint(command: str, site: Path) -> str:
    """Run a printed `python3 -c "..."` hint with the fake site-packages importable."""
    found = re.fullmatch(r'python3? -c "(.+)"', command.strip())
    assert found, command
    done = subprocess.run(
        [sys.executable, "-c", found[1]],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(site)},
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_readme_site_hint_prints_site_packages(site: Path) -> None:
    line = next(line for line in README.read_text().splitlines() if line.startswith("SITE="))
    command = re.search(r"#\s*(python3? -c \".+\") in the image", line)
    assert command, line
    assert run_hint(command[1], site) == str(site)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_mounts_site_hint_prints_site_packages(site: Path, engine: str) -> None:
    text = render_mounts(
        MountRequest(
            device_name="NVIDIA_L20",
            engine=engine,
            file_names=(A,),
            host_dir="$PWD/configs",
            site_packages="/site",
            fmt="docker",
        )
    )
    command = re.search(r'^# \(site-packages in your image: (python3 -c ".+");$', text, re.M)
    assert command, text
    assert run_hint(command[1], site) == str(site)


def test_archive_readme_hint_prints_the_configs_folder(site: Path) -> None:
    command = re.search(r"Find the folder: (python3 -c \".+\")$", _HOW_TO, re.M)
    assert command, _HOW_TO
    assert run_hint(command[1], site) == str(
        site / "vllm" / "model_executor" / "layers" / "quantization" / "utils" / "configs"
    )
