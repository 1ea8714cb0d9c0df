"""What every `tuner` command shares: the console, one-line errors, the option types, opening
the store (`tuner.cli.store`, re-exported) and resolving --device. Command modules import this;
it imports no command module."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from rich.console import Console

from tuner.cli.errors import fail as fail

# The store's URL and opening, for every command (`tuner.cli.store`), re-exported here.
from tuner.cli.store import PSYCOPG_INSTALL as PSYCOPG_INSTALL
from tuner.cli.store import STORE_URL_FORMS as STORE_URL_FORMS
from tuner.cli.store import existing_store as existing_store
from tuner.cli.store import masked as masked
from tuner.cli.store import no_store_line as no_store_line
from tuner.cli.store import open_db as open_db
from tuner.cli.store import open_failed as open_failed
from tuner.cli.store import sqlite_missing as sqlite_missing
from tuner.cli.store import sqlite_url_hint as sqlite_url_hint
from tuner.cli.store import store_url as store_url
from tuner.core import VLLM_M_GRID, OutDtype, ResolvedDevice
from tuner.search.defaults import DEFAULT_STRATEGY

console = Console()
# Progress bars: on stderr, so stdout keeps only the tables and lines a script reads.
err_console = Console(stderr=True)


def strategy_names() -> Any:
    """The type of a `--strategy` value: a `Literal` of the names in
    `tuner.search.registry.STRATEGIES` as they are when the command is built. Typer reads a
    command's annotations each time the app runs, so `Annotated[strategy_names(), ...]` makes a
    strategy registered at run time a choice, listed in --help, with no change here."""
    from tuner.search.registry import STRATEGIES

    return Literal[tuple(STRATEGIES)]  # Literal[("a", "b")] is Literal["a", "b"]


DEFAULT_STRATEGY_NAME = DEFAULT_STRATEGY


class EngineName(StrEnum):
    vllm = "vllm"
    sglang = "sglang"


EngineOpt = Annotated[
    EngineName, typer.Option("--engine", help="Serving engine: its config folder and its "
                             "file-name spelling (SGLang: block_shape=[128, 128]).")
]


class KernelChoice(StrEnum):
    """Whose Triton kernels a sweep times (`tuner.kernels.source.KERNEL_CHOICES`)."""

    auto = "auto"
    vllm = "vllm"
    builtin = "builtin"


DbOpt = Annotated[
    str | None,
    typer.Option("--db", envvar="TUNER_DB_URL", show_envvar=True,
                 help="SQLAlchemy URL of the store (default: sqlite:///tuner.db in the current "
                 "folder; sqlite:////abs/path.db for an absolute path); postgresql://user@host/db "
                 "(psycopg; postgres:// too) to share one store between hosts. A store that "
                 "cannot be opened when the command starts is one line and exit 2; one that "
                 "then stays unreachable, locked or full for $TUNER_STORE_TIMEOUT_S seconds "
                 "(default 180) stops the command the same way."),
]
DeviceOpt = Annotated[
    str,
    typer.Option("--device", help="GPU model as vLLM names it (L20, NVIDIA_L20, H200, ...), or "
                 "'interpreter' for the CPU interpreter (device_name TRITON_INTERPRETER)."),
]
OutDtypeOpt = Annotated[
    OutDtype, typer.Option("--out-dtype", help="Output dtype of the GEMM (bf16 when serving).")
]
ConfigsOpt = Annotated[
    Path | None, typer.Option("--configs", help="JSON list of configs to search instead of "
                              "vLLM's 1,280-config space.")
]
ReplayOpt = Annotated[
    Path | None, typer.Option("--replay", help="Answer every trial from this landscape file "
                              "(recorded timings) instead of a device: for tests and search "
                              "benchmarks.")
]
InterpreterRepsOpt = Annotated[
    int, typer.Option("--interpreter-reps", min=1, help="Timed calls per trial on the "
                      "interpreter.")
]
TrialTimeoutOpt = Annotated[
    float | None, typer.Option("--trial-timeout", min=0.1, show_default="300 on a GPU, 1800 on "
                               "the interpreter", help="Seconds one config may take (compile, "
                               "check, timing); then its worker is killed, the config recorded "
                               "as timeout, and the task goes on in a new worker.")
]
KernelOpt = Annotated[
    KernelChoice, typer.Option("--kernel", help="Whose Triton kernels to time: vllm (the "
                               "installed vLLM's, called as vLLM calls them), builtin (the "
                               "tuner's copies), auto (vllm where vLLM is importable and "
                               "keeps the real Triton). A sweep's winners have one source.")
]
# Commands that time nothing: --kernel picks whose kernel's trials the files come from.
TRIALS_KERNEL_HELP = ("Whose kernel's trials the files are merged from: vllm (trials of vLLM's "
                      "own kernel, a sweep inside the serving image), builtin (the tuner's "
                      "copies), auto (vllm where vLLM is importable here or the device has "
                      "trials of it, else builtin).")
TrialsKernelOpt = Annotated[KernelChoice, typer.Option("--kernel", help=TRIALS_KERNEL_HELP)]


def resolve_kernel_choice(choice: KernelChoice) -> tuple[str, str]:
    """(source, space label) of --kernel here (`tuner.kernels.source.choose_kernel`); exit 2."""
    from tuner.kernels.source import choose_kernel, kernel_label

    try:
        chosen = choose_kernel(choice.value)
    except ValueError as exc:
        raise fail(str(exc), 2) from None
    if chosen.note:  # auto took the builtin beside an installed vLLM: say why
        typer.echo(f"note: {chosen.note}", err=True)
    return chosen.source, kernel_label(chosen.source)


# Hidden: tests shorten the lease so that tasks of killed workers come back in seconds.
LeaseOpt = Annotated[
    float, typer.Option("--lease", envvar="TUNER_LEASE_S", min=1.0, hidden=True,
                        help="Seconds a claimed task stays leased without a heartbeat.")
]

# The largest M the store keeps (a 32-bit INTEGER column on PostgreSQL).
MAX_M = 2**31 - 1

# vLLM's default batch sizes (benchmarks/kernels/benchmark_w8a8_block_fp8.py), as --m spells them.
DEFAULT_M = ",".join(map(str, VLLM_M_GRID))


def plain(text: str) -> None:
    """Print a line as it is: no markup, no highlighting, wrapped only at the terminal's edge."""
    console.print(text, soft_wrap=True, markup=False, highlight=False)


