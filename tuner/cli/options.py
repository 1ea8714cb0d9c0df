"""The options every `tuner` command shares: their `Annotated` types (help, defaults, choices)
and the enums they choose from. Command modules import this; it imports no command module.
The console is `tuner.cli.output`'s, --device is resolved in `tuner.cli.devices`, --m and
--configs are read in `tuner.cli.arguments`, the store is opened in `tuner.cli.store`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from tuner.core import OutDtype
from tuner.search.registry import STRATEGIES


def strategy_names() -> Any:
    """The type of a `--strategy` value: a `Literal` of the names in `STRATEGIES` as they are
    when the command is built. Typer reads a command's annotations each time the app runs, so
    `Annotated[strategy_names(), ...]` makes a strategy registered at run time a choice,
    listed in --help, with no change here."""
    return Literal[tuple(STRATEGIES)]  # Literal[("a", "b")] is Literal["a", "b"]


# A serving engine, as `tuner.kernels.engines.ENGINES` names them.
EngineName = Literal["vllm", "sglang"]
EngineOpt = Annotated[
    EngineName, typer.Option("--engine", help="Serving engine: its config folder and file names.")
]
# Whose Triton kernels a sweep times (`tuner.kernels.source.KERNEL_CHOICES`).
KernelChoice = Literal["auto", "vllm", "builtin"]
DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        envvar="TUNER_DB_URL",
        show_envvar=True,
        help="SQLAlchemy URL of the store [default: sqlite:///tuner.db; postgresql://u@host/db].",
    ),
]
DeviceOpt = Annotated[
    str, typer.Option("--device", help="GPU as vLLM names it (L20, NVIDIA_L20), or 'interpreter'.")
]
ModelOpt = Annotated[str, typer.Option(help="Model key from `tuner shapes list`.")]
TpOpt = Annotated[int | None, typer.Option(help="Tensor-parallel size (which shapes).")]
OutDtypeOpt = Annotated[
    OutDtype, typer.Option("--out-dtype", help="Output dtype of the GEMM (bf16 when serving).")
]
ConfigsOpt = Annotated[
    Path | None, typer.Option("--configs", help="JSON list of configs to search instead.")
]
ReplayOpt = Annotated[
    Path | None, typer.Option("--replay", help="Answer every trial from this landscape file.")
]
InterpreterRepsOpt = Annotated[
    int, typer.Option("--interpreter-reps", min=1, help="Timed calls per trial on the interpreter.")
]
TrialTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--trial-timeout",
        min=0.1,
        show_default="300 on a GPU, 1800 on the interpreter",
        help="Seconds one config may take; then it is recorded as timeout.",
    ),
]
KernelOpt = Annotated[
    KernelChoice,
    typer.Option("--kernel", help="Whose Triton kernels to time (auto: vllm where importable)."),
]
# Commands that time nothing: --kernel picks whose kernel's trials the files come from.
TrialsKernelOpt = Annotated[
    KernelChoice,
    typer.Option("--kernel", help="Whose kernel's trials to merge (auto: vllm where it has some)."),
]
SweepMOpt = Annotated[
    str,
    typer.Option(
        "--m", show_default="vLLM's 18, 1 to 4096", help="Batch sizes M, comma-separated."
    ),
]
TrialsOpt = Annotated[
    int, typer.Option(min=1, max=100_000, help="Configs per (N, K, M), vLLM's default included.")
]
SweepSeedOpt = Annotated[int, typer.Option(min=0, max=2**31 - 1, help="Seed of search and inputs.")]
NoRunOpt = Annotated[
    bool, typer.Option("--no-run", help="Only create the sweep, for `tuner worker` on other hosts.")
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print the plan (tasks, trials, time); write nothing.")
]
SweepIdOpt = Annotated[
    int | None,
    typer.Option("--sweep", min=1, max=2**31 - 1, help="Only this sweep [default: every one]."),
]
