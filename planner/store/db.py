"""Database engines for the store of plans and jobs (``planner.store``): a SQLite file or a PostgreSQL
URL, and the one transaction that holds the write lock from its start (for schema upgrades)."""

from __future__ import annotations

import itertools
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from gpuplan.models.base import InputError

DEFAULT_SQLITE = "gpuplan.db"
TEST_POSTGRES_ENV = "GPUPLAN_TEST_POSTGRES_URL"
#: The PostgreSQL advisory lock that :func:`locked` takes (any fixed number; this is "gpup" in ASCII).
ADVISORY_LOCK = 0x67707570
#: The PostgreSQL advisory lock under which a job is admitted (counted against the active-job limit and
#: inserted): apart from :data:`ADVISORY_LOCK`, so that admissions do not wait for a schema upgrade's.
ADMISSION_LOCK = ADVISORY_LOCK + 1
#: Tries, and the pause between them, at switching a SQLite file to WAL while other connections open it.
WAL_ATTEMPTS = 200
WAL_RETRY_S = 0.05


def database_url(target: str | None) -> str:
    """An SQLAlchemy URL from a URL, a file path, or ``None`` (``gpuplan.db`` in the working directory)."""
    if target is None or target == "":
        target = DEFAULT_SQLITE
    if "://" in target:
        try:
            url = make_url(target)
        except ArgumentError as exc:
            raise InputError(f"database URL '{target}': {exc}") from None
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise InputError(f"database URL '{target}': only sqlite and postgresql are supported")
        if url.drivername in ("postgresql", "postgresql+psycopg2"):
            url = url.set(drivername="postgresql+psycopg")
        return url.render_as_string(hide_password=False)
    return f"sqlite:///{Path(target).expanduser().resolve()}"


def shown(target: str) -> str:
    """``target`` as it may be printed: a URL's password masked (``postgresql://user:***@host/db``)."""
    if "://" not in target:
        return target
    try:
        return make_url(target).render_as_string(hide_password=True)
    except ArgumentError:
        return target.split("://", 1)[0] + "://***"


def driver_reason(exc: SQLAlchemyError) -> str:
    """The first line of the driver's message (without SQLAlchemy's statement and background link)."""
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    """WAL journal so that a reader never blocks the writer and a killed writer leaves the file intact."""
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=10000")
    # Switching a new file to WAL needs it to itself, and SQLite answers "locked" at once, without
    # waiting, while other connections opening it together hold it: retry for up to the busy timeout.
    for attempt in itertools.count(1):
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt >= WAL_ATTEMPTS:
                raise
            time.sleep(WAL_RETRY_S)
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.close()


def make_engine(target: str | None) -> Engine:
    """An engine for ``target`` (see :func:`database_url`); SQLite files get WAL and a busy timeout."""
    url = database_url(target)
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.parent.is_dir():
            raise InputError(f"database '{path}': directory {path.parent} does not exist")
        engine = create_engine(url, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


@contextmanager
def locked(engine: Engine, key: int = ADVISORY_LOCK) -> Iterator[Connection]:
    """A transaction holding the database's write lock from its first statement, committed when the
    block ends: two processes doing the same one-off work take turns, and the second sees what the
    first did. On SQLite ``BEGIN IMMEDIATE`` (the driver would otherwise commit each DDL statement at
    once, so a killed schema upgrade would leave half a schema); on PostgreSQL a transaction-scoped
    advisory lock ``key`` (PostgreSQL's DDL is transactional anyway)."""
    with engine.connect() as conn:
        if conn.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
        yield conn
        conn.commit()


def postgres_test_url() -> str | None:
    """The PostgreSQL URL ``.ci/run`` started for the store tests, if any."""
    return os.environ.get(TEST_POSTGRES_ENV) or None
