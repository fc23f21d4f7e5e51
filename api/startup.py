"""Start-up checks of ``gpuplan serve``: one server per database, a database that opens and passes an
integrity check, and database names shown without their password.

A second server on the same database would mark the first one's running jobs ``interrupted`` at its
start, so a server holds a lock on its database for its whole life: an exclusive ``flock`` on
``<file>.lock`` next to a SQLite file, a session advisory lock on a connection of its own on PostgreSQL.
Both are released by the operating system or the database when the server dies, however it dies.
"""

from __future__ import annotations

import fcntl
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from gpuplan.api.store import Store
from gpuplan.models.base import InputError
from gpuplan.planner.db import ADVISORY_LOCK, database_url, driver_reason, shown

#: The PostgreSQL session advisory lock of a running server (the schema upgrade takes ``ADVISORY_LOCK``).
SERVER_LOCK = ADVISORY_LOCK + 1
#: What a server writes in its lock (the lock file, or its connection's ``application_name``).
_OWNER_PREFIX = "gpuplan serve: "


def _owner() -> str:
    return f"pid {os.getpid()}, host {socket.gethostname()}"


def _in_use(target: str, holder: str) -> InputError:
    return InputError(f"database {shown(target)} is in use by another gpuplan server ({holder})")


@dataclass
class ServerLock:
    """The lock a server holds on its database (see the module's text); ``release`` when it stops."""

    file: IO[str] | None = None
    conn: Connection | None = None

    @classmethod
    def acquire(cls, target: str) -> ServerLock:
        """Take the lock of ``target``, or an ``InputError`` naming the server that holds it."""
        url = database_url(target)
        if url.startswith("sqlite:///"):
            return cls._acquire_file(target, Path(url.removeprefix("sqlite:///") + ".lock"))
        return cls._acquire_advisory(target, url)

    @classmethod
    def _acquire_file(cls, target: str, path: Path) -> ServerLock:
        try:
            file = path.open("a+")
        except OSError as exc:
            raise InputError(f"database {shown(target)}: cannot open its lock file {path}: {exc}") from None
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.seek(0)
            holder = file.read().strip().removeprefix(_OWNER_PREFIX) or "pid unknown"
            file.close()
            raise _in_use(target, holder) from None
        file.seek(0)
        file.truncate()
        file.write(_OWNER_PREFIX + _owner() + "\n")
        file.flush()
        return cls(file=file)

    @classmethod
    def _acquire_advisory(cls, target: str, url: str) -> ServerLock:
        engine = create_engine(url, poolclass=NullPool)
        try:
            conn = engine.connect()
            conn.execute(
                text("SELECT set_config('application_name', :name, false)"),
                {"name": (_OWNER_PREFIX + _owner())[:63]},
            )
            got = conn.execute(text("SELECT pg_try_advisory_lock(:key)"), {"key": SERVER_LOCK}).scalar_one()
            holder = None
            if not got:
                holder = conn.execute(
                    text(
                        "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                        " WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = :key"
                        " AND l.objsubid = 1"
                    ),
                    {"key": SERVER_LOCK},
                ).scalar_one_or_none()
            conn.commit()
        except SQLAlchemyError as exc:
            raise InputError(f"database {shown(target)}: {driver_reason(exc)}") from None
        if not got:
            conn.close()
            raise _in_use(target, str(holder or "pid unknown").removeprefix(_OWNER_PREFIX))
        return cls(conn=conn)

    def release(self) -> None:
        """Let another server start on the database."""
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None


def open_store(target: str) -> Store:
    """The store at ``target``, brought to the current schema and checked for damage; an ``InputError``
    of one line (the password masked) when it cannot be opened or is damaged."""
    try:
        store = Store.open(target)
    except SQLAlchemyError as exc:
        raise InputError(f"database {shown(target)}: {driver_reason(exc)}") from None
    try:
        problem = store.integrity_problem()
    except SQLAlchemyError as exc:
        problem = driver_reason(exc)
    if problem is not None:
        store.close()
        raise InputError(f"database {shown(target)} is damaged ({problem}); restore it from a backup")
    return store
