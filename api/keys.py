"""The API's keys: roles, hashes, ids, expiry, and their rows in the store's database.

A key is stored only as its SHA-256; its *id* is the first :data:`KEY_ID_CHARS` hex digits of that hash,
what audits, ``gpuplan keys list`` and ``DELETE /v1/keys/{id}`` name it by. The API owns its keys: the
table is the API store's (``api.store.tables``, made by its migrations), and
:class:`KeyStore` reads and writes it, for the server and for ``gpuplan keys`` (which manages them
without a server).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from sqlalchemy import Engine, RowMapping, insert, select, update

from gpuplan.api.store.tables import api_keys
from gpuplan.models.base import InputError
from gpuplan.planner.store.records import as_utc, now

#: Hex digits of a key's hash that name it.
KEY_ID_CHARS = 12
#: Longest role text (the store's role columns are ``String(200)``).
MAX_ROLE_CHARS = 200

_DURATION = re.compile(r"^(\d{1,5})([dhw])$")
_UNITS = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}


class Role(StrEnum):
    """What a key may do: ``admin`` (everything, keys too), ``planner`` (submit and read all plans) or
    ``viewer`` (read its team's plans)."""

    ADMIN = "admin"
    PLANNER = "planner"
    VIEWER = "viewer"


def parse_role(text: str) -> tuple[Role, str | None]:
    """``admin`` | ``planner`` | ``viewer:<team>`` as (role, team); ValueError naming the text otherwise
    (also for more than :data:`MAX_ROLE_CHARS` characters, or control characters, which the store's
    role column cannot hold)."""
    if len(text) > MAX_ROLE_CHARS:
        raise ValueError(f"role '{text[:40]}...' has more than {MAX_ROLE_CHARS} characters")
    if not text.isprintable():
        raise ValueError(f"role {text!r} has a control character")
    name, _, team = text.partition(":")
    try:
        role = Role(name.strip())
    except ValueError:
        raise ValueError(f"unknown role '{text}' (use admin, planner or viewer:<team>)") from None
    if role is Role.VIEWER and not team.strip():
        raise ValueError(f"role '{text}' names no team (use viewer:<team>)")
    if role is not Role.VIEWER and team:
        raise ValueError(f"role '{text}' takes no team")
    return role, team.strip() or None


def key_hash(key: str) -> str:
    """SHA-256 of a key: only hashes are stored."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh random key (256 bits, URL-safe)."""
    return "gp_" + secrets.token_urlsafe(32)


def parse_expiry(text: str, at: datetime) -> datetime:
    """When a key made at ``at`` expires: a duration (``12h``, ``30d``, ``8w``) after ``at``, or an ISO
    date (midnight UTC) or time; ValueError naming the text unless it is in the future."""
    match = _DURATION.match(text.strip())
    if match:
        when = at + int(match[1]) * _UNITS[match[2]]
    else:
        try:
            parsed = datetime.fromisoformat(text.strip())
        except ValueError:
            raise ValueError(
                f"'{text}' is neither a duration (e.g. 12h, 30d, 8w) nor an ISO date or time"
            ) from None
        when = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    if when <= at:
        raise ValueError(f"'{text}' is not in the future")
    return when


@dataclass(frozen=True)
class KeyRecord:
    """A stored key: its hash, role, when it was made, when it expires and when it was revoked."""

    key_hash: str
    role: str
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    @property
    def id(self) -> str:
        """The key's id: the first hex digits of its hash."""
        return self.key_hash[:KEY_ID_CHARS]

    def usable(self, at: datetime) -> bool:
        """Neither revoked nor expired at ``at``."""
        return self.revoked_at is None and (self.expires_at is None or at < self.expires_at)


def _key(row: RowMapping) -> KeyRecord:
    """A key from its row (times read as UTC)."""
    expires, revoked = row["expires_at"], row["revoked_at"]
    return KeyRecord(
        key_hash=row["key_hash"],
        role=row["role"],
        created_at=as_utc(row["created_at"]),
        expires_at=as_utc(expires) if expires is not None else None,
        revoked_at=as_utc(revoked) if revoked is not None else None,
    )


@dataclass(frozen=True)
class KeyStore:
    """The stored keys of one database (the store's engine)."""

    engine: Engine

    def add(self, digest: str, role: str, expires_at: datetime | None = None) -> KeyRecord:
        """Store a key's hash with its role and expiry (``None``: never)."""
        record = KeyRecord(digest, role, now(), expires_at)
        with self.engine.begin() as conn:
            conn.execute(
                insert(api_keys).values(
                    key_hash=digest, role=role, created_at=record.created_at, expires_at=expires_at
                )
            )
        return record

    def get(self, digest: str) -> KeyRecord | None:
        """The stored key with hash ``digest`` (revoked and expired ones too)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(api_keys).where(api_keys.c.key_hash == digest)).one_or_none()
        return _key(row._mapping) if row is not None else None

    def all_keys(self) -> list[KeyRecord]:
        """Every stored key, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(api_keys).order_by(api_keys.c.created_at, api_keys.c.key_hash)).all()
        return [_key(r._mapping) for r in rows]

    def revoke(self, key_id: str) -> KeyRecord | None:
        """Revoke the key whose hash starts with ``key_id`` (hex digits; a key revoked already keeps its
        time) and return it; ``None`` when no key has that id, InputError when several have."""
        if not key_id or any(c not in "0123456789abcdef" for c in key_id):
            raise InputError(f"key id '{key_id}' is not hex digits")
        with self.engine.begin() as conn:
            rows = conn.execute(select(api_keys).where(api_keys.c.key_hash.startswith(key_id))).all()
            if len(rows) > 1:
                raise InputError(f"key id '{key_id}' names {len(rows)} keys; give more of its digits")
            if not rows:
                return None
            record = _key(rows[0]._mapping)
            if record.revoked_at is None:
                record = replace(record, revoked_at=now())
                conn.execute(
                    update(api_keys)
                    .where(api_keys.c.key_hash == record.key_hash)
                    .values(revoked_at=record.revoked_at)
                )
        return record
