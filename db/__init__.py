"""The store: SQLAlchemy 2 tables, engine factory, repository functions and Alembic migrations."""
