"""Database engines for the plan history (``planner.store``) and the API's store on the same database
(``api.store``): a SQLite file or a PostgreSQL URL, with time limits on every wait for the database when
asked (:func:`make_engine`), and the one transaction that holds the write lock from its start (for
schema upgrades, and the API's admissions under a lock of their own)."""

from __future__ import annotations

import itertools
import math
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import partial
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
#: Tries, and the pause between them, at switching a SQLite file to WAL while other connections open it.
WAL_ATTEMPTS = 200
WAL_RETRY_S = 0.05
#: How long a SQLite connection waits for another's write lock, without a time limit of the caller's.
SQLITE_BUSY_S = 10.0
#: Seconds the client waits for a PostgreSQL answer beyond the time limit before it cuts the connection:
#: a live server cancels the statement itself at the limit (``statement_timeout``) and says so first.
CUT_MARGIN_S = 1.0
#: Milliseconds per second, for the databases' timeouts.
MS_PER_S = 1000


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


def _sqlite_pragmas(dbapi_conn: Any, _record: Any, *, busy_s: float = SQLITE_BUSY_S) -> None:
    """WAL journal so that a reader never blocks the writer and a killed writer leaves the file intact;
    a writer waits ``busy_s`` for another's lock."""
    cur = dbapi_conn.cursor()
    cur.execute(f"PRAGMA busy_timeout={_milliseconds(busy_s)}")
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


