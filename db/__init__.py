"""The store: SQLAlchemy 2 tables (`models`), engine and session factory (`engine`), repository
functions (`repo` re-exports them from one module per table group) and Alembic migrations.
Imports nothing from tuner or api."""
