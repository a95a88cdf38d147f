"""Where the SDK scenarios' kernels keep their data.

`KEEL_TEST_BACKEND` picks the backend: unset or `sqlite` keeps the kernel's default (a SQLite
file in its data directory); `postgres` gives every kernel a fresh database `keel_sdk_<uuid>`,
created with `psql` on the server `KEEL_TEST_POSTGRES_URL` names (its admin database), passed
as `--db-url`, kept across restarts of that kernel and dropped when the kernel is stopped.
`cluster` does the same and runs each scenario kernel as three `--cluster` kernels on that
database (harness.py): every use of its URL names the next of the three, so agents, runners
and clients are spread over them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from urllib.parse import urlsplit, urlunsplit

BACKEND_ENV = "KEEL_TEST_BACKEND"
POSTGRES_ENV = "KEEL_TEST_POSTGRES_URL"


def backend() -> str:
    value = os.environ.get(BACKEND_ENV, "") or "sqlite"
    if value not in ("sqlite", "postgres", "postgresql", "cluster"):
        raise RuntimeError(f"{BACKEND_ENV}={value!r}: expected sqlite, postgres or cluster")
    if value == "cluster":
        return "cluster"
    return "postgres" if value.startswith("postgres") else "sqlite"


# Kernels of one scenario kernel in the cluster mode.
CLUSTER_SIZE = 3


def _psql(admin_url: str, sql: str) -> None:
    psql = shutil.which("psql")
    if psql is None:
        raise RuntimeError(f"{BACKEND_ENV}=postgres needs the psql client on PATH")
    subprocess.run(
        [psql, admin_url, "-v", "ON_ERROR_STOP=1", "-Atqc", sql],
        check=True,
        capture_output=True,
        timeout=30,
    )


class Database:
    """A fresh PostgreSQL database; `drop()` removes it (terminating leftover sessions)."""

    def __init__(self, admin_url: str):
        self.admin_url = admin_url
        self.name = f"keel_sdk_{uuid.uuid4().hex}"
        _psql(admin_url, f"CREATE DATABASE {self.name}")
        parts = urlsplit(admin_url)
        self.url = urlunsplit(parts._replace(path=f"/{self.name}"))
        self.dropped = False

    def drop(self) -> None:
        if not self.dropped:
            self.dropped = True
            _psql(self.admin_url, f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")


def new_database() -> Database | None:
    """A fresh database when the backend is PostgreSQL, else None (the SQLite default)."""
    if backend() == "sqlite":
        return None
    admin_url = os.environ.get(POSTGRES_ENV, "")
    if not admin_url:
        raise RuntimeError(f"{BACKEND_ENV}=postgres needs {POSTGRES_ENV} (an admin URL)")
    return Database(admin_url)
