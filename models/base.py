"""Shared pydantic configuration for every gpuplan schema, and the bounds every input name and number
obeys."""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Iterable, Mapping
from functools import cache, cached_property
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

#: Longest id or name (node, workload, team, tier, pool, gang): the store keeps a team in a column of
#: this many characters, and names longer than this are mistakes, not names.
MAX_NAME_LENGTH = 200
#: Validation-context key with a tighter name length (the API's ``max_name_length`` limit).
NAME_LENGTH_CONTEXT = "max_name_length"
#: Most GPUs one node may have: far beyond any server, small enough to keep validation cheap.
MAX_GPUS_PER_NODE = 1024
#: Longest duration, wait or runtime in seconds (ten years).
MAX_SECONDS = 10 * 365 * 86400.0

#: C0 and C1 control characters and DEL: they break spreadsheets, CSV lines, logs and PostgreSQL text.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


class Strict(BaseModel):
    """Immutable schema object that rejects unknown fields.

    Values derived from the fields (``functools.cached_property``: a workload's shapes, an input's
    workloads by id, a node's GPUs by index) are cached in the instance; :meth:`model_copy` drops them
    from the copy, so that a copy with changed fields never answers with its original's."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copy = super().model_copy(update=update, deep=deep)
        for name in _cached_properties(type(self)):
            copy.__dict__.pop(name, None)
        return copy


@cache
def _cached_properties(cls: type) -> tuple[str, ...]:
    """The names of the ``cached_property`` attributes of ``cls`` and its bases."""
    return tuple(
        name
        for klass in cls.__mro__
        for name, value in vars(klass).items()
        if isinstance(value, cached_property)
    )


class InputError(ValueError):
    """Bad user input: the message names the object, the field and the reason."""


#: Closest known names a "did you mean" suggests.
SUGGESTED = 3
#: How alike (difflib's ratio) a known name must be to be suggested: one or two characters off in a
#: name of ten (``L40S-46GB`` for ``L40S-48GB``, ``cpu_mili`` for ``cpu_milli``), not merely the same family.
CLOSE = 0.8


def closest(value: str, known: Iterable[str], n: int = SUGGESTED) -> list[str]:
    """The known names closest to ``value`` (case-insensitive, best first; empty when none is close)."""
    by_key: dict[str, str] = {}
    for name in known:
        by_key.setdefault(name.lower(), name)
    return [by_key[k] for k in difflib.get_close_matches(value.lower(), list(by_key), n=n, cutoff=CLOSE)]


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """`` (did you mean L40S-48GB?)`` naming the known names closest to ``value``, or ``""``."""
    close = closest(value, known)
    return f" (did you mean {' or '.join(close)}?)" if close else ""


#: Objects named in a grouped input error; the others are counted.
GROUP_NAMED = 3
#: Distinct input errors given in one message; the others are counted.
MAX_ERRORS = 10


def grouped_errors(noun: str, errors: Iterable[tuple[str, str]]) -> list[str]:
    """``(id, reason)`` errors of objects called ``noun`` (e.g. ``workload``), each reason once.

    A reason one object has reads ``workload 'a' field team: unknown team 'x'``; one many objects share
    names the first :data:`GROUP_NAMED` and counts them, ``field team: unknown team 'x' (8,152
    workloads: a, b, c, ...)``, so that one bad value in a large input gives one short line. At most
    :data:`MAX_ERRORS` reasons, in order of first appearance; the rest are counted in a last entry.
    """
    by_reason: dict[str, list[str]] = {}
    for ident, reason in errors:
        by_reason.setdefault(reason, []).append(ident)
    lines: list[str] = []
    for reason, idents in itertools.islice(by_reason.items(), MAX_ERRORS):
        if len(idents) == 1:
            lines.append(f"{noun} '{idents[0]}' {reason}")
            continue
        shown = ", ".join(idents[:GROUP_NAMED]) + (", ..." if len(idents) > GROUP_NAMED else "")
        lines.append(f"{reason} ({len(idents):,} {noun}s: {shown})")
    rest = len(by_reason) - MAX_ERRORS
    if rest > 0:
        lines.append(f"and {rest:,} more {noun} error(s)")
    return lines


def _printable(value: str, info: ValidationInfo) -> str:
    """Refuse control characters, and names longer than the context's ``max_name_length``."""
    found = _CONTROL.search(value)
    if found is not None:
        raise ValueError(f"contains control character U+{ord(found.group()):04X}; names must be printable")
    limit: Any = info.context.get(NAME_LENGTH_CONTEXT) if isinstance(info.context, dict) else None
    if isinstance(limit, int) and len(value) > limit:
        raise ValueError(f"is {len(value)} characters long; at most {limit} (limit {NAME_LENGTH_CONTEXT})")
    return value


#: The rule of :func:`_printable` as a JSON-schema pattern, so that a schema states it (not checked by it).
PRINTABLE_PATTERN = f"^[^{_CONTROL.pattern[1:-1]}]*$"
#: An id or name: printable, at most :data:`MAX_NAME_LENGTH` characters.
Name = Annotated[
    str,
    Field(max_length=MAX_NAME_LENGTH, json_schema_extra={"pattern": PRINTABLE_PATTERN}),
    AfterValidator(_printable),
]
#: Seconds: finite, not negative, at most :data:`MAX_SECONDS`.
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS, allow_inf_nan=False)]
