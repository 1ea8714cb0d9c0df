"""`tuner publish`: freeze a device's merged files as its next release; and the publish that
`tuner sweep`, `verify --fix` and `tuner import` run when they finish."""

from __future__ import annotations

from typing import Annotated

import typer
from sqlalchemy import Engine

from db.repo import session_scope
from tuner.cli.errors import fail
from tuner.cli.export import AllowPartialOpt, AllowStaleOpt, OutDtypeOpt
from tuner.cli.options import DbOpt, DeviceOpt, KernelChoice, TrialsKernelOpt
from tuner.cli.output import plain
from tuner.cli.store import device_in_store, open_db
from tuner.files.device import MergeError
from tuner.files.release import NothingToPublish, publish

NoPublishOpt = Annotated[
    bool,
    typer.Option(
        "--no-publish", help="Don't publish the device's files as a new release when done."
    ),
]


def publish_device(
    store: Engine, device_name: str, *, reason: str, required: bool = False, **scope
) -> None:
    """Publish a device's files (`tuner.files.release.publish`, which `reason` and the
    `scope` go to: allow_partial, allow_stale, out_dtype, kernel) and print one line.

    Raises:
        typer.Exit: the winners cannot be merged (exit 2); nothing to publish where
            `required` (exit 1; else one note line).
    """
    try:
        with session_scope(store) as session:
            done = publish(session, device_name, reason=reason, **scope)
    except MergeError as exc:
        raise fail(f"{exc}; pick one with --out-dtype") from None
    except NothingToPublish as exc:
        if required:
            raise fail(str(exc), 1) from None
        plain(f"note: {exc}; no release")
        return
    plain(done.line())


def publish_cmd(
    device: DeviceOpt,
    allow_partial: AllowPartialOpt = False,
    allow_stale: AllowStaleOpt = False,
    out_dtype: OutDtypeOpt = None,
    kernel: TrialsKernelOpt = KernelChoice.auto,
    db: DbOpt = None,
) -> None:
    """Freeze a device's merged files as its next release, which downloads serve byte for byte.

    The release keeps every file's bytes (stored once per sha256), coverage, merge notes, the
    versions the files were tuned with, who and when. Files identical to the latest release's
    make no new release.
    """
    _, store = open_db(db, must_exist=True)
    with session_scope(store) as session:
        device_name = device_in_store(session, device)
    publish_device(
        store,
        device_name,
        reason="tuner publish",
        required=True,
        allow_partial=allow_partial,
        allow_stale=allow_stale,
        out_dtype=out_dtype and out_dtype.value,
        kernel=kernel.value,
    )
