"""Tiers and preemptibility: tiers come from the priority class, named in the tier map, else ranked by
``spec.priority`` onto the policy's tiers; pods of the least important tier are preemptible unless the
tier map says otherwise.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.models import BACKGROUND, LATENCY_SENSITIVE, STANDARD
from gpuplan.models.base import InputError
from gpuplan.models.policy import Tier
from gpuplan.planner.io.importers.kubernetes.pods import _Pod
from gpuplan.planner.pipeline.files import read_structured

#: Tier of a ``priorityClassName`` unless ``--tier-map`` says otherwise; other classes are ranked by
#: priority onto the policy's tiers (:func:`assign_tiers`).
DEFAULT_TIER_MAP: dict[str, str] = {
    "system-node-critical": LATENCY_SENSITIVE,
    "system-cluster-critical": LATENCY_SENSITIVE,
    "latency-sensitive": LATENCY_SENSITIVE,
    "high-priority": LATENCY_SENSITIVE,
    "standard": STANDARD,
    "low-priority": BACKGROUND,
    "background": BACKGROUND,
}


@dataclass(frozen=True)
class TierMap:
    """Priority class to tier, and the classes whose pods may (or may not) be preempted whatever their
    tier's default; the key ``*`` stands for every class not named and for pods without a class."""

    tiers: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_TIER_MAP))
    preemptible: Mapping[str, bool] = field(default_factory=dict)


@dataclass(frozen=True)
class TierChoice:
    """The tier the pods of one priority class get, and why (for the import summary)."""

    klass: str
    tier: str
    why: str
    pods: int


def _tier_order(tiers: Sequence[Tier]) -> list[str]:
    """The policy's tier names, most important (highest weight) first."""
    return [t.name for t in sorted(tiers, key=lambda t: -t.weight)]


def _ranked_tier(value: int, levels: Sequence[int], anchors: Sequence[tuple[int, int]], n_tiers: int) -> int:
    """The tier index (0 is the most important) of a class not in the tier map with priority ``value``.

    The distinct priorities of the pods' classes (``levels``, highest first; the named classes count too,
    so naming one class does not move the others) are spread evenly over the tiers: the highest on the
    first, the lowest on the last, those between at the nearest even step (one level alone takes the
    middle tier). ``anchors`` (priority, tier index of the classes the map names) keep
    the order: a class never ranks above a named class of higher priority nor below one of lower
    priority, and takes the tier of a named class of the same priority."""
    same = [k for v, k in anchors if v == value]
    if same:
        return min(same)
    last, i = n_tiers - 1, levels.index(value)
    spread = last // 2 if len(levels) == 1 else (2 * i * last + len(levels) - 1) // (2 * (len(levels) - 1))
    low = max((k for v, k in anchors if v > value), default=0)
    high = min((k for v, k in anchors if v < value), default=last)
    return max(low, min(spread, high))


def assign_tiers(pods: Sequence[_Pod], tier_map: TierMap, tiers: Sequence[Tier]) -> tuple[TierChoice, ...]:
    """Set each pod's ``tier`` and ``preemptible`` and say how each priority class was mapped.

    A class the tier map names keeps its tier. Without a ``*`` entry the other classes are ranked by their
    pods' ``spec.priority`` onto the policy's tiers (:func:`_ranked_tier`); a class without one, and pods
    without a class, get ``standard`` (or the middle tier). A pod is preemptible when the tier map says
    so for its class (or ``*``), else when its tier is the policy's least important one: Kubernetes
    preempts any pod for one of higher priority (``preemptionPolicy: Never`` only stops a pod from
    preempting others), and the lowest tier is the one every other tier outranks.
    """
    order = _tier_order(tiers)
    index = {name: i for i, name in enumerate(order)}
    default = STANDARD if STANDARD in index else order[(len(order) - 1) // 2]
    values: dict[str, int | None] = {}
    counts: Counter[str] = Counter()
    for pod in pods:
        counts[pod.klass] += 1
        seen = values.get(pod.klass)
        if pod.klass and pod.spec_priority is not None:
            values[pod.klass] = pod.spec_priority if seen is None else max(seen, pod.spec_priority)
        else:
            values.setdefault(pod.klass, None)
    named = {c: tier_map.tiers[c] for c in values if c and c in tier_map.tiers}
    rest = tier_map.tiers.get("*")
    anchors = [
        (v, index[named[c]]) for c, v in values.items() if c in named and v is not None and named[c] in index
    ]
    levels = sorted({v for c, v in values.items() if c and v is not None}, reverse=True)
    chosen: dict[str, tuple[str, str]] = {}
    for klass, value in values.items():
        if klass in named:
            chosen[klass] = (named[klass], "tier map")
        elif rest is not None:
            chosen[klass] = (rest, "tier map '*'")
        elif not klass:
            chosen[klass] = (default, "no priority class")
        elif value is None:
            chosen[klass] = (default, "no spec.priority to rank it by")
        else:
            k = _ranked_tier(value, levels, anchors, len(order))
            chosen[klass] = (order[k], f"spec.priority {value}, ranked")
    lowest = order[-1] if len(order) > 1 else None
    for pod in pods:
        tier = chosen[pod.klass][0]
        pod.values["tier"] = tier
        own = tier_map.preemptible.get(pod.klass)
        if own is None and pod.klass not in named:
            own = tier_map.preemptible.get("*")
        if (tier == lowest) if own is None else own:
            pod.values["preemptible"] = True

    def rank(klass: str) -> tuple[int, int, str]:
        return (index.get(chosen[klass][0], len(order)), -(values[klass] or 0), klass)

    return tuple(
        TierChoice(klass=c, tier=chosen[c][0], why=chosen[c][1], pods=counts[c])
        for c in sorted(chosen, key=rank)
    )


def load_tier_map(path: Path | None) -> TierMap:
    """The default priority-class → tier map, updated by a YAML/JSON mapping file when given: each class
    maps to a tier name, or to ``{tier: NAME, preemptible: true|false}`` (either key may be left out)."""
    tiers = dict(DEFAULT_TIER_MAP)
    if path is None:
        return TierMap(tiers)
    raw = read_structured(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping of priorityClassName to tier name ('*' for the rest)")
    preemptible: dict[str, bool] = {}
    for key, value in raw.items():
        klass = str(key)
        entry = value if isinstance(value, dict) else {"tier": value}
        tier, flag = entry.get("tier"), entry.get("preemptible")
        if (
            set(entry) - {"tier", "preemptible"}
            or not entry
            or (tier is not None and not (isinstance(tier, str) and tier))
            or (flag is not None and not isinstance(flag, bool))
        ):
            raise InputError(
                f"{path}: '{klass}': expected a tier name or {{tier: NAME, preemptible: true|false}}"
            )
        if tier is not None:
            tiers[klass] = tier
        if flag is not None:
            preemptible[klass] = flag
    return TierMap(tiers, preemptible)
