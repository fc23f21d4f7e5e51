"""A differential harness: tiny planning inputs, their true optimum by brute force, and every solver path
judged against it.

The optimum is that of the documented objective (README, "What a plan's report means": the
tier-weighted queue term, lexicographic mode), and the only judge of whether a candidate plan is allowed
is the validator (:func:`gpuplan.planner.validation.validate.validate_plan`). Candidates are built from
``gpuplan.models`` alone, never from solver code, and the enumeration restates no rule, so that a rule
changed in the validator changes the brute force's optimum and a rule changed in a solver makes it
disagree with the brute force (``benchmarks/mutations.py`` checks both, one rule at a time).

Enumeration: every replica waits or takes each placement its shapes define, whatever the rules say
(:func:`placements`: every node; every set of ``gpus`` GPUs of it, every GPU for a fraction, every GPU
whose model offers the MIG profile at every memory slice as start, valid or not; each alternative);
running replicas stay, move anywhere or are preempted; each node with a sharing mode keeps it or takes
exclusive or time-slicing with the policy's replicas, whether the policy allows changes or not. What a
plan derives from its assignments is built, not enumerated: a GPU used whole or as a fraction has MIG
off (a ``set-mig-mode`` when it was on), one used through MIG instances has MIG on, and a GPU whose MIG
uses ``U`` are not all current instances gets the smallest layout the policy can allow, ``U``
(re-partition allowed) or the current instances plus ``U`` (not allowed): every other layout holding
``U`` breaks at least the rules this one breaks (layout validity and the MIG policy only get worse with
more instances or fewer kept ones). Every change has its action: preempt, migrate, start,
``set-sharing``, ``set-mig-mode``, ``destroy-mig``, ``create-mig``; each preemption and move in a round
of its own, everything else in round 1. The validator counts the budget per round and over the plan
(one round's worth, the plan made for one round), so one stop per round breaks no rule another layout
of rounds keeps, and lets through what the validator lets through (``max_moves_per_team`` is checked
per round and over the plan, as the other budgets). Instances use the default lexicographic objective
only (the weighted mode's terms are not enumerated).

Cuts (``prune=True``; :func:`optimum` with ``prune=False`` enumerates every plan above, with the bound
only, and the tests check on every stratum that both find the same optimum):

- the bound: a partial plan already leaving as much queue penalty waiting as the best valid plan found;
- the validator's own verdict on partial plans: a choice is dropped when the validator, run on the plan
  of the replicas decided so far against the input holding only those replicas (and, for one replica
  alone, the input holding only that replica), reports a rule of :data:`MONOTONE_RULES`. Each of those
  rules is judged on what the decided replicas do and can only stay broken when more replicas are
  added: more uses of a GPU, a node, a quota or a team; more moves and preemptions; a kept violation
  (only running replicas that stay) stops being kept once a replica that does not stay joins it, never
  the other way round. ``preempt-higher-tier`` is not among them (a replica started later on the node
  may make a preemption allowed); nothing else is restated;
- waiting replicas of one workload are interchangeable: their placements are taken in order.

Instances: :func:`instances`, the generic strategy (B14's default), and :data:`STRATA`, one strategy per
family of rules, built so that the family binds on most draws (one more move, preemption, GPU-equivalent,
MIG start or time-sliced fraction would pay); :data:`KNOWN_STRATUM` draws the classes of disagreement
still known, apart.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

from hypothesis import strategies as st

from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import (
    EXCLUSIVE,
    Gpu,
    MigInstance,
    Node,
    Sharing,
    TimeSliced,
    sharing_offers,
    sharing_replicas,
    sharing_text,
)
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import (
    CREATE,
    DESTROY,
    MIGRATE,
    PREEMPT,
    SET_MIG_MODE,
    SET_SHARING,
    START,
    Action,
    Assignment,
    GpuUse,
    MigLayout,
    MigMode,
    NodeSharing,
    Plan,
    PlanStatus,
    SolverReport,
    Unplaced,
)
from gpuplan.models.policy import IsolationKind
from gpuplan.models.topology import link_graph
from gpuplan.models.workload import Placement, Shape, TopologyNeed, Workload, where
from gpuplan.planner.validation.validate import validate_plan

#: The plan's time for every instance.
NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
#: Waiting time counts in hours over a base of 8 h, capped at a week (README: the objective).
BASE_HOURS, CAP_HOURS = 8, 168
#: Largest enumeration (search nodes) before an instance is given up as too large.
MAX_NODES = 400_000

CATALOG = default_catalog()
PLAIN_MODEL, MIG_MODEL = "L4-24GB", "A30-24GB"
MIG_PROFILES = ("1g.6gb", "2g.12gb", "4g.24gb")
#: Current layouts an A30 may have (None: MIG disabled).
LAYOUTS: tuple[tuple[tuple[str, int], ...] | None, ...] = (
    None,
    (),
    (("4g.24gb", 0),),
    (("2g.12gb", 0), ("2g.12gb", 2)),
    (("1g.6gb", 0), ("1g.6gb", 1), ("2g.12gb", 2)),
    (("1g.6gb", 0), ("1g.6gb", 1), ("1g.6gb", 2), ("1g.6gb", 3)),
)

#: Rules whose violation by the replicas decided so far is a violation of every plan that decides the
#: others too (see the module docstring): the only ones the search cuts on.
MONOTONE_RULES = frozenset(
    {
        # Per GPU (models' GPU rules) and per node: more users only add to them.
        "whole-exclusive",
        "gpu-overcommit",
        "mig-mixed-fraction",
        "mig-start",
        "mig-instance-shared",
        "sharing-mode",
        "sharing-replicas",
        "gpu-memory",
        "gpu-model",
        "cpu",
        "memory",
        # MIG layouts, modes and the MIG policy: the layout built holds every instance used, and grows.
        "mig-bounds",
        "mig-overlap",
        "mig-max-instances",
        "mig-compute",
        "mig-mode",
        "mig-mode-change",
        "mig-create-forbidden",
        "mig-repartition-forbidden",
        # Sharing-mode changes: fixed before any replica; a replica that stays on a changed node stays.
        "sharing-change",
        # Kept rules: broken by a replica that does not stay, it stays broken.
        "topology-nvlink",
        "topology-numa",
        "isolation",
        "quota",
        "gang",
        # Disruption: who is stopped only grows.
        "preempt-forbidden",
        "disruption-budget",
        "min-runtime",
    }
)


def demand_units(shape: Shape, catalog: HardwareCatalog) -> int:
    """GPU demand in hundredths of a GPU (README): 100 per whole GPU, the fraction rounded up, a MIG
    profile's compute share of the smallest GPU model allowed to host it, 1 for CPU-only work."""
    if shape.kind == "whole":
        return 100 * shape.gpus
    if shape.kind == "fraction":
        return max(1, -(-shape.share_milli // 10))
    if shape.kind == "mig":
        allowed = {catalog.canonical(m) for m in shape.gpu_models}
        shares = [
            m.profile_map[shape.mig_profile].compute_slices / m.compute_slices
            for m in catalog.models
            if shape.mig_profile in m.profile_map
            and (not allowed or m.name in allowed)
            and m.fits_memory("mig", shape.mig_profile, shape.gpu_memory_mib)
        ]
        return max(1, round(100 * min(shares, default=0.01)))
    return 1


def _held(inp: PlanningInput, w: Workload, catalog: HardwareCatalog) -> float:
    """GPU-equivalents ``w``'s running replicas hold: 1 per whole GPU, a fraction's milli-GPU over 1000, a
    MIG instance's compute slices over its GPU model's."""
    held = 0.0
    for place in w.running_on:
        node = inp.cluster.node_by_name[place.node]
        for g in place.gpus:
            if g.mig_profile is not None:
                model = catalog.model(node.gpu_by_index[g.index].model)
                held += model.profile_map[g.mig_profile].compute_slices / model.compute_slices
            else:
                held += 1.0 if g.milli is None else g.milli / 1000
    return held


def fair_units(inp: PlanningInput, team: str, catalog: HardwareCatalog, now: datetime = NOW) -> int:
    """The fair-share multiplier of ``team``'s queue penalty (README, "Fair share"): 1 without
    ``fair_share``; else ``round(100 x (min_factor + (max_factor - min_factor) x 2 ** (-U / S)))``, ``S``
    the team's share over every team's (the policy's teams, the workloads', those with shares or usage),
    ``U`` its usage over everyone's (given, from the history, and running work's GPU-equivalents from
    ``started_at``, or ``history_until`` when later, to now, each hour weighted ``2 ** (-age / half-life)``:
    ``h / ln 2 x (1 - 2 ** (-hours run / h))`` GPU-hours per GPU-equivalent)."""
    fair = inp.policy.fair_share
    if fair is None:
        return 1
    usage: dict[str, float] = defaultdict(float)
    for given in (fair.usage, fair.history_usage):
        for t, hours in given.items():
            usage[t] += hours
    h = fair.half_life_h
    for w in inp.workloads:
        starts = [t for t in (w.started_at, fair.history_until) if t is not None]
        if w.running_on and starts:
            ran = max(0.0, (now - max(starts)).total_seconds() / 3600)
            usage[w.team] += _held(inp, w, catalog) * h / math.log(2) * (1 - 2 ** (-ran / h))
    teams = set(inp.policy.teams) | {w.team for w in inp.workloads} | set(fair.shares)
    teams |= {t for t, u in usage.items() if u > 0}
    share = fair.shares.get(team, fair.default_share) / sum(
        fair.shares.get(t, fair.default_share) for t in teams
    )
    total = sum(usage[t] for t in teams)
    used = usage[team] / total if total > 0 else 0.0
    return max(1, round(100 * (fair.min_factor + (fair.max_factor - fair.min_factor) * 2 ** (-used / share))))


def penalty(inp: PlanningInput, w: Workload, catalog: HardwareCatalog, now: datetime = NOW) -> int:
    """The queue penalty of one waiting replica of ``w``: tier weight x demand x (8 + hours waited) x its
    team's fair-share multiplier."""
    hours = min(int(w.waited_s(now)) // 3600, CAP_HOURS)
    weight = max(1, inp.policy.tier(w.tier).weight)
    return (
        weight
        * demand_units(w.shapes[0], catalog)
        * (BASE_HOURS + hours)
        * fair_units(inp, w.team, catalog, now)
    )


def _gpu_share(shape: Shape, catalog: HardwareCatalog) -> Fraction:
    """GPU-equivalents one replica of ``shape`` asks for (README, "Fairness floor"): its whole GPUs, its
    fraction, or its MIG profile's smallest compute share on the models it allows."""
    if shape.kind == "whole":
        return Fraction(shape.gpus)
    if shape.kind == "fraction":
        return Fraction(shape.share_milli, 1000)
    allowed = {catalog.canonical(m) for m in shape.gpu_models}
    shares = [
        Fraction(m.profile_map[shape.mig_profile].compute_slices, m.compute_slices)
        for m in catalog.models
        if shape.mig_profile in m.profile_map and (not allowed or m.name in allowed)
    ]
    return min(shares, default=Fraction(1))


def _use_share(inp: PlanningInput, node: str, g: GpuUse, catalog: HardwareCatalog) -> Fraction:
    """GPU-equivalents one GPU use holds: 1 whole, milli / 1000, a MIG instance's compute share."""
    if g.mig_profile is not None:
        model = catalog.model(inp.cluster.node_by_name[node].gpu_by_index[g.index].model)
        return Fraction(model.profile_map[g.mig_profile].compute_slices, model.compute_slices)
    return Fraction(1) if g.milli is None else Fraction(g.milli, 1000)


def floor_lack(plan: Plan, inp: PlanningInput, catalog: HardwareCatalog = CATALOG) -> int:
    """Whole GPU-equivalents the teams lack of the policy's fairness floor (README, "Fairness floor"):
    each team's max-min fair entitlement of the cluster's GPUs (water-filling by the fair-share shares,
    1 each without; capped at its replicas' demand), its floor ``level x entitlement`` rounded up to the
    catalog's quota unit, and what it holds in the plan; each team's lack rounded up to a whole GPU."""
    level = inp.policy.fair_floor
    if level is None:
        return 0
    unit = 1000 * math.lcm(*(m.compute_slices for m in catalog.models))
    demand: dict[str, Fraction] = defaultdict(Fraction)
    for w in inp.workloads:
        demand[w.team] += w.replicas * _gpu_share(w.shapes[0], catalog)
    fair = inp.policy.fair_share
    weight = {
        t: Fraction(repr(1.0 if fair is None else fair.shares.get(t, fair.default_share))) for t in demand
    }
    left = Fraction(sum(len(n.gpus) for n in inp.cluster.nodes))
    entitled = {t: Fraction(0) for t in demand}
    active = {t for t in demand if demand[t] > 0}
    while active and left > 0:
        level_now = left / sum(weight[t] for t in active)
        capped = {t for t in active if demand[t] <= level_now * weight[t]}
        if not capped:
            for t in active:
                entitled[t] = level_now * weight[t]
            break
        for t in capped:
            entitled[t] = demand[t]
            left -= demand[t]
        active -= capped
    held: dict[str, Fraction] = defaultdict(Fraction)
    for a in plan.assignments:
        for g in a.gpus:
            held[inp.workload_by_id[a.workload].team] += _use_share(inp, a.node, g, catalog)
    lack = 0
    for t, e in entitled.items():
        if e > 0:
            floor = Fraction(math.ceil(Fraction(repr(level)) * e * unit), unit)
            lack += max(0, math.ceil(floor - held[t]))
    return lack


def queue_of(plan: Plan, inp: PlanningInput, catalog: HardwareCatalog = CATALOG) -> int:
    """The queue term of a plan, recomputed from its waiting list, and under a fairness floor each whole
    GPU-equivalent its teams lack of it at one more than every replica's penalty added."""
    waiting = sum(penalty(inp, inp.workload_by_id[u.workload], catalog) for u in plan.unplaced)
    lack = floor_lack(plan, inp, catalog)
    if not lack:
        return waiting
    every = sum(w.replicas * penalty(inp, w, catalog) for w in inp.workloads)
    return waiting + (1 + every) * lack


@dataclass(frozen=True)
class Option:
    """One placement of one replica: alternative, node and GPU entries."""

    alt: int
    node: str
    uses: tuple[GpuUse, ...]


@dataclass(frozen=True)
class Slot:
    """One replica to decide: its workload, index, penalty and current place (running work)."""

    workload: Workload
    replica: int
    cost: int
    running: Placement | None


def _entries(uses: Sequence[GpuUse]) -> frozenset[tuple[int, int | None, str | None, int | None]]:
    return frozenset((u.index, u.milli, u.mig_profile, u.mig_start) for u in uses)


def placements(inp: PlanningInput, w: Workload, catalog: HardwareCatalog) -> list[Option]:
    """Every placement of one replica of ``w`` as its shapes define one, whatever the rules say: on every
    node, for each alternative, every set of ``gpus`` of its GPUs (whole), every GPU (a fraction), every
    GPU whose model offers the MIG profile at every memory slice as start (MIG), none (CPU only). The
    validator judges GPU models, memory, CPU, topology, isolation, sharing and MIG modes and starts."""
    out: list[Option] = []
    for k, shape in enumerate(w.shapes):
        for node in inp.cluster.nodes:
            indices = [g.index for g in node.gpus]
            if shape.kind == "cpu":
                out.append(Option(k, node.name, ()))
            elif shape.kind == "whole":
                for combo in itertools.combinations(indices, shape.gpus):
                    out.append(Option(k, node.name, tuple(GpuUse(index=i) for i in combo)))
            elif shape.kind == "fraction":
                for i in indices:
                    out.append(Option(k, node.name, (GpuUse(index=i, milli=shape.share_milli),)))
            else:
                for g in node.gpus:
                    spec = catalog.model(g.model)
                    if shape.mig_profile not in spec.profile_map:
                        continue
                    for s in range(spec.memory_slices):
                        use = GpuUse(index=g.index, mig_profile=shape.mig_profile, mig_start=s)
                        out.append(Option(k, node.name, (use,)))
    return out


def fitting_placements(inp: PlanningInput, w: Workload, catalog: HardwareCatalog) -> list[Option]:
    """The placements of ``w`` that no single-replica rule forbids (allowed GPU models, GPU memory, CPU
    and memory of the node, topology, valid MIG starts, team-exclusive nodes, MIG mode): where the
    instance strategies put running work. Never used to judge a plan."""
    mig = inp.policy.mig
    reserved: dict[str, set[str]] = defaultdict(set)
    for rule in inp.policy.isolation:
        if rule.kind is IsolationKind.TEAM_EXCLUSIVE and rule.team is not None:
            for n in inp.cluster.nodes:
                if n.name in rule.nodes or (rule.pool and n.pool == rule.pool):
                    reserved[n.name].add(rule.team)
    out: list[Option] = []
    for k, shape in enumerate(w.shapes):
        allowed = {catalog.canonical(m) for m in shape.gpu_models}
        for node in inp.cluster.nodes:
            if any(team != w.team for team in reserved[node.name]):
                continue
            if shape.cpu_milli > node.cpu_milli or shape.memory_mib > node.memory_mib:
                continue
            ok = [g for g in node.gpus if not allowed or catalog.canonical(g.model) in allowed]
            if shape.kind == "cpu":
                out.append(Option(k, node.name, ()))
            elif shape.kind == "whole":
                plain = [
                    g.index
                    for g in ok
                    if _plain(g, catalog, mig.allow_repartition)
                    and shape.gpu_memory_mib <= catalog.model(g.model).memory_mib
                ]
                for combo in itertools.combinations(plain, shape.gpus):
                    if _topology_ok(node, shape, combo):
                        out.append(Option(k, node.name, tuple(GpuUse(index=i) for i in combo)))
            elif shape.kind == "fraction":
                for g in ok:
                    if _plain(g, catalog, mig.allow_repartition):
                        out.append(Option(k, node.name, (GpuUse(index=g.index, milli=shape.share_milli),)))
            else:
                for g in ok:
                    spec = catalog.model(g.model)
                    on = spec.mig_capable and (
                        g.mig is not None or (mig.allow_repartition and mig.allow_create)
                    )
                    prof = spec.profile_map.get(shape.mig_profile or "") if on else None
                    if prof is None or shape.gpu_memory_mib > spec.instance_memory_mib(prof.name):
                        continue
                    for s in sorted(prof.starts):
                        use = GpuUse(index=g.index, mig_profile=prof.name, mig_start=s)
                        out.append(Option(k, node.name, (use,)))
    return out


def _plain(gpu: Gpu, catalog: HardwareCatalog, switch: bool) -> bool:
    """Whether ``gpu`` may be given whole or as a fraction: MIG off, or MIG-capable and ``switch``."""
    return gpu.mig is None or (switch and catalog.model(gpu.model).mig_capable)


def _topology_ok(node: Node, shape: Shape, gpus: Sequence[int]) -> bool:
    if len(gpus) < 2 or shape.topology not in (TopologyNeed.NVLINK, TopologyNeed.NUMA):
        return True
    if shape.topology is TopologyNeed.NUMA:
        return len({node.gpu_by_index[i].numa for i in gpus}) == 1
    graph = link_graph(node)
    return all(graph.edges[a, b]["nvlink"] for a, b in itertools.combinations(sorted(gpus), 2))


def _uses_of(place: Placement) -> tuple[GpuUse, ...]:
    return tuple(
        GpuUse(index=g.index, milli=g.milli, mig_profile=g.mig_profile, mig_start=g.mig_start)
        for g in place.gpus
    )


def _stop(running: Placement | None, opt: Option | None) -> str | None:
    """How a plan stops a running replica: None (it stays, or does not run), MIGRATE or PREEMPT."""
    if running is None:
        return None
    if opt is None:
        return PREEMPT
    if opt.node != running.node or _entries(opt.uses) != _entries(_uses_of(running)):
        return MIGRATE
    return None


#: The placements a replica may take and whether it may wait.
Choices = tuple[list[Option], bool]
#: One replica's decision in a plan: its workload, replica index (in the input judged), current place
#: and placement (None: it waits).
Decision = tuple[Workload, int, Placement | None, Option | None]


class _Search:
    """Depth-first enumeration; the validator judges every complete plan, and (``prune``) partial ones
    on :data:`MONOTONE_RULES`."""

    def __init__(
        self, inp: PlanningInput, catalog: HardwareCatalog, *, prune: bool, max_nodes: int = MAX_NODES
    ) -> None:
        self.inp, self.catalog, self.prune, self.max_nodes = inp, catalog, prune, max_nodes
        self.slots: list[Slot] = []
        for w in inp.workloads:
            cost = penalty(inp, w, catalog)
            for r in range(w.replicas):
                self.slots.append(Slot(w, r, cost, w.running_on[r] if r < len(w.running_on) else None))
        order = {w.id: i for i, w in enumerate(inp.workloads)}
        # A workload's replicas are consecutive and in order: a prefix of the slots holds a prefix of them.
        self.slots.sort(key=lambda s: (-s.cost, order[s.workload.id], s.replica))
        self.options = {w.id: placements(inp, w, catalog) for w in inp.workloads}
        self.best: int | None = None
        self.plan: Plan | None = None
        self.nodes = 0
        self.leaves = 0
        #: Partial plans the validator judged, and complete plans it rejected (by first rule).
        self.partial = 0
        self.rejected: Counter[str] = Counter()
        self._choices: dict[tuple[str, int | None, frozenset[tuple[str, Sharing | None]]], Choices] = {}
        self._views: dict[tuple[str, int | None] | int, PlanningInput] = {}
        self._assignments: dict[tuple[str, int, Option], Assignment] = {}

    # --- the sharing modes and the replicas' choices ---------------------------------------------------

    def modes(self) -> list[dict[str, Sharing | None]]:
        """Every choice of sharing modes: a node with a mode keeps it or takes exclusive or time-slicing
        with the policy's replicas."""
        ts = TimeSliced.model_validate({"time-slicing": {"replicas": self.inp.policy.sharing.replicas}})
        per_node: list[list[Sharing | None]] = []
        for n in self.inp.cluster.nodes:
            choices: list[Sharing | None] = [n.sharing]
            if n.sharing is not None:
                choices += [m for m in (EXCLUSIVE, ts) if m != n.sharing]
            per_node.append(choices)
        names = [n.name for n in self.inp.cluster.nodes]
        return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*per_node)]

    def run(self) -> None:
        """Every sharing-mode choice, then every replica choice under it."""
        for modes in self.modes():
            changed = {n: m for n, m in modes.items() if m != self.inp.cluster.node_by_name[n].sharing}
            if self.prune and self.slots and self._rejects(self._plan([], changed), self._prefix(0)):
                continue
            self._dfs(0, 0, [], changed)

    def choices(self, i: int, changed: dict[str, Sharing | None]) -> tuple[list[Option], bool]:
        """The placements slot ``i`` may take (its current place first when it runs) and whether it may
        wait; with ``prune``, only those the validator does not reject for this replica alone."""
        slot = self.slots[i]
        w = slot.workload
        key = (w.id, None if slot.running is None else slot.replica, frozenset(changed.items()))
        if key in self._choices:
            return self._choices[key]
        opts = list(self.options[w.id])
        if slot.running is not None:
            here = Option(w.running_alternative(slot.replica), slot.running.node, _uses_of(slot.running))
            opts = [here] + [o for o in opts if o != here]
        may_wait = True
        if self.prune:
            view = self._single(slot)
            opts = [
                o for o in opts if not self._rejects(self._plan([(w, 0, slot.running, o)], changed), view)
            ]
            if slot.running is not None:
                may_wait = not self._rejects(self._plan([(w, 0, slot.running, None)], changed), view)
        self._choices[key] = (opts, may_wait)
        return opts, may_wait

    def _dfs(
        self, i: int, cost: int, chosen: list[Option | None], changed: dict[str, Sharing | None]
    ) -> None:
        self.nodes += 1
        if self.nodes > self.max_nodes:
            raise TooLarge
        if self.best is not None and cost >= self.best:
            return
        if i == len(self.slots):
            self._leaf(cost, chosen, changed)
            return
        slot = self.slots[i]
        opts, may_wait = self.choices(i, changed)
        floor = self._twin_floor(i, chosen, opts) if self.prune else 0
        for opt in opts[floor:]:
            if self.best is not None and cost >= self.best:
                return
            self._try(i, cost, chosen, opt, changed)
        if may_wait and (self.best is None or cost + slot.cost < self.best):
            self._try(i, cost + slot.cost, chosen, None, changed)

    def _try(
        self,
        i: int,
        cost: int,
        chosen: list[Option | None],
        opt: Option | None,
        changed: dict[str, Sharing | None],
    ) -> None:
        """Decide slot ``i`` as ``opt`` and go on, unless the plan so far breaks a monotone rule."""
        chosen.append(opt)
        last = i + 1 == len(self.slots)  # the complete plan is judged at the leaf
        if not self.prune or last or not self._rejects(self.build(chosen, changed), self._prefix(i + 1)):
            self._dfs(i + 1, cost, chosen, changed)
        chosen.pop()

    def _twin_floor(self, i: int, chosen: list[Option | None], opts: list[Option]) -> int:
        """Waiting replicas of one workload are interchangeable: their options are taken in order."""
        if i == 0:
            return 0
        slot, prev = self.slots[i], self.slots[i - 1]
        if slot.running is not None or prev.running is not None or prev.workload is not slot.workload:
            return 0
        last = chosen[-1]
        return len(opts) if last is None else opts.index(last)

    def _rejects(self, plan: Plan, view: PlanningInput) -> bool:
        """Whether the validator reports a monotone rule for ``plan`` on the partial input ``view``."""
        self.partial += 1
        return any(v.rule in MONOTONE_RULES for v in validate_plan(plan, view, self.catalog))

    def _prefix(self, k: int) -> PlanningInput:
        """The input holding only the replicas of the first ``k`` slots (a prefix of each workload's)."""
        if k == len(self.slots):
            return self.inp
        if k not in self._views:
            count = Counter(s.workload.id for s in self.slots[:k])
            workloads = tuple(
                w.model_copy(update={"replicas": count[w.id], "running_on": w.running_on[: count[w.id]]})
                for w in self.inp.workloads
                if count[w.id]
            )
            self._views[k] = PlanningInput.model_construct(
                cluster=self.inp.cluster, workloads=workloads, policy=self.inp.policy, arrivals=()
            )
        return self._views[k]

    def _single(self, slot: Slot) -> PlanningInput:
        """The input holding only ``slot``'s replica, as replica 0 of its workload."""
        key = (slot.workload.id, None if slot.running is None else slot.replica)
        if key not in self._views:
            running = () if slot.running is None else (slot.running,)
            w = slot.workload.model_copy(update={"replicas": 1, "running_on": running})
            self._views[key] = PlanningInput.model_construct(
                cluster=self.inp.cluster, workloads=(w,), policy=self.inp.policy, arrivals=()
            )
        return self._views[key]

    def _leaf(self, cost: int, chosen: list[Option | None], changed: dict[str, Sharing | None]) -> None:
        self.leaves += 1
        plan = self.build(chosen, changed)
        violations = validate_plan(plan, self.inp, self.catalog)
        if violations:
            self.rejected[violations[0].rule] += 1
            return
        # The waiting replicas' penalties bound the queue term from below while the search goes down; a
        # fairness floor's part is known at the leaf only.
        total = cost if self.inp.policy.fair_floor is None else queue_of(plan, self.inp, self.catalog)
        if self.best is None or total < self.best:
            self.best, self.plan = total, plan

    # --- plans -----------------------------------------------------------------------------------------

    def build(self, chosen: Sequence[Option | None], changed: dict[str, Sharing | None]) -> Plan:
        """The plan of one choice per replica (the first ``len(chosen)`` slots, in :attr:`slots` order)
        and the changed sharing modes."""
        return self._plan(
            [(s.workload, s.replica, s.running, opt) for s, opt in zip(self.slots, chosen, strict=False)],
            changed,
        )

    def _assignment(self, w: Workload, replica: int, opt: Option) -> Assignment:
        key = (w.id, replica, opt)
        if key not in self._assignments:
            shape = w.shapes[opt.alt]
            self._assignments[key] = Assignment(
                workload=w.id,
                replica=replica,
                node=opt.node,
                gpus=opt.uses,
                cpu_milli=shape.cpu_milli,
                memory_mib=shape.memory_mib,
                gpu_memory_mib=shape.gpu_memory_mib,
                alternative=opt.alt,
            )
        return self._assignments[key]

    def _plan(self, decisions: Sequence[Decision], changed: dict[str, Sharing | None]) -> Plan:
        """The plan of ``decisions``: assignments and waits, the MIG modes and layouts their uses need,
        the sharing modes ``changed``, and every action (round 1, but each stop in a round of its own)."""
        assignments: list[Assignment] = []
        unplaced: list[Unplaced] = []
        stops: list[Action] = []
        starts: list[Action] = []
        mig_uses: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
        plain_uses: set[tuple[str, int]] = set()
        for w, replica, running, opt in decisions:
            how = _stop(running, opt)
            if how is not None and running is not None:
                # One round per stop: no round holds more than one (per-round counts, per team too).
                rnd = len(stops) + 1
                stops.append(Action(round=rnd, kind=how, workload=w.id, replica=replica, node=running.node))
            if opt is None:
                unplaced.append(Unplaced(workload=w.id, replica=replica, code="WAITING", reason="-"))
                continue
            assignments.append(self._assignment(w, replica, opt))
            if running is None:
                to = where(opt.node, opt.uses)
                starts.append(Action(round=1, kind=START, workload=w.id, replica=replica, to=to))
            for u in opt.uses:
                if u.mig_profile is not None and u.mig_start is not None:
                    mig_uses[(opt.node, u.index)].add((u.mig_profile, u.mig_start))
                else:
                    plain_uses.add((opt.node, u.index))
        nodes = self.inp.cluster.node_by_name
        modes: list[MigMode] = []
        mode_actions: list[Action] = []
        for node, index in sorted(plain_uses | set(mig_uses)):
            was = nodes[node].gpu_by_index[index].mig is not None
            if was != ((node, index) in mig_uses):
                modes.append(MigMode(node=node, gpu=index, enabled=not was))
                switch = ("on", "off") if was else ("off", "on")
                mode_actions.append(
                    Action(round=1, kind=SET_MIG_MODE, node=node, gpu=index, from_=switch[0], to=switch[1])
                )
        layouts: list[MigLayout] = []
        mig_actions: list[Action] = []
        for (node, index), used in sorted(mig_uses.items()):
            gpu = nodes[node].gpu_by_index[index]
            current = set() if gpu.mig is None else {(i.profile, i.start) for i in gpu.mig.instances}
            if gpu.mig is not None and used <= current:
                continue
            target = used if self.inp.policy.mig.allow_repartition else used | current
            inst = tuple(
                MigInstance(profile=p, start=s) for p, s in sorted(target, key=lambda x: (x[1], x[0]))
            )
            layouts.append(MigLayout(node=node, gpu=index, instances=inst))
            for kind, pairs in ((DESTROY, current - target), (CREATE, target - current)):
                mig_actions.extend(
                    Action(round=1, kind=kind, node=node, gpu=index, detail=f"{prof}@{start}")
                    for prof, start in sorted(pairs, key=lambda x: (x[1], x[0]))
                )
        sharing: list[NodeSharing] = []
        sharing_actions: list[Action] = []
        for name, mode in sorted(changed.items()):
            assert mode is not None
            sharing.append(NodeSharing(node=name, sharing=mode))
            before = sharing_text(nodes[name].sharing)
            sharing_actions.append(
                Action(round=1, kind=SET_SHARING, node=name, from_=before, to=sharing_text(mode))
            )
        return Plan(
            status=PlanStatus.FEASIBLE,
            solver=SolverReport(name="brute-force"),
            assignments=tuple(assignments),
            unplaced=tuple(unplaced),
            mig_layouts=tuple(layouts),
            mig_modes=tuple(modes),
            sharing=tuple(sharing),
            actions=(*stops, *sharing_actions, *mode_actions, *mig_actions, *starts),
            provenance={"now": NOW.isoformat()},
        )


class TooLarge(Exception):
    """The enumeration passed its node limit (:data:`MAX_NODES` by default)."""


class NoValidPlan(Exception):
    """The validator accepts no plan at all (running work that breaks a rule no allowed change repairs);
    the message counts the rules that rejected the complete plans."""


@dataclass(frozen=True)
class Optimum:
    """The true optimum of an instance, a plan reaching it, and the size of the search."""

    cost: int
    plan: Plan
    nodes: int
    leaves: int


def optimum(
    inp: PlanningInput,
    catalog: HardwareCatalog = CATALOG,
    *,
    prune: bool = True,
    max_nodes: int = MAX_NODES,
) -> Optimum:
    """The least queue term over every plan the validator accepts (raises :class:`TooLarge` past
    ``max_nodes`` search nodes, :class:`NoValidPlan` when it accepts none)."""
    search = _Search(inp, catalog, prune=prune, max_nodes=max_nodes)
    search.run()
    if search.best is None or search.plan is None:
        raise NoValidPlan(", ".join(f"{rule} x{n}" for rule, n in search.rejected.most_common()))
    return Optimum(search.best, search.plan, search.nodes, search.leaves)


# --- instances -------------------------------------------------------------------------------------------

TEAMS = ("a", "b")
#: What an instance may hold beyond waiting work on fixed layouts and modes: running work (in a state
#: the validator accepts), running work in any state the input check accepts (``drift``: over quota,
#: across isolation, part of a gang), MIG-capable GPUs with MIG disabled, a policy allowing MIG
#: re-partitions, one allowing sharing-mode changes.
FEATURES = frozenset({"running", "drift", "mig-off", "repartition", "sharing-change"})
TIERS = ("latency-sensitive", "standard", "background")


@st.composite
def shapes(draw: st.DrawFn, *, mig: bool) -> dict[str, Any]:
    """One shape: whole GPUs, a fraction, a MIG profile or CPU only, with optional limits."""
    kinds = ["whole", "fraction", *(["mig"] if mig else []), "cpu"]
    kind = draw(st.sampled_from(kinds)) if draw(st.integers(0, 9)) else "cpu"
    kind = kind if kind != "cpu" or draw(st.booleans()) else "whole"
    out: dict[str, Any] = {}
    if kind == "whole":
        out["gpus"] = draw(st.sampled_from([1, 1, 2]))
        if out["gpus"] == 2 and draw(st.integers(0, 3)) == 0:
            out["topology"] = draw(st.sampled_from(["nvlink", "numa"]))
    elif kind == "fraction":
        out["gpu_milli"] = draw(st.sampled_from([250, 500, 700]))
    elif kind == "mig":
        out["mig_profile"] = draw(st.sampled_from(MIG_PROFILES))
    if kind != "cpu" and draw(st.integers(0, 3)) == 0:
        out["gpu_memory_mib"] = 4000 if kind == "mig" else draw(st.sampled_from([4000, 10000, 20000]))
    if kind in ("whole", "fraction") and draw(st.integers(0, 4)) == 0:
        out["gpu_models"] = [draw(st.sampled_from([PLAIN_MODEL, MIG_MODEL]))]
    out["cpu_milli"] = draw(st.sampled_from([0, 1000, 4000]))
    return out


@st.composite
def instances(
    draw: st.DrawFn, *, features: frozenset[str] = FEATURES, max_replicas: int = 6
) -> PlanningInput:
    """A tiny planning input: up to 3 nodes of 1-2 GPUs (L4 or A30 with a MIG layout), up to
    ``max_replicas`` replicas (whole, fractions, MIG, CPU, alternatives, gangs, GPU memory), running work
    that may break quotas or isolation, and a policy with quotas, isolation, budgets and MIG and
    sharing-change permissions. ``features`` (of :data:`FEATURES`) says which of running work (legal or
    drifted), GPUs with MIG disabled, MIG re-partitions and sharing-mode changes may be drawn."""
    nodes: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 3))):
        model = draw(st.sampled_from([PLAIN_MODEL, MIG_MODEL]))
        n_gpus = draw(st.sampled_from([1, 1, 2]))
        gpus: list[dict[str, Any]] = []
        for g in range(n_gpus):
            entry: dict[str, Any] = {"index": g, "model": model, "numa": draw(st.sampled_from([0, 0, 1]))}
            if model == MIG_MODEL:
                layout = draw(st.sampled_from(LAYOUTS if "mig-off" in features else LAYOUTS[1:]))
                if layout is not None:
                    entry["mig"] = {"instances": [{"profile": p, "start": s} for p, s in layout]}
            gpus.append(entry)
        node: dict[str, Any] = {
            "name": f"n{i}",
            "cpu_milli": draw(st.sampled_from([4000, 64000])),
            "memory_mib": 65536,
            "gpus": gpus,
            "labels": draw(st.sampled_from([{"rack": "r0"}, {"rack": "r1"}, {"rack": "r0"}, {}])),
        }
        if n_gpus == 2 and draw(st.booleans()):
            node["links"] = [{"a": 0, "b": 1, "kind": draw(st.sampled_from(["NV4", "PIX"]))}]
        if draw(st.booleans()):
            node["pool"] = "p"
        mode = draw(st.sampled_from([None, "exclusive", 1, 2]))
        if mode is not None:
            node["sharing"] = mode if mode == "exclusive" else {"time-slicing": {"replicas": mode}}
        nodes.append(node)
    has_mig = any(n["gpus"][0]["model"] == MIG_MODEL for n in nodes)
    workloads: list[dict[str, Any]] = []
    left = draw(st.integers(1, max_replicas))
    gang = 0
    while left > 0:
        replicas = draw(st.integers(1, min(3, left)))
        left -= replicas
        w: dict[str, Any] = {
            "id": f"w{len(workloads)}",
            "team": draw(st.sampled_from(TEAMS)),
            "tier": draw(st.sampled_from(TIERS)),
            "replicas": replicas,
            "preemptible": draw(st.booleans()),
            "queued_since": (NOW - timedelta(hours=draw(st.sampled_from([0, 3, 30, 500])))).isoformat(),
        }
        if draw(st.integers(0, 3)) == 0:
            w["alternatives"] = [draw(shapes(mig=has_mig)) for _ in range(2)]
        else:
            w.update(draw(shapes(mig=has_mig)))
        if draw(st.integers(0, 4)) == 0:
            w["gang"] = f"g{gang % 2}"
            gang += 1
            if draw(st.booleans()):
                w["gang_domain"] = "rack"
        workloads.append(w)
    policy = draw(policies(features))
    inp = PlanningInput.model_validate(
        {"cluster": {"nodes": nodes}, "workloads": workloads, "policy": policy}
    )
    if "running" in features or "drift" in features:
        inp = draw(with_running(inp, drift="drift" in features))
    return inp


