"""Why one alternative shape of a waiting replica cannot be placed on the state the plan leaves.

Each alternative shape is diagnosed on the exact state the plan leaves by relaxing one rule at a time
(quota, sharing isolation, reserved nodes, kube-scheduler's filters, topology, MIG layout, GPU model,
then capacity); the code
names the first rule whose relaxation would let it fit. Kept apart from the explainer, which chooses
among the alternatives' findings and verifies counterfactuals.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gpuplan.models.cluster import sharing_offers
from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.plan import Counterfactual
from gpuplan.models.rules.fairness import Standing
from gpuplan.models.workload import TopologyNeed
from gpuplan.planner.explain import counterfactual as cfs
from gpuplan.planner.explain.counterfactual import Target
from gpuplan.planner.explain.findings import (
    DISRUPTION_BUDGET,
    FAIR_SHARE,
    GPU_MODEL,
    ISOLATION,
    MIG_LAYOUT,
    MIG_MODE,
    NEVER_FITS,
    NO_CAPACITY,
    NO_NVLINK_CLIQUE,
    NUMA,
    OUTRANKED,
    QUOTA,
    SHARING_MODE,
    SOLVER_LIMIT,
    Finding,
    listed,
)
from gpuplan.planner.explain.scheduling import scheduling_finding
from gpuplan.planner.explain.state import Checks, Key, PlanState
from gpuplan.planner.pipeline.migmode import may_switch
from gpuplan.solvers.placement.options import describe, whole_groups
from gpuplan.solvers.placement.state import NodeInfo
from gpuplan.solvers.problem import Request, ShapeSpec, any_model


def _ahead(st: PlanState, key: Key, req: Request) -> bool:
    """Whether ``key`` comes before ``req`` in the queue (higher tier or priority, longer wait, or the
    smaller workload id and replica among equals: never the input's row order)."""
    return st.queue_pos[key] < st.queue_pos[req.key]


def _capacity(st: PlanState, target: Target, req: Request, k: int) -> Finding:
    """NO_CAPACITY, or who took the capacity (OUTRANKED), or what moves would free it (DISRUPTION_BUDGET)."""
    shape = req.shapes[k]
    what = describe(shape)
    nodes = cfs.candidate_nodes(st, req, shape)
    for n in nodes:
        ahead = [
            key
            for key in st.occupants[n]
            if key not in st.was_running and key not in target.members and _ahead(st, key, req)
        ]
        ahead.sort(key=lambda key: (st.requests[key].tier_rank, -st.gpu_milli(key), key))
        removed = cfs.clearance(st, req, shape, n, ahead)
        if removed:
            node = st.infos[n].name
            names = [cfs.replica_name(key, st) for key in removed]
            standings = _fair_share_cause(st, req, removed)
            if standings is not None:
                return Finding(
                    FAIR_SHARE,
                    f"{standings}; the capacity on {node} that could hold {what} went to work of its tier "
                    f"and priority from teams with a better standing, placed in this plan: {listed(names)}",
                    [node, *names],
                    [cfs.migrations, cfs.waits],
                )
            return Finding(
                OUTRANKED,
                f"the capacity on {node} that could hold {what} went to higher-tier or older work "
                f"placed in this plan: {listed(names)}",
                [node, *names],
                [cfs.migrations, cfs.waits],
            )
    migrations = cfs.migrations(st, target, req, k)
    moves = [c for c in migrations if c.counterfactual.kind == "migrate" and c.counterfactual.disruption]
    if moves:
        budget = st.inp.policy.disruption
        used = sum(1 for a in st.plan.actions if a.kind in ("migrate", "preempt"))
        first = moves[0].counterfactual
        names = [cfs.replica_name((c.workload or "", c.replica or 0), st) for c in first.changes]
        node = first.changes[0].node or ""
        return Finding(
            DISRUPTION_BUDGET,
            f"{what} would fit on {node} after moving running {listed(names)}, which the disruption "
            f"budget did not allow this round ({budget.max_moves_per_round} moves per round, {used} used "
            "by this plan)",
            [node, *names],
            [cfs.waits],
            migrations,
        )
    pools = sorted({st.infos[n].spec.pool or st.infos[n].name for n in nodes})
    free = []
    for n in nodes[:4]:
        info, state = st.infos[n], st.state(n)
        gpus = st.free_milli(n, shape.models)
        free.append(f"{info.name} {gpus / MILLI_PER_GPU:g} GPU, {state.cpu} mCPU, {state.mem} MiB")
    where = f" in {listed(pools)}" if pools else ""
    return Finding(
        NO_CAPACITY,
        f"no free capacity of this shape ({what}){where}; most free: {listed(free)}",
        [st.infos[n].name for n in nodes[:4]],
        [cfs.waits],
        migrations,
    )


def _standing(s: Standing) -> str:
    return (
        f"standing {s.factor:.2f}: {s.usage_gpu_hours:.4g} decayed GPU-hours, {s.usage_share:.0%} of the "
        f"usage against a {s.share:.0%} share"
    )


def _fair_share_cause(st: PlanState, req: Request, removed: Sequence[Key]) -> str | None:
    """The standings, in words, when the fair share alone put the replicas in ``req``'s way ahead of it:
    each is of its tier and priority and of a team with a better standing (else ``None``: a higher tier,
    a higher priority or a longer wait ranked them first, or no fair-share policy is set)."""
    fair = st.problem.fair_share
    mine = fair.get(req.team)
    if mine is None:
        return None
    others = [st.requests[key] for key in removed]
    if not all(
        q.tier_rank == req.tier_rank
        and q.priority == req.priority
        and st.problem.fair_units(q.team) > mine.units
        for q in others
    ):
        return None
    above = "over" if mine.over_share else "within"
    theirs = "; ".join(f"team {t}'s {_standing(fair[t])}" for t in sorted({q.team for q in others}))
    return f"team {req.team} is {above} its fair share ({_standing(mine)}), below {theirs}"


def _quota_sentence(st: PlanState, req: Request, k: int) -> tuple[str, list[str]]:
    shape = req.shapes[k]
    demand = st.demand(req)
    rules = st.placer.rules
    fit = next(st.fits_now(shape, demand, Checks(quota=False)))
    info = st.infos[fit.node]
    parts, names = [], []
    for i, c in zip(demand.quotas, rules.charges(info, shape, fit.option.gpus, demand), strict=True):
        short = rules.used[i] + c - rules.limits[i]
        if short <= 0:
            continue
        q = st.inp.policy.quotas[i]
        where = q.gpu_model or (f"pool {q.pool}" if q.pool else "GPUs")
        u = rules.unit
        parts.append(
            f"team {q.team} would exceed its quota on {where} by {short / u:.3g} GPU-equivalents "
            f"(uses {rules.used[i] / u:.3g} of {q.gpus:g}, needs {c / u:.3g})"
        )
        names.append(f"quota {i} ({q.team}, {where})")
    return "; ".join(parts) + f"; {info.name} has room", [*names, info.name]


def _mig_layout(st: PlanState, target: Target, req: Request, k: int) -> Finding:
    """MIG_LAYOUT: GPUs that would hold the profile after a re-partition the policy did not make."""
    shape = req.shapes[k]
    reparts = cfs.repartitions(st, target, req, k)
    why = (
        "re-partitioning is not allowed (policy mig.allow_repartition is false)"
        if not st.inp.policy.mig.allow_repartition
        else "re-partitioning was not worth its cost this round"
    )
    gpus = [f"{c.counterfactual.changes[0].node} GPU {c.counterfactual.changes[0].gpu}" for c in reparts]
    return Finding(
        MIG_LAYOUT,
        f"no free {shape.mig_profile} instance on an allowed GPU and no valid place to create one; "
        f"{listed(gpus)} could hold it after a re-partition, but {why}",
        gpus,
        [cfs.migrations],
        reparts,
    )


def _switch_why(st: PlanState, node: str, flips: Sequence[int], enabled: bool) -> str:
    """Why the plan did not switch the MIG mode of ``flips`` on ``node``: the policy's switch that
    forbids it, GPUs not drained, or switching not placing more of the queue."""
    mig = st.inp.policy.mig
    if not may_switch(st.inp.policy, enabled):
        switch = "mig.allow_repartition" if not mig.allow_repartition else "mig.allow_create"
        return f"the policy does not allow it ({switch} is false)"
    running = {(p.node, g.index) for w in st.inp.workloads for p in w.running_on for g in p.gpus}
    busy = [f"{node} GPU {i}" for i in flips if (node, i) in running]
    if busy:
        return f"{listed(busy)} {'is' if len(busy) == 1 else 'are'} not drained"
    return "switching them did not place more of the queue"


def _mig_mode(st: PlanState, req: Request, shape: ShapeSpec) -> Finding | None:
    """MIG_MODE when no node could host ``shape`` even empty with its GPUs' MIG modes as the plan leaves
    them, but some node could with its MIG-capable GPUs turned off (whole GPUs, fractions) or on (a MIG
    profile): the work fits the fleet as the policy may let it become, so it is never ``NEVER_FITS``."""
    hosts = st.switched_hosts(shape, req.team)
    if not hosts:
        return None
    node, flips = hosts[0]
    enabled = shape.kind == "mig"
    gpus = [f"{node} GPU {i}" for i in flips]
    return Finding(
        MIG_MODE,
        f"no node could host {describe(shape)} with its GPUs' MIG modes as they are; turning MIG "
        f"{'on' if enabled else 'off'} on {listed(gpus)} would serve it, but "
        f"{_switch_why(st, node, flips, enabled)}",
        gpus,
        [cfs.new_nodes],
    )


def mig_mode_note(st: PlanState, req: Request) -> str:
    """``; turning MIG off on ... would give it room now, but ...`` when some alternative of a replica
    blocked on the state the plan leaves would fit once MIG-capable GPUs that nothing uses there
    switched MIG mode (empty if none)."""
    demand = st.demand(req)
    for shape in req.shapes:
        hosts = st.switched_now(shape, demand)
        if hosts:
            node, flips = hosts[0]
            enabled = shape.kind == "mig"
            gpus = listed([f"{node} GPU {i}" for i in flips])
            why = _switch_why(st, node, flips, enabled)
            return f"; turning MIG {'on' if enabled else 'off'} on {gpus} would give it room now, but {why}"
    return ""


def _missing_clique(st: PlanState, req: Request, shape: ShapeSpec) -> Finding | None:
    """NO_NVLINK_CLIQUE when no node, even empty, has ``shape.gpus`` GPUs joined all-to-all by NVLink
    but some node would hold the GPUs over PCIe (e.g. 8 GPUs on a DGX-1 cube-mesh, whose largest
    NVLink clique has 4)."""
    if shape.kind != "whole" or shape.gpus < 2 or shape.topology is not TopologyNeed.NVLINK:
        return None
    hosts = [st.infos[n] for n in st.fits_empty(replace(shape, topology=TopologyNeed.ANY), req.team)]
    if not hosts:
        return None

    def clique(info: NodeInfo) -> int:
        allowed = {
            info.index(p) for p, m in enumerate(info.models) if not shape.models or m.name in shape.models
        }
        return max((len(c & allowed) for c in info.spec.nvlink_cliques), default=1)

    best = min(hosts, key=lambda i: (-clique(i), i.name))
    return Finding(
        NO_NVLINK_CLIQUE,
        f"no node has {shape.gpus} GPUs joined all-to-all by NVLink: {best.name} has {len(best.spec.gpus)} "
        f"GPUs but its largest NVLink clique has {clique(best)}",
        [best.name],
        [cfs.relaxations, cfs.new_nodes],
    )


def _sharing_mode(st: PlanState, shape: ShapeSpec) -> Finding | None:
    """SHARING_MODE when no node could host ``shape`` even empty in the sharing modes the plan leaves,
    but some node whose mode does not offer its kind of GPU (whole or fraction) would hold it empty in
    the other mode: the work fits the fleet as the policy may let it become, so it is never
    ``NEVER_FITS`` (the note :func:`~gpuplan.planner.pipeline.sharing.mode_notes` adds names those nodes
    and why they keep their mode)."""
    if shape.kind not in ("whole", "fraction"):
        return None
    hosts = [
        n.name
        for n in sorted(st.after.cluster.nodes, key=lambda n: n.name)
        if n.sharing is not None
        and not sharing_offers(n.sharing, shape.kind)
        and n.cpu_milli >= shape.cpu_milli
        and n.memory_mib >= shape.memory_mib
        and sum(
            1
            for g in n.gpus
            if g.mig is None and (not shape.models or st.catalog.canonical(g.model) in shape.models)
        )
        >= max(shape.gpus, 1)
    ]
    if not hosts:
        return None
    return Finding(
        SHARING_MODE,
        f"no node could host {describe(shape)} in the sharing modes as they are",
        hosts[:4],
        [cfs.new_nodes],
    )


def mode_may_serve(st: PlanState, req: Request) -> bool:
    """Whether some node, were it empty, could host an alternative of ``req`` once its GPUs changed MIG
    mode or its sharing mode changed (what ``MIG_MODE`` and ``SHARING_MODE`` name instead of
    ``NEVER_FITS``)."""
    return any(st.switched_hosts(s, req.team) or _sharing_mode(st, s) is not None for s in req.shapes)


def diagnose(st: PlanState, target: Target, req: Request, k: int) -> Finding:
    """Why alternative ``k`` of ``req`` cannot be placed on the current state."""
    shape = req.shapes[k]
    demand = st.demand(req)
    what = describe(shape)
    fit = st.first_fit(shape, demand)
    if fit is not None:
        node = st.infos[fit.node].name
        again = Counterfactual(summary=f"re-plan: {node} has room now", kind="replan", changes=())
        replan = cfs.Candidate(again, frozenset({node}))
        return Finding(
            SOLVER_LIMIT, f"{node} has room for {what} on the state this plan leaves", [node], [], [replan]
        )
    if not any(True for _ in st.fits_empty(shape, req.team)):
        if shape.kind == "mig" and cfs.repartitions(st, target, req, k):
            return _mig_layout(st, target, req, k)
        hosts = [st.infos[n].name for n in st.fits_empty(shape, None)]
        if hosts:
            return Finding(
                ISOLATION,
                f"{what} fits only on nodes reserved for other teams by team-exclusive rules: "
                f"{listed(hosts)}",
                hosts[:4],
                [cfs.team_admissions],
            )
        refused = scheduling_finding(st, req, k, empty=True)
        if refused is not None:
            return refused
        clique = _missing_clique(st, req, shape)
        if clique is not None:
            return clique
        switch = _mig_mode(st, req, shape) or _sharing_mode(st, shape)
        if switch is not None:
            return switch
        present = {m.name for i in st.infos for m in i.models}
        if shape.models and not shape.models & present:
            return Finding(
                GPU_MODEL,
                f"none of the allowed GPU models ({listed(sorted(shape.models))}) exists in the cluster",
                sorted(shape.models),
                [cfs.relaxations, cfs.new_nodes],
            )
        big = st.largest(shape.models)
        largest = (
            ""
            if big is None
            else f"; the largest eligible node, {big.name}, has {len(big.spec.gpus)} GPUs, "
            f"{big.spec.cpu_milli} mCPU and {big.spec.memory_mib} MiB"
        )
        return Finding(
            NEVER_FITS,
            f"no node of the cluster could host {what}, even if empty{largest}",
            [] if big is None else [big.name],
            [cfs.new_nodes],
        )
    if st.first_fit(shape, demand, Checks(quota=False)) is not None:
        sentence, names = _quota_sentence(st, req, k)
        return Finding(QUOTA, sentence, names, [cfs.quota_raises])
    fit = st.first_fit(shape, demand, Checks(tags=False))
    if fit is not None:
        info = st.infos[fit.node]
        gpus = [f"{info.name} GPU {info.index(p)}" for p in fit.option.gpus]
        return Finding(
            ISOLATION,
            f"{listed(gpus)} has room for {what} but serves a team or tier that isolation rules keep apart "
            f"from team {req.team} ({req.tier})",
            gpus,
            [cfs.migrations],
        )
    fit = st.first_fit(shape, demand, Checks(reserved=False))
    if fit is not None:
        node = st.infos[fit.node].name
        return Finding(
            ISOLATION,
            f"{node} has room for {what} but a team-exclusive rule reserves it for another team",
            [node],
            [cfs.team_admissions, cfs.migrations],
        )
    refused = scheduling_finding(st, req, k, empty=False)
    if refused is not None:
        return refused
    if shape.kind == "whole" and shape.gpus > 1 and shape.topology is not TopologyNeed.ANY:
        fit = st.first_fit(replace(shape, topology=TopologyNeed.ANY), demand)
        if fit is not None:
            info, state = st.infos[fit.node], st.state(fit.node)
            loose = replace(shape, topology=TopologyNeed.ANY, gpus=1)
            free = len(whole_groups(info, state, loose)[0]) if whole_groups(info, state, loose) else 0
            tight = replace(shape, gpus=1)
            best = max((len(g) for g in whole_groups(info, state, tight)), default=0)
            if shape.topology is TopologyNeed.NVLINK:
                best = max(
                    (
                        sum(1 for p, f in enumerate(state.free) if f == MILLI_PER_GPU and info.index(p) in c)
                        for c in info.spec.nvlink_cliques
                    ),
                    default=0,
                )
                return Finding(
                    NO_NVLINK_CLIQUE,
                    f"no {shape.gpus} free GPUs forming an NVLink clique: {info.name} has {free} free GPUs "
                    f"but at most {best} in one clique",
                    [info.name],
                    [cfs.relaxations, cfs.migrations],
                )
            return Finding(
                NUMA,
                f"no {shape.gpus} free GPUs on one NUMA node: {info.name} has {free} free GPUs but at most "
                f"{best} on one NUMA node",
                [info.name],
                [cfs.relaxations, cfs.migrations],
            )
    if shape.kind == "mig" and cfs.repartitions(st, target, req, k):
        return _mig_layout(st, target, req, k)
    if shape.models:
        fit = st.first_fit(any_model(shape, st.catalog), demand)
        if fit is not None:
            info = st.infos[fit.node]
            other = info.models[fit.option.gpus[0]].name if fit.option.gpus else info.models[0].name
            return Finding(
                GPU_MODEL,
                f"every GPU of the allowed models ({listed(sorted(shape.models))}) that could hold {what} "
                f"is taken; {info.name} has room on {other}",
                [*sorted(shape.models), info.name],
                [cfs.relaxations, cfs.migrations, cfs.waits],
            )
    return _capacity(st, target, req, k)
