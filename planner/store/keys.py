"""API keys as the store keeps them: roles, hashes, ids and expiry.

A key is stored only as its SHA-256; its *id* is the first :data:`KEY_ID_CHARS` hex digits of that hash,
what audits, ``gpuplan keys list`` and ``DELETE /v1/keys/{id}`` name it by. Keys live in the store (not
the API) so that ``gpuplan keys`` manages them without the server; the API reads them from here.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

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