@st.composite
def policies(draw: st.DrawFn, features: frozenset[str]) -> dict[str, Any]:
    """Quotas, isolation, disruption budget, MIG and sharing-change permissions (re-partitions and
    sharing changes only among ``features``)."""
    policy: dict[str, Any] = {"teams": list(TEAMS)}
    if draw(st.integers(0, 2)) == 0:
        quota: dict[str, Any] = {"team": "a", "gpus": draw(st.sampled_from([0, 0.5, 1, 2]))}
        quota["borrow"] = draw(st.booleans())
        if draw(st.integers(0, 3)) == 0:
            quota["gpu_model"] = draw(st.sampled_from([PLAIN_MODEL, MIG_MODEL]))
        policy["quotas"] = [quota]
    rule = draw(st.integers(0, 5))
    if rule == 0:
        policy["isolation"] = [{"kind": "team-exclusive", "team": "b", "nodes": ["n0"]}]
    elif rule == 1:
        policy["isolation"] = [{"kind": "no-shared-gpu-across-teams"}]
    elif rule == 2:
        policy["isolation"] = [{"kind": "tiers-no-share", "tiers": ["latency-sensitive", "background"]}]
    policy["disruption"] = {
        "max_moves_per_round": draw(st.integers(0, 2)),
        "max_preemptions_per_round": draw(st.integers(0, 2)),
        "max_moves_per_team": draw(st.sampled_from([None, None, 1])),
        "min_runtime_s": draw(st.sampled_from([0, 0, 7200])),
        "preempt_latency_sensitive": draw(st.booleans()),
        "preempt_only_for_higher_tier": draw(st.booleans()),
    }
    repartition = "repartition" in features and draw(st.booleans())
    policy["mig"] = {"allow_create": draw(st.booleans()), "allow_repartition": repartition}
    change = "sharing-change" in features and draw(st.booleans())
    policy["sharing"] = {"allow_change": change, "replicas": draw(st.sampled_from([2, 4]))}
    return policy