def parse_m_values(text: str) -> tuple[int, ...]:
    """`"1,16,32"` -> (1, 16, 32), sorted and unique.

    Raises:
        ValueError: an entry is not a positive integer.
    """
    values = set()
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--m: '{part}' is not a positive integer (expected e.g. 1,16,32)")
        if int(part) > MAX_M:
            raise ValueError(f"--m: {part} is larger than {MAX_M} (the store keeps M as a "
                             "32-bit integer)")
        values.add(int(part))
    return tuple(sorted(values))


def out_folder(path: Path) -> Path:
    """--out of a command that fills a folder: refuse a path that is not one.

    Raises:
        typer.Exit: one line, exit 2, when the path exists and is not a folder.
    """
    if path.exists() and not path.is_dir():
        raise fail(f"--out {path} is a file, not a folder: name a folder (created if absent)")
    return path


def load_configs(path: Path | None):
    """The `--configs` file's configs (a JSON list of vLLM's six-key dicts) as KernelConfig;
    None when no file is given. Bad files exit 2 with one line (typer.Exit)."""
    from tuner.files.format import parse_config_list
    from tuner.kernels.config import KernelConfig

    if path is None:
        return None
    try:
        items = parse_config_list(path.read_bytes().decode("utf-8"), source=str(path))
        return tuple(dict.fromkeys(KernelConfig.from_dict(item) for item in items))
    except OSError as exc:
        raise fail(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise fail(f"{path}: not UTF-8 text") from None
    except ValueError as exc:  # one line that names the file
        raise fail(str(exc)) from None


def device_in_store(session, device: str) -> str:
    """The store's device key that `--device` names (`tuner.inputs.devices.store_device`); else
    one line naming them, exit 2."""
    from db import repo
    from tuner.inputs.devices import store_device

    known = set(repo.list_device_names(session)) | set(repo.list_import_device_names(session))
    try:
        return store_device(device, known)
    except ValueError as exc:
        raise fail(str(exc)) from None


def print_sweep_summary(summary) -> None:
    """The closing lines of a sweep run (`tuner.run.sweep.summary_lines`)."""
    from tuner.run.sweep import summary_lines

    for line in summary_lines(summary):
        console.print(line, soft_wrap=True, markup=False, highlight=False)


def resolve_device(device: str, replay: Path | None, *, need_device: bool = True,
                   plan_only: bool = False) -> tuple[str, ResolvedDevice]:
    """(backend, device) for --device and --replay: the device resolved once
    (`tuner.inputs.devices.resolve_device`), carried by the command to its workers and files.

    With need_device=False a GPU model that no visible GPU matches is still accepted (its vLLM
    key, for creating a sweep that workers on other hosts run). With plan_only (`tuner sweep
    --dry-run`) the GPUs are looked up as the run would: the matching ones are planned for;
    when none matches, one note line on stderr says so and the plan is for one such GPU.

    Returns:
        (backend: "replay", "interpreter" or "cuda"; the device, whose `visible_ids` are the
        workers' CUDA_VISIBLE_DEVICES entries).

    Raises:
        typer.Exit: exit 2 with one line: no visible GPU matches (need_device, not plan_only),
            a landscape of another device, a name that is no GPU model.
    """
    from tuner.inputs.devices import matches
    from tuner.inputs.devices import resolve_device as resolve_named

    if replay is not None:
        from tuner.measure.landscape import load_landscape

        try:
            landscape = load_landscape(replay)
        except ValueError as exc:
            raise fail(str(exc)) from None
        if not matches(device, landscape.device_name):
            raise fail(f"--device {device} does not name the landscape's device "
                       f"{landscape.device_name}")
        return "replay", ResolvedDevice(landscape.device_name, visible_ids=(None,))
    from tuner.run.gpus import visible_gpus

    try:
        resolved, note = resolve_named(device, visible_gpus, need_device=need_device,
                                       plan_only=plan_only)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if note is not None:
        typer.echo(note, err=True)
    return ("interpreter" if resolved.interpreter else "cuda"), resolved


def resolve_runner(device: str, replay: Path | None, *, interpreter_reps: int = 3,
                   need_device: bool = True, plan_only: bool = False):
    """(runner, device) for --device and --replay: `resolve_device`'s backend name parsed,
    here and only here, into its runner (`tuner.measure.runners.make_runner`), whose
    device_name is the resolved device's.

    Raises:
        typer.Exit: exit 2 with one line, as `resolve_device`.
    """
    from tuner.measure.runners import make_runner

    backend, resolved = resolve_device(device, replay, need_device=need_device,
                                       plan_only=plan_only)
    try:
        runner = make_runner(backend, device_name=resolved.device_name,
                             landscape=None if replay is None else str(replay),
                             interpreter_reps=interpreter_reps)
    except ValueError as exc:
        raise fail(str(exc)) from None
    return runner, resolved


def store_files(engine, device_name: str, *, out_dtype: str | None, allow_stale: bool,
                allow_partial: bool, engine_name: str = "vllm", hint: str = "",
                kernel: str = "auto"):
    """A device's files from the store (`tuner.files.device.device_files`), for `tuner export`,
    `verify` and `mounts`; the note on stale trials left out goes to stderr.

    Args:
        engine: the store's engine.
        device_name: vLLM's device key, present in the store.
        out_dtype: only sweeps with this output dtype; None for all.
        allow_stale: also trials of another kernel source or Triton major.minor.
        allow_partial: also files of shapes whose M grid is not fully tuned.
        engine_name: file-name spelling, "vllm" or "sglang".
        hint: appended to the error line when the winners cannot be merged.
        kernel: whose kernels' trials count: "auto", "vllm" or "builtin".

    Returns:
        `tuner.files.device.StoreFiles`.

    Raises:
        typer.Exit: the winners cannot be merged (one line, exit 2).
    """
    from db.repo import session_scope
    from tuner.files.device import MergeError, device_files

    try:
        with session_scope(engine) as session:
            read = device_files(session, device_name, out_dtype=out_dtype,
                                allow_stale=allow_stale, allow_partial=allow_partial,
                                engine=engine_name, kernel=kernel)
    except MergeError as exc:
        raise fail(f"{exc}{hint}") from None
    note = read.view.scope.note(device_name)
    if note is not None:
        typer.echo(note, err=True)
    return read
