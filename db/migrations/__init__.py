"""Alembic migrations of the store; run them with `tuner db upgrade` (db.connection.upgrade)."""