@st.composite
def with_running(draw: st.DrawFn, inp: PlanningInput, *, drift: bool) -> PlanningInput:
    """``inp`` with some replicas already running where the GPUs, node capacity, sharing modes and MIG
    instances let them run; without running work if the product's own input check refuses the state,
    or, unless ``drift``, if the state breaks a rule of the validator or runs a gang in part (quotas,
    isolation, gangs: fleets drift into such states)."""
    from gpuplan.planner.validation.occupancy import running_conflicts

    held: dict[tuple[str, int], list[tuple[GpuUse, int]]] = defaultdict(list)
    cpu: Counter[str] = Counter()
    data = [w.model_dump(mode="json", by_alias=True, exclude_defaults=True) for w in inp.workloads]
    for w, d in zip(inp.workloads, data, strict=True):
        if draw(st.integers(0, 2)) != 0:
            continue
        shape = w.shapes[0]
        opts = [o for o in fitting_placements(inp, w, CATALOG) if o.alt == 0]
        places: list[dict[str, Any]] = []
        for _ in range(draw(st.integers(1, w.replicas))):
            free = [o for o in opts if _runs(inp, o, shape, held, cpu)]
            if not free:
                break
            o = draw(st.sampled_from(free))
            for u in o.uses:
                held[(o.node, u.index)].append((u, shape.gpu_memory_mib))
            cpu[o.node] += shape.cpu_milli
            gpus = [u.model_dump(exclude_none=True) for u in o.uses]
            places.append({"node": o.node, "gpus": gpus, **({"alternative": 0} if w.alternatives else {})})
        if places:
            d["running_on"] = places
            d["started_at"] = (NOW - timedelta(hours=draw(st.sampled_from([1, 5])))).isoformat()
            d.pop("queued_since", None)
    found = PlanningInput.model_validate(
        {
            "cluster": inp.cluster.model_dump(mode="json", by_alias=True, exclude_none=True),
            "workloads": data,
            "policy": inp.policy.model_dump(mode="json"),
        }
    )
    if running_conflicts(found.cluster, found.workloads, CATALOG):
        return inp
    if not drift and (gang_in_part(found) or validate_plan(current_plan(found), found, CATALOG)):
        return inp
    return found


