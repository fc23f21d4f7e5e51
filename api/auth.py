"""API keys and roles: ``admin``, ``planner`` (submit and read all) and ``viewer:<team>`` (read its team);
the keys the server accepts, and how often each may call.

Keys are stored hashed (``api.keys``, so that ``gpuplan keys`` manages them without the
server). A stored key is read again at most :data:`KEY_TTL_S` after it was last read, so that a key
revoked or expired elsewhere is refused within that time, without a restart.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from gpuplan.api.keys import KEY_ID_CHARS, KeyRecord, KeyStore, Role, key_hash, new_key, parse_role
from gpuplan.api.store import Store
from gpuplan.planner.store.records import now

__all__ = ["Keyring", "Principal", "RateLimiter", "Role", "key_hash", "new_key", "parse_role", "principal"]

#: Seconds a stored key's record is used before it is read again (a revoked key is refused after this).
KEY_TTL_S = 0.5


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


def principal(digest: str, role_text: str) -> Principal:
    """The principal of a key with hash ``digest`` and role ``role_text``."""
    role, team = parse_role(role_text)
    return Principal(key_id=digest[:KEY_ID_CHARS], role=role, team=team)


class Keyring:
    """The keys the server accepts: those of the settings (fixed while it runs) and the store's, each
    stored key's record kept for :data:`KEY_TTL_S` so that most requests do not read the database."""

    def __init__(self, configured: dict[str, str]) -> None:
        self.configured = {key_hash(k): role for k, role in configured.items()}
        self.recent: dict[str, tuple[KeyRecord, float]] = {}
        #: Store look-ups under way, by key hash: requests with the same key wait for the same one.
        self.lookups: dict[str, asyncio.Future[KeyRecord | None]] = {}

    def known(self, key: str) -> Principal | None:
        """The caller with ``key`` if known without reading the store (a configured key, or a stored one
        read less than :data:`KEY_TTL_S` ago and still usable); ``None`` otherwise."""
        digest = key_hash(key)
        role = self.configured.get(digest)
        if role is not None:
            return principal(digest, role)
        cached = self.recent.get(digest)
        if cached is not None and time.monotonic() - cached[1] < KEY_TTL_S and cached[0].usable(now()):
            return principal(digest, cached[0].role)
        return None

    async def principal(self, key: str, store: Store) -> Principal | None:
        """The caller with ``key``; ``None`` for an unknown, revoked or expired key."""
        digest = key_hash(key)
        role = self.configured.get(digest)
        if role is not None:
            return principal(digest, role)
        cached = self.recent.get(digest)
        if cached is not None and time.monotonic() - cached[1] < KEY_TTL_S:
            record: KeyRecord | None = cached[0]
        else:
            record = await self._lookup(digest, store)
        if record is None or not record.usable(now()):
            self.recent.pop(digest, None)
            return None
        if cached is None or cached[0] is not record:
            self.recent[digest] = (record, time.monotonic())
        return principal(digest, record.role)

    def looking_up(self, key: str) -> bool:
        """Whether a store look-up of ``key`` is under way (a request with it waits for that one)."""
        return key_hash(key) in self.lookups

    async def _lookup(self, digest: str, store: Store) -> KeyRecord | None:
        """The stored record of the key with hash ``digest``: one look-up however many ask at once (one
        that gives up waiting does not stop it for the others)."""
        lookup = self.lookups.get(digest)
        if lookup is None:
            lookup = asyncio.ensure_future(asyncio.to_thread(KeyStore(store.engine).get, digest))
            self.lookups[digest] = lookup

            def done(finished: asyncio.Future[KeyRecord | None]) -> None:
                if self.lookups.get(digest) is finished:
                    del self.lookups[digest]
                if not finished.cancelled():
                    finished.exception()  # retrieved: its waiters raise it

            lookup.add_done_callback(done)
        return await asyncio.shield(lookup)

    def forget(self, key_id: str) -> None:
        """Drop the kept record of the key ``key_id`` (revoked by this server: refused at once)."""
        for digest in [d for d in self.recent if d.startswith(key_id)]:
            del self.recent[digest]


class RateLimiter:
    """A token bucket per key: ``burst`` calls at once, refilled at ``per_minute`` a minute (0: no
    limit)."""

    def __init__(self, per_minute: int, burst: int) -> None:
        self.per_second = per_minute / 60
        self.burst = float(burst)
        self.buckets: dict[str, tuple[float, float]] = {}

    def give_back(self, key_id: str) -> None:
        """Return a call :meth:`take` took for ``key_id`` (it turned out not to count)."""
        if self.per_second <= 0 or key_id not in self.buckets:
            return
        tokens, then = self.buckets[key_id]
        self.buckets[key_id] = (min(self.burst, tokens + 1), then)

    def take(self, key_id: str) -> int:
        """Take one call for ``key_id``: 0 when it may go ahead, else the seconds until it may."""
        if self.per_second <= 0:
            return 0
        at = time.monotonic()
        tokens, then = self.buckets.get(key_id, (self.burst, at))
        tokens = min(self.burst, tokens + (at - then) * self.per_second)
        if tokens < 1:
            self.buckets[key_id] = (tokens, at)
            return max(1, math.ceil((1 - tokens) / self.per_second))
        self.buckets[key_id] = (tokens - 1, at)
        return 0
