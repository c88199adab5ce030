"""A real PostgreSQL server in a temporary directory, for tests and benchmarks of the shared store.

Debian's ``postgresql`` package (``/usr/lib/postgresql/<version>/bin``): ``initdb`` a cluster in a temp dir,
``pg_ctl start`` it on a Unix socket in that dir (no TCP: ``listen_addresses=''``), hand out one fresh
database per test (:meth:`PostgresServer.database`), and stop and delete it all on exit. PostgreSQL refuses
to run as root, so as root the server runs as the ``postgres`` user the package creates (``runuser``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from types import TracebackType
from typing import Self


def binaries() -> Path | None:
    """The directory of ``initdb`` / ``pg_ctl`` (newest version first), or None when PostgreSQL's server is
    not installed (``apt-get install postgresql``)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).resolve().parent
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name), reverse=True)
    return next((Path(d) for d in dirs if (Path(d) / "initdb").exists()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """``with PostgresServer() as pg: url = pg.database()`` — a throwaway server and a new database on it."""

    def __init__(self, user: str = "greval") -> None:
        bindir = binaries()
        if bindir is None:
            raise RuntimeError("PostgreSQL's server binaries are not installed (apt-get install postgresql)")
        self.bindir = bindir
        self.user = user
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="greval-pg-"))
        self.data = self.root / "data"
        self._as: list[str] = []
        if os.geteuid() == 0:
            self._as = ["runuser", "-u", "postgres", "--"]
            os.chmod(self.root, 0o777)

    def _run(self, *args: str) -> None:
        proc = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")

    def start(self) -> Self:
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", self.user, "-E", "UTF8",
            "--locale=C",
        )  # fmt: skip
        self.up()
        return self

    def up(self) -> None:
        """Start the server on its data directory (again, after :meth:`down`)."""
        opts = f"-k {self.root} -p {self.port} -c listen_addresses='' -c fsync=off -c max_connections=200"
        self._run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-w", "-o", opts, "start"
        )

    def down(self) -> None:
        """Stop the server and keep its data: an outage (open connections are cut, new ones refused) until
        :meth:`up`."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def url(self, dbname: str = "postgres") -> str:
        """A libpq URL of a database on this server (over its Unix socket)."""
        return f"postgresql://{self.user}@/{dbname}?host={self.root}&port={self.port}"

    def database(self, name: str | None = None) -> str:
        """Create a new empty database; its URL."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
