"""`tuner publish`: freeze a device's merged files as its next release; and the publish that
`tuner sweep`, `verify --fix` and `tuner import` run when they finish."""

from __future__ import annotations

from typing import Annotated

import typer

from tuner.cli.errors import fail
from tuner.cli.options import DbOpt, DeviceOpt, KernelChoice
from tuner.cli.output import console
from tuner.cli.store import device_in_store, open_db
from tuner.core import OutDtype

NoPublishOpt = Annotated[
    bool,
    typer.Option(
        "--no-publish", help="Don't publish the device's files as a new release when done."
    ),
]


def _say(line: str) -> None:
    console.print(line, soft_wrap=True, markup=False, highlight=False)


def publish_device(
    store,
    device_name: str,
    *,
    reason: str,
    allow_partial: bool = False,
    allow_stale: bool = False,
    out_dtype: str | None = None,
    required: bool = False,
    kernel: str = "auto",
):
    """Publish a device's files (`tuner.files.release.publish`) and print one line.

    Args:
        store: the store's SQLAlchemy Engine (`tuner.cli.store.open_db`).
        device_name: vLLM's device key, as stored.
        reason: what publishes ("tuner sweep", ...), kept with the release.
        allow_partial, allow_stale, out_dtype: the scope of the files.
        kernel: whose kernels' trials the files come from: "auto", "vllm" or "builtin"; a
            sweep passes the source it timed, so its own trials are published whatever auto
            would read.
        required: nothing to publish is an error (exit 1), not a note.

    Returns:
        `tuner.files.release.Published`, or None when there was nothing to publish.

    Raises:
        typer.Exit: the winners cannot be merged (exit 2), or nothing to publish with required.
    """
    from db.repo import session_scope
    from tuner.files.device import MergeError
    from tuner.files.release import NothingToPublish, publish

    try:
        with session_scope(store) as session:
            done = publish(
                session,
                device_name,
                reason=reason,
                allow_partial=allow_partial,
                allow_stale=allow_stale,
                out_dtype=out_dtype,
                kernel=kernel,
            )
    except MergeError as exc:
        raise fail(f"{exc}; pick one with --out-dtype") from None
    except NothingToPublish as exc:
        if required:
            raise fail(str(exc), 1) from None
        _say(f"note: {exc}; no release")
        return None
    _say(done.line())
    return done


def publish_cmd(
    device: DeviceOpt,
    allow_partial: Annotated[
        bool, typer.Option(help="Also publish files whose M grid is not fully tuned yet.")
    ] = False,
    allow_stale: Annotated[
        bool,
        typer.Option(
            "--allow-stale",
            help="Also use trials timed with another kernel source or another "
            "Triton major.minor than the current ones.",
        ),
    ] = False,
    out_dtype: Annotated[
        OutDtype | None, typer.Option(help="Only trials with this output dtype [default: all].")
    ] = None,
    kernel: Annotated[
        KernelChoice,
        typer.Option(
            "--kernel",
            help="Whose kernels' trials the files come from: vllm, builtin, or auto "
            "(vllm where vLLM is importable or the device has vLLM-kernel trials).",
        ),
    ] = KernelChoice.auto,
    db: DbOpt = None,
) -> None:
    """Freeze a device's merged files as its next release, which downloads serve byte for byte.

    The release keeps every file's bytes (stored once per sha256), coverage, merge notes, the
    versions the files were tuned with, who and when. Files identical to the latest release's
    make no new release.
    """
    from db.repo import session_scope

    _, store = open_db(db, must_exist=True)
    with session_scope(store) as session:
        device_name = device_in_store(session, device)
    publish_device(
        store,
        device_name,
        reason="tuner publish",
        allow_partial=allow_partial,
        allow_stale=allow_stale,
        out_dtype=out_dtype.value if out_dtype else None,
        required=True,
        kernel=kernel.value,
    )