def gang_in_part(inp: PlanningInput) -> bool:
    """Whether some gang runs only in part (drift: a plan may keep it so, or complete or stop it)."""
    running: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for w in inp.workloads:
        if w.gang_id is not None:
            running[w.gang_id] += len(w.running_on)
            total[w.gang_id] += w.replicas
    return any(0 < running[g] < total[g] for g in total)


def current_plan(inp: PlanningInput) -> Plan:
    """The plan that keeps what runs where it runs and starts nothing (it breaks a rule only if the
    current state does)."""
    assignments: list[Assignment] = []
    unplaced: list[Unplaced] = []
    for w in inp.workloads:
        for r in range(w.replicas):
            if r >= len(w.running_on):
                unplaced.append(Unplaced(workload=w.id, replica=r, code="WAITING", reason="-"))
                continue
            place = w.running_on[r]
            shape = w.shapes[place.alternative or 0]
            assignments.append(
                Assignment(
                    workload=w.id,
                    replica=r,
                    node=place.node,
                    gpus=tuple(GpuUse.model_validate(g.model_dump()) for g in place.gpus),
                    cpu_milli=shape.cpu_milli,
                    memory_mib=shape.memory_mib,
                    gpu_memory_mib=shape.gpu_memory_mib,
                    alternative=place.alternative or 0,
                )
            )
    return Plan(
        status=PlanStatus.FEASIBLE,
        solver=SolverReport(name="current state"),
        assignments=tuple(assignments),
        unplaced=tuple(unplaced),
        provenance={"now": NOW.isoformat()},
    )


