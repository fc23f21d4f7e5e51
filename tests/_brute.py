"""A differential harness: tiny planning inputs, their true optimum by brute force, and every solver path
judged against it.

The optimum is that of the documented objective (README, "What a plan's report means": the
tier-weighted queue term, lexicographic mode), and the only judge of whether a candidate plan is allowed
is the validator (:func:`gpuplan.planner.validation.validate.validate_plan`). Candidates are built from
``gpuplan.models`` alone, never from solver code, so the harness stays independent of what it checks.

Enumeration: for every replica, waiting or each placement (node, GPU set, fraction of a GPU with MIG off,
MIG profile at each valid start of a GPU in MIG mode, for each alternative shape; with
``mig.allow_repartition`` a MIG-capable GPU may also be used in the other MIG mode, which the plan then
switches with a ``set-mig-mode`` action); running replicas stay, move or are preempted; each node with a
sharing mode keeps it or, when the policy allows changes, takes the other mode (``exclusive`` and
``time-slicing`` with the policy's replicas, as the README says). MIG layouts are not enumerated: a GPU
whose MIG uses ``U`` are not all current instances gets the smallest layout the policy can allow, ``U``
(re-partition allowed) or the current instances plus ``U`` (not allowed); every other layout holding
``U`` breaks at least the rules this one breaks (layout validity and the MIG policy only get worse with
more instances or fewer kept ones); each change has its ``destroy-mig`` and ``create-mig`` actions. All
actions are in round 1: one plan is one round of the disruption budget. Two plans the validator accepts
today are left out on purpose, as the README's rules do not allow them: a node time-sliced with other
replicas than the policy's, and moves spread over several rounds beyond the per-round budget. Instances
use the default lexicographic objective only (the weighted mode's terms are not enumerated).

Branches are cut only by necessary conditions that restate a validator rule exactly and can only get
worse as more replicas are placed (per-GPU and per-node capacity, sharing modes, MIG layout validity,
quotas, isolation, gangs, the disruption budget, min-runtime; a quota or isolation rule that the current
state breaks is cut only once a replica that does not stay where it runs adds to it, as the validator
then reports it instead of keeping it) and by the bound (a partial plan already
leaving as much queue penalty waiting as the best plan found). :func:`optimum` with ``prune=False``
checks only the bound, so the tests can confirm the cuts on the smallest inputs.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
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
    mig_layout_problems,
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
from gpuplan.models.workload import GpuRef, Placement, Shape, TopologyNeed, Workload, where
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


def penalty(inp: PlanningInput, w: Workload, catalog: HardwareCatalog, now: datetime = NOW) -> int:
    """The queue penalty of one waiting replica of ``w``: tier weight x demand x (8 + hours waited)."""
    hours = min(int(w.waited_s(now)) // 3600, CAP_HOURS)
    weight = max(1, inp.policy.tier(w.tier).weight)
    return weight * demand_units(w.shapes[0], catalog) * (BASE_HOURS + hours)


def queue_of(plan: Plan, inp: PlanningInput, catalog: HardwareCatalog = CATALOG) -> int:
    """The queue term of a plan, recomputed from its waiting list."""
    return sum(penalty(inp, inp.workload_by_id[u.workload], catalog) for u in plan.unplaced)


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


def _entries(uses: Sequence[GpuUse | GpuRef]) -> frozenset[tuple[int, int | None, str | None, int | None]]:
    return frozenset((u.index, u.milli, u.mig_profile, u.mig_start) for u in uses)


def placements(inp: PlanningInput, w: Workload, catalog: HardwareCatalog) -> list[Option]:
    """Every placement of one replica of ``w`` that no single-replica rule forbids: allowed GPU models,
    GPU memory of whole GPUs and MIG instances, CPU and memory of the node, topology, MIG starts,
    team-exclusive nodes, and MIG mode: whole GPUs and fractions where it is off, MIG instances where it
    is on, and on a MIG-capable GPU either way when the policy allows re-partitioning (the plan then
    switches the mode: MIG on also needs ``mig.allow_create``)."""
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


@dataclass
class _State:
    """What a partial plan holds, per GPU, node, quota, team and gang (for the exact cuts). ``fresh``,
    ``quota_fresh`` and ``firm_fresh`` count what replicas that do not stay where they run add there: a
    quota or isolation rule the current state already breaks is only kept (not a violation) while every
    replica it concerns stays."""

    inp: PlanningInput
    catalog: HardwareCatalog
    modes: dict[str, Sharing | None]
    uses: dict[tuple[str, int], list[tuple[Workload, GpuUse, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    cpu: Counter[str] = field(default_factory=Counter)
    mem: Counter[str] = field(default_factory=Counter)
    quota: list[Fraction] = field(default_factory=list)
    firm: list[Fraction] = field(default_factory=list)
    fresh: Counter[tuple[str, int]] = field(default_factory=Counter)
    quota_fresh: list[int] = field(default_factory=list)
    firm_fresh: list[int] = field(default_factory=list)
    moves: int = 0
    team_moves: Counter[str] = field(default_factory=Counter)
    preempts: int = 0
    gang_placed: Counter[str] = field(default_factory=Counter)
    gang_waiting: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.quota = [Fraction(0)] * len(self.inp.policy.quotas)
        self.firm = [Fraction(0)] * len(self.inp.policy.quotas)
        self.quota_fresh = [0] * len(self.inp.policy.quotas)
        self.firm_fresh = [0] * len(self.inp.policy.quotas)

    def gpu_ok(self, key: tuple[str, int]) -> bool:
        """Whether the GPU's uses (the new one last) keep the validator's per-GPU rules."""
        node = self.inp.cluster.node_by_name[key[0]]
        gpu = node.gpu_by_index[key[1]]
        entries = self.uses[key]
        use = entries[-1][1]
        spec = self.catalog.model(gpu.model)
        migs = [u for _, u, _ in entries if u.mig_profile is not None]
        if migs and len(migs) < len(entries):
            return False
        if migs:
            pairs = [(u.mig_profile or "", u.mig_start or 0) for u in migs]
            if len(set(pairs)) < len(pairs):
                return False
            current = set() if gpu.mig is None else {(i.profile, i.start) for i in gpu.mig.instances}
            mig = self.inp.policy.mig
            if not mig.allow_create and not set(pairs) <= current:
                return False
            target = set(pairs) if mig.allow_repartition or set(pairs) <= current else set(pairs) | current
            inst = tuple(MigInstance(profile=p, start=s) for p, s in sorted(target))
            return not mig_layout_problems(spec, inst) and self._shared_ok(key, entries)
        mode = self.modes[key[0]]
        if mode is not None and not sharing_offers(mode, use.kind):
            return False
        if use.kind == "whole":
            return len(entries) == 1
        if any(u.kind == "whole" for _, u, _ in entries):
            return False
        if sum(u.milli or 0 for _, u, _ in entries) > 1000:
            return False
        limit = sharing_replicas(mode)
        if limit is not None and len(entries) > limit:
            return False
        return sum(m for _, _, m in entries) <= spec.memory_mib and self._shared_ok(key, entries)

    def _shared_ok(self, key: tuple[str, int], entries: Sequence[tuple[Workload, GpuUse, int]]) -> bool:
        """The isolation rules on one GPU, or only kept broken (every replica there stays)."""
        if not self.fresh[key]:
            return True
        for rule in self.inp.policy.isolation:
            if rule.kind is IsolationKind.NO_SHARED_GPU_ACROSS_TEAMS:
                if len({ww.team for ww, _, _ in entries}) > 1:
                    return False
            elif rule.kind is IsolationKind.TIERS_NO_SHARE and (
                len({ww.tier for ww, _, _ in entries} & set(rule.tiers)) > 1
            ):
                return False
        return True


class _Search:
    """Depth-first enumeration with exact cuts; the validator judges every complete plan."""

    def __init__(self, inp: PlanningInput, catalog: HardwareCatalog, *, prune: bool) -> None:
        self.inp, self.catalog, self.prune = inp, catalog, prune
        self.slots: list[Slot] = []
        for w in inp.workloads:
            cost = penalty(inp, w, catalog)
            for r in range(w.replicas):
                self.slots.append(Slot(w, r, cost, w.running_on[r] if r < len(w.running_on) else None))
        order = {w.id: i for i, w in enumerate(inp.workloads)}
        self.slots.sort(key=lambda s: (-s.cost, order[s.workload.id], s.replica))
        self.options = {w.id: placements(inp, w, catalog) for w in inp.workloads}
        self.best: int | None = None
        self.plan: Plan | None = None
        self.nodes = 0
        self.leaves = 0
        self.rejected: Counter[str] = Counter()
        self.quota_models = [
            None if q.gpu_model is None else catalog.canonical(q.gpu_model) for q in inp.policy.quotas
        ]

    def run(self) -> None:
        """Every sharing-mode choice, then every replica choice under it."""
        policy = self.inp.policy
        choices: list[list[Sharing | None]] = []
        for n in self.inp.cluster.nodes:
            modes: list[Sharing | None] = [n.sharing]
            if n.sharing is not None and policy.sharing.allow_change and any(g.mig is None for g in n.gpus):
                other: Sharing = (
                    TimeSliced.model_validate({"time-slicing": {"replicas": policy.sharing.replicas}})
                    if n.sharing == EXCLUSIVE
                    else EXCLUSIVE
                )
                modes.append(other)
            choices.append(modes)
        names = [n.name for n in self.inp.cluster.nodes]
        for combo in itertools.product(*choices):
            modes_by = dict(zip(names, combo, strict=True))
            changed = {n for n, m in modes_by.items() if m != self.inp.cluster.node_by_name[n].sharing}
            state = _State(self.inp, self.catalog, modes_by)
            self._dfs(0, 0, state, [], changed)

    def _dfs(self, i: int, cost: int, st_: _State, chosen: list[Option | None], changed: set[str]) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise TooLarge
        if self.best is not None and cost >= self.best:
            return
        if i == len(self.slots):
            self._leaf(cost, chosen, st_, changed)
            return
        slot = self.slots[i]
        prev = self._twin_floor(i, chosen)
        opts = self.options[slot.workload.id]
        for k, opt in enumerate(opts):
            if k < prev:
                continue
            if self.prune and not self._apply(slot, opt, st_, changed):
                continue
            chosen.append(opt)
            self._dfs(i + 1, cost, st_, chosen, changed)
            chosen.pop()
            if self.prune:
                self._undo(slot, opt, st_)
        if self.prune and not self._wait(slot, st_, +1):
            return
        chosen.append(None)
        self._dfs(i + 1, cost + slot.cost, st_, chosen, changed)
        chosen.pop()
        if self.prune:
            self._wait(slot, st_, -1)

    def _twin_floor(self, i: int, chosen: list[Option | None]) -> int:
        """Waiting replicas of one workload are interchangeable: their options are taken in order."""
        if i == 0:
            return 0
        slot, prev = self.slots[i], self.slots[i - 1]
        if slot.running is not None or prev.running is not None or prev.workload is not slot.workload:
            return 0
        last = chosen[-1]
        opts = self.options[slot.workload.id]
        return len(opts) if last is None else opts.index(last)

    def _stop(self, slot: Slot, opt: Option | None) -> str | None:
        """How the plan stops a running replica: None (stays), MIGRATE or PREEMPT."""
        if slot.running is None:
            return None
        if opt is None:
            return PREEMPT
        if opt.node != slot.running.node or _entries(opt.uses) != _entries(slot.running.gpus):
            return MIGRATE
        return None

    def _may_stop(self, slot: Slot, how: str) -> bool:
        policy = self.inp.policy
        budget = policy.disruption
        w = slot.workload
        started = w.started_at
        if (
            budget.min_runtime_s > 0
            and started is not None
            and (NOW - started).total_seconds() < budget.min_runtime_s
        ):
            return False
        if how == PREEMPT:
            tier_ok = policy.tier(w.tier).may_be_preempted or budget.preempt_latency_sensitive
            return w.preemptible and tier_ok
        return True

    def _apply(self, slot: Slot, opt: Option, st_: _State, changed: set[str]) -> bool:
        w = slot.workload
        shape = w.shapes[opt.alt]
        how = self._stop(slot, opt)
        running = slot.running
        if how is None and running is not None and running.node in changed:
            node = self.inp.cluster.node_by_name[running.node]
            if any(node.gpu_by_index[g.index].mig is None for g in running.gpus):
                return False  # a node whose mode changes is drained first
        if how == MIGRATE and not self._may_stop(slot, how):
            return False
        budget = self.inp.policy.disruption
        if how == MIGRATE:
            st_.moves += 1
            st_.team_moves[w.team] += 1
        gang = w.gang_id
        if gang is not None:
            st_.gang_placed[gang] += 1
        st_.cpu[opt.node] += shape.cpu_milli
        st_.mem[opt.node] += shape.memory_mib
        stays = running is not None and how is None
        for u in opt.uses:
            st_.uses[(opt.node, u.index)].append((w, u, shape.gpu_memory_mib))
            st_.fresh[(opt.node, u.index)] += not stays
        self._quota(w, opt, st_, +1, fresh=not stays)
        ok = (
            st_.moves <= budget.max_moves_per_round
            and (budget.max_moves_per_team is None or st_.team_moves[w.team] <= budget.max_moves_per_team)
            and (gang is None or st_.gang_waiting[gang] == 0)
            and self._node_ok(opt.node, st_)
            and all(st_.gpu_ok((opt.node, u.index)) for u in opt.uses)
            and self._quota_ok(st_)
        )
        if not ok:
            self._undo(slot, opt, st_)
        return ok

    def _undo(self, slot: Slot, opt: Option, st_: _State) -> None:
        w = slot.workload
        shape = w.shapes[opt.alt]
        if self._stop(slot, opt) == MIGRATE:
            st_.moves -= 1
            st_.team_moves[w.team] -= 1
        if w.gang_id is not None:
            st_.gang_placed[w.gang_id] -= 1
        st_.cpu[opt.node] -= shape.cpu_milli
        st_.mem[opt.node] -= shape.memory_mib
        stays = slot.running is not None and self._stop(slot, opt) is None
        for u in opt.uses:
            st_.uses[(opt.node, u.index)].pop()
            st_.fresh[(opt.node, u.index)] -= not stays
        self._quota(w, opt, st_, -1, fresh=not stays)

    def _wait(self, slot: Slot, st_: _State, sign: int) -> bool:
        """Mark (``sign`` +1) or unmark (-1) a replica waiting; False when waiting breaks a rule."""
        w = slot.workload
        preempt = slot.running is not None
        if sign > 0:
            if preempt and not self._may_stop(slot, PREEMPT):
                return False
            if w.gang_id is not None and st_.gang_placed[w.gang_id] > 0:
                return False
            if preempt and st_.preempts + 1 > self.inp.policy.disruption.max_preemptions_per_round:
                return False
        st_.preempts += sign * preempt
        if w.gang_id is not None:
            st_.gang_waiting[w.gang_id] += sign
        return True

    def _node_ok(self, node: str, st_: _State) -> bool:
        n = self.inp.cluster.node_by_name[node]
        return st_.cpu[node] <= n.cpu_milli and st_.mem[node] <= n.memory_mib

    def _quota(self, w: Workload, opt: Option, st_: _State, sign: int, *, fresh: bool) -> None:
        """Add (``sign`` +1) or take off (-1) one replica's GPU-equivalents in each quota it counts
        against; ``fresh``: the replica does not stay where it runs."""
        node = self.inp.cluster.node_by_name[opt.node]
        for qi, q in enumerate(self.inp.policy.quotas):
            if q.team != w.team or (q.pool is not None and node.pool != q.pool):
                continue
            eq = Fraction(0)
            for u in opt.uses:
                gpu = node.gpu_by_index[u.index]
                if (
                    self.quota_models[qi] is not None
                    and self.catalog.canonical(gpu.model) != self.quota_models[qi]
                ):
                    continue
                if u.mig_profile is not None:
                    spec = self.catalog.model(gpu.model)
                    eq += Fraction(spec.profile_map[u.mig_profile].compute_slices, spec.compute_slices)
                elif u.milli is not None:
                    eq += Fraction(u.milli, 1000)
                else:
                    eq += 1
            st_.quota[qi] += sign * eq
            st_.quota_fresh[qi] += sign * (fresh and eq > 0)
            if not w.preemptible:
                st_.firm[qi] += sign * eq
                st_.firm_fresh[qi] += sign * (fresh and eq > 0)

    def _quota_ok(self, st_: _State) -> bool:
        """Every quota holds, or is only kept broken (no replica that counts against it is new there)."""
        for qi, q in enumerate(self.inp.policy.quotas):
            limit = Fraction(repr(q.gpus))
            used, fresh = (
                (st_.firm[qi], st_.firm_fresh[qi]) if q.borrow else (st_.quota[qi], st_.quota_fresh[qi])
            )
            if used > limit and fresh:
                return False
        return True

    def _leaf(self, cost: int, chosen: list[Option | None], st_: _State, changed: set[str]) -> None:
        del st_
        self.leaves += 1
        plan = self.build(chosen, changed)
        violations = validate_plan(plan, self.inp, self.catalog)
        if violations:
            self.rejected[violations[0].rule] += 1
            return
        self.best, self.plan = cost, plan

    def build(self, chosen: Sequence[Option | None], changed: set[str]) -> Plan:
        """The plan of one choice per replica (in :attr:`slots` order) and the changed sharing modes."""
        assignments: list[Assignment] = []
        unplaced: list[Unplaced] = []
        actions: list[Action] = []
        mig_uses: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
        plain_uses: set[tuple[str, int]] = set()
        for slot, opt in zip(self.slots, chosen, strict=True):
            w = slot.workload
            how = self._stop(slot, opt)
            if how is not None and slot.running is not None:
                actions.append(
                    Action(round=1, kind=how, workload=w.id, replica=slot.replica, node=slot.running.node)
                )
            if opt is None:
                unplaced.append(Unplaced(workload=w.id, replica=slot.replica, code="WAITING", reason="-"))
                continue
            shape = w.shapes[opt.alt]
            assignments.append(
                Assignment(
                    workload=w.id,
                    replica=slot.replica,
                    node=opt.node,
                    gpus=opt.uses,
                    cpu_milli=shape.cpu_milli,
                    memory_mib=shape.memory_mib,
                    gpu_memory_mib=shape.gpu_memory_mib,
                    alternative=opt.alt,
                )
            )
            if slot.running is None:
                to = where(opt.node, opt.uses)
                actions.append(Action(round=1, kind=START, workload=w.id, replica=slot.replica, to=to))
            for u in opt.uses:
                if u.mig_profile is not None and u.mig_start is not None:
                    mig_uses[(opt.node, u.index)].add((u.mig_profile, u.mig_start))
                else:
                    plain_uses.add((opt.node, u.index))
        modes: list[MigMode] = []
        for node, index in sorted(plain_uses | set(mig_uses)):
            was = self.inp.cluster.node_by_name[node].gpu_by_index[index].mig is not None
            if was != ((node, index) in mig_uses):
                modes.append(MigMode(node=node, gpu=index, enabled=not was))
                switch = ("on", "off") if was else ("off", "on")
                actions.append(
                    Action(round=1, kind=SET_MIG_MODE, node=node, gpu=index, from_=switch[0], to=switch[1])
                )
        layouts: list[MigLayout] = []
        for (node, index), used in sorted(mig_uses.items()):
            gpu = self.inp.cluster.node_by_name[node].gpu_by_index[index]
            current = set() if gpu.mig is None else {(i.profile, i.start) for i in gpu.mig.instances}
            if gpu.mig is not None and used <= current:
                continue
            target = used if self.inp.policy.mig.allow_repartition else used | current
            inst = tuple(
                MigInstance(profile=p, start=s) for p, s in sorted(target, key=lambda x: (x[1], x[0]))
            )
            layouts.append(MigLayout(node=node, gpu=index, instances=inst))
            for kind, pairs in ((DESTROY, current - target), (CREATE, target - current)):
                actions.extend(
                    Action(round=1, kind=kind, node=node, gpu=index, detail=f"{prof}@{start}")
                    for prof, start in sorted(pairs, key=lambda x: (x[1], x[0]))
                )
        sharings = {n.name: n.sharing for n in self.inp.cluster.nodes}
        sharing = tuple(
            NodeSharing(node=n, sharing=self._mode(n)) for n in sorted(changed) if sharings[n] is not None
        )
        actions.extend(
            Action(round=1, kind=SET_SHARING, node=c.node, to=sharing_text(c.sharing)) for c in sharing
        )
        return Plan(
            status=PlanStatus.FEASIBLE,
            solver=SolverReport(name="brute-force"),
            assignments=tuple(assignments),
            unplaced=tuple(unplaced),
            mig_layouts=tuple(layouts),
            mig_modes=tuple(modes),
            sharing=sharing,
            actions=tuple(actions),
            provenance={"now": NOW.isoformat()},
        )

    def _mode(self, node: str) -> Sharing:
        current = self.inp.cluster.node_by_name[node].sharing
        if current == EXCLUSIVE:
            return TimeSliced.model_validate({"time-slicing": {"replicas": self.inp.policy.sharing.replicas}})
        return EXCLUSIVE


class TooLarge(Exception):
    """The enumeration passed :data:`MAX_NODES`."""


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


def optimum(inp: PlanningInput, catalog: HardwareCatalog = CATALOG, *, prune: bool = True) -> Optimum:
    """The least queue term over every plan the validator accepts (raises :class:`TooLarge`)."""
    search = _Search(inp, catalog, prune=prune)
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
    or, unless ``drift``, if the state breaks a rule of the validator (quotas, isolation, gangs: fleets
    drift into such states)."""
    from gpuplan.planner.pipeline.occupancy import running_conflicts

    held: dict[tuple[str, int], list[tuple[GpuUse, int]]] = defaultdict(list)
    cpu: Counter[str] = Counter()
    data = [w.model_dump(mode="json", by_alias=True, exclude_defaults=True) for w in inp.workloads]
    for w, d in zip(inp.workloads, data, strict=True):
        if draw(st.integers(0, 2)) != 0:
            continue
        shape = w.shapes[0]
        opts = [o for o in placements(inp, w, CATALOG) if o.alt == 0]
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
    if not drift and validate_plan(current_plan(found), found, CATALOG):
        return inp
    return found


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
