"""What kube-scheduler's filters read, as schema objects: a node's taints, a workload's tolerations and
required node affinity, and their one-line text forms (the workloads CSV, ``kubectl taint``'s spelling).

The rules over them (TaintToleration, NodeAffinity, NodeResourcesFit by name) are
:mod:`gpuplan.models.rules.scheduling`'s; this module only says what the fields are and how they read and
write as text. Keys and values are Kubernetes label keys and values: they never hold white space nor any of
``, ; = : | ( ) ! < >``, which is what keeps the text forms unambiguous.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, model_validator

from gpuplan.models.base import Strict

#: Longest label or taint key Kubernetes allows (a 253-character prefix, ``/``, a 63-character name).
MAX_KEY_LENGTH = 317
#: Longest label or taint value Kubernetes allows.
MAX_VALUE_LENGTH = 63
_KEY_PATTERN = r"^[^\s,;=:|()!<>]+$"
_VALUE_PATTERN = r"^[^\s,;=:|()!<>]*$"

#: A label or taint key (not empty) and a label or taint value (may be empty).
Key = Annotated[str, Field(min_length=1, max_length=MAX_KEY_LENGTH, pattern=_KEY_PATTERN)]
Value = Annotated[str, Field(max_length=MAX_VALUE_LENGTH, pattern=_VALUE_PATTERN)]
#: An extended resource name (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``, ``nvidia.com/gpumem``).
ResourceName = Annotated[str, Field(min_length=1, max_length=MAX_KEY_LENGTH, pattern=_KEY_PATTERN)]


class TaintEffect(StrEnum):
    """What a taint does to pods that do not tolerate it."""

    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Taint(Strict):
    """A node taint (``spec.taints[]``): ``key=value:Effect``."""

    key: Key
    value: Value = ""
    effect: TaintEffect


class TolerationOperator(StrEnum):
    """How a toleration matches a taint's value."""

    EQUAL = "Equal"
    EXISTS = "Exists"


class Toleration(Strict):
    """A pod toleration (``spec.tolerations[]``); ``tolerationSeconds`` is not read (a pod that tolerates
    a ``NoExecute`` taint for a while tolerates it when it is placed)."""

    key: Annotated[str, Field(max_length=MAX_KEY_LENGTH, pattern=_VALUE_PATTERN)] = ""
    operator: TolerationOperator = TolerationOperator.EQUAL
    value: Value = ""
    effect: TaintEffect | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator is TolerationOperator.EXISTS and self.value:
            raise ValueError(f"value '{self.value}' must be empty with operator Exists")
        if not self.key and self.operator is not TolerationOperator.EXISTS:
            raise ValueError("operator must be Exists when key is empty (a toleration of every taint)")
        return self


class SelectorOperator(StrEnum):
    """A node selector requirement's operator, as Kubernetes spells it."""

    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


#: ``Gt`` and ``Lt`` compare a label as a 64-bit integer (Go's ``strconv.ParseInt``: an optional sign
#: and decimal digits).
_INTEGER = re.compile(r"[+-]?[0-9]+")
_INT64 = (-(2**63), 2**63 - 1)


def as_int64(text: str) -> int | None:
    """``text`` as Kubernetes reads a label value for ``Gt``/``Lt`` (``None``: not a 64-bit integer)."""
    if not _INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64[0] <= number <= _INT64[1] else None


class NodeSelectorRequirement(Strict):
    """One match expression of a required node affinity term (``matchExpressions[]``)."""

    key: Key
    operator: SelectorOperator
    values: tuple[Value, ...] = ()

    @model_validator(mode="after")
    def _values(self) -> NodeSelectorRequirement:
        op = self.operator
        if op in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not self.values:
            raise ValueError(f"values: operator {op} needs at least one value")
        if op in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and self.values:
            raise ValueError(f"values: operator {op} takes no value")
        if op in (SelectorOperator.GT, SelectorOperator.LT) and (
            len(self.values) != 1 or as_int64(self.values[0]) is None
        ):
            raise ValueError(f"values: operator {op} takes exactly one whole number")
        return self


#: A required node affinity term: its match expressions, all of which must hold (a term without any
#: matches no node, as in Kubernetes).
NodeSelectorTerm = tuple[NodeSelectorRequirement, ...]


# --- text forms -----------------------------------------------------------------------------------------

_EFFECTS = {e.value.lower(): e for e in TaintEffect}


def _effect(text: str, where: str) -> TaintEffect:
    found = _EFFECTS.get(text.strip().lower())
    if found is None:
        raise ValueError(f"{where}: effect '{text}' is not NoSchedule, PreferNoSchedule or NoExecute")
    return found


def _split(text: str, sep: str = ",") -> list[str]:
    return [p.strip() for p in text.split(sep) if p.strip()]


def parse_taint(text: str) -> dict[str, Any]:
    """``key=value:Effect`` or ``key:Effect`` (as ``kubectl taint`` writes it) as taint fields."""
    body, colon, effect = text.strip().rpartition(":")
    if not colon or not body:
        raise ValueError(f"taint '{text}' is not key=value:Effect or key:Effect")
    key, _, value = body.partition("=")
    return {"key": key.strip(), "value": value.strip(), "effect": _effect(effect, f"taint '{text}'")}


def taint_text(taint: Taint) -> str:
    """A taint as ``key=value:Effect`` (``key:Effect`` without a value)."""
    return f"{taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}"