def _runs(
    inp: PlanningInput,
    o: Option,
    shape: Shape,
    held: dict[tuple[str, int], list[tuple[GpuUse, int]]],
    cpu: Counter[str],
) -> bool:
    """Whether a running replica can hold ``o`` beside what runs: free whole GPUs, fractions within a
    GPU, its memory and the sharing mode, existing MIG instances not in use, node CPU."""
    node = inp.cluster.node_by_name[o.node]
    if cpu[o.node] + shape.cpu_milli > node.cpu_milli:
        return False
    for u in o.uses:
        gpu = node.gpu_by_index[u.index]
        there = [h for h, _ in held[(o.node, u.index)]]
        if u.mig_profile is not None:
            current = set() if gpu.mig is None else {(i.profile, i.start) for i in gpu.mig.instances}
            if (u.mig_profile, u.mig_start) not in current or any(
                (h.mig_profile, h.mig_start) == (u.mig_profile, u.mig_start) for h in there
            ):
                return False
        elif (node.sharing is not None and not sharing_offers(node.sharing, u.kind)) or (
            u.kind == "whole" and there
        ):
            return False
        elif u.kind == "fraction":
            limit = sharing_replicas(node.sharing)
            milli = sum(h.milli or 0 for h in there) + (u.milli or 0)
            memory = sum(m for _, m in held[(o.node, u.index)]) + shape.gpu_memory_mib
            if any(h.kind == "whole" for h in there) or milli > 1000:
                return False
            if (limit is not None and len(there) + 1 > limit) or memory > CATALOG.model(gpu.model).memory_mib:
                return False
    return True


# --- strata: instances made for one rule each --------------------------------------------------------------
#
# The generic strategy above rarely draws an instance on which a disruption budget, the minimum runtime,
# a quota or a time-sliced GPU's replicas decide the optimum. Each stratum below is built around one
# family of rules so that it binds on most draws (moving or preempting one more replica, starting one
# more fraction, using one more GPU-equivalent or one more MIG start would pay), with the rest of the
# instance drawn small. Running work is placed where the input check and the validator accept it (a
# drawn state they refuse loses its running work instead).


def _ago(hours: float) -> str:
    return (NOW - timedelta(hours=hours)).isoformat()


