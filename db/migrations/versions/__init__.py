"""Alembic revision scripts of the store, one file per schema revision."""
