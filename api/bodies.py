"""Request bodies parsed and validated in a worker thread, so that no body, however large, holds up the
event loop (and with it ``/healthz`` and every other request); at most ``max_parsing`` large ones at once
(:class:`ParseGate`), since parsing takes about ten times a body's size in memory.

FastAPI parses and validates a declared body on the event loop; the submitting routes instead take the
body through :func:`json_body` and describe it in the OpenAPI document with :func:`documented`. Errors
keep FastAPI's form: 422 with the field path under ``body``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from gpuplan.api.schemas import (
    CapacityGapRequest,
    FrontierRequest,
    PlanRequest,
    PolicyCostRequest,
    ReplayRequest,
    ValidateRequest,
)
from gpuplan.api.settings import Settings
from gpuplan.models.base import NAME_LENGTH_CONTEXT
from gpuplan.models.catalog import default_catalog

M = TypeVar("M", bound=BaseModel)
#: The request-state name of a large body's :class:`BodyHold`.
BODY_HOLD = "body_hold"


def parse_body(model: type[M], raw: bytes, settings: Settings) -> M:
    """``raw`` JSON as ``model`` under the settings' limits; :class:`RequestValidationError` if it is not."""
    try:
        context = {NAME_LENGTH_CONTEXT: settings.limits.max_name_length}
        return model.model_validate_json(raw, context=context)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


class BodyHold:
    """A large body's place in its :class:`ParseGate`, held from the body's first byte to the end of its
    parse (or of its request): the memory of a body being received counts as much as one being parsed."""

    def __init__(self, gate: ParseGate) -> None:
        self.gate = gate
        self.start = time.monotonic()
        self.held = True

    def release(self) -> None:
        """Give the place back (once; later calls do nothing)."""
        if self.held:
            self.held = False
            self.gate.busy -= 1
            self.gate.last_s = time.monotonic() - self.start


class ParseGate:
    """At most ``slots`` bodies of ``large`` bytes or more received and parsed at once (a body declared
    that large takes its place before its first byte is read, a streamed one when it reaches ``large``);
    one more is refused with 503 and a ``Retry-After`` of the last large body's time in the gate (a queue
    would hold its bytes meanwhile)."""

    def __init__(self, slots: int, large: int) -> None:
        self.slots = slots
        self.large = large
        self.busy = 0
        self.last_s = 1.0

    def admit(self) -> BodyHold | None:
        """A place for one large body, or ``None`` when every place is taken (see :meth:`refusal`)."""
        if self.busy >= self.slots:
            return None
        self.busy += 1
        return BodyHold(self)

    def refusal(self) -> tuple[str, int]:
        """Why a large body cannot be taken now, and the seconds to retry after."""
        detail = f"{self.busy} large bodies are being received or parsed; at most {self.slots} at once"
        return detail, max(1, math.ceil(self.last_s))

    async def parse(self, model: type[M], raw: bytes, settings: Settings, hold: BodyHold | None = None) -> M:
        """``raw`` parsed as ``model`` in a worker thread, in the place ``hold`` the body took while it
        was received (given back when the parse ends), or in one taken now (503 when none is free)."""
        if hold is None:
            if len(raw) < self.large:
                return await asyncio.to_thread(parse_body, model, raw, settings)
            hold = self.admit()
            if hold is None:
                detail, retry = self.refusal()
                raise HTTPException(status_code=503, detail=detail, headers={"Retry-After": str(retry)})
        try:
            return await asyncio.to_thread(parse_body, model, raw, settings)
        finally:
            hold.release()


def json_body(model: type[M]) -> Callable[[Request], Awaitable[M]]:
    """A dependency that reads the request body and parses it as ``model`` in a worker thread (through
    the app's :class:`ParseGate`, in the place the body took when ``BodyLimit`` received it)."""

    async def parsed(request: Request) -> M:
        raw = await request.body()
        gate: ParseGate = request.app.state.parsing
        hold: BodyHold | None = getattr(request.state, BODY_HOLD, None)
        return await gate.parse(model, raw, request.app.state.settings, hold)

    return parsed


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    """``node`` with every ``#/$defs/…`` reference replaced by its definition (the models are not
    recursive, so this ends)."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {k: _inline(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


#: Properties that name GPU models of the hardware catalog (one name, or a list of them).
_GPU_MODEL_FIELDS = frozenset({"model", "gpu_model", "gpu_models"})


def _known_models(node: Any, names: list[str]) -> Any:
    """``node`` with the GPU-model properties limited to ``names`` (an unknown model is refused)."""
    if isinstance(node, list):
        return [_known_models(v, names) for v in node]
    if not isinstance(node, dict):
        return node
    # A plan's counterfactuals describe changes, not hardware of the request: left as they are.
    out = {k: v if k == "counterfactuals" else _known_models(v, names) for k, v in node.items()}
    for key, prop in out.get("properties", {}).items():
        if key not in _GPU_MODEL_FIELDS or not isinstance(prop, dict):
            continue
        for branch in [prop, prop.get("items"), *prop.get("anyOf", ())]:
            if isinstance(branch, dict) and branch.get("type") == "string":
                branch["enum"] = names
    return out


def documented(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` of a route that takes ``model`` through :func:`json_body`: its JSON schema as the
    required request body (inlined: references into the model's own ``$defs`` would not resolve in the
    OpenAPI document), its GPU models limited to the server's hardware catalog."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    names = sorted(m.name for m in default_catalog().models)
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _known_models(_inline(schema, defs), names)}},
        }
    }


PlanBody = Annotated[PlanRequest, Depends(json_body(PlanRequest))]
CapacityGapBody = Annotated[CapacityGapRequest, Depends(json_body(CapacityGapRequest))]
ValidateBody = Annotated[ValidateRequest, Depends(json_body(ValidateRequest))]
PolicyCostBody = Annotated[PolicyCostRequest, Depends(json_body(PolicyCostRequest))]
ReplayBody = Annotated[ReplayRequest, Depends(json_body(ReplayRequest))]
FrontierBody = Annotated[FrontierRequest, Depends(json_body(FrontierRequest))]