def _node(name: str, gpus: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": name, "cpu_milli": 64000, "memory_mib": 65536, "gpus": gpus, **extra}


def _l4(n: int) -> list[dict[str, Any]]:
    return [{"index": i, "model": PLAIN_MODEL} for i in range(n)]


def _a30(*layouts: tuple[tuple[str, int], ...] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, lay in enumerate(layouts):
        gpu: dict[str, Any] = {"index": i, "model": MIG_MODEL}
        if lay is not None:
            gpu["mig"] = {"instances": [{"profile": p, "start": s} for p, s in lay]}
        out.append(gpu)
    return out


def _ts(replicas: int) -> dict[str, Any]:
    return {"time-slicing": {"replicas": replicas}}


def _running(
    wid: str, node: str, held: list[dict[str, Any]], *, hours: float = 5, **extra: Any
) -> dict[str, Any]:
    """A one-replica workload running on GPU entries ``held`` of ``node`` since ``hours`` ago."""
    return {
        "id": wid,
        "started_at": _ago(hours),
        "running_on": [{"node": node, "gpus": held}],
        **extra,
    }


def _waiting(data: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in data.items() if k not in ("running_on", "started_at")}
    out.setdefault("queued_since", _ago(0))
    return out


def stratum_input(
    nodes: list[dict[str, Any]],
    workloads: list[dict[str, Any]],
    policy: dict[str, Any],
    *,
    drift: bool = False,
) -> PlanningInput:
    """The input, or, when the input check refuses its running state or (unless ``drift``) the validator
    finds it breaks a rule or a gang runs in part, the same input with nothing running."""
    from pydantic import ValidationError

    from gpuplan.planner.validation.occupancy import running_conflicts

    data = {"cluster": {"nodes": nodes}, "workloads": workloads, "policy": policy}
    try:
        inp = PlanningInput.model_validate(data)
    except ValidationError:
        inp = None
    if inp is not None and not running_conflicts(inp.cluster, inp.workloads, CATALOG):
        broken = gang_in_part(inp) or bool(validate_plan(current_plan(inp), inp, CATALOG))
        if drift or not broken:
            return inp
    data["workloads"] = [_waiting(w) for w in workloads]
    return PlanningInput.model_validate(data)


def _disruption(draw: st.DrawFn, **fixed: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "max_moves_per_round": draw(st.sampled_from([0, 1, 1, 2])),
        "max_preemptions_per_round": draw(st.sampled_from([0, 1, 1, 2])),
        "max_moves_per_team": draw(st.sampled_from([None, None, 0, 1])),
        "min_runtime_s": 0,
        "preempt_latency_sensitive": draw(st.integers(0, 4)) == 0,
        "preempt_only_for_higher_tier": draw(st.booleans()),
    }
    out.update(fixed)
    return out


@st.composite
def moves_stratum(draw: st.DrawFn, *, small: bool = False) -> PlanningInput:
    """``max_moves_per_round`` (and per team) binds: nodes of two GPUs each hold one running one-GPU
    replica (not preemptible, mostly), and two-GPU replicas wait: each one placed needs one move to free
    a node, so with ``k`` nodes ``k // 2`` moves pay (``small``: up to 3 nodes)."""
    n = draw(st.sampled_from([2, 3] if small else [2, 4, 4, 4]))
    mode = draw(st.sampled_from([None, "exclusive"]))
    nodes = [_node(f"n{i}", _l4(2), **({"sharing": mode} if mode else {})) for i in range(n)]
    workloads: list[dict[str, Any]] = []
    for i in range(n - draw(st.sampled_from([0, 0, 0, 1]))):
        workloads.append(
            _running(
                f"r{i}",
                f"n{i}",
                [{"index": draw(st.integers(0, 1))}],
                gpus=1,
                team=draw(st.sampled_from(TEAMS)),
                tier=draw(st.sampled_from(["background", "standard"])),
                preemptible=draw(st.integers(0, 3)) == 0,
            )
        )
    workloads.append(
        {
            "id": "w",
            "team": draw(st.sampled_from(TEAMS)),
            "gpus": 2,
            "replicas": max(1, n // 2 - draw(st.sampled_from([0, 0, 0, 1]))),
            "tier": draw(st.sampled_from(["standard", "latency-sensitive"])),
            "queued_since": _ago(draw(st.sampled_from([0, 3, 30]))),
        }
    )
    policy = {
        "teams": list(TEAMS),
        "disruption": _disruption(
            draw,
            max_moves_per_round=draw(st.sampled_from([0, 1, 1, 1, 2])),
            max_preemptions_per_round=draw(st.sampled_from([0, 0, 1])),
        ),
    }
    return stratum_input(nodes, workloads, policy)


@st.composite
def preemptions_stratum(draw: st.DrawFn) -> PlanningInput:
    """``max_preemptions_per_round``, ``preempt_only_for_higher_tier``, ``preempt_latency_sensitive`` and
    the ``preemptible`` flag bind: every GPU runs a one-GPU replica (mixed tiers, mostly preemptible) and
    one-GPU replicas of mixed tiers wait, more of them than the budget frees."""
    n = draw(st.integers(1, 2))
    per = draw(st.integers(1, 2))
    nodes = [_node(f"n{i}", _l4(per)) for i in range(n)]
    workloads: list[dict[str, Any]] = []
    for i in range(n):
        for g in range(per):
            workloads.append(
                _running(
                    f"r{i}{g}",
                    f"n{i}",
                    [{"index": g}],
                    gpus=1,
                    tier=draw(st.sampled_from(["background", "background", "standard", "latency-sensitive"])),
                    preemptible=draw(st.integers(0, 4)) > 0,
                )
            )
    for j in range(draw(st.integers(1, 3))):
        workloads.append(
            {
                "id": f"w{j}",
                "gpus": 1,
                "tier": draw(st.sampled_from(TIERS)),
                "queued_since": _ago(draw(st.sampled_from([0, 3, 30]))),
            }
        )
    policy = {"disruption": _disruption(draw, max_moves_per_round=0)}
    return stratum_input(nodes, workloads, policy)


@st.composite
def min_runtime_stratum(draw: st.DrawFn) -> PlanningInput:
    """``min_runtime_s`` binds: running replicas started 0.5 to 5 h ago on every GPU, some younger than the
    minimum runtime, higher-tier replicas waiting, moves and preemptions in the budget."""
    n = draw(st.integers(1, 2))
    nodes = [_node(f"n{i}", _l4(2)) for i in range(n)]
    workloads: list[dict[str, Any]] = []
    for i in range(n):
        for g in range(2 if i == 0 else draw(st.integers(1, 2))):
            workloads.append(
                _running(
                    f"r{i}{g}",
                    f"n{i}",
                    [{"index": g}],
                    hours=draw(st.sampled_from([0.5, 1, 3, 5])),
                    gpus=1,
                    tier=draw(st.sampled_from(["background", "standard"])),
                    preemptible=True,
                )
            )
    for j in range(draw(st.integers(1, 2))):
        workloads.append(
            {
                "id": f"w{j}",
                "gpus": draw(st.sampled_from([1, 1, 2])),
                "tier": draw(st.sampled_from(["standard", "latency-sensitive"])),
                "queued_since": _ago(draw(st.sampled_from([0, 3, 30]))),
            }
        )
    policy = {
        "disruption": _disruption(
            draw,
            min_runtime_s=draw(st.sampled_from([3600, 7200, 7200])),
            max_preemptions_per_round=draw(st.sampled_from([1, 2])),
        )
    }
    return stratum_input(nodes, workloads, policy)


QUOTA_LAYOUTS: tuple[tuple[tuple[str, int], ...], ...] = (
    (("1g.6gb", 0), ("1g.6gb", 1), ("2g.12gb", 2)),
    (("2g.12gb", 0), ("2g.12gb", 2)),
    (("1g.6gb", 0), ("1g.6gb", 1), ("1g.6gb", 2), ("1g.6gb", 3)),
)


@st.composite
def quota_stratum(draw: st.DrawFn) -> PlanningInput:
    """A team quota binds by fractions and MIG slices: team a asks for more GPU-equivalents than its
    quota (0.25 to 1.5, borrowing or not, per GPU model or pool sometimes) on a cluster with room for
    more (an L4 node for whole GPUs and fractions, an A30 in MIG mode)."""
    nodes = [
        _node("n0", _l4(2), pool="p", **({"sharing": _ts(4)} if draw(st.booleans()) else {})),
        _node("n1", _a30(draw(st.sampled_from(QUOTA_LAYOUTS)))),
    ]
    workloads: list[dict[str, Any]] = []
    for j in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["fraction", "fraction", "mig", "mig", "whole"]))
        w: dict[str, Any] = {
            "id": f"a{j}",
            "team": "a",
            "tier": draw(st.sampled_from(TIERS)),
            "replicas": draw(st.integers(1, 2)),
            "preemptible": draw(st.booleans()),
            "queued_since": _ago(draw(st.sampled_from([0, 3, 30]))),
        }
        if kind == "fraction":
            w["gpu_milli"] = draw(st.sampled_from([250, 500, 700]))
        elif kind == "mig":
            w["mig_profile"] = draw(st.sampled_from(["1g.6gb", "2g.12gb"]))
        else:
            w["gpus"] = 1
        workloads.append(w)
    if draw(st.booleans()):
        workloads.append({"id": "b", "team": "b", "gpu_milli": 500, "replicas": draw(st.integers(1, 2))})
    quota: dict[str, Any] = {
        "team": "a",
        "gpus": draw(st.sampled_from([0.25, 0.5, 0.75, 1, 1.25, 1.5])),
        "borrow": draw(st.integers(0, 2)) == 0,
    }
    scope = draw(st.integers(0, 5))
    if scope == 0:
        quota["gpu_model"] = draw(st.sampled_from([PLAIN_MODEL, MIG_MODEL]))
    elif scope == 1:
        quota["pool"] = "p"
    policy = {"teams": list(TEAMS), "quotas": [quota], "disruption": _disruption(draw)}
    inp = stratum_input(nodes, workloads, policy)
    return draw(with_running(inp, drift=False)) if draw(st.booleans()) else inp


#: A30 layouts where a 2g.12gb fits only at an invalid start (1) or over an instance in use.
MIG_STRATUM_LAYOUTS: tuple[tuple[tuple[str, int], ...] | None, ...] = (
    (("1g.6gb", 0), ("1g.6gb", 3)),
    (("1g.6gb", 0), ("1g.6gb", 3)),
    (("1g.6gb", 0), ("1g.6gb", 3)),
    (("1g.6gb", 1), ("1g.6gb", 2)),
    (("1g.6gb", 0), ("1g.6gb", 1), ("2g.12gb", 2)),
    (("2g.12gb", 2),),
    (("1g.6gb", 0),),
    (),
    None,
)


@st.composite
def mig_stratum(draw: st.DrawFn, *, small: bool = False) -> PlanningInput:
    """MIG starts, overlaps, layouts and modes bind: A30s whose 1g.6gb instances run replicas at starts
    that leave room for a 2g.12gb only at an invalid start or over them, 1g/2g/4g replicas waiting,
    creating, re-partitioning and stopping allowed or not (``small``: one GPU)."""
    gpus = 1 if small else draw(st.integers(1, 2))
    layouts = [draw(st.sampled_from(MIG_STRATUM_LAYOUTS)) for _ in range(gpus)]
    nodes = [_node("n0", _a30(*layouts))]
    workloads: list[dict[str, Any]] = []
    for g, lay in enumerate(layouts):
        for prof, start in lay or ():
            if prof == "1g.6gb" and draw(st.integers(0, 5)) > 0:
                workloads.append(
                    _running(
                        f"r{g}{start}",
                        "n0",
                        [{"index": g, "mig_profile": prof, "mig_start": start}],
                        mig_profile=prof,
                        tier=draw(st.sampled_from(["background", "standard"])),
                        preemptible=draw(st.booleans()),
                    )
                )
    for j in range(draw(st.integers(1, 2))):
        workloads.append(
            {
                "id": f"w{j}",
                "mig_profile": draw(st.sampled_from(["2g.12gb", "2g.12gb", "1g.6gb", "4g.24gb"])),
                "replicas": draw(st.integers(1, 2)),
                "tier": draw(st.sampled_from(["standard", "latency-sensitive"])),
                "queued_since": _ago(draw(st.sampled_from([0, 3, 30]))),
            }
        )
    if draw(st.integers(0, 3)) == 0:
        workloads.append({"id": "x", "gpus": 1, "queued_since": _ago(3)})
    policy = {
        "mig": {"allow_create": draw(st.integers(0, 3)) > 0, "allow_repartition": draw(st.booleans())},
        "disruption": _disruption(
            draw,
            max_moves_per_round=draw(st.sampled_from([0, 0, 1])),
            max_preemptions_per_round=draw(st.sampled_from([0, 0, 1])),
        ),
    }
    return stratum_input(nodes, workloads, policy)


@st.composite
def time_slicing_stratum(draw: st.DrawFn) -> PlanningInput:
    """A time-sliced GPU's ``replicas`` binds: one-GPU nodes time-sliced 1 to 3 ways (or exclusive, with a
    change allowed or not), more small fractions than the replicas, some running."""
    nodes: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 2))):
        ways = draw(st.sampled_from([1, 2, 2, 3, 0]))  # 0: exclusive
        nodes.append(_node(f"n{i}", _l4(1), sharing=_ts(ways) if ways else "exclusive"))
    workloads: list[dict[str, Any]] = []
    for j in range(draw(st.integers(1, 2))):
        workloads.append(
            {
                "id": f"f{j}",
                "gpu_milli": draw(st.sampled_from([250, 250, 300, 500])),
                "replicas": draw(st.integers(1, 3)),
                "tier": draw(st.sampled_from(TIERS)),
                "preemptible": draw(st.booleans()),
                "queued_since": _ago(draw(st.sampled_from([0, 3, 30]))),
            }
        )
    policy = {
        "sharing": {"allow_change": draw(st.booleans()), "replicas": draw(st.sampled_from([2, 3]))},
        "disruption": _disruption(draw, max_moves_per_round=0, max_preemptions_per_round=0),
    }
    inp = stratum_input(nodes, workloads, policy)
    return draw(with_running(inp, drift=False)) if draw(st.booleans()) else inp


