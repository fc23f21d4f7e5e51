"""Why-not explanations: a reason code and a sentence naming the resources for every waiting replica
and every replica placed on a worse alternative than its first, with verified counterfactuals.

Codes: ``NO_CAPACITY``, ``NO_NVLINK_CLIQUE``, ``NUMA``, ``GPU_MODEL``, ``MIG_LAYOUT``, ``QUOTA``,
``ISOLATION``, ``OUTRANKED``, ``GANG``, ``DISRUPTION_BUDGET``, ``NEVER_FITS``; ``SOLVER_LIMIT`` when the
replica fits on the state the plan leaves (the solver ran out of time), ``TRADE_OFF`` when a better
alternative fits but the objective preferred the chosen one. Each alternative shape is diagnosed on
the exact state the plan leaves by relaxing one rule at a time (quota, sharing isolation, reserved
nodes, topology, MIG layout, GPU model, then capacity); the first alternative that could ever fit
gives the code, the others are listed in ``details``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.plan import Counterfactual, Explanation, Plan, ReasonDetail
from gpuplan.models.problem import PlanningInput
from gpuplan.models.workload import TopologyNeed
from gpuplan.planner import counterfactual as cfs
from gpuplan.planner.counterfactual import Candidate, Target
from gpuplan.planner.explain_state import Key, PlanState
from gpuplan.solvers.placement.options import describe, whole_groups
from gpuplan.solvers.problem import Request, any_model

log = logging.getLogger(__name__)

NO_CAPACITY = "NO_CAPACITY"
NO_NVLINK_CLIQUE = "NO_NVLINK_CLIQUE"
NUMA = "NUMA"
GPU_MODEL = "GPU_MODEL"
MIG_LAYOUT = "MIG_LAYOUT"
QUOTA = "QUOTA"
ISOLATION = "ISOLATION"
OUTRANKED = "OUTRANKED"
GANG = "GANG"
DISRUPTION_BUDGET = "DISRUPTION_BUDGET"
NEVER_FITS = "NEVER_FITS"
SOLVER_LIMIT = "SOLVER_LIMIT"
TRADE_OFF = "TRADE_OFF"

#: Codes that say the replica could not be placed on the state the plan leaves.
BLOCKED = frozenset(
    {
        NO_CAPACITY, NO_NVLINK_CLIQUE, NUMA, GPU_MODEL, MIG_LAYOUT, QUOTA, ISOLATION, OUTRANKED, GANG,
        DISRUPTION_BUDGET, NEVER_FITS,
    }
)  # fmt: skip

Search = Callable[[PlanState, Target, Request, int], list[Candidate]]


@dataclass
class Finding:
    """The diagnosis of one alternative: code, sentence, named resources and counterfactual searches."""

    code: str
    reason: str
    resources: list[str] = field(default_factory=list)
    searches: list[Search] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)


def _list(items: Sequence[str], limit: int = 4) -> str:
    shown = list(items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(shown) + more


def _ahead(st: PlanState, key: Key, req: Request) -> bool:
    """Whether ``key`` comes before ``req`` in the queue (higher tier or priority, longer wait, or
    earlier arrival among equals)."""
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
            return Finding(
                OUTRANKED,
                f"the capacity on {node} that could hold {what} went to higher-tier or older work "
                f"placed in this plan: {_list(names)}",
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
            f"{what} would fit on {node} after moving running {_list(names)}, which the disruption "
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
        gpus = sum(
            f for p, f in enumerate(state.free) if not shape.models or info.models[p].name in shape.models
        )
        free.append(f"{info.name} {gpus / 1000:g} GPU, {state.cpu} mCPU, {state.mem} MiB")
    where = f" in {_list(pools)}" if pools else ""
    return Finding(
        NO_CAPACITY,
        f"no free capacity of this shape ({what}){where}; most free: {_list(free)}",
        [st.infos[n].name for n in nodes[:4]],
        [cfs.waits],
        migrations,
    )


def _quota_sentence(st: PlanState, req: Request, k: int) -> tuple[str, list[str]]:
    shape = req.shapes[k]
    demand = st.demand(req)
    rules = st.placer.rules
    fit = next(st.fits_now(shape, demand, quota=False))
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
        f"{_list(gpus)} could hold it after a re-partition, but {why}",
        gpus,
        [cfs.migrations],
        reparts,
    )


def diagnose(st: PlanState, target: Target, req: Request, k: int) -> Finding:
    """Why alternative ``k`` of ``req`` cannot be placed on the current state."""
    shape = req.shapes[k]
    demand = st.demand(req)
    what = describe(shape)
    fit = next(st.fits_now(shape, demand), None)
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
                f"{what} fits only on nodes reserved for other teams by team-exclusive rules: {_list(hosts)}",
                hosts[:4],
                [cfs.team_admissions],
            )
        present = {m.name for i in st.infos for m in i.models}
        if shape.models and not shape.models & present:
            return Finding(
                GPU_MODEL,
                f"none of the allowed GPU models ({_list(sorted(shape.models))}) exists in the cluster",
                sorted(shape.models),
                [cfs.relaxations, cfs.new_nodes],
            )
        eligible = [i for i in st.infos if any(not shape.models or m.name in shape.models for m in i.models)]
        big = max(eligible, key=lambda i: (len(i.spec.gpus), i.spec.cpu_milli, -i.pos), default=None)
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
    if next(st.fits_now(shape, demand, quota=False), None) is not None:
        sentence, names = _quota_sentence(st, req, k)
        return Finding(QUOTA, sentence, names, [cfs.quota_raises])
    fit = next(st.fits_now(shape, demand, tags=False), None)
    if fit is not None:
        info = st.infos[fit.node]
        gpus = [f"{info.name} GPU {info.index(p)}" for p in fit.option.gpus]
        return Finding(
            ISOLATION,
            f"{_list(gpus)} has room for {what} but serves a team or tier that isolation rules keep apart "
            f"from team {req.team} ({req.tier})",
            gpus,
            [cfs.migrations],
        )
    fit = next(st.fits_now(shape, demand, reserved=False), None)
    if fit is not None:
        node = st.infos[fit.node].name
        return Finding(
            ISOLATION,
            f"{node} has room for {what} but a team-exclusive rule reserves it for another team",
            [node],
            [cfs.team_admissions, cfs.migrations],
        )
    if shape.kind == "whole" and shape.gpus > 1 and shape.topology is not TopologyNeed.ANY:
        fit = next(st.fits_now(replace(shape, topology=TopologyNeed.ANY), demand), None)
        if fit is not None:
            info, state = st.infos[fit.node], st.state(fit.node)
            loose = replace(shape, topology=TopologyNeed.ANY, gpus=1)
            free = len(whole_groups(info, state, loose)[0]) if whole_groups(info, state, loose) else 0
            tight = replace(shape, gpus=1)
            best = max((len(g) for g in whole_groups(info, state, tight)), default=0)
            if shape.topology is TopologyNeed.NVLINK:
                best = max(
                    (
                        sum(1 for p, f in enumerate(state.free) if f == 1000 and info.index(p) in c)
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
        fit = next(st.fits_now(any_model(shape, st.catalog), demand), None)
        if fit is not None:
            info = st.infos[fit.node]
            other = info.models[fit.option.gpus[0]].name if fit.option.gpus else info.models[0].name
            return Finding(
                GPU_MODEL,
                f"every GPU of the allowed models ({_list(sorted(shape.models))}) that could hold {what} "
                f"is taken; {info.name} has room on {other}",
                [*sorted(shape.models), info.name],
                [cfs.relaxations, cfs.migrations, cfs.waits],
            )
    return _capacity(st, target, req, k)


def _targets(st: PlanState, plan: Plan) -> list[tuple[Target, Request]]:
    waiting = [(u.workload, u.replica) for u in plan.unplaced]
    gangs: dict[str, list[Key]] = {}
    for key in waiting:
        g = st.requests[key].gang
        if g is not None:
            gangs.setdefault(g, []).append(key)
    out = []
    for key in waiting:
        req = st.requests[key]
        members = tuple(gangs[req.gang]) if req.gang is not None else (key,)
        out.append((Target(key, members), req))
    for a in plan.assignments:
        if a.alternative > 0:
            key = (a.workload, a.replica)
            req = st.requests[key]
            out.append((Target(key, (key,), a.alternative), replace(req, shapes=req.shapes[: a.alternative])))
    return out


@dataclass
class Explainer:
    """Explains targets on one plan state; counterfactuals are verified by ``solver`` re-solves."""

    state: PlanState
    counterfactuals: int = 3
    solver: str = "cpsat"
    time_limit_s: float = 2.0
    deadline: float | None = None
    verified: dict[str, Counterfactual | None] = field(default_factory=dict)

    def explain(self, target: Target, req: Request) -> Explanation:
        """The explanation of one target (its replica waits, or runs on alternative ``alternatives``)."""
        st = self.state
        with st.trial():
            st.lift([target.key] if target.alternatives is not None else [])
            extra: set[str] = set()
            gang_note = ""
            blocker = req
            all_fit: Finding | None = None
            if len(target.members) > 1:
                placed_before = 0
                for key in sorted(target.members, key=lambda k: (k != target.key, k)):
                    other = replace(st.requests[key], running=None, gang=None)
                    a = st.placer.place(other)
                    if a is None:
                        blocker = st.requests[key]
                        break
                    placed_before += 1
                    extra.add(a.node)
                else:
                    nodes = sorted(extra)
                    replan = cfs.Candidate(
                        Counterfactual(summary="re-plan: the whole gang fits now", kind="replan", changes=()),
                        frozenset(extra),
                    )
                    all_fit = Finding(
                        SOLVER_LIMIT,
                        f"all {len(target.members)} waiting replicas of gang '{req.gang}' fit on the state "
                        f"this plan leaves ({_list(nodes)})",
                        nodes,
                        [],
                        [replan],
                    )
                if placed_before < len(target.members):
                    gang_note = (
                        f"only {placed_before} of {len(target.members)} waiting replicas of gang "
                        f"'{req.gang}' fit now; {cfs.replica_name(blocker.key, st)} does not: "
                    )
            if all_fit is not None:
                findings = [all_fit]
            else:
                findings = [diagnose(st, target, blocker, k) for k in range(len(blocker.shapes))]
            for k, f in enumerate(findings):
                if self.counterfactuals and not self.late():
                    for search in f.searches:
                        if target.alternatives is not None and search is cfs.relaxations:
                            continue  # relaxing the better alternative only reproduces the chosen one
                        f.candidates.extend(search(st, target, blocker, k))
                if extra:
                    f.candidates = [replace(c, nodes=c.nodes | extra) for c in f.candidates]
        primary = _primary(findings)
        code, reason = primary.code, primary.reason
        if gang_note:
            code, reason = GANG, gang_note + primary.reason
        elif target.alternatives is not None and code == SOLVER_LIMIT:
            code = TRADE_OFF
            reason = f"{reason}; the objective preferred alternative {target.alternatives}"
        details = tuple(
            ReasonDetail(alternative=k, code=f.code, reason=f.reason) for k, f in enumerate(findings)
        )
        verified = self._verify(target, blocker, [c for f in findings for c in f.candidates])
        return Explanation(
            workload=target.key[0],
            replica=target.key[1],
            alternative=None if target.alternatives is None else target.alternatives,
            code=code,
            reason=reason,
            resources=tuple(dict.fromkeys(primary.resources)),
            details=details,
            counterfactuals=tuple(verified),
        )

    def late(self) -> bool:
        """Whether the time budget is spent."""
        return self.deadline is not None and time.perf_counter() > self.deadline

    def _cache_key(self, target: Target, req: Request, cand: Candidate) -> str | None:
        """Targets with equal requests on the same plan state verify alike (a lone replica of a
        workload with nothing else placed): the re-solve is keyed by the request and the change."""
        st = self.state
        w = st.inp.workload_by_id[target.key[0]]
        if len(target.members) > 1 or any((w.id, r) in st.assigned for r in range(w.replicas)):
            return None
        changes = [c.model_dump_json(exclude={"workload"}) if c.workload == w.id else c.model_dump_json()
                   for c in cand.counterfactual.changes]  # fmt: skip
        return repr((req.shapes, req.team, req.tier, req.preemptible, target.alternatives, w.alternatives,
                     sorted(cand.nodes), changes))  # fmt: skip

    def _verify(self, target: Target, req: Request, candidates: list[Candidate]) -> list[Counterfactual]:
        ranked = sorted(
            {c.counterfactual.summary: c for c in candidates}.values(),
            key=lambda c: (c.counterfactual.disruption, c.counterfactual.cost, c.counterfactual.summary),
        )
        out: list[Counterfactual] = []
        for cand in ranked[: 2 * self.counterfactuals]:
            if len(out) >= self.counterfactuals or self.late():
                break
            key = self._cache_key(target, req, cand)
            if key is not None and key in self.verified:
                seen = self.verified[key]
                done = None
                if seen is not None:
                    where = {"workload": target.key[0], "replica": target.key[1]}
                    placed = None if seen.placement is None else seen.placement.model_copy(update=where)
                    done = cand.counterfactual.model_copy(
                        update={"verified": True, "verified_by": seen.verified_by, "placement": placed}
                    )
            else:
                done = cfs.verify(
                    self.state.inp,
                    self.state.plan,
                    target,
                    cand,
                    self.state.catalog,
                    self.state.now,
                    solver=self.solver,
                    time_limit_s=self.time_limit_s,
                )
                if key is not None:
                    self.verified[key] = done
            if done is None:
                log.info("counterfactual '%s' for %s did not verify", cand.counterfactual.summary, target.key)
                continue
            out.append(done)
        return cfs.rank(out)


def _primary(findings: list[Finding]) -> Finding:
    """SOLVER_LIMIT if any alternative fits now; else the first alternative that could ever fit."""
    for f in findings:
        if f.code == SOLVER_LIMIT:
            return f
    return next((f for f in findings if f.code != NEVER_FITS), findings[0])


def plan_time(plan: Plan) -> datetime:
    """The planning time recorded in the plan's provenance (now if absent)."""
    text = plan.provenance.get("now")
    return datetime.fromisoformat(text) if isinstance(text, str) else datetime.now(UTC)


