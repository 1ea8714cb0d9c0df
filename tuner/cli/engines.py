"""Options and lines shared by the commands that hand files to a serving engine: the engine's
release (`--engine-version`), the serving image's Triton (`--triton-version`), and the entries
SGLang rewrites as it reads a file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated

import typer

from tuner.cli.errors import fail

EngineVersionOpt = Annotated[
    str | None,
    typer.Option(
        "--engine-version",
        help="The engine's release in the serving image, which decides its "
        'config folders and what it rewrites on read (python3 -c "import sglang; '
        'print(sglang.__version__)") [default: vLLM 0.33.0, SGLang 0.5.23].',
    ),
]
TritonVersionOpt = Annotated[
    str | None,
    typer.Option(
        "--triton-version",
        help="SGLang: the serving image's Triton, e.g. 3.8.0; its fused-MoE "
        "files go to configs/triton_3_8_0/ [default: the Triton the files were tuned with].",
    ),
]


def clamp_lines(
    device_name: str,
    version: str | None,
    files: Iterable[tuple[str, Mapping[int, Mapping[str, int]]]],
) -> list[str]:
    """The lines of `tuner.files.engine_folders.sglang_clamp_lines`, a bad `--engine-version`
    one line and exit 2."""
    from tuner.files.engine_folders import sglang_clamp_lines

    try:
        return sglang_clamp_lines(files, device_name, version)
    except ValueError as exc:
        raise fail(str(exc)) from None
