"""Schema of the store: the migration equals the models, open_store creates or refuses."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, UniqueConstraint, inspect, select, text

from db.connection import (
    MIGRATIONS_DIR,
    SchemaError,
    connect,
    current_revision,
    default_db_url,
    head_revision,
    open_store,
    session_scope,
    upgrade,
)
from db.models import Base, Device
from tuner.core import CONFIG_KEYS

# Tables the store must have (the models may add more: the migrations must then create them).
TABLES = {
    "devices",
    "environments",
    "sweeps",
    "tasks",
    "trials",
    "imports",
    "retimes",
    "decisions",
    "comparisons",
    "comparison_points",
    "ceilings",
    "blobs",
    "releases",
    "release_files",
}
# The revision of the newest migration file, `NNNN_<what>.py`: the one a store is upgraded to.
NEWEST = max(
    path.name[:4] for path in (MIGRATIONS_DIR / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")
)


def test_migration_equals_models(engine: Engine) -> None:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
        inspector = inspect(connection)
        assert TABLES <= set(Base.metadata.tables)
        assert set(inspector.get_table_names()) == set(Base.metadata.tables) | {"alembic_version"}
        for table in Base.metadata.sorted_tables:
            reflected = {c["name"]: c["nullable"] for c in inspector.get_columns(table.name)}
            assert reflected == {c.name: c.nullable for c in table.columns}
            uniques = {
                (u["name"], tuple(u["column_names"]))
                for u in inspector.get_unique_constraints(table.name)
            }
            expected = {
                (c.name, tuple(col.name for col in c.columns))
                for c in table.constraints
                if isinstance(c, UniqueConstraint)
            }
            assert uniques == expected
        trial_uniques = inspector.get_unique_constraints("trials")
        assert [tuple(u["column_names"]) for u in trial_uniques] == [("task_id", *CONFIG_KEYS)]
        checks = inspector.get_check_constraints("tasks")
        assert [c["name"] for c in checks] == ["ck_tasks_state"]
        checks = inspector.get_check_constraints("decisions")
        assert [c["name"] for c in checks] == ["ck_decisions_kept"]
        retime_uniques = inspector.get_unique_constraints("retimes")
        assert [tuple(u["column_names"]) for u in retime_uniques] == [("task_id", *CONFIG_KEYS)]
        cascades = {
            table: {
                fk["referred_table"]: (fk["options"] or {}).get("ondelete")
                for fk in inspector.get_foreign_keys(table)
            }
            for table in ("retimes", "decisions", "ceilings")
        }
        assert cascades == {
            "retimes": {"tasks": "CASCADE", "environments": None},
            "decisions": {"tasks": "CASCADE", "environments": None},
            "ceilings": {"environments": None},
        }


def test_open_store_creates_schema_in_new_folder(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "tuner.db"
    engine = open_store(f"sqlite:///{path}")
    try:
        assert path.is_file()
        assert current_revision(engine) == head_revision() == NEWEST
        assert TABLES <= set(inspect(engine).get_table_names())
        with engine.connect() as connection:
            pragmas = {
                name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
            }
        # synchronous 1: NORMAL, no fsync per commit (WAL keeps it consistent)
        assert pragmas == {
            "journal_mode": "wal",
            "busy_timeout": 30000,
            "foreign_keys": 1,
            "synchronous": 1,
        }
    finally:
        engine.dispose()
    open_store(f"sqlite:///{path}").dispose()  # a store at head opens again


def _version(url: str) -> list[str]:
    engine = connect(url)
    try:
        with engine.connect() as connection:
            return list(connection.scalars(text("SELECT version_num FROM alembic_version")))
    finally:
        engine.dispose()


def test_unknown_revision_raises_and_changes_nothing(store_url: str) -> None:
    engine = open_store(store_url)
    with session_scope(engine) as session:
        session.execute(text("UPDATE alembic_version SET version_num = '0000old'"))
        session.add(Device(device_name="NVIDIA_L20"))
    engine.dispose()
    with pytest.raises(SchemaError) as raised:
        open_store(store_url)
    message = str(raised.value)
    assert "\n" not in message
    assert "run `tuner db upgrade`" in message
    assert "0000old" in message and head_revision() in message
    assert _version(store_url) == ["0000old"]
    check = connect(store_url)
    with session_scope(check) as session:
        assert session.scalars(select(Device.device_name)).all() == ["NVIDIA_L20"]
    check.dispose()


def test_unstamped_tables_raise(store_url: str) -> None:
    engine = connect(store_url)
    Base.metadata.create_all(engine)
    engine.dispose()
    with pytest.raises(SchemaError, match=r"revision none, .*run `tuner db upgrade`"):
        open_store(store_url)
    check = connect(store_url)
    assert "alembic_version" not in inspect(check).get_table_names()
    check.dispose()


def test_session_scope_commits_or_rolls_back(engine: Engine) -> None:
    with pytest.raises(RuntimeError), session_scope(engine) as session:
        session.add(Device(device_name="NVIDIA_L20"))
        session.flush()
        raise RuntimeError("boom")
    with session_scope(engine) as session:
        assert session.scalars(select(Device)).all() == []
        session.add(Device(device_name="NVIDIA_H200"))
    with session_scope(engine) as session:
        device = session.scalars(select(Device)).one()
    assert device.device_name == "NVIDIA_H200"
    assert device.created_at.utcoffset() is not None  # read back timezone-aware (UTC)


def test_default_db_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TUNER_DB_URL", raising=False)
    assert default_db_url() == "sqlite:///tuner.db"
    monkeypatch.setenv("TUNER_DB_URL", "sqlite:////tmp/x.db")
    assert default_db_url() == "sqlite:////tmp/x.db"


def test_alembic_with_a_url_up_down_and_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url)
    command.upgrade(config, "head")
    engine = connect(url)
    try:
        assert current_revision(engine) == head_revision()
        command.downgrade(config, "base")
        assert current_revision(engine) is None
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    finally:
        engine.dispose()
    command.upgrade(config, "head", sql=True)
    assert "CREATE TABLE trials" in capsys.readouterr().out


def test_a_store_made_by_the_first_schema_upgrades_and_keeps_its_rows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'first.db'}"
    engine = connect(url)
    upgrade(engine, "0001")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO devices (device_name, created_at) "
                "VALUES ('NVIDIA_L20', '2026-11-30 00:00:00')"
            )
        )
    engine.dispose()
    with pytest.raises(
        SchemaError,
        match=rf"revision 0001, this tuner expects {NEWEST}: run "
        r"`tuner db upgrade`",
    ):
        open_store(url)
    assert _version(url) == ["0001"]  # refusing changed nothing
    engine = connect(url)
    upgrade(engine)
    columns = {column["name"] for column in inspect(engine).get_columns("tasks")}
    assert {"in_flight_config", "in_flight_since"} <= columns
    with engine.connect() as connection:
        assert list(connection.scalars(text("SELECT device_name FROM devices"))) == ["NVIDIA_L20"]
    engine.dispose()
    open_store(url).dispose()
    assert _version(url) == [NEWEST]


def test_a_store_at_0003_with_data_upgrades_to_head_and_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'third.db'}"
    engine = connect(url)
    upgrade(engine, "0003")
    config = "64, 128, 128, 32, 4, 2"
    statements = [
        "INSERT INTO devices (device_id, device_name, created_at) "
        "VALUES (1, 'NVIDIA_L20', '2026-12-01 00:00:00')",
        "INSERT INTO environments VALUES (1, 1, 'NVIDIA L20', '8.9', '580', '12.9', '2.11.0', "
        "'3.6.0', '0.1.0', 'k1')",
        "INSERT INTO sweeps VALUES (1, 'key', 1, 'm', 2, 'grid', 8, 'vllm', 0, '[1]', "
        "'bfloat16', 128, 128, '2026-12-01 00:00:00')",
        "INSERT INTO tasks (task_id, sweep_id, N, K, M, state, attempts) "
        "VALUES (1, 1, 256, 512, 1, 'done', 1)",
        "INSERT INTO trials (trial_id, task_id, environment_id, BLOCK_SIZE_M, BLOCK_SIZE_N, "
        "BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages, is_default, status, latency_us, "
        f"created_at) VALUES (7, 1, 1, {config}, 1, 'ok', 12.5, '2026-12-01 00:00:00')",
        "INSERT INTO imports VALUES (1, 1, 256, 512, 128, 128, 'vllm', 'f.json', 'ab', '{}', "
        "'2026-12-01 00:00:00')",
    ]
    with engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))
    engine.dispose()
    with pytest.raises(SchemaError, match=rf"revision 0003, this tuner expects {NEWEST}"):
        open_store(url)
    engine = connect(url)
    upgrade(engine)
    trial_sql = "SELECT trial_id, task_id, BLOCK_SIZE_M, status, latency_us FROM trials"
    with engine.connect() as connection:
        assert list(connection.execute(text(trial_sql))) == [(7, 1, 64, "ok", 12.5)]
        assert list(connection.scalars(text("SELECT label FROM imports"))) == ["vllm"]
        assert list(connection.scalars(text("SELECT triton FROM environments"))) == ["3.6.0"]
        for table in ("retimes", "decisions", "ceilings"):
            assert connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one() == 0
    upgrade(engine, "head")  # at head already: nothing to do
    engine.dispose()
    assert _version(url) == [NEWEST]
    opened = open_store(url)
    with session_scope(opened) as session:
        session.execute(
            text(
                "INSERT INTO ceilings (environment_id, name, value, created_at) "
                "VALUES (1, 'copy_gbps', 4300.0, '2026-12-02 00:00:00')"
            )
        )
    opened.dispose()
    config_alembic = Config()
    config_alembic.set_main_option("script_location", str(MIGRATIONS_DIR))
    config_alembic.set_main_option("sqlalchemy.url", url)
    command.downgrade(config_alembic, "0003")
    engine = connect(url)
    try:
        tables = set(inspect(engine).get_table_names())
        assert not tables & {"retimes", "decisions", "ceilings"}
        with engine.connect() as connection:
            assert list(connection.execute(text(trial_sql))) == [(7, 1, 64, "ok", 12.5)]
    finally:
        engine.dispose()
    assert _version(url) == ["0003"]
