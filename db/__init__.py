"""The store: SQLAlchemy 2 tables (`models`), connecting, migrating and store faults
(`connection`), repository functions (one module per table group) and Alembic migrations. `repo` is
the one module tuner and api import: it re-exports what they need of the others.
Imports nothing from tuner or api."""
