"""``gpuplan serve``: run the REST API with uvicorn, or make an API key for it."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from gpuplan.models.base import InputError

if TYPE_CHECKING:
    from gpuplan.api.settings import Settings


def _settings(args: argparse.Namespace) -> Settings:
    """The settings from the environment and ``--database``; one line naming the variable if wrong."""
    from pydantic_settings import SettingsError

    from gpuplan.api.settings import Settings

    overrides = {"database": args.database} if args.database else {}
    try:
        return Settings(**overrides)
    except SettingsError as exc:
        cause = f": {exc.__cause__}" if exc.__cause__ is not None else ""
        raise InputError(f"settings from the environment (GPUPLAN_*): {exc}{cause}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve the API, or with ``--create-key``/``--create-admin-key`` store a new key and print it."""
    from gpuplan.api.auth import key_hash, new_key, parse_role
    from gpuplan.api.startup import ServerLock, open_store
    from gpuplan.planner.db import shown

    settings = _settings(args)
    role = "admin" if args.create_admin_key else args.create_key
    if role is not None:
        try:
            parse_role(role)
        except ValueError as exc:
            raise InputError(f"--create-key: {exc}") from None
        key = new_key()
        store = open_store(settings.database)
        store.add_key(key_hash(key), role)
        store.close()
        where = shown(settings.database)
        sys.stdout.write(f"new {role} key (shown once; only its hash is stored in {where}):\n")
        sys.stdout.write(key + "\n")
        return 0
    import uvicorn

    from gpuplan.api.app import create_app

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
        timeout_graceful_shutdown=5,
    )
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``serve`` (the command line finds this function by name, so the planner never imports
    the API)."""
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
    p.set_defaults(func=cmd_serve)
