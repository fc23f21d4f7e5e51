"""PodDisruptionBudgets (``kubectl get pdb -A -o json``): an Eviction that would take a budget's healthy
pods below what it allows is refused (HTTP 429), so a plan that moves or preempts more of a budget's pods
than it allows does not land. gpuplan has no per-group limit in its plans; the import turns each budget
into a hard one: of the running GPU pods a budget selects, as many as it allows disruptions of
(``status.disruptionsAllowed``, else computed from ``minAvailable``/``maxUnavailable``) stay free to
move, the others are ``disruptible: false`` (the plan keeps them where they run), with a warning that
names them. A pod that two budgets select cannot be evicted at all (the API refuses it) and is kept too.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.models.base import InputError
from gpuplan.planner.io.files import read_structured
from gpuplan.planner.io.importers.kubernetes.pods import _Pod

#: Pods named in one warning at most (the rest are counted).
NAMED = 5


@dataclass(frozen=True)
class DisruptionBudget:
    """One PodDisruptionBudget: its namespace, name, pod selector and the disruptions it allows."""

    namespace: str
    name: str
    #: ``matchLabels`` as pairs, and ``matchExpressions`` as (key, operator, values); ``None``: selects
    #: no pod (a budget without ``selector``).
    selector: tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str, tuple[str, ...]], ...]] | None
    allowed: int | None
    min_available: int | str | None = None
    max_unavailable: int | str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether the budget's selector takes a pod of ``namespace`` with ``labels``."""
        if self.selector is None or namespace != self.namespace:
            return False
        match, expressions = self.selector
        if any(labels.get(k) != v for k, v in match):
            return False
        for key, op, values in expressions:
            has = key in labels
            if op == "In" and not (has and labels[key] in values):
                return False
            if op == "NotIn" and has and labels[key] in values:
                return False
            if op == "Exists" and not has:
                return False
            if op == "DoesNotExist" and has:
                return False
        return True

    def allowed_for(self, healthy: int) -> int:
        """The disruptions it allows: ``status.disruptionsAllowed`` when the dump has it, else what
        ``minAvailable``/``maxUnavailable`` leave of ``healthy`` selected pods (percentages rounded up, as
        the disruption controller does; the expected count is taken to be the healthy one)."""
        if self.allowed is not None:
            return max(0, self.allowed)
        if self.min_available is not None:
            return max(0, healthy - _scaled(self.min_available, healthy))
        if self.max_unavailable is not None:
            return max(0, _scaled(self.max_unavailable, healthy))
        return healthy


def _scaled(value: int | str, total: int) -> int:
    """An IntOrString of a budget: a count, or a percentage of ``total`` rounded up."""
    if isinstance(value, int):
        return value
    return math.ceil(int(value.rstrip("%")) * total / 100)


def _int_or_percent(value: Any, where: str) -> int | str | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and re.fullmatch(r"\d+%", value.strip()):
        return value.strip()
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise InputError(f"{where}: '{value}' is not a count or a percentage")


def load_pdbs(path: Path) -> tuple[DisruptionBudget, ...]:
    """The budgets of ``kubectl get pdb -A -o json`` (``policy/v1``); a bad value is one line naming the
    budget and the field."""
    raw = read_structured(Path(path))
    items = raw.get("items") if isinstance(raw, dict) else raw
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InputError(f"{path}: expected the output of `kubectl get pdb -A -o json`")
    out = []
    for i, item in enumerate(items):
        if item.get("kind", "PodDisruptionBudget") != "PodDisruptionBudget":
            raise InputError(f"{path}: items[{i}]: a {item.get('kind')}, expected a PodDisruptionBudget")
        meta = item.get("metadata") or {}
        spec = item.get("spec") or {}
        status = item.get("status") or {}
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        where = f"{path}: PodDisruptionBudget '{key}'"
        selector = spec.get("selector")
        parsed = None
        if isinstance(selector, dict):
            match = tuple(sorted((str(k), str(v)) for k, v in (selector.get("matchLabels") or {}).items()))
            exprs = []
            for e in selector.get("matchExpressions") or ():
                op = e.get("operator")
                if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
                    raise InputError(f"{where}: spec.selector.matchExpressions: unknown operator '{op}'")
                exprs.append((str(e.get("key")), str(op), tuple(str(v) for v in e.get("values") or ())))
            parsed = (match, tuple(exprs))
        elif selector is not None:
            raise InputError(f"{where}: spec.selector: expected a label selector")
        allowed = status.get("disruptionsAllowed")
        if allowed is not None and (isinstance(allowed, bool) or not isinstance(allowed, int)):
            raise InputError(f"{where}: status.disruptionsAllowed: '{allowed}' is not a whole number")
        out.append(
            DisruptionBudget(
                namespace=str(meta.get("namespace") or "default"),
                name=str(meta.get("name") or ""),
                selector=parsed,
                allowed=allowed,
                min_available=_int_or_percent(spec.get("minAvailable"), f"{where}: spec.minAvailable"),
                max_unavailable=_int_or_percent(spec.get("maxUnavailable"), f"{where}: spec.maxUnavailable"),
            )
        )
    return tuple(out)


