"""Counterfactuals: the smallest changes that would place a waiting replica now, each verified.

Candidates are searched on the state the plan leaves (:class:`planner.explain.state.PlanState`):
migrating named replicas off a node (to named destinations), preempting them, waiting until running
work ends (when durations are known), raising a team's quota, re-partitioning a MIG GPU, allowing PCIe
instead of NVLink (or GPUs across NUMA nodes), allowing another GPU model, letting a team onto a
reserved node, or adding a node. A candidate counts only once a re-solve with the change applied
places the replica: :func:`apply_counterfactual` writes the change into a planning input where the
plan's placements are running work that may not move, restricted to the nodes the change touches, and
a solver (CP-SAT by default) plans it. Candidates are ranked by disruption, then cost.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from gpuplan.models.cluster import Cluster, MigInstance, check_mig_layout
from gpuplan.models.hardware import MILLI_PER_GPU, HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Assignment, Change, Counterfactual, Plan
from gpuplan.models.policy import DisruptionBudget, IsolationKind, Quota
from gpuplan.models.rules.isolation import covers
from gpuplan.models.rules.quota import charges_gpu, charges_replica, exact_gpus, gpu_equivalents, quota_model
from gpuplan.models.workload import Shape, TopologyNeed
from gpuplan.planner.explain.state import Checks, Key, PlanState
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.layouts import cluster_after
from gpuplan.planner.pipeline.verdict import result_violations
from gpuplan.planner.validation.errors import InvalidPlanError
from gpuplan.solvers.base import get_solver
from gpuplan.solvers.placement.options import options
from gpuplan.solvers.problem import Request, ShapeSpec, any_model
from gpuplan.solvers.run_options import RunOptions

#: Nodes tried per alternative when searching which replicas to move.
NODES_TRIED = 4
#: Most replicas one migration or preemption counterfactual moves.
MAX_MOVED = 6


@dataclass(frozen=True)
class Target:
    """The replicas a counterfactual must place together (a gang's waiting members, or one replica),
    the one being explained, and how many leading alternatives count (a replica placed on alternative
    ``k`` asks for one of the first ``k``)."""

    key: Key
    members: tuple[Key, ...]
    alternatives: int | None = None


@dataclass(frozen=True)
class Candidate:
    """An unverified counterfactual and the nodes its re-solve needs."""

    counterfactual: Counterfactual
    nodes: frozenset[str]


def replica_name(key: Key, st: PlanState) -> str:
    """``w`` for a single-replica workload, else ``w#r``."""
    w = st.inp.workload_by_id[key[0]]
    return key[0] if w.replicas == 1 else f"{key[0]}#{key[1]}"


def _names(keys: Sequence[Key], st: PlanState) -> str:
    names = [replica_name(k, st) for k in keys]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _cf(summary: str, kind: str, changes: Sequence[Change], disruption: int, cost: float) -> Counterfactual:
    return Counterfactual(
        summary=summary, kind=kind, changes=tuple(changes), disruption=disruption, cost=round(cost, 3)
    )


def _with_shape(req: Request, k: int) -> Request:
    return replace(req, shapes=(req.shapes[k],), running=None, gang=None)


def _placed(a: Assignment, alternative: int) -> Assignment:
    return a.model_copy(update={"alternative": alternative})


def candidate_nodes(st: PlanState, req: Request, shape: ShapeSpec, skip: Iterable[int] = ()) -> list[int]:
    """Nodes that could host ``shape`` if emptied, most free eligible GPU capacity first (then by name)."""
    banned = set(skip)
    return [n for n in st.roomiest_hosts(shape, req.team) if n not in banned][:NODES_TRIED]


def _fits_on(st: PlanState, n: int, shape: ShapeSpec, tags: tuple[str, ...], gone: Sequence[Key]) -> bool:
    info = st.infos[n]
    return bool(options(info, st.without(n, gone), shape, tags))


def clearance(
    st: PlanState, req: Request, shape: ShapeSpec, n: int, order: Sequence[Key]
) -> list[Key] | None:
    """A minimal set of replicas (taken from ``order``, first preferred) whose leaving node ``n`` makes
    room for ``shape``; ``None`` if even all of them leaving is not enough."""
    tags = st.demand(req).tags
    removed: list[Key] = []
    for key in order:
        if _fits_on(st, n, shape, tags, removed):
            break
        removed.append(key)
    if not _fits_on(st, n, shape, tags, removed) or len(removed) > MAX_MOVED:
        return None
    for key in list(reversed(removed)):
        rest = [k for k in removed if k != key]
        if _fits_on(st, n, shape, tags, rest):
            removed = rest
    return removed


def _movable_order(st: PlanState, n: int, req: Request, exclude: set[Key]) -> list[Key]:
    """Occupants of node ``n``: work placed by this plan first, then lower tiers, then larger."""
    keys = [k for k in st.occupants[n] if k not in exclude and k not in st.lifted]
    return sorted(
        keys,
        key=lambda k: (k in st.was_running, -st.requests[k].tier_rank, -st.gpu_milli(k), k),
    )


def _yields(st: PlanState, key: Key, req: Request) -> bool:
    """Whether ``key`` may give way to ``req``: running work of a lower tier (or preemptible work of
    the same tier), or work of the same or a lower tier that this plan starts."""
    q = st.requests[key]
    if key in st.was_running:
        return q.tier_rank > req.tier_rank or (q.preemptible and q.tier_rank == req.tier_rank)
    return q.tier_rank >= req.tier_rank


def migrations(st: PlanState, target: Target, req: Request, k: int) -> list[Candidate]:
    """Move named replicas off a node to named destinations (or preempt them) to make room."""
    shape = req.shapes[k]
    out: list[Candidate] = []
    exclude = set(target.members)
    for n in candidate_nodes(st, req, shape):
        node = st.infos[n].name
        removed = clearance(st, req, shape, n, _movable_order(st, n, req, exclude))
        if not removed:
            continue
        moves: list[Change] = []
        placement: Assignment | None = None
        with st.trial():
            st.lift(removed)
            a = st.placer.place(_with_shape(req, k), within=lambda i, n=n: i.pos == n)  # type: ignore[misc]
            if a is not None:
                placement = _placed(a, k)
                for key in removed:
                    moved = st.placer.place(
                        replace(st.requests[key], running=None, gang=None),
                        within=lambda i, n=n: i.pos != n,  # type: ignore[misc]
                    )
                    if moved is None:
                        moves = []
                        break
                    moves.append(
                        Change(
                            kind="migrate", workload=key[0], replica=key[1], node=node, to=moved.node,
                            gpus=moved.gpus, alternative=moved.alternative,
                        )
                    )  # fmt: skip
        if placement is None:
            continue
        running = sum(key in st.was_running for key in removed)
        size = sum(st.gpu_milli(key) for key in removed) / MILLI_PER_GPU
        names = _names(removed, st)
        if moves:
            dests = sorted({m.to for m in moves if m.to})
            text = (
                f"migrate {names} off {node} (to {', '.join(dests)})"
                if running
                else f"place {names} on {', '.join(dests)} instead of {node}"
            )
            out.append(Candidate(_cf(text, "migrate", moves, running, size), frozenset({node, *dests})))
        if all(_yields(st, key, req) for key in removed):
            changes = [Change(kind="preempt", workload=key[0], replica=key[1], node=node) for key in removed]
            text = f"preempt {names} on {node}" if running else f"leave {names} waiting (frees {node})"
            # Displacing a replica (running, or one this plan starts) weighs twice a migration.
            out.append(Candidate(_cf(text, "preempt", changes, 2 * len(removed), size), frozenset({node})))
    return out


def _end(st: PlanState, key: Key) -> datetime | None:
    """Predicted end of an assigned replica: its start (queued_since for running work, now for work
    this plan starts) plus its expected duration; ``None`` without a duration."""
    w = st.inp.workload_by_id[key[0]]
    if w.duration_s is None:
        return None
    start = w.queued_since if key in st.was_running else st.now
    if start is None:
        return None
    return max(st.now, start + timedelta(seconds=w.duration_s))


def waits(st: PlanState, target: Target, req: Request, k: int) -> list[Candidate]:
    """Wait until named work ends (predicted from expected durations), the earliest node first."""
    shape = req.shapes[k]
    tags = st.demand(req).tags
    best: tuple[datetime, int, list[Key]] | None = None
    for n in candidate_nodes(st, req, shape):
        ending = sorted(
            ((e, key) for key in st.occupants[n] if key not in target.members and (e := _end(st, key))),
            key=lambda x: (x[0], x[1]),
        )
        gone: list[Key] = []
        for when, key in ending:
            gone.append(key)
            if len(gone) > MAX_MOVED:
                break
            if _fits_on(st, n, shape, tags, gone) and (best is None or when < best[0]):
                best = (when, n, list(gone))
                break
    if best is None:
        return []
    when, n, gone = best
    stamp = when.strftime("%Y-%m-%d %H:%M")
    changes = [Change(kind="end", workload=key[0], replica=key[1], at=when.isoformat()) for key in gone]
    node = st.infos[n].name
    verb = "ends" if len(gone) == 1 else "end"
    hours = (when - st.now).total_seconds() / 3600
    return [
        Candidate(
            _cf(
                f"after {_names(gone, st)} {verb} on {node} at {stamp} (predicted)", "wait", changes, 0, hours
            ),
            frozenset({node}),
        )
    ]


def _quota_phrase(st: PlanState, i: int) -> str:
    q = st.inp.policy.quotas[i]
    where = q.gpu_model or (f"pool {q.pool}" if q.pool else "GPUs")
    return f"team {q.team}'s quota on {where}"


def quota_raises(st: PlanState, target: Target, req: Request, k: int) -> list[Candidate]:
    """Raise each quota the replica would exceed by the whole GPU-equivalents it is short."""
    shape = req.shapes[k]
    demand = st.demand(req)
    rules = st.placer.rules
    fit = st.first_fit(shape, demand, Checks(quota=False))
    if fit is None:
        return []
    info = st.infos[fit.node]
    charges = rules.charges(info, shape, fit.option.gpus, demand)
    changes = []
    for i, c in zip(demand.quotas, charges, strict=True):
        short = rules.used[i] + c - rules.limits[i]
        if short > 0:
            amount = math.ceil(short / rules.unit)
            changes.append(Change(kind="raise_quota", team=req.team, index=i, amount=float(amount)))
    if not changes:
        return []
    text = " and ".join(f"raise {_quota_phrase(st, c.index or 0)} by {c.amount:g}" for c in changes)
    return [
        Candidate(
            _cf(text, "raise_quota", changes, 0, sum(c.amount or 0 for c in changes)),
            frozenset({info.name}),
        )
    ]


def repartitions(st: PlanState, target: Target, req: Request, k: int) -> list[Candidate]:
    """Re-partition a GPU of an allowed model so that a free instance of the profile exists."""
    shape = req.shapes[k]
    profile = shape.mig_profile
    if profile is None:
        return []
    out: list[Candidate] = []
    for info in (st.infos[n] for n in st.by_name):
        state = st.state(info.pos)
        if not st.allowed(info, req.team) or state.cpu < shape.cpu_milli or state.mem < shape.memory_mib:
            continue
        for p, model in enumerate(info.models):
            if (shape.models and model.name not in shape.models) or profile not in model.profile_map:
                continue
            slots = state.mig[p]
            if slots is None and state.free[p] < MILLI_PER_GPU:
                continue
            kept = [(pn, s) for s, pn, _, occupied in slots or () if occupied]
            for pl in model.profile(profile).placements:
                layout = tuple(
                    MigInstance(profile=pn, start=s)
                    for pn, s in sorted([*kept, (profile, pl.start)], key=lambda x: x[1])
                )
                if check_mig_layout(model.name, layout, st.catalog):
                    continue
                gpu = info.index(p)
                text = "+".join(i.profile for i in layout)
                change = Change(kind="repartition", node=info.name, gpu=gpu, instances=layout)
                out.append(
                    Candidate(
                        _cf(f"re-partition {info.name} GPU {gpu} to {text}", "repartition", [change], 1, 1),
                        frozenset({info.name}),
                    )
                )
                break
            if len(out) >= 2:
                return out
    return out


def relaxations(st: PlanState, target: Target, req: Request, k: int) -> list[Candidate]:
    """Allow PCIe instead of NVLink (or GPUs across NUMA nodes), or another GPU model."""
    shape = req.shapes[k]
    demand = st.demand(req)
    out: list[Candidate] = []
    if shape.kind == "whole" and shape.topology in (TopologyNeed.NVLINK, TopologyNeed.NUMA):
        fit = st.first_fit(replace(shape, topology=TopologyNeed.ANY), demand)
        if fit is not None:
            what = (
                "PCIe instead of NVLink"
                if shape.topology is TopologyNeed.NVLINK
                else "GPUs across NUMA nodes"
            )
            change = Change(kind="relax_topology", workload=req.workload, alternative=k, topology="any")
            out.append(
                Candidate(
                    _cf(f"allow {what}", "relax_topology", [change], 0, 1),
                    frozenset({st.infos[fit.node].name}),
                )
            )
    if shape.models:
        fit = st.first_fit(any_model(shape, st.catalog), demand)
        if fit is not None:
            info = st.infos[fit.node]
            p = fit.option.gpus[0] if fit.option.gpus else 0
            model = info.models[p].name
            change = Change(kind="allow_model", workload=req.workload, alternative=k, model=model)
            allowed = "|".join(sorted(shape.models))
            out.append(
                Candidate(
                    _cf(f"allow {model} as well as {allowed}", "allow_model", [change], 0, 2),
                    frozenset({info.name}),
                )
            )
    return out


def _reserving_rule(st: PlanState, node: str) -> int | None:
    pool = st.inp.cluster.node_by_name[node].pool
    for i, rule in enumerate(st.inp.policy.isolation):
        if covers(rule, node, pool):
            return i
    return None


def team_admissions(st: PlanState, target: Target, req: Request, k: int) -> list[Candidate]:
    """Let the team use a node a team-exclusive rule reserves for another team."""
    shape = req.shapes[k]
    demand = st.demand(req)
    for fit in st.fits_now(shape, demand, Checks(reserved=False)):
        info = st.infos[fit.node]
        rule = _reserving_rule(st, info.name)
        if rule is None or st.allowed(info, req.team):
            continue
        owner = st.inp.policy.isolation[rule].team
        change = Change(kind="allow_team", node=info.name, team=req.team, index=rule)
        text = f"let team {req.team} use {info.name} (reserved for team {owner} by isolation rule {rule})"
        return [Candidate(_cf(text, "allow_team", [change], 0, 2), frozenset({info.name}))]
    return []


def new_nodes(st: PlanState, target: Target, req: Request, k: int) -> list[Candidate]:
    """Add a node like the largest one of an allowed model, grown to hold the shape."""
    shape = req.shapes[k]
    models = sorted(shape.models) or sorted({m.name for i in st.infos for m in i.models})
    if not models:
        return []
    template = st.largest(models)
    model = models[0] if template is None else next(m.name for m in template.models if m.name in models)
    count = max(shape.gpus, 1 if shape.kind != "cpu" else 0, len(template.spec.gpus) if template else 0)
    base = template.name if template is not None else "node"
    name = f"new-{base}"
    change = Change(
        kind="add_node", node=template.name if template else None, to=name, model=model, amount=count,
        alternative=k,
    )  # fmt: skip
    return [
        Candidate(
            _cf(f"add a node {name} with {count} {model} GPUs", "add_node", [change], 0, 10.0 * count),
            frozenset({name}),
        )
    ]


def rank(cfs: Iterable[Counterfactual]) -> list[Counterfactual]:
    """By disruption, then cost, then number of changes, then text (deterministic)."""
    return sorted(cfs, key=lambda c: (c.disruption, c.cost, len(c.changes), c.summary))


# --- applying a counterfactual -------------------------------------------------------------------


def _equivalents(a: Assignment, st_inp: PlanningInput, catalog: HardwareCatalog, q: Quota) -> Fraction:
    """The GPU-equivalents quota ``q`` charges for the GPUs of assignment ``a``
    (:mod:`gpuplan.models.rules.quota`: on its GPU model and in its pool, when it names them)."""
    node = st_inp.cluster.node_by_name[a.node]
    model = quota_model(q, catalog)
    total = Fraction(0)
    for g in a.gpus:
        gpu_model = catalog.canonical(node.gpu_by_index[g.index].model)
        if charges_gpu(q, model, node.pool, gpu_model):
            spec = catalog.model(gpu_model) if g.mig_profile is not None else None
            total += gpu_equivalents(g.kind, g.milli, g.mig_profile, spec)
    return total


def _add_node(cluster: dict[str, Any], change: Change, shape: Shape) -> None:
    """Append the node an ``add_node`` change adds: an empty copy of its template, or ``amount`` GPUs
    of ``model`` (linked as the shape's topology needs, MIG enabled for a MIG shape)."""
    template = next((n for n in cluster["nodes"] if n["name"] == change.node), None)
    count = int(change.amount or 0)
    node: dict[str, Any] = {
        "name": change.to,
        "cpu_milli": max(shape.cpu_milli, template["cpu_milli"] if template else 0),
        "memory_mib": max(shape.memory_mib, template["memory_mib"] if template else 0),
    }
    if template is not None and len(template["gpus"]) >= count:
        node["gpus"] = [
            {**g, "mig": None if g.get("mig") is None else {"instances": []}} for g in template["gpus"]
        ]
        node["links"] = template["links"]
        node["pool"] = template.get("pool")
        node["labels"] = template.get("labels", {})
        node["taints"] = template.get("taints", [])  # a node like it: kube-scheduler's filters alike
        node["resources"] = template.get("resources", [])
    else:
        mig: dict[str, list[Any]] | None = {"instances": []} if shape.mig_profile is not None else None
        node["gpus"] = [{"index": i, "model": change.model, "numa": 0, "mig": mig} for i in range(count)]
        kind = "NV18" if shape.topology is TopologyNeed.NVLINK else "PIX"
        node["links"] = [{"a": a, "b": b, "kind": kind} for a in range(count) for b in range(a + 1, count)]
    cluster["nodes"].append(node)


_INDEX: dict[int, tuple[Plan, dict[str, list[Assignment]], dict[Key, Assignment]]] = {}


def _index(plan: Plan) -> tuple[dict[str, list[Assignment]], dict[Key, Assignment]]:
    """A plan's assignments by node and by replica (kept for the last plan seen: one explanation run
    verifies many counterfactuals against the same plan)."""
    found = _INDEX.get(id(plan))
    if found is None or found[0] is not plan:
        on_node: dict[str, list[Assignment]] = {}
        for a in plan.assignments:
            on_node.setdefault(a.node, []).append(a)
        found = (plan, on_node, {(a.workload, a.replica): a for a in plan.assignments})
        _INDEX.clear()
        _INDEX[id(plan)] = found
    return found[1], found[2]


def apply_counterfactual(
    inp: PlanningInput,
    plan: Plan,
    target: Target,
    cf: Counterfactual,
    catalog: HardwareCatalog,
    nodes: frozenset[str] | None = None,
) -> PlanningInput:
    """The state after ``plan`` with ``cf`` applied: every placement is running work that may not move,
    the target's replicas (and nothing else) wait. ``nodes`` restricts the cluster to a neighbourhood;
    quotas then count what the team holds elsewhere."""
    members = set(target.members)
    moved = {(c.workload, c.replica): c for c in cf.changes if c.kind == "migrate"}
    gone = {(c.workload, c.replica) for c in cf.changes if c.kind in ("preempt", "end")}
    templates = {c.node for c in cf.changes if c.kind == "add_node"}
    chosen = tuple(n for n in inp.cluster.nodes if nodes is None or n.name in nodes or n.name in templates)
    cluster = cluster_after(Cluster(nodes=chosen), plan).model_dump(mode="json")
    for node in cluster["nodes"]:
        node.pop("topology", None)
        for change in cf.changes:
            if change.kind == "repartition" and change.node == node["name"]:
                for g in node["gpus"]:
                    if g["index"] == change.gpu:
                        g["mig"] = {"instances": [i.model_dump() for i in change.instances]}
    w_target = inp.workload_by_id[target.key[0]]
    for change in cf.changes:
        if change.kind == "add_node":
            _add_node(cluster, change, w_target.shapes[change.alternative or 0])
    keep_nodes = None if nodes is None else set(nodes)
    if keep_nodes is not None:
        cluster["nodes"] = [n for n in cluster["nodes"] if n["name"] in keep_nodes]
    present = {n["name"] for n in cluster["nodes"]}
    pools = {n.get("pool") for n in cluster["nodes"] if n.get("pool")}

    running: dict[str, list[dict[str, Any]]] = {}
    outside: dict[str, list[Assignment]] = {}
    selected: Iterable[Assignment] = plan.assignments
    if keep_nodes is not None and not inp.policy.quotas:
        # Nothing outside the neighbourhood matters: only its occupants and the replicas moving in.
        on_node, by_key = _index(plan)
        near = {(a.workload, a.replica): a for n in present for a in on_node.get(n, ())}
        selected = {**near, **{k: by_key[k] for k in moved if k in by_key}}.values()
    for a in sorted(selected, key=lambda a: (a.workload, a.replica)):
        key = (a.workload, a.replica)
        if key in gone or (key in members and target.alternatives is not None):
            continue
        c = moved.get(key)
        node, uses, alt = (a.node, a.gpus, a.alternative) if c is None else (c.to, c.gpus, c.alternative)
        if node in present:
            gpus = [g.model_dump(exclude_none=True) for g in uses]
            running.setdefault(a.workload, []).append({"node": node, "gpus": gpus, "alternative": alt})
        else:
            outside.setdefault(a.workload, []).append(a)
    queued: dict[str, int] = {}
    for key in members:
        queued[key[0]] = queued.get(key[0], 0) + 1

    workloads: list[dict[str, Any]] = []
    for wid in sorted(set(running) | set(queued)):
        w = inp.workload_by_id[wid]
        held = running.get(w.id, [])
        data = w.model_dump(mode="json", exclude={"running_on"})
        if w.id in queued and target.alternatives is not None and held:
            # The other replicas keep running on alternatives the target may no longer choose.
            workloads.append(
                {**data, "id": f"{w.id}~placed", "replicas": len(held), "running_on": held, "gang": None}
            )
            held = []
        data["replicas"] = len(held) + queued.get(w.id, 0)
        data["running_on"] = held
        if w.id not in queued:
            data["gang"] = None
        else:
            _relax(data, w.alternatives != (), target, cf)
        workloads.append(data)

    policy = inp.policy.model_dump(mode="json")
    policy["disruption"] = DisruptionBudget().model_dump(mode="json")
    quotas = []
    for i, q in enumerate(inp.policy.quotas):
        limit = exact_gpus(q.gpus)
        raised = sum(c.amount or 0 for c in cf.changes if c.kind == "raise_quota" and c.index == i)
        if q.pool is not None and q.pool not in pools:
            continue
        if limit is not None:
            limit += exact_gpus(raised) or 0
            if keep_nodes is not None:
                for wid, held_out in outside.items():
                    w = inp.workload_by_id[wid]
                    if not charges_replica(q, w.team, w.preemptible):
                        continue
                    for a in held_out:
                        limit -= _equivalents(a, inp, catalog, q)
            quotas.append(
                {**q.model_dump(mode="json"), "gpus": math.ceil(max(limit, Fraction(0)) * 10**6) / 10**6}
            )
        else:
            quotas.append(q.model_dump(mode="json"))
    policy["quotas"] = quotas
    rules = []
    for i, rule in enumerate(inp.policy.isolation):
        data = rule.model_dump(mode="json")
        if rule.kind is IsolationKind.TEAM_EXCLUSIVE:
            names = set(rule.nodes) | {n.name for n in inp.cluster.nodes if rule.pool and n.pool == rule.pool}
            names -= {c.node for c in cf.changes if c.kind == "allow_team" and c.index == i}
            names &= present
            if not names:
                continue
            data["nodes"], data["pool"] = sorted(names), None
        rules.append(data)
    policy["isolation"] = rules
    return PlanningInput.model_validate(
        {"cluster": cluster, "workloads": workloads, "policy": policy}, context={"catalog": catalog}
    )


def _relax(data: dict[str, Any], has_alternatives: bool, target: Target, cf: Counterfactual) -> None:
    """Write the target's own changes (fewer alternatives, topology, GPU models) into its workload."""
    if has_alternatives and target.alternatives is not None and data["id"] == target.key[0]:
        data["alternatives"] = data["alternatives"][: target.alternatives]
    for c in cf.changes:
        if c.workload != data["id"] or c.kind not in ("relax_topology", "allow_model"):
            continue
        shape = data["alternatives"][c.alternative or 0] if has_alternatives else data
        if c.kind == "relax_topology":
            shape["topology"] = c.topology
        else:
            models = list(shape.get("gpu_models") or data.get("gpu_models") or [])
            shape["gpu_models"] = [*models, c.model]


def verify(
    inp: PlanningInput,
    plan: Plan,
    target: Target,
    candidate: Candidate,
    catalog: HardwareCatalog,
    now: datetime,
    *,
    solver: str = "cpsat",
    time_limit_s: float = 2.0,
) -> Counterfactual | None:
    """Re-solve the candidate's neighbourhood with the change applied; the counterfactual (with the
    target's placement from the re-solve) if every target replica is placed, else ``None``."""
    sub = apply_counterfactual(inp, plan, target, candidate.counterfactual, catalog, candidate.nodes)
    problem = compile_problem(sub, catalog, now)
    result = get_solver(solver).solve(problem, RunOptions(time_limit_s=time_limit_s, num_workers=1))
    violations = result_violations(result, sub, catalog)
    if violations:
        raise InvalidPlanError(result.solver, violations)
    wanted = {w: sum(1 for k in target.members if k[0] == w) for w in {k[0] for k in target.members}}
    held = {w.id: len(w.running_on) for w in sub.workloads}
    mine: Assignment | None = None
    for w, n in wanted.items():
        got = [a for a in result.assignments if a.workload == w and a.replica >= held[w]]
        if len(got) < n:
            return None
        if w == target.key[0]:
            mine = got[0].model_copy(update={"replica": target.key[1]})
    return candidate.counterfactual.model_copy(
        update={"verified": True, "verified_by": solver, "placement": mine}
    )
