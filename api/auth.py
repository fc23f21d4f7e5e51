"""API keys and roles: ``admin``, ``planner`` (submit and read all) and ``viewer:<team>`` (read its team)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    """What a key may do."""

    ADMIN = "admin"
    PLANNER = "planner"
    VIEWER = "viewer"


@dataclass(frozen=True)
class Principal:
    """The caller behind a valid key; ``team`` is set for viewers only."""

    key_id: str
    role: Role
    team: str | None = None

    @property
    def can_submit(self) -> bool:
        """Admins and planners submit, cancel and validate."""
        return self.role in (Role.ADMIN, Role.PLANNER)

    def can_read(self, team: str | None) -> bool:
        """Admins and planners read every plan; a viewer reads only its team's."""
        return self.can_submit or (team is not None and team == self.team)

    @property
    def role_text(self) -> str:
        """The role as written in settings (``viewer:<team>`` for viewers)."""
        return f"viewer:{self.team}" if self.role is Role.VIEWER else str(self.role)


def parse_role(text: str) -> tuple[Role, str | None]:
    """``admin`` | ``planner`` | ``viewer:<team>`` as (role, team); ValueError naming the text otherwise."""
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
    """SHA-256 of a key: only hashes are stored, and the first 12 hex digits name the key in audits."""
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    """A fresh random key (256 bits, URL-safe)."""
    return "gp_" + secrets.token_urlsafe(32)


def principal(digest: str, role_text: str) -> Principal:
    """The principal of a key with hash ``digest`` and role ``role_text``."""
    role, team = parse_role(role_text)
    return Principal(key_id=digest[:12], role=role, team=team)
