"""``/v1/keys`` (admins only): make, list and revoke the API keys stored in the database.

Keys given in the settings (``GPUPLAN_API_KEYS``) are not listed and cannot be revoked here: they live
in the server's environment. A key revoked here is refused at once by this server, and by others on
the same database within ``KEY_TTL_S``.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException, Path, Request, status
from pydantic import BaseModel, ConfigDict, Field

from gpuplan.api.auth import Keyring, key_hash, new_key, parse_role
from gpuplan.api.deps import Admin, StoreDep
from gpuplan.api.errors import InputRejected
from gpuplan.api.jobs import actor
from gpuplan.api.keys import KeyRecord, KeyStore, parse_expiry
from gpuplan.models.base import InputError
from gpuplan.planner.store.records import now

router = APIRouter(prefix="/v1/keys", tags=["keys"])

_AUTH: dict[int | str, dict[str, Any]] = {
    401: {"description": "no valid API key"},
    403: {"description": "only admins manage keys"},
}


class KeyCreate(BaseModel):
    """A key to make: its role, and optionally when it expires."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(
        max_length=200,
        pattern=r"^(admin|planner|viewer:\S(.*\S)?)$",
        description="admin, planner or viewer:<team> (a team without control characters), as written here",
    )
    expires: str | None = Field(
        default=None, max_length=40, description="a duration (12h, 30d, 8w) or an ISO date or time"
    )


class KeyOut(BaseModel):
    """A stored key as listed: its id (the first digits of its hash), never the key itself."""

    id: str
    role: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None

    @classmethod
    def of(cls, record: KeyRecord) -> KeyOut:
        """The listing of ``record``."""
        return cls(
            id=record.id,
            role=record.role,
            created_at=record.created_at,
            expires_at=record.expires_at,
            revoked_at=record.revoked_at,
        )


class NewKey(KeyOut):
    """A key just made, with the key itself (shown this once: only its hash is stored)."""

    key: str


@router.post("", status_code=status.HTTP_201_CREATED, response_model=NewKey, responses=_AUTH)
async def create_key(body: KeyCreate, caller: Admin, store: StoreDep) -> NewKey:
    """Make a key for ``role`` (expiring at ``expires``, else never); the answer holds the key once."""
    try:
        parse_role(body.role)
    except ValueError as exc:
        raise InputRejected(("body", "role"), str(exc)) from None
    expires_at = None
    if body.expires is not None:
        try:
            expires_at = parse_expiry(body.expires, now())
        except ValueError as exc:
            raise InputRejected(("body", "expires"), str(exc)) from None
    key = new_key()
    record = await asyncio.to_thread(KeyStore(store.engine).add, key_hash(key), body.role, expires_at)
    detail = {"key_id": record.id, "role": record.role, "expires_at": expires_at}
    await asyncio.to_thread(store.record, actor(caller), "create-key", None, detail)
    return NewKey(key=key, **KeyOut.of(record).model_dump())


@router.get("", response_model=list[KeyOut], responses=_AUTH)
async def list_keys(caller: Admin, store: StoreDep) -> list[KeyOut]:
    """Every stored key, oldest first: id, role, when made, when it expires, when it was revoked."""
    return [KeyOut.of(r) for r in await asyncio.to_thread(KeyStore(store.engine).all_keys)]


@router.delete(
    "/{key_id}",
    response_model=KeyOut,
    responses={
        **_AUTH,
        404: {"description": "no stored key has this id"},
        409: {"description": "the id names several keys"},
    },
)
async def revoke_key(
    key_id: Annotated[str, Path(pattern=r"^[0-9a-f]{6,64}$", description="a key's id (hash prefix)")],
    caller: Admin,
    store: StoreDep,
    request: Request,
) -> KeyOut:
    """Revoke a stored key: refused from now on (revoking it again changes nothing)."""
    try:
        record = await asyncio.to_thread(KeyStore(store.engine).revoke, key_id)
    except InputError as exc:
        raise HTTPException(status_code=409, detail=str(exc)) from None
    if record is None:
        raise HTTPException(status_code=404, detail=f"no stored key '{key_id}'")
    keyring: Keyring = request.app.state.keys
    keyring.forget(record.id)
    await asyncio.to_thread(store.record, actor(caller), "revoke-key", None, {"key_id": record.id})
    return KeyOut.of(record)
