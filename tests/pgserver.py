"""A private PostgreSQL server in a temporary folder, for fault tests that restart or stop it
(never the shared server the other tests use): initdb, pg_ctl start/stop/restart.

PostgreSQL refuses to run as root, so as root the server runs as the `postgres` user (runuser),
as CI does (.ci/run: Debian's postgresql package). `PrivatePostgres.available()` says whether
the binaries and that user are there; tests skip otherwise.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

_BIN_ROOT = Path("/usr/lib/postgresql")


def _bin_dir() -> Path | None:
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(_BIN_ROOT.glob("*/bin/pg_ctl"), key=lambda p: int(p.parts[-3]))
    return versions[-1].parent if versions else None


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrivatePostgres:
    """One server on 127.0.0.1 at a free port, data in a new temporary folder, trust auth."""

    def __init__(self) -> None:
        bin_dir = _bin_dir()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL binaries (pg_ctl, initdb)")
        self.bin_dir = bin_dir
        self.folder = Path(tempfile.mkdtemp(prefix="tuner-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @staticmethod
    def available() -> bool:
        """Whether initdb/pg_ctl exist and (as root) a `postgres` user to run them."""
        return _bin_dir() is not None and (
            os.geteuid() != 0 or "postgres" in {user.pw_name for user in pwd.getpwall()}
        )

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        return subprocess.run(
            command, capture_output=True, text=True, check=check, cwd="/", timeout=120
        )

    def init(self) -> PrivatePostgres:
        """initdb and start; returns self."""
        if os.geteuid() == 0:
            shutil.chown(self.folder, "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8")
        self.start()
        return self

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.folder / "server.log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        """Fast shutdown: open sessions are ended (psycopg sees AdminShutdown)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop", check=False)

    def restart(self) -> None:
        """`pg_ctl restart -m fast`, as the issue did."""
        self.stop()
        self.start()

    def destroy(self) -> None:
        """Stop the server and remove its folder."""
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
