"""The store itself: the migrations equal the models, open_store creates a store or refuses one
at another revision (naming the upgrade command), an older store upgrades with its rows and
refuses a downgrade that would lose some."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, select, text

from db import repo
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

TABLES = {"devices", "environments", "sweeps", "tasks", "trials", "imports", "retimes"}
TABLES |= {"decisions", "comparisons", "comparison_points", "blobs", "releases"}
TABLES |= {"release_files", "ab_tests", "ab_runs"}  # every table of the schema
# The revision of the newest migration file, `NNNN_<what>.py`: the one a store is upgraded to.
NEWEST = max(path.name[:4] for path in (MIGRATIONS_DIR / "versions").glob("[0-9]" * 4 + "_*.py"))


def test_migration_equals_models(engine: Engine) -> None:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
        inspector = inspect(connection)  # beyond what compare_metadata sees: checks, cascades
        assert set(inspector.get_table_names()) == TABLES | {"alembic_version"}
        for table in ("trials", "retimes"):
            uniques = inspector.get_unique_constraints(table)
            assert [tuple(u["column_names"]) for u in uniques] == [("task_id", *CONFIG_KEYS)]
        assert [c["name"] for c in inspector.get_check_constraints("tasks")] == ["ck_tasks_state"]
        checks = inspector.get_check_constraints("decisions")
        assert [c["name"] for c in checks] == ["ck_decisions_kept"]
        cascades = [
            {
                fk["referred_table"]: fk["options"].get("ondelete")
                for fk in inspector.get_foreign_keys(t)
            }
            for t in ("retimes", "decisions")
        ]
    task_cascade = {"tasks": "CASCADE", "environments": None}
    assert cascades == [task_cascade, task_cascade]


def test_open_store_creates_a_wal_store_in_a_new_folder(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "tuner.db"
    engine = open_store(f"sqlite:///{path}")
    try:
        assert current_revision(engine) == head_revision() == NEWEST
        with engine.connect() as connection:
            pragmas = [
                connection.exec_driver_sql(f"PRAGMA {name}").scalar()
                for name in ("journal_mode", "busy_timeout", "foreign_keys", "synchronous")
            ]
        assert pragmas == ["wal", 30000, 1, 1]  # synchronous NORMAL: no fsync per commit
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


def test_a_store_at_another_revision_or_unstamped_is_refused_unchanged(store_url: str) -> None:
    engine = open_store(store_url)
    with session_scope(engine) as session:
        session.execute(text("UPDATE alembic_version SET version_num = '0000old'"))
        session.add(Device(device_name="NVIDIA_L20"))
    engine.dispose()
    with pytest.raises(SchemaError) as raised:
        open_store(store_url)
    message = str(raised.value)
    assert "\n" not in message and "run `tuner db upgrade`" in message
    assert "0000old" in message and head_revision() in message
    assert _version(store_url) == ["0000old"]
    check = connect(store_url)
    with session_scope(check) as session:
        assert session.scalars(select(Device.device_name)).all() == ["NVIDIA_L20"]
        session.execute(text("DROP TABLE alembic_version"))
    check.dispose()
    with pytest.raises(SchemaError, match=r"revision none, .*run `tuner db upgrade`"):
        open_store(store_url)


def test_session_scope_commits_and_its_objects_stay_readable(engine: Engine, monkeypatch) -> None:
    with session_scope(engine) as session:
        session.add(Device(device_name="NVIDIA_H200"))
    with session_scope(engine) as session:
        device = session.scalars(select(Device)).one()
    assert device.device_name == "NVIDIA_H200"
    assert device.created_at.utcoffset() is not None  # read back timezone-aware (UTC)
    monkeypatch.delenv("TUNER_DB_URL", raising=False)
    assert default_db_url() == "sqlite:///tuner.db"
    monkeypatch.setenv("TUNER_DB_URL", "sqlite:////tmp/x.db")
    assert default_db_url() == "sqlite:////tmp/x.db"


def _alembic(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url)
    return config


def test_alembic_up_and_down_with_a_url(store_url: str) -> None:
    command.upgrade(_alembic(store_url), "head")  # on PostgreSQL too: SQL must quote N and K
    engine = connect(store_url)
    try:
        assert current_revision(engine) == head_revision()
        command.downgrade(_alembic(store_url), "base")
        assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    finally:
        engine.dispose()


AT_0001 = [
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
    "created_at) VALUES (7, 1, 1, 64, 128, 128, 32, 4, 2, 1, 'ok', 12.5, '2026-12-01 00:00:00')",
]
AT_0003 = (
    "INSERT INTO imports VALUES (1, 1, 256, 512, 128, 128, 'vllm', 'f.json', 'ab', "
    "'{\"1\": {\"BLOCK_SIZE_M\": 16}}', '2026-12-01 00:00:00')"
)
TRIALS = "SELECT trial_id, task_id, BLOCK_SIZE_M, status, latency_us FROM trials"


def _execute(engine: Engine, *statements: str) -> None:
    with engine.begin() as connection:
        for statement in statements:
            connection.execute(text(statement))


def _refused(url: str, engine: Engine, revision: str, message: str, *rows: str) -> None:
    """A downgrade to `revision` with `rows` stored is refused with `message`; rows removed."""
    _execute(engine, *rows)
    with pytest.raises(RuntimeError, match=message):
        command.downgrade(_alembic(url), revision)
    _execute(
        engine, "DELETE FROM imports WHERE import_id > 1", "DELETE FROM tasks WHERE task_id > 1"
    )


def test_an_older_store_upgrades_with_its_rows_and_never_downgrades_losing_some(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = connect(url)
    upgrade(engine, "0001")
    _execute(engine, *AT_0001)
    upgrade(engine, "0003")  # in-flight columns, imports
    _execute(engine, AT_0003)
    upgrade(engine)  # decisions, families, comparisons, launch check, releases, kernel source
    with engine.connect() as connection:
        assert list(connection.execute(text(TRIALS))) == [(7, 1, 64, "ok", 12.5)]
        tasks = connection.execute(text("SELECT task_id, family, shape_params FROM tasks"))
        assert list(tasks) == [(1, "dense", "")]
    with session_scope(engine) as session:
        (item,) = repo.list_imports(session)
        (winner,) = repo.winners(session, device_name="NVIDIA_L20")
        (env,) = repo.device_environments(session, device_name="NVIDIA_L20")
    got = (item.label, item.family, item.shape_params, item.checked_arch)
    assert got == ("vllm", "dense", "", None)
    assert (item.configs, item.cannot_launch) == ({1: {"BLOCK_SIZE_M": 16}}, {})
    assert (winner.family, winner.N, winner.M, winner.latency_us) == ("dense", 256, 1, 12.5)
    assert (env.triton, env.kernel_source, env.vllm, env.trials) == ("3.6.0", "builtin", "", 1)
    assert _version(url) == [NEWEST]
    moe_import = (
        "INSERT INTO imports (import_id, device_id, N, K, block_n, block_k, label, file_name, "
        "sha256, configs, created_at, cannot_launch, family, shape_params) VALUES (2, 1, 256, "
        "512, 128, 128, 'vllm', 'e.json', 'cd', '{}', '2026-12-01 00:00:00', '{}', 'moe', 'PARAMS')"
    )
    _refused(
        url, engine, "0010", r"1 import\(s\) with shape params", moe_import.replace("PARAMS", "E=8")
    )
    toy_import = (
        moe_import.replace("'moe'", "'toy'").replace("PARAMS", "").replace("256, 512", "64, 32")
    )
    _refused(url, engine, "0009", r"1 import\(s\) of another kernel family", toy_import)
    moe_task = (
        "INSERT INTO tasks (task_id, sweep_id, family, shape_params, N, K, M, state, attempts) "
        "VALUES (2, 1, 'moe', 'E=8', 512, 256, 32, 'pending', 0)"
    )
    _refused(url, engine, "0004", r"1 task\(s\) of another kernel family", moe_task)
    command.downgrade(_alembic(url), "0001")
    with engine.connect() as connection:
        assert list(connection.execute(text(TRIALS))) == [(7, 1, 64, "ok", 12.5)]
        columns = [row[1] for row in connection.execute(text("PRAGMA table_info(tasks)"))]
    assert "family" not in columns and "in_flight_config" not in columns
    tables = set(inspect(engine).get_table_names())
    assert not {"imports", "retimes", "decisions", "ceilings"} & tables
    command.downgrade(_alembic(url), "base")
    assert set(inspect(engine).get_table_names()) == {"alembic_version"}
    engine.dispose()


def _open(url: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        open_store(url).dispose()
        out.put("ok")
    except Exception as exc:  # reported to the parent, which fails the test
        out.put(repr(exc))


def run_two(target: Any, *args: Any) -> list[Any]:
    """Run target(*args[i], barrier, queue) in two forked processes at once; what they put."""
    context = multiprocessing.get_context("fork")
    barrier, out = context.Barrier(2), context.Queue()
    processes = [context.Process(target=target, args=(*args[i], barrier, out)) for i in range(2)]
    for process in processes:
        process.start()
    results = [out.get(timeout=60) for _ in processes]
    for process in processes:
        process.join(timeout=60)
        assert process.exitcode == 0
    return results


def test_two_processes_create_one_schema(store_url: str) -> None:
    assert run_two(_open, (store_url,), (store_url,)) == ["ok", "ok"]