def explain_all(
    inp: PlanningInput,
    plan: Plan,
    *,
    catalog: HardwareCatalog | None = None,
    now: datetime | None = None,
    counterfactuals: int = 3,
    solver: str = "cpsat",
    time_limit_s: float = 2.0,
    budget_s: float | None = None,
    only: Collection[str] | None = None,
) -> list[Explanation]:
    """Explanations of every waiting replica and every replica on a worse alternative (of the
    workloads ``only`` names, when given). With ``budget_s``, no new explanation or counterfactual
    starts once that many seconds have passed (the replicas left keep the solver's reason)."""
    catalog = catalog or default_catalog()
    start = time.perf_counter()
    st = PlanState(inp, plan, catalog, now or plan_time(plan))
    explainer = Explainer(
        st, counterfactuals, solver, time_limit_s, None if budget_s is None else start + budget_s
    )
    targets = [(t, r) for t, r in _targets(st, plan) if only is None or t.key[0] in only]
    if budget_s is None:
        out = [explainer.explain(t, r) for t, r in targets]
    else:
        # Within a budget, codes and sentences for every replica first, then counterfactuals.
        codes_only = replace(explainer, counterfactuals=0)
        out = []
        for t, r in targets:
            if explainer.late():
                log.info("budget spent: %d replicas keep the solver's reason", len(targets) - len(out))
                break
            out.append(codes_only.explain(t, r))
        for i, (t, r) in enumerate(targets[: len(out)]):
            if explainer.late():
                break
            out[i] = explainer.explain(t, r)
    log.info("explained %d replicas in %.2f s", len(out), time.perf_counter() - start)
    return out


