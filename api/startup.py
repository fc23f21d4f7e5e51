"""Start-up checks of ``gpuplan serve`` and ``gpuplan worker``: one server per SQLite file, a database
that opens and passes an integrity check, and database names shown without their password.

A SQLite file has one server: a second would mark the first one's running jobs ``interrupted`` at its
start, so a server holds an exclusive ``flock`` on ``<file>.lock`` next to the file for its whole life
(released by the operating system when the server dies, however it dies). On PostgreSQL any number of
servers and workers share the database and its job queue (``api.queue``): no lock is taken.
"""

from __future__ import annotations

import fcntl
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sqlalchemy.exc import SQLAlchemyError

from gpuplan.api.store import Store
from gpuplan.models.base import InputError
from gpuplan.planner.store.db import database_url, driver_reason, shown

#: What a server writes in its lock file.
_OWNER_PREFIX = "gpuplan serve: "


def _owner() -> str:
    return f"pid {os.getpid()}, host {socket.gethostname()}"


def _in_use(target: str, holder: str) -> InputError:
    return InputError(f"database {shown(target)} is in use by another gpuplan server ({holder})")


@dataclass
class ServerLock:
    """The lock a server holds on its database (see the module's text); ``release`` when it stops."""

    file: IO[str] | None = None

    @classmethod
    def acquire(cls, target: str) -> ServerLock:
        """Take the lock of a SQLite file ``target`` (nothing to take on PostgreSQL), or an
        ``InputError`` naming the server that holds it."""
        url = database_url(target)
        if url.startswith("sqlite:///"):
            return cls._acquire_file(target, Path(url.removeprefix("sqlite:///") + ".lock"))
        return cls()

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

    def release(self) -> None:
        """Let another server start on the database."""
        if self.file is not None:
            self.file.close()
            self.file = None


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
