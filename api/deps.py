"""Dependencies of the routes, as ``Annotated`` aliases: settings, store, runner, jobs and the caller."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from gpuplan.api.auth import Principal, key_hash, principal
from gpuplan.api.jobs import Jobs
from gpuplan.api.runner import Runner
from gpuplan.api.settings import Settings
from gpuplan.api.store import Store

_bearer = HTTPBearer(auto_error=False, description="An API key as a bearer token")
_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="An API key")


def get_settings(request: Request) -> Settings:
    """The app's settings."""
    settings: Settings = request.app.state.settings
    return settings


def get_store(request: Request) -> Store:
    """The app's job store."""
    store: Store = request.app.state.store
    return store


def get_runner(request: Request) -> Runner:
    """The app's job runner."""
    runner: Runner = request.app.state.runner
    return runner


SettingsDep = Annotated[Settings, Depends(get_settings)]
StoreDep = Annotated[Store, Depends(get_store)]
RunnerDep = Annotated[Runner, Depends(get_runner)]


def get_jobs(settings: SettingsDep, store: StoreDep, runner: RunnerDep) -> Jobs:
    """Job submission over the app's settings, store and runner."""
    return Jobs(settings, store, runner)


JobsDep = Annotated[Jobs, Depends(get_jobs)]

_UNAUTHENTICATED = HTTPException(
    status_code=401,
    detail="a valid API key is required (Authorization: Bearer <key> or X-API-Key: <key>)",
    headers={"WWW-Authenticate": "Bearer"},
)


async def get_principal(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
) -> Principal:
    """The caller named by the key in the request; 401 without a valid one."""
    key = bearer.credentials if bearer is not None else header
    if not key:
        raise _UNAUTHENTICATED
    digest = key_hash(key)
    known: dict[str, str] = request.app.state.keys
    role = known.get(digest)
    if role is None:
        store: Store = request.app.state.store
        role = await asyncio.to_thread(store.key_role, digest)
        if role is None:
            raise _UNAUTHENTICATED
        known[digest] = role
    return principal(digest, role)


Caller = Annotated[Principal, Depends(get_principal)]


async def get_submitter(caller: Caller) -> Principal:
    """A caller that may submit, cancel and validate (admin or planner); 403 for viewers."""
    if not caller.can_submit:
        raise HTTPException(status_code=403, detail=f"role '{caller.role_text}' may only read plans")
    return caller


Submitter = Annotated[Principal, Depends(get_submitter)]
