"""The `tuner` command line: the Typer app and the one place every command is registered.

Commands live in their own modules (sweep, export, imports, status, serving, db_admin,
compare (with verify), shapes, ...), which share `tuner.cli.options` (the options),
`tuner.cli.output`, `tuner.cli.arguments`, `tuner.cli.devices` and `tuner.cli.store`; this
module imports them and nothing imports it back.
"""

from __future__ import annotations

import typer

from tuner.cli import (
    ab,
    compare,
    db_admin,
    doctor,
    export,
    imports,
    recipe,
    serving,
    shapes,
    status,
    sweep,
)
from tuner.cli.guard import run_guarded

# Click's plain help, not Typer's rich panels: on an 80-column terminal the panels cut long
# option names, URLs and paths with an ellipsis; plain help wraps them whole.
PLAIN_HELP = None

app = typer.Typer(
    help="Autotune vLLM's W8A8 block-FP8 Triton GEMM over the full M grid, keep every timing, "
    "and serve merged vLLM config files.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=PLAIN_HELP,
)


def _group(name: str, help_text: str, no_args_is_help: bool = True) -> typer.Typer:
    """The command group `tuner NAME`, with plain help."""
    group = typer.Typer(
        help=help_text, no_args_is_help=no_args_is_help, rich_markup_mode=PLAIN_HELP
    )
    app.add_typer(group, name=name)
    return group


shapes_app = _group("shapes", "Models and their (N, K) per TP size, from a log or config.json.")
db_app = _group("db", "Manage the store: its schema, its backup.")
recipe_app = _group("recipe", "Ready-to-run text for sweeps inside the serving image.", False)

app.command()(sweep.sweep)
app.command()(sweep.worker)
app.command("import")(imports.import_files)
app.command()(status.status)
app.command()(serving.mounts)
app.command()(serving.serve)
app.command()(compare.verify)
app.command()(compare.compare)
app.command()(doctor.doctor)
app.command()(export.export)
app.command()(export.winners)
app.command("publish")(export.publish_cmd)
app.command("pull")(serving.pull)
app.command()(ab.ab)
recipe_app.command("sweep")(recipe.recipe_sweep)
shapes_app.command("list")(shapes.shapes_list)
shapes_app.command("show")(shapes.shapes_show)
shapes_app.command("from-log")(shapes.from_log)
shapes_app.command("from-config")(shapes.from_config)
db_app.command("upgrade")(db_admin.db_upgrade)
db_app.command("backup")(db_admin.db_backup)


def main() -> None:
    """Console-script entry point: a store fault or Ctrl-C is one line (tuner.cli.guard)."""
    run_guarded(app)
