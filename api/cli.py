"""``gpuplan serve``: run the REST API with uvicorn, or make an API key for it; ``gpuplan worker``: run
jobs from a PostgreSQL database's queue without serving HTTP; ``gpuplan keys`` (``api.keys_cli``)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING, Any

from gpuplan.models.base import InputError

if TYPE_CHECKING:
    from gpuplan.api.settings import Settings


def _settings(args: argparse.Namespace, processes: int | None = None) -> Settings:
    """The settings from the environment, ``--database`` and ``processes`` (solver processes); one
    line naming the variable if wrong."""
    from pydantic_settings import SettingsError

    from gpuplan.api.settings import Settings

    overrides: dict[str, Any] = {"database": args.database} if args.database else {}
    if processes is not None:
        overrides["solver_processes"] = processes
    try:
        return Settings(**overrides)
    except SettingsError as exc:
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        raise InputError(f"settings from the environment (GPUPLAN_*): {exc}{cause}") from None


def _shared(settings: Settings, what: str) -> None:
    """An InputError unless the database is PostgreSQL: on a SQLite file (one server) nothing else
    would run the jobs of ``what``."""
    from gpuplan.planner.store.db import database_url, shown

    if database_url(settings.database).startswith("sqlite"):
        raise InputError(
            f"{what} needs a PostgreSQL database shared by servers and workers; on the SQLite file "
            f"{shown(settings.database)} `gpuplan serve` runs the jobs itself"
        )


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the API, or with ``--create-key``/``--create-admin-key`` store a new key and print it."""
    from gpuplan.api.keys import KeyStore, key_hash, new_key, parse_role
    from gpuplan.api.startup import ServerLock, open_store
    from gpuplan.planner.store.db import shown

    settings = _settings(args, 0 if args.no_worker else None)
    role = "admin" if args.create_admin_key else args.create_key
    if role is not None:
        try:
            parse_role(role)
        except ValueError as exc:
            raise InputError(f"--create-key: {exc}") from None
        key = new_key()
        store = open_store(settings.database)
        KeyStore(store.engine).add(key_hash(key), role)
        store.close()
        where = shown(settings.database)
        sys.stdout.write(f"new {role} key (shown once; only its hash is stored in {where}):\n")
        sys.stdout.write(key + "\n")
        return 0
    import uvicorn

    from gpuplan.api.app import create_app
    from gpuplan.api.serving import uvicorn_options

    if settings.solver_processes == 0:
        _shared(settings, "serve --no-worker (GPUPLAN_SOLVER_PROCESSES=0)")
    lock = ServerLock.acquire(settings.database)
    try:
        open_store(settings.database).close()
    except InputError:
        lock.release()
        raise
    logging.getLogger("api").setLevel(logging.INFO)
    uvicorn.run(
        create_app(settings, lock=lock),
        host=args.host,
        port=args.port,
        log_level="info" if args.verbose else "warning",
        **uvicorn_options(settings),
    )
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Run jobs from the queue of a PostgreSQL database, without HTTP, until SIGTERM or SIGINT."""
    import asyncio

    from gpuplan.api.headless import work
    from gpuplan.api.startup import open_store

    if args.processes is not None and args.processes < 1:
        raise InputError(f"--processes: {args.processes} is not a positive number of solver processes")
    settings = _settings(args, args.processes)
    _shared(settings, "gpuplan worker")
    open_store(settings.database).close()
    logging.getLogger("gpuplan").setLevel(logging.INFO)
    asyncio.run(work(settings))
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve``, ``worker`` and ``keys`` (the command line's one import of the API)."""
    from gpuplan.api import keys_cli

    keys_cli.add_parsers(sub)
    p = sub.add_parser("serve", help="run the REST API (uvicorn)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument(
        "--database", help="SQLite file or PostgreSQL URL (default: GPUPLAN_DATABASE or ./gpuplan.db)"
    )
    p.add_argument("--create-admin-key", action="store_true", help="store a new admin key, print it, exit")
    p.add_argument(
        "--create-key",
        metavar="ROLE",
        help="store a new key for ROLE (planner or viewer:<team>), print it and exit",
    )
    p.add_argument(
        "--no-worker",
        action="store_true",
        help="serve HTTP only: servers and `gpuplan worker`s on the same PostgreSQL database run the jobs",
    )
    p.set_defaults(func=cmd_serve)
    w = sub.add_parser("worker", help="run jobs from a PostgreSQL database's queue, without serving HTTP")
    w.add_argument("--database", help="PostgreSQL URL (default: GPUPLAN_DATABASE)")
    w.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="solver processes (default: GPUPLAN_SOLVER_PROCESSES, or one per CPU)",
    )
    w.set_defaults(func=cmd_worker)