@st.composite
def isolation_stratum(draw: st.DrawFn) -> PlanningInput:
    """Isolation binds: fractions and whole GPUs of teams a and b and of several tiers that would share a
    GPU or a reserved node, under team-exclusive nodes (by name or pool), no GPU shared across teams, or
    tiers that do not share."""
    nodes = [_node(f"n{i}", _l4(draw(st.integers(1, 2))), pool="p" if i == 0 else "q") for i in range(2)]
    workloads: list[dict[str, Any]] = []
    for j in range(draw(st.integers(2, 3))):
        w: dict[str, Any] = {
            "id": f"w{j}",
            "team": draw(st.sampled_from(TEAMS)),
            "tier": draw(st.sampled_from(TIERS)),
            "replicas": draw(st.integers(1, 2)),
            "queued_since": _ago(draw(st.sampled_from([0, 3, 30]))),
        }
        if draw(st.integers(0, 3)) == 0:
            w["gpus"] = 1
        else:
            w["gpu_milli"] = draw(st.sampled_from([250, 500]))
        workloads.append(w)
    rules: list[dict[str, Any]] = []
    for kind in draw(st.sets(st.sampled_from(["exclusive", "teams", "tiers"]), min_size=1, max_size=2)):
        if kind == "exclusive":
            where_ = {"nodes": ["n0"]} if draw(st.booleans()) else {"pool": "p"}
            rules.append({"kind": "team-exclusive", "team": draw(st.sampled_from(TEAMS)), **where_})
        elif kind == "teams":
            rules.append({"kind": "no-shared-gpu-across-teams"})
        else:
            rules.append({"kind": "tiers-no-share", "tiers": ["latency-sensitive", "background"]})
    policy = {"teams": list(TEAMS), "isolation": rules}
    inp = stratum_input(nodes, workloads, policy)
    return draw(with_running(inp, drift=False)) if draw(st.booleans()) else inp


@st.composite
def gang_stratum(draw: st.DrawFn) -> PlanningInput:
    """Gangs bind: a gang of 2-3 replicas (one workload, or two sharing a gang name), with a rack domain
    or not, on nodes with room for part of it or in one rack only, beside single replicas; sometimes a
    whole gang already runs."""
    labels = [{"rack": "r0"}, {"rack": "r1"}, {"rack": "r0"}, {}]
    nodes = [
        _node(f"n{i}", _l4(draw(st.integers(1, 2))), labels=draw(st.sampled_from(labels)))
        for i in range(draw(st.integers(2, 3)))
    ]
    workloads: list[dict[str, Any]] = []
    domain = {"gang_domain": "rack"} if draw(st.booleans()) else {}
    queued = _ago(draw(st.sampled_from([0, 3, 30])))
    if draw(st.booleans()):
        workloads.append(
            {
                "id": "g",
                "gpus": 1,
                "replicas": draw(st.integers(2, 3)),
                "gang": "true",
                "queued_since": queued,
            }
            | domain
        )
    else:
        for j in range(2):
            workloads.append(
                {"id": f"g{j}", "gpus": 1, "gang": "g", "queued_since": queued, "tier": "standard"} | domain
            )
    for j in range(draw(st.integers(0, 2))):
        workloads.append(
            {
                "id": f"s{j}",
                "gpus": 1,
                "tier": draw(st.sampled_from(TIERS)),
                "queued_since": _ago(draw(st.sampled_from([0, 3, 30]))),
            }
        )
    policy = {"disruption": _disruption(draw)}
    inp = stratum_input(nodes, workloads, policy)
    return draw(with_running(inp, drift=False)) if draw(st.integers(0, 2)) == 0 else inp


@st.composite
def sharing_stratum(draw: st.DrawFn) -> PlanningInput:
    """Sharing-mode and MIG-mode changes on drained and busy nodes: exclusive and time-sliced L4 nodes and
    an A30 with MIG on or off, changes allowed or not, fractions, whole GPUs and MIG replicas waiting,
    running work on some nodes; no move or preemption in the budget, so a busy node keeps its modes."""
    nodes: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 2))):
        ways = draw(st.sampled_from([0, 0, 2]))  # 0: exclusive
        nodes.append(_node(f"n{i}", _l4(1), sharing=_ts(ways) if ways else "exclusive"))
    if draw(st.booleans()):
        nodes.append(
            _node("m", _a30(draw(st.sampled_from([None, (), (("4g.24gb", 0),)]))), sharing="exclusive")
        )
    workloads: list[dict[str, Any]] = []
    for j in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["fraction", "fraction", "whole", "mig"]))
        w: dict[str, Any] = {
            "id": f"w{j}",
            "tier": draw(st.sampled_from(TIERS)),
            "replicas": draw(st.integers(1, 2)),
            "queued_since": _ago(draw(st.sampled_from([0, 3, 30]))),
        }
        if kind == "fraction":
            w["gpu_milli"] = draw(st.sampled_from([250, 500]))
        elif kind == "whole":
            w["gpus"] = 1
        else:
            w["mig_profile"] = draw(st.sampled_from(["2g.12gb", "4g.24gb"]))
        workloads.append(w)
    policy = {
        "sharing": {"allow_change": draw(st.integers(0, 3)) > 0, "replicas": draw(st.sampled_from([2, 4]))},
        "mig": {"allow_create": True, "allow_repartition": draw(st.booleans())},
        "disruption": _disruption(draw, max_moves_per_round=0, max_preemptions_per_round=0),
    }
    inp = stratum_input(nodes, workloads, policy)
    return draw(with_running(inp, drift=False)) if draw(st.booleans()) else inp


@st.composite
def fair_share_stratum(draw: st.DrawFn) -> PlanningInput:
    """The fair share binds: teams a and b (and c, in the shares only) have usage given (one of them more),
    from the history and from their running work (not preemptible), and replicas of both, of one shape
    and of equal or neighbouring tiers, wait for less room than they ask; shares, half-life and factor
    range are drawn (ranges that keep the tiers in order)."""
    nodes = [_node(f"n{i}", _l4(n)) for i, n in enumerate(draw(st.sampled_from([[1], [2], [1, 1]])))]
    workloads: list[dict[str, Any]] = []
    if draw(st.booleans()):
        held = [{"index": 0}] if draw(st.booleans()) else [{"index": 0, "milli": 500}]
        workloads.append(
            _running(
                "r", "n0", held, hours=draw(st.sampled_from([1, 5, 30])), team=draw(st.sampled_from(TEAMS)),
                **({"gpus": 1} if "milli" not in held[0] else {"gpu_milli": 500}),
            )
        )  # fmt: skip
    tiers = draw(
        st.sampled_from([["standard"], ["standard", "background"], ["latency-sensitive", "standard"]])
    )
    ask = {"gpu_milli": 500} if draw(st.integers(0, 2)) == 0 else {"gpus": 1}
    for j in range(3):
        w: dict[str, Any] = {
            "id": f"w{j}",
            "team": TEAMS[j % 2],
            "tier": draw(st.sampled_from(tiers)),
            "replicas": draw(st.integers(1, 3 if "gpu_milli" in ask else 2)),
            "queued_since": _ago(draw(st.sampled_from([0, 0, 0, 3, 30]))),
            **ask,
        }
        workloads.append(w)
    low, high = draw(st.sampled_from([(1.0, 2.0), (1.0, 2.9), (0.5, 1.0), (2.0, 2.0)]))
    over = draw(st.sampled_from(TEAMS))
    fair: dict[str, Any] = {
        "half_life_h": draw(st.sampled_from([1, 24, 168])),
        "min_factor": low,
        "max_factor": high,
        "usage": {over: draw(st.sampled_from([2, 40])), **({} if draw(st.booleans()) else {"b": 1})},
    }
    if draw(st.booleans()):
        fair["shares"] = {"a": draw(st.sampled_from([1, 3])), "c": draw(st.sampled_from([1, 2]))}
    if draw(st.booleans()):
        fair["history_usage"] = {draw(st.sampled_from(TEAMS)): draw(st.sampled_from([1, 20]))}
        fair["history_until"] = _ago(draw(st.sampled_from([0.5, 2])))
    return stratum_input(nodes, workloads, {"fair_share": fair})


@st.composite
def fair_floor_stratum(draw: st.DrawFn) -> PlanningInput:
    """The fairness floor binds: teams a and b ask for more than the cluster holds, a's work ranks
    higher (a better tier, or a longer wait), so the queue alone would serve a first; the floor (drawn
    from 0.3 to 1) asks for b's max-min fair share, with shares drawn or equal, some work running."""
    nodes = [_node(f"n{i}", _l4(n)) for i, n in enumerate(draw(st.sampled_from([[1], [2], [1, 1]])))]
    workloads: list[dict[str, Any]] = []
    if draw(st.booleans()):
        held = [{"index": 0}] if draw(st.booleans()) else [{"index": 0, "milli": 500}]
        workloads.append(
            _running(
                "r", "n0", held, hours=draw(st.sampled_from([1, 5])), team=draw(st.sampled_from(TEAMS)),
                **({"gpus": 1} if "milli" not in held[0] else {"gpu_milli": 500}),
            )
        )  # fmt: skip
    high, low = draw(st.sampled_from([("standard", "background"), ("standard", "standard")]))
    for j, (team, tier) in enumerate([("a", high), ("b", low), (draw(st.sampled_from(TEAMS)), low)]):
        ask = (
            {"gpu_milli": draw(st.sampled_from([300, 500]))} if draw(st.integers(0, 2)) == 0 else {"gpus": 1}
        )
        workloads.append(
            {
                "id": f"w{j}",
                "team": team,
                "tier": tier,
                "replicas": draw(st.integers(1, 2)),
                "queued_since": _ago(draw(st.sampled_from([30, 0])) if team == "a" else 0),
                **ask,
            }
        )
    policy: dict[str, Any] = {"fair_floor": draw(st.sampled_from([0.3, 0.5, 0.8, 1.0]))}
    if draw(st.booleans()):
        policy["fair_share"] = {"shares": {"a": 1, "b": draw(st.sampled_from([1, 2, 3]))}, "max_factor": 1.0}
    return stratum_input(nodes, workloads, policy)


