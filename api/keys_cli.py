"""``gpuplan keys create|list|revoke``: the API keys stored in the database, managed without the server.

A running server refuses a revoked or expired key within a second (it reads stored keys again after
``KEY_TTL_S``), so no restart is needed.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from gpuplan.models.base import InputError

if TYPE_CHECKING:
    from gpuplan.api.store import Store

#: Exit code of a command that did what it was asked.
EXIT_OK = 0

#: Where ``gpuplan serve`` finds its database when ``--database`` is not given (its settings' variable).
DATABASE_ENV = "GPUPLAN_DATABASE"


def _with_store(args: argparse.Namespace, run: Callable[[Store], int]) -> int:
    """Open the store named by ``--database`` and run ``run`` on it; a database error is one line."""
    from sqlalchemy.exc import SQLAlchemyError

    from gpuplan.api.store import Store
    from gpuplan.planner.store.db import driver_reason

    target = args.database or os.environ.get(DATABASE_ENV) or None
    try:
        store = Store.open(target)
        try:
            return run(store)
        finally:
            store.close()
    except SQLAlchemyError as exc:
        raise InputError(f"--database: {driver_reason(exc)}") from None


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def cmd_create(args: argparse.Namespace) -> int:
    """Store a new key for ``--role`` (expiring after ``--expires``) and print it once."""
    from gpuplan.api.keys import KeyStore, key_hash, new_key, parse_expiry, parse_role
    from gpuplan.planner.store.records import now

    try:
        parse_role(args.role)
    except ValueError as exc:
        raise InputError(f"--role: {exc}") from None
    try:
        expires_at = parse_expiry(args.expires, now()) if args.expires else None
    except ValueError as exc:
        raise InputError(f"--expires: {exc}") from None
    key = new_key()

    def create(store: Store) -> int:
        record = KeyStore(store.engine).add(key_hash(key), args.role, expires_at)
        until = f"expires {_when(expires_at)} UTC" if expires_at else "never expires"
        sys.stdout.write(f"new {args.role} key {record.id} ({until}; shown once, only its hash is stored):\n")
        sys.stdout.write(key + "\n")
        return EXIT_OK

    return _with_store(args, create)


def cmd_list(args: argparse.Namespace) -> int:
    """Print the stored keys: id, role, created, expires, revoked (never the keys)."""
    from gpuplan.api.keys import KeyStore

    def show(store: Store) -> int:
        rows = [("id", "role", "created", "expires", "revoked")]
        rows += [
            (r.id, r.role, _when(r.created_at), _when(r.expires_at), _when(r.revoked_at))
            for r in KeyStore(store.engine).all_keys()
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n")
        return EXIT_OK

    return _with_store(args, show)


def cmd_revoke(args: argparse.Namespace) -> int:
    """Revoke the stored key with id ``ID`` (the digits ``gpuplan keys list`` shows)."""
    from gpuplan.api.keys import KeyStore

    def revoke(store: Store) -> int:
        record = KeyStore(store.engine).revoke(args.id.strip().lower())
        if record is None:
            raise InputError(f"no stored key '{args.id}' (see gpuplan keys list)")
        sys.stdout.write(f"key {record.id} ({record.role}) revoked at {_when(record.revoked_at)} UTC\n")
        return EXIT_OK

    return _with_store(args, revoke)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``keys`` with its sub-commands ``create``, ``list`` and ``revoke``."""
    p = sub.add_parser("keys", help="make, list and revoke the API keys stored in the database")
    keys = p.add_subparsers(dest="keys_command", required=True)
    database = argparse.ArgumentParser(add_help=False)
    database.add_argument(
        "--database", help=f"SQLite file or PostgreSQL URL (default: {DATABASE_ENV} or ./gpuplan.db)"
    )
    c = keys.add_parser("create", parents=[database], help="store a new key and print it once")
    c.add_argument("--role", required=True, help="admin, planner or viewer:<team>")
    c.add_argument("--expires", help="a duration (12h, 30d, 8w) or an ISO date or time (default: never)")
    c.set_defaults(func=cmd_create)
    ls = keys.add_parser("list", parents=[database], help="id, role, created, expires, revoked (no keys)")
    ls.set_defaults(func=cmd_list)
    r = keys.add_parser("revoke", parents=[database], help="refuse a key from now on")
    r.add_argument("id", help="the key's id, as gpuplan keys list shows it")
    r.set_defaults(func=cmd_revoke)
