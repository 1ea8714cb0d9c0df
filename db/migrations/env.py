"""Alembic environment of the store: a connection from `db.connection.upgrade`, or a URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from db.connection import connect, default_db_url
from db.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or default_db_url()


def _migrate(connection: Connection) -> None:
    # Batch mode: SQLite cannot ALTER most things, so Alembic copies the table instead.
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Write the migration SQL for the configured URL instead of running it."""
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on the connection passed in, or on a new store connection for the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _migrate(connection)
        return
    store = connect(_url())
    try:
        with store.begin() as new_connection:
            _migrate(new_connection)
    finally:
        store.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
