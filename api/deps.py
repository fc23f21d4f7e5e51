"""Dependencies of the routes, as ``Annotated`` aliases: settings, store, runner, jobs and the caller
(checked against the keys and the caller's rate limit)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from gpuplan.api.auth import Keyring, Principal, RateLimiter, Role
from gpuplan.api.errors import LimitExceeded
from gpuplan.api.jobs import Jobs
from gpuplan.api.middleware import UNAUTHENTICATED
from gpuplan.api.runner import Runner
from gpuplan.api.settings import Limits, Settings
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
    status_code=401, detail=UNAUTHENTICATED, headers={"WWW-Authenticate": "Bearer"}
)


async def get_principal(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
) -> Principal:
    """The caller named by the key in the request: 401 without a valid one (unknown, revoked or
    expired), 429 with ``Retry-After`` when the key has used up its calls (``rate_per_minute``)."""
    caller: Principal | None = getattr(request.state, "principal", None)  # found by ``KeyFirst``
    if caller is None:
        key = bearer.credentials if bearer is not None else header
        if not key:
            raise _UNAUTHENTICATED
        keyring: Keyring = request.app.state.keys
        caller = await keyring.principal(key, request.app.state.store)
    if caller is None:
        raise _UNAUTHENTICATED
    rates: RateLimiter = request.app.state.rates
    retry_after = rates.take(caller.key_id)
    if retry_after:
        limits: Limits = request.app.state.settings.limits
        raise LimitExceeded(
            429,
            "rate_per_minute",
            limits.rate_per_minute,
            f"key {caller.key_id} made more than {limits.rate_per_minute} calls a minute "
            f"(at most {limits.rate_burst} at once); retry in {retry_after} s",
            retry_after=retry_after,
        )
    return caller


Caller = Annotated[Principal, Depends(get_principal)]


async def get_submitter(caller: Caller) -> Principal:
    """A caller that may submit, cancel and validate (admin or planner); 403 for viewers."""
    if not caller.can_submit:
        raise HTTPException(status_code=403, detail=f"role '{caller.role_text}' may only read plans")
    return caller


Submitter = Annotated[Principal, Depends(get_submitter)]


async def get_admin(caller: Caller) -> Principal:
    """A caller that may manage keys (admin); 403 for everyone else."""
    if caller.role is not Role.ADMIN:
        raise HTTPException(status_code=403, detail=f"role '{caller.role_text}' may not manage keys")
    return caller


Admin = Annotated[Principal, Depends(get_admin)]