class _Watchdog:
    """One thread that cuts the socket of a PostgreSQL connection still waiting for its server past a
    deadline. A frozen server (stopped, or a network path that drops everything) leaves the kernel
    acknowledging what the client sends, so neither ``statement_timeout`` (the server's own) nor TCP
    time-outs end the wait: shutting the socket down does, and the driver then raises as for a lost
    connection (which SQLAlchemy invalidates)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        #: Connections being waited on, by id: their deadline and the connection.
        self._armed: dict[int, tuple[float, Any]] = {}
        #: Ids of connections cut since they were armed.
        self._cut: set[int] = set()
        self._thread: threading.Thread | None = None
        #: The deadline the thread sleeps until (None: until woken).
        self._until: float | None = None

    def arm(self, conn: Any, timeout_s: float) -> None:
        """Cut ``conn`` unless :meth:`disarm` comes within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._armed[id(conn)] = (deadline, conn)
            self._cut.discard(id(conn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpuplan-db-watchdog", daemon=True)
                self._thread.start()
            elif self._until is None or deadline < self._until:
                self._cond.notify()

    def disarm(self, conn: Any) -> bool:
        """Stop watching ``conn``; whether it was cut meanwhile."""
        with self._cond:
            self._armed.pop(id(conn), None)
            if id(conn) in self._cut:
                self._cut.discard(id(conn))
                return True
            return False

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                for key, (deadline, conn) in list(self._armed.items()):
                    if deadline <= now:
                        del self._armed[key]
                        self._cut.add(key)
                        _shut(conn)
                self._until = min((d for d, _ in self._armed.values()), default=None)
                self._cond.wait(None if self._until is None else self._until - now)


def _shut(conn: Any) -> None:
    """Shut down the socket of the psycopg connection ``conn`` (both ways): a blocked wait on it ends."""
    try:
        fd = os.dup(conn.pgconn.socket)
    except Exception:  # closed meanwhile: nothing to cut
        return
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return
    with sock, suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


_WATCHDOG = _Watchdog()


class _Breaker:
    """Whether one engine's PostgreSQL is answering. Once a wait for it was cut or a connection timed
    out, one thread at a time waits for it again (the probe: a ping, then a new connection); every other
    call fails at once, so that during an outage requests are answered 503 within the time limit rather
    than queueing for the worker threads behind calls that each wait it out. The first answer closes
    it again."""

    def __init__(self, probe_s: float) -> None:
        self._lock = threading.Lock()
        #: How long a probe may take before another caller may probe instead.
        self.probe_s = probe_s
        self.open = False
        #: The thread probing, and until when its probe may run.
        self._prober: int | None = None
        self._probe_until = 0.0

    def admit(self) -> bool:
        """Whether the caller may wait for the database now (as the probe, if the breaker is open)."""
        with self._lock:
            if not self.open:
                return True
            me, now = threading.get_ident(), time.monotonic()
            if self._prober not in (None, me) and now < self._probe_until:
                return False
            self._prober, self._probe_until = me, now + self.probe_s
            return True

    def tripped(self) -> None:
        """The caller's wait was cut, or its connection timed out: open; its probe, if it was probing,
        is over (the next caller probes; a pool that reconnects after a cut ping makes that the same
        caller, unless another came first)."""
        with self._lock:
            self.open = True
            if self._prober == threading.get_ident():
                self._prober = None

    def ended(self) -> None:
        """The caller's call failed otherwise (refused, reset): its probe, if it was probing, is over."""
        with self._lock:
            if self._prober == threading.get_ident():
                self._prober = None

    def answered(self) -> None:
        """The database answered: close."""
        if self.open:
            with self._lock:
                self.open = False
                self._prober = None


def _watched_connection(limit_s: float, breaker: _Breaker) -> type[Any]:
    """A psycopg connection class whose every wait for the server (a statement, its results, a commit,
    a rollback, a ping) is cut after ``limit_s`` seconds; it then raises ``OperationalError`` "no answer
    from the database within ..." and is closed. While ``breaker`` is open and another caller probes,
    a wait fails at once the same way."""
    import psycopg

    class Watched(psycopg.Connection[Any]):
        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            if not breaker.admit():
                self.pgconn.finish()  # closed, so that SQLAlchemy drops it rather than reset it
                raise psycopg.OperationalError(_not_answering(limit_s))
            _WATCHDOG.arm(self, limit_s)
            try:
                answer = super().wait(gen, *args, **kwargs)
            except psycopg.Error as exc:
                if not _WATCHDOG.disarm(self):
                    breaker.ended()
                    raise
                breaker.tripped()
                self.pgconn.finish()
                raise psycopg.OperationalError(f"no answer from the database within {limit_s:g} s") from exc
            finally:
                _WATCHDOG.disarm(self)
            breaker.answered()
            return answer

    return Watched


def _not_answering(limit_s: float) -> str:
    return f"no answer from the database within {limit_s:g} s (not asked again until it answers)"


def make_engine(target: str | None, timeout_s: float | None = None) -> Engine:
    """An engine for ``target`` (see :func:`database_url`); SQLite files get WAL and a busy timeout.

    With ``timeout_s`` no wait for the database lasts much longer: SQLite waits that long for a write
    lock; PostgreSQL that long to connect (``connect_timeout``, at least 2 s) and for a statement
    (``statement_timeout``, the server's), and a server that does not answer at all is cut off by the
    client :data:`CUT_MARGIN_S` later; a free connection of the pool is waited for that long too. Each
    raises an ``OperationalError`` (a ``TimeoutError`` of the pool), which the API answers as an
    outage. After a cut or a connection timeout, one call at a time waits for PostgreSQL again and the
    others fail at once, until it answers (see :class:`_Breaker`). Without ``timeout_s`` (the command
    line, schema upgrades) waits are as long as they take."""
    url = database_url(target)
    pool: dict[str, Any] = {} if timeout_s is None else {"pool_timeout": timeout_s}
    if url.startswith("sqlite"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.parent.is_dir():
            raise InputError(f"database '{path}': directory {path.parent} does not exist")
        busy_s = SQLITE_BUSY_S if timeout_s is None else timeout_s
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": busy_s}, **pool)
        event.listen(engine, "connect", partial(_sqlite_pragmas, busy_s=busy_s))
        return engine
    if timeout_s is None:
        return create_engine(url, pool_pre_ping=True)
    connect_s = max(2, math.ceil(timeout_s))
    # Options of the URL (``?options=-c ...``) are kept: connect_args would replace them.
    given = make_url(url).query.get("options", ())
    options = [given] if isinstance(given, str) else list(given)
    options.append(f"-c statement_timeout={_milliseconds(timeout_s)}")
    connect_args = {"connect_timeout": connect_s, "options": " ".join(options)}
    engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args, **pool)
    limit_s = timeout_s + CUT_MARGIN_S
    breaker = _Breaker(limit_s + connect_s + CUT_MARGIN_S)  # a ping cut, then a connection timing out
    watched = _watched_connection(limit_s, breaker)

    def connect(_dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        import psycopg

        if not breaker.admit():
            raise psycopg.OperationalError(_not_answering(limit_s))
        start = time.monotonic()
        try:
            conn = watched.connect(*cargs, **cparams)
        except psycopg.OperationalError:
            if time.monotonic() - start >= 0.9 * connect_s:  # timed out, rather than refused or denied
                breaker.tripped()
            else:
                breaker.ended()
            raise
        breaker.answered()
        return conn

    event.listen(engine, "do_connect", connect)
    return engine


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


def _milliseconds(seconds: float) -> int:
    """A timeout in whole milliseconds, at least one (SQLite's ``busy_timeout``, PostgreSQL's
    ``statement_timeout``)."""
    return max(1, round(seconds * MS_PER_S))