def _labels(raw: Mapping[str, Any]) -> tuple[str, dict[str, str]]:
    meta = raw.get("metadata") or {}
    return str(meta.get("namespace") or "default"), {
        str(k): str(v) for k, v in (meta.get("labels") or {}).items()
    }


def _healthy(raw: Mapping[str, Any]) -> bool:
    """Whether a pod counts as healthy for a budget: running and Ready."""
    status = raw.get("status") or {}
    if status.get("phase") != "Running" or (raw.get("metadata") or {}).get("deletionTimestamp"):
        return False
    ready = next((c for c in status.get("conditions") or () if c.get("type") == "Ready"), None)
    return ready is None or ready.get("status") == "True"


def apply_budgets(
    budgets: Sequence[DisruptionBudget], pod_items: Sequence[Mapping[str, Any]], pods: Sequence[_Pod]
) -> list[str]:
    """Mark the running GPU pods each budget keeps in place ``disruptible: false`` and return the warnings
    that say so. Of a budget's selected running GPU pods, as many as it allows disruptions of stay free
    (the preemptible ones first, then the youngest), the others are kept."""
    if not budgets:
        return []
    by_key = {p.key: p for p in pods}
    selected: dict[str, list[DisruptionBudget]] = {}
    healthy: dict[str, int] = {b.key: 0 for b in budgets}
    for raw in pod_items:
        namespace, labels = _labels(raw)
        key = f"{namespace}/{(raw.get('metadata') or {}).get('name', '')}"
        for b in budgets:
            if b.selects(namespace, labels):
                healthy[b.key] += _healthy(raw)
                if key in by_key and by_key[key].node:
                    selected.setdefault(key, []).append(b)
    warnings: list[str] = []
    kept: set[str] = set()
    twice = sorted(k for k, bs in selected.items() if len(bs) > 1)
    for key in twice:
        kept.add(key)
    if twice:
        warnings.append(
            f"{_named(twice)} selected by more than one PodDisruptionBudget: the API refuses to evict "
            "such a pod, so gpuplan keeps it where it runs (disruptible: false)"
        )
    for b in budgets:
        members = [by_key[k] for k, bs in selected.items() if b in bs and k not in twice]
        if not members:
            continue
        allowed = b.allowed_for(healthy[b.key])
        if allowed >= len(members):
            continue

        def order(p: _Pod) -> tuple[bool, str, str]:
            return (not p.values.get("preemptible"), _newest_first(p.created), p.key)

        free = sorted(members, key=order)[:allowed]
        pinned = sorted(p.key for p in members if p not in free)
        kept.update(pinned)
        still = f"; {_named(sorted(p.key for p in free))} may still move" if free else ""
        warnings.append(
            f"PodDisruptionBudget '{b.key}' allows {allowed} disruption(s) of its {len(members)} running "
            f"GPU pod(s): gpuplan keeps {_named(pinned)} where they run (disruptible: false){still}"
        )
    for key in kept:
        by_key[key].values["disruptible"] = "false"
    return warnings


def _newest_first(created: str) -> str:
    """A sort key putting later creation times first (ISO-8601 text sorts by time)."""
    return "".join(chr(0x10FFFF - ord(c)) for c in created)


def _named(keys: Sequence[str]) -> str:
    """``a, b, c`` or ``a, b, c and 4 more``."""
    shown = ", ".join(keys[:NAMED])
    return f"{shown} and {len(keys) - NAMED} more" if len(keys) > NAMED else shown