def parse_toleration(text: str) -> dict[str, Any]:
    """A toleration's fields from ``key=value:Effect`` (``Equal``; ``key=value``: every effect),
    ``key:Effect`` or ``key`` (``Exists``), ``:Effect`` (every key of that effect) or ``*`` (every taint)."""
    raw = text.strip()
    if raw == "*":
        return {"operator": TolerationOperator.EXISTS}
    body, colon, effect = raw.rpartition(":") if ":" in raw else (raw, "", "")
    out: dict[str, Any] = {}
    if colon:
        out["effect"] = _effect(effect, f"toleration '{text}'")
    key, eq, value = body.partition("=")
    out["key"] = key.strip()
    if eq:
        out["operator"] = TolerationOperator.EQUAL
        out["value"] = value.strip()
    else:
        out["operator"] = TolerationOperator.EXISTS
    return out


def toleration_text(tol: Toleration) -> str:
    """A toleration in the form :func:`parse_toleration` reads."""
    if not tol.key and tol.effect is None:
        return "*"
    head = f"{tol.key}={tol.value}" if tol.operator is TolerationOperator.EQUAL else tol.key
    return f"{head}:{tol.effect}" if tol.effect is not None else head


def parse_pairs(text: str, what: str) -> dict[str, str]:
    """``key=value,key2=value2`` as a mapping (a node selector)."""
    out: dict[str, str] = {}
    for part in _split(text):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"{what} '{part}' is not key=value")
        out[key.strip()] = value.strip()
    return out


def pairs_text(pairs: Iterable[tuple[str, str]]) -> str:
    """Pairs as ``key=value,key2=value2``."""
    return ",".join(f"{k}={v}" for k, v in pairs)


_EXPRESSION = re.compile(
    r"""\s*(?:
        (?P<not>!)\s*(?P<absent>[^\s,;=:|()!<>]+)
      | (?P<key>[^\s,;=:|()!<>]+)\s*(?:
            (?P<op>in|notin)\s*\((?P<values>[^()]*)\)
          | (?P<cmp>[<>])\s*(?P<number>[^\s,;=:|()!<>]+)
          | (?P<eq>!=|==|=)\s*(?P<value>[^\s,;=:|()!<>]*)
        )?
    )\s*(?:,|$)""",
    re.X | re.I,
)


def parse_term(text: str) -> list[dict[str, Any]]:
    """One node affinity term in label-selector syntax, expressions separated by commas: ``key in
    (a,b)``, ``key notin (a,b)``, ``key`` (Exists), ``!key`` (DoesNotExist), ``key>5`` (Gt), ``key<5``
    (Lt), ``key=v`` (In one value) and ``key!=v`` (NotIn one value)."""
    out: list[dict[str, Any]] = []
    pos, raw = 0, text.strip()
    while pos < len(raw):
        m = _EXPRESSION.match(raw, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"node affinity term '{text}': cannot read '{raw[pos:]}'")
        pos = m.end()
        if m["not"]:
            out.append({"key": m["absent"], "operator": SelectorOperator.DOES_NOT_EXIST})
        elif m["op"]:
            op = SelectorOperator.IN if m["op"].lower() == "in" else SelectorOperator.NOT_IN
            out.append({"key": m["key"], "operator": op, "values": _split(m["values"])})
        elif m["cmp"]:
            op = SelectorOperator.GT if m["cmp"] == ">" else SelectorOperator.LT
            out.append({"key": m["key"], "operator": op, "values": [m["number"]]})
        elif m["eq"]:
            op = SelectorOperator.NOT_IN if m["eq"] == "!=" else SelectorOperator.IN
            out.append({"key": m["key"], "operator": op, "values": [m["value"]]})
        else:
            out.append({"key": m["key"], "operator": SelectorOperator.EXISTS})
    return out


def parse_affinity(text: str) -> list[list[dict[str, Any]]]:
    """Required node affinity as text: terms separated by ``|`` (any one of them must hold), each in
    the form :func:`parse_term` reads."""
    return [parse_term(t) for t in text.split("|")] if text.strip() else []


def requirement_text(req: NodeSelectorRequirement) -> str:
    """One expression in the form :func:`parse_term` reads."""
    op = req.operator
    if op is SelectorOperator.EXISTS:
        return req.key
    if op is SelectorOperator.DOES_NOT_EXIST:
        return f"!{req.key}"
    if op in (SelectorOperator.GT, SelectorOperator.LT):
        return f"{req.key}{'>' if op is SelectorOperator.GT else '<'}{req.values[0]}"
    return f"{req.key} {'in' if op is SelectorOperator.IN else 'notin'} ({','.join(req.values)})"


def affinity_text(terms: Iterable[NodeSelectorTerm]) -> str:
    """Required node affinity in the form :func:`parse_affinity` reads."""
    return " | ".join(",".join(requirement_text(r) for r in term) for term in terms)


def text_items(v: Any, parse: Any) -> Any:
    """A list field given as comma-separated text (each item read by ``parse``), or a list whose text
    items are read by ``parse``; other values as they are."""
    if isinstance(v, str):
        return [parse(p) for p in _split(v)]
    if isinstance(v, list | tuple):
        return [parse(p) if isinstance(p, str) else p for p in v]
    return v


def sorted_pairs(v: Any, what: str) -> Any:
    """A mapping, or ``key=value,...`` text, as sorted ``(key, value)`` pairs; other values as they are."""
    if isinstance(v, str):
        v = parse_pairs(v, what)
    if isinstance(v, Mapping):
        return tuple(sorted((str(k), str(x)) for k, x in v.items()))
    return v