def explain_workload(
    inp: PlanningInput,
    plan: Plan,
    workload_id: str,
    *,
    catalog: HardwareCatalog | None = None,
    counterfactuals: int = 3,
    solver: str = "cpsat",
    time_limit_s: float = 2.0,
) -> list[Explanation]:
    """Why the replicas of ``workload_id`` wait or run on a worse alternative (empty if all run on
    their first choice). Raises ``KeyError`` for an unknown workload."""
    if workload_id not in inp.workload_by_id:
        raise KeyError(f"unknown workload '{workload_id}'")
    return explain_all(
        inp,
        plan,
        catalog=catalog,
        counterfactuals=counterfactuals,
        solver=solver,
        time_limit_s=time_limit_s,
        only={workload_id},
    )


def with_explanations(plan: Plan, explanations: Sequence[Explanation]) -> Plan:
    """The plan with each waiting replica's code, sentence and counterfactuals replaced by the
    explanation's, and the explanations of replicas on worse alternatives added."""
    by_key = {(e.workload, e.replica): e for e in explanations if e.alternative is None}
    unplaced = []
    for u in plan.unplaced:
        e = by_key.get((u.workload, u.replica))
        if e is None:
            unplaced.append(u)
            continue
        unplaced.append(
            u.model_copy(
                update={
                    "code": e.code,
                    "reason": e.reason,
                    "resources": e.resources,
                    "details": e.details,
                    "counterfactuals": e.counterfactuals,
                }
            )
        )
    degraded = tuple(e for e in explanations if e.alternative is not None)
    return plan.model_copy(update={"unplaced": tuple(unplaced), "explanations": degraded})


def target_of(inp: PlanningInput, plan: Plan, e: Explanation) -> Target:
    """The replicas a counterfactual of ``e`` must place: the waiting members of its gang (or itself),
    limited to the alternatives before the chosen one for a replica on a worse alternative."""
    key = (e.workload, e.replica)
    if e.alternative is not None:
        return Target(key, (key,), e.alternative)
    gang = inp.workload_by_id[e.workload].gang_id
    if gang is None:
        return Target(key, (key,))
    members = tuple(
        (u.workload, u.replica) for u in plan.unplaced if inp.workload_by_id[u.workload].gang_id == gang
    )
    return Target(key, members)
