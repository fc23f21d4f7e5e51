"""Tiers and preemptibility: tiers come from the priority class, named in the tier map (or gpuplan's own
``gpuplan-<tier>`` class), else ranked by priority onto the policy's tiers: over every PriorityClass of
the cluster when ``kubectl get priorityclasses -o json`` is given (:func:`load_priority_classes`), so that
the mapping does not depend on which classes have pods today, else over the classes of the pods. Pods of
the least important tier are preemptible unless the tier map says otherwise. A mapping that differs from
the previous run's is a warning (:func:`mapping_changes`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuplan.models import BACKGROUND, LATENCY_SENSITIVE, STANDARD
from gpuplan.models.base import InputError
from gpuplan.models.policy import Tier
from gpuplan.planner.io.files import read_structured
from gpuplan.planner.io.importers.kubernetes.pods import _Pod

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


@dataclass(frozen=True)
class PriorityClass:
    """A ``scheduling.k8s.io/v1`` PriorityClass: its value, whether its pods may preempt others
    (``preemptionPolicy``), and whether pods without a class get it (``globalDefault``)."""

    name: str
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    global_default: bool = False


#: gpuplan's own PriorityClasses (the export's ``gpuplan-<tier>``) map back to their tier.
OWN_CLASS_PREFIX = "gpuplan-"
#: The largest value a user-defined PriorityClass may have (larger ones are Kubernetes' system classes).
MAX_USER_PRIORITY = 1_000_000_000


def load_priority_classes(path: Path) -> tuple[PriorityClass, ...]:
    """The PriorityClasses of ``kubectl get priorityclasses -o json`` (a list with ``items``, or a bare
    list); a bad value is one line naming the class and the field."""
    raw = read_structured(Path(path))
    items = raw.get("items") if isinstance(raw, dict) else raw
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InputError(f"{path}: expected the output of `kubectl get priorityclasses -o json`")
    out = []
    for i, item in enumerate(items):
        if item.get("kind", "PriorityClass") != "PriorityClass":
            raise InputError(f"{path}: items[{i}]: a {item.get('kind')}, expected a PriorityClass")
        name = str((item.get("metadata") or {}).get("name") or "")
        value = item.get("value")
        if not name:
            raise InputError(f"{path}: items[{i}]: no metadata.name")
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"{path}: PriorityClass '{name}': value: '{value}' is not a whole number")
        policy = str(item.get("preemptionPolicy") or "PreemptLowerPriority")
        out.append(PriorityClass(name, value, policy, bool(item.get("globalDefault"))))
    return tuple(out)


def mapping_changes(previous: Mapping[str, str], current: Mapping[str, str], source: str) -> list[str]:
    """A warning per priority class that maps to another tier than in the previous run (``source`` says
    where that mapping was read)."""
    return [
        f"priority class '{c}' now maps to tier '{current[c]}', to '{previous[c]}' in {source}: the "
        "tiers (and which pods are preemptible) changed although the class did not"
        for c in sorted(current.keys() & previous.keys())
        if c and current[c] != previous[c]
    ]


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


def assign_tiers(
    pods: Sequence[_Pod],
    tier_map: TierMap,
    tiers: Sequence[Tier],
    classes: Sequence[PriorityClass] | None = None,
) -> tuple[TierChoice, ...]:
    """Set each pod's ``tier`` and ``preemptible`` and say how each priority class was mapped (every class
    of ``classes`` too, those without pods with ``pods`` 0).

    A class the tier map names keeps its tier, and so does gpuplan's own ``gpuplan-<tier>``. Without a
    ``*`` entry the other classes are ranked by priority onto the policy's tiers (:func:`_ranked_tier`):
    by the ``value`` of every PriorityClass in ``classes`` when given (the mapping is then a function of
    the cluster's classes, not of which have pods), else by the pods' ``spec.priority``. A class without
    a value, and pods without a class, get ``standard`` (or the middle tier), unless ``classes`` has a
    ``globalDefault`` class: pods without a class get its tier. A pod is preemptible when the tier map
    says so for its class (or ``*``), else when its tier is the policy's least important one: Kubernetes
    preempts any pod for one of higher priority (``preemptionPolicy: Never`` only stops a pod from
    preempting others), and the lowest tier is the one every other tier outranks.
    """
    order = _tier_order(tiers)
    index = {name: i for i, name in enumerate(order)}
    default = STANDARD if STANDARD in index else order[(len(order) - 1) // 2]
    values: dict[str, int | None] = {}
    counts: Counter[str] = Counter()
    known = {c.name: c for c in classes or ()}
    for c in known.values():
        values[c.name] = c.value
    fallback = next((c for c in known.values() if c.global_default), None)
    for pod in pods:
        klass = pod.klass or (fallback.name if fallback is not None else "")
        counts[klass] += 1
        seen = values.get(klass)
        if klass in known:
            continue
        if klass and pod.spec_priority is not None:
            values[klass] = pod.spec_priority if seen is None else max(seen, pod.spec_priority)
        else:
            values.setdefault(klass, None)
    own = {f"{OWN_CLASS_PREFIX}{t}": t for t in order}
    named = {c: tier_map.tiers[c] for c in values if c and c in tier_map.tiers}
    named.update({c: own[c] for c in values if c in own and c not in named})
    rest = tier_map.tiers.get("*")
    # Kubernetes' own classes (above the largest user value, system-node-critical and
    # system-cluster-critical) are named, and do not take a rank from the user classes.
    anchors = [
        (v, index[named[c]])
        for c, v in values.items()
        if c in named and v is not None and v <= MAX_USER_PRIORITY and named[c] in index
    ]
    levels = sorted(
        {v for c, v in values.items() if c and v is not None and v <= MAX_USER_PRIORITY}, reverse=True
    )
    chosen: dict[str, tuple[str, str]] = {}
    for klass, value in values.items():
        if klass in named:
            chosen[klass] = (named[klass], "tier map" if klass in tier_map.tiers else "gpuplan's own class")
        elif rest is not None:
            chosen[klass] = (rest, "tier map '*'")
        elif not klass:
            chosen[klass] = (default, "no priority class")
        elif value is None:
            chosen[klass] = (default, "no spec.priority to rank it by")
        else:
            k = _ranked_tier(value, levels, anchors, len(order))
            by = "value" if klass in known else "spec.priority"
            chosen[klass] = (order[k], f"{by} {value}, ranked")
        if klass in known and known[klass].global_default:
            chosen[klass] = (chosen[klass][0], chosen[klass][1] + "; globalDefault")
        if klass in known and known[klass].preemption_policy == "Never":
            # Its pods never preempt others; that says nothing about whether they may be preempted.
            chosen[klass] = (chosen[klass][0], chosen[klass][1] + "; preemptionPolicy Never")
    lowest = order[-1] if len(order) > 1 else None
    for pod in pods:
        klass = pod.klass or (fallback.name if fallback is not None else "")
        tier = chosen[klass][0]
        pod.values["tier"] = tier
        flag = tier_map.preemptible.get(klass)
        if flag is None and klass not in named:
            flag = tier_map.preemptible.get("*")
        if (tier == lowest) if flag is None else flag:
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