@st.composite
def fair_preemption_stratum(draw: st.DrawFn) -> PlanningInput:
    """Fair-sharing preemption binds: every GPU runs one-GPU preemptible work of team b (over its share by
    its usage), b's quota borrowing or not, and team a's (below its share) replicas of the same tier or a
    lower one wait; ``preempt_borrowed`` drawn, preemptions in the budget only for a higher tier."""
    per = draw(st.integers(1, 2))
    nodes = [_node("n0", _l4(per))]
    tier = draw(st.sampled_from(["standard", "background"]))
    workloads: list[dict[str, Any]] = [
        _running(f"r{g}", "n0", [{"index": g}], gpus=1, team="b", tier=tier,
                 preemptible=draw(st.integers(0, 3)) > 0)
        for g in range(per)
    ]  # fmt: skip
    for j in range(draw(st.integers(1, 2))):
        workloads.append(
            {
                "id": f"w{j}",
                "team": "a",
                "gpus": 1,
                "tier": draw(st.sampled_from([tier, tier, "background"])),
                "queued_since": _ago(draw(st.sampled_from([0, 3]))),
            }
        )
    fair = {"usage": {"b": draw(st.sampled_from([5, 50]))}, "max_factor": 1.0,
            "preempt_borrowed": draw(st.integers(0, 3)) > 0}  # fmt: skip
    policy: dict[str, Any] = {
        "fair_share": fair,
        "disruption": _disruption(
            draw, max_moves_per_round=0, preempt_only_for_higher_tier=True, preempt_latency_sensitive=False
        ),
    }
    if draw(st.integers(0, 3)) > 0:
        policy["quotas"] = [{"team": "b", "gpus": draw(st.sampled_from([0, 1])), "borrow": True}]
    return stratum_input(nodes, workloads, policy)


@st.composite
def known_stratum(draw: st.DrawFn) -> PlanningInput:
    """The classes of disagreement found last (each a strict xfail of
    ``tests/solvers/test_differential.py`` until fixed): a gang partly running (drift), a sharing change
    that pays only once a busy node is drained (its running work preempted or moved within the budget),
    and ``max_moves_per_team`` binding (the validator used to check it per round only and the fleet
    engine and the large-cluster path not at all)."""
    kind = draw(st.sampled_from(["gang", "sharing", "team-moves"]))
    if kind == "team-moves":
        n = draw(st.sampled_from([3, 4]))
        nodes = [_node(f"n{i}", _l4(2)) for i in range(n)]
        team = draw(st.sampled_from(TEAMS))
        workloads = [
            _running(
                f"r{i}", f"n{i}", [{"index": draw(st.integers(0, 1))}], gpus=1, team=team, tier="background"
            )
            for i in range(n)
        ]
        workloads.append({"id": "w", "team": team, "gpus": 2, "replicas": n // 2, "queued_since": _ago(3)})
        budget = {"max_moves_per_round": 2, "max_moves_per_team": draw(st.integers(0, 1))}
        return stratum_input(nodes, workloads, {"teams": list(TEAMS), "disruption": budget})
    if kind == "gang":
        nodes = [_node("n0", _l4(draw(st.integers(1, 2))))]
        gang: dict[str, Any] = _running(
            "g", "n0", [{"index": 0}], gpus=1, replicas=draw(st.integers(2, 3)), gang="true", preemptible=True
        )
        workloads = [gang]
        if draw(st.booleans()):
            workloads.append({"id": "w", "cpu_milli": 1000, "queued_since": _ago(3)})
        policy = {"disruption": _disruption(draw)}
        return stratum_input(nodes, workloads, policy, drift=True)
    nodes = [_node("n0", _l4(draw(st.integers(1, 2))), sharing="exclusive")]
    workloads = [
        _running("r", "n0", [{"index": 0}], gpus=1, tier="background", preemptible=True),
        {
            "id": "f",
            "gpu_milli": 500,
            "replicas": draw(st.integers(2, 4)),
            "tier": draw(st.sampled_from(["standard", "latency-sensitive"])),
            "queued_since": _ago(3),
        },
    ]
    policy = {
        "sharing": {"allow_change": True, "replicas": 2},
        "disruption": _disruption(
            draw, max_preemptions_per_round=1, max_moves_per_round=draw(st.integers(0, 1))
        ),
    }
    return stratum_input(nodes, workloads, policy)


def strata(*, small: bool = False) -> dict[str, st.SearchStrategy[PlanningInput]]:
    """The strata by name (``small``: the larger ones cut down, for plain enumeration)."""
    return {
        "moves": moves_stratum(small=small),
        "preemptions": preemptions_stratum(),
        "min-runtime": min_runtime_stratum(),
        "quota": quota_stratum(),
        "mig": mig_stratum(small=small),
        "time-slicing": time_slicing_stratum(),
        "isolation": isolation_stratum(),
        "gangs": gang_stratum(),
        "sharing": sharing_stratum(),
        "fair-share": fair_share_stratum(),
        "fair-floor": fair_floor_stratum(),
        "fair-preemption": fair_preemption_stratum(),
    }


#: The strata by name: each strategy makes the rules its docstring names bind.
STRATA = strata()
#: The stratum of the disagreements still known (drawn apart, so that the others stay strict).
KNOWN_STRATUM = known_stratum()


# --- solver paths ------------------------------------------------------------------------------------------

#: Every solver path, by name: the registry's back-ends and the cpsat paths forced onto tiny inputs.
PATHS = (
    "cpsat",
    "cpsat-fleet",
    "cpsat-large",
    "cpsat-pop",
    "milp-highs",
    "milp-cbc",
    "greedy-fgd",
    "best-fit",
    "first-fit",
)
#: Disagreement kinds.
#: ``harness``: a valid plan better than the brute force's optimum (the harness itself would be wrong).
KINDS = ("crash", "invalid", "bound-above-optimum", "optimal-not-optimum", "objective-misreported", "harness")


@contextlib.contextmanager
def forced(path: str) -> Iterator[str]:
    """The solver name for ``path``, with the cpsat thresholds set so that a tiny input takes it:
    ``cpsat-fleet`` the fleet engine and its neighbourhood search (no monolithic model), ``cpsat-large``
    the large-cluster path (candidate nodes, or the transition and neighbourhood search when running
    work may move), ``cpsat-pop`` the POP split (parts of about 2 GPUs, from 3 GPUs up). Restored on exit."""
    from gpuplan.solvers.cpsat import candidates, pools, solver

    saved = (solver.MONOLITHIC_REPLICAS, candidates.FULL_MODEL_PAIRS, pools.POOL_GPUS)
    try:
        if path == "cpsat-fleet":
            solver.MONOLITHIC_REPLICAS = 0
        elif path == "cpsat-large":
            candidates.FULL_MODEL_PAIRS = 0
        elif path == "cpsat-pop":
            pools.POOL_GPUS = 2  # a node has at most 2 GPUs here: a part never splits again
        yield "cpsat" if path.startswith("cpsat") else path
    finally:
        solver.MONOLITHIC_REPLICAS, candidates.FULL_MODEL_PAIRS, pools.POOL_GPUS = saved


@dataclass(frozen=True)
class Verdict:
    """What one solver path did on one instance: disagreements with the brute force (kind, sentence)."""

    path: str
    problems: tuple[tuple[str, str], ...]
    status: str | None = None
    objective: float | None = None
    bound: float | None = None


def judge(inp: PlanningInput, best: int, path: str, *, time_limit_s: float = 5.0) -> Verdict:
    """Plan ``inp`` on ``path`` through ``make_plan`` and compare it with the true optimum ``best``."""
    from gpuplan.planner.planning import make_plan
    from gpuplan.planner.validation.errors import InvalidPlanError

    try:
        with forced(path) as name:
            plan = make_plan(
                inp, solver=name, now=NOW, time_limit_s=time_limit_s, deterministic=True, num_workers=1
            )
    except InvalidPlanError as exc:
        return Verdict(path, (("invalid", str(exc).splitlines()[0][:300]),))
    except Exception as exc:
        last = traceback.format_exception(exc)[-1].strip()
        return Verdict(path, (("crash", f"{type(exc).__name__}: {last[:300]}"),))
    problems: list[tuple[str, str]] = []
    violations = validate_plan(plan, inp, CATALOG)
    if violations:
        problems.append(("invalid", f"{violations[0].rule}: {violations[0].message}"))
    queue = queue_of(plan, inp)
    report = plan.solver
    if report.objective is None or not math.isclose(report.objective, queue):
        problems.append(("objective-misreported", f"reported {report.objective}, recomputed {queue}"))
    if report.best_bound is not None and report.best_bound > best + 1e-6:
        problems.append(
            ("bound-above-optimum", f"bound {report.best_bound:g} ({report.bound_source}) > optimum {best}")
        )
    if plan.status is PlanStatus.OPTIMAL and queue != best:
        problems.append(("optimal-not-optimum", f"OPTIMAL at {queue}, optimum {best}"))
    if not violations and queue < best:
        problems.append(("harness", f"valid plan at {queue} below the brute-force optimum {best}"))
    return Verdict(path, tuple(problems), plan.status.value, report.objective, report.best_bound)
