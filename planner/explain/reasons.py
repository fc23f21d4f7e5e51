"""Why-not explanations: a reason code and a sentence naming the resources for every waiting replica
and every replica placed on a worse alternative than its first, with verified counterfactuals.

One function, :meth:`Explainer.explain`, computes every reason: the plan (``make_plan`` attaches one to
each waiting replica) and ``gpuplan explain`` / ``GET .../explain/{workload}`` call it on the same state
(:class:`~gpuplan.planner.explain.state.PlanState`, the state the plan leaves, nodes in name order), so
both give the same code, sentence and node.

Codes and findings: :mod:`~gpuplan.planner.explain.findings`; how one alternative is diagnosed:
:mod:`~gpuplan.planner.explain.diagnose`; gangs and reserved capacity: ``gangs``, ``reservations``. The first
alternative that could ever fit gives the code, the others are listed in ``details``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import Node
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Counterfactual, Explanation, Plan, ReasonDetail
from gpuplan.models.workload import Shape
from gpuplan.planner.explain import counterfactual as cfs
from gpuplan.planner.explain.counterfactual import Candidate, Target
from gpuplan.planner.explain.diagnose import diagnose, mig_mode_note
from gpuplan.planner.explain.findings import (
    BLOCKED,
    GANG,
    ISOLATION,
    MIG_MODE,
    MODE_MAY_BLOCK,
    NEVER_FITS,
    QUOTA,
    SOLVER_LIMIT,
    TRADE_OFF,
    Finding,
)
from gpuplan.planner.explain.gangs import gang_fits, gang_in_domain, gang_never_fits
from gpuplan.planner.explain.reservations import fits_but_waits, reserved_note
from gpuplan.planner.explain.state import Key, PlanState
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.pipeline.sharing import mode_notes
from gpuplan.solvers.problem import Request

#: Seconds per replica (running or waiting) that building the plan state takes, before the first reason
#: (0.6 s for 8,328 replicas on 1,213 nodes and 6.0-6.7 s for 66,624 on 9,704, a quiet 2-core machine):
#: with less time left before ``reasons_by``, no reason is derived (the state alone would overrun it).
STATE_S_PER_REPLICA = 0.0001

log = logging.getLogger(__name__)


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
        """The explanation of one target (its replica waits, or runs on alternative ``alternatives``):
        the one place a reason (code, sentence, named resources) is computed, for the plan and for
        ``gpuplan explain`` alike; counterfactuals are searched and verified when asked for."""
        st = self.state
        with st.trial():
            st.lift([target.key] if target.alternatives is not None else [])
            extra: set[str] = set()
            gang_note = ""
            blocker = req
            whole_gang = gang_never_fits(st, req) if target.alternatives is None else None
            # The rest of a gang the plan keeps as it runs, in part, may only join its running members.
            joins = target.alternatives is None and req.gang is not None and bool(st.gang_placed(req.gang))
            if whole_gang is None and (len(target.members) > 1 or joins):
                whole_gang = gang_in_domain(st, target, req)
            if len(target.members) > 1 and whole_gang is None:
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
                    whole_gang = gang_fits(target, req, sorted(extra))
                if placed_before < len(target.members):
                    gang_note = (
                        f"only {placed_before} of {len(target.members)} waiting replicas of gang "
                        f"'{req.gang}' fit now; {cfs.replica_name(blocker.key, st)} does not: "
                    )
            if whole_gang is not None:
                findings = [whole_gang]
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
            if target.alternatives is None and primary.code == SOLVER_LIMIT:
                primary = fits_but_waits(st, target.key, req) or primary
        code, reason = primary.code, primary.reason
        if gang_note:
            code, reason = GANG, gang_note + primary.reason
        elif target.alternatives is not None and code == SOLVER_LIMIT:
            code = TRADE_OFF
            reason = f"{reason}; the objective preferred alternative {target.alternatives}"
        if target.alternatives is None and code in BLOCKED:
            reason += reserved_note(st, target.key)
        if target.alternatives is None and code in BLOCKED - {MIG_MODE, NEVER_FITS, QUOTA, ISOLATION}:
            reason += mig_mode_note(st, blocker)
        details = tuple(
            ReasonDetail(alternative=k, code=f.code, reason=f.reason) for k, f in enumerate(findings)
        )
        searched = findings if any(f is primary for f in findings) else [primary, *findings]
        verified = self._verify(target, blocker, [c for f in searched for c in f.candidates])
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
    reasons_by: Deadline | None = None,
) -> list[Explanation]:
    """Explanations of every waiting replica and every replica on a worse alternative (of the
    workloads ``only`` names, when given). With ``budget_s``, every replica still gets its reason (code,
    sentence, resources: they must match what ``gpuplan explain`` says), but no new counterfactual search
    starts once that many seconds have passed. With ``reasons_by``, no replica's reason is derived once
    that deadline has passed, and none at all when it leaves less than the plan state takes to build
    (:data:`STATE_S_PER_REPLICA`): the replicas not reached get no explanation (they keep what the plan
    says; the caller counts them)."""
    if reasons_by is not None:
        needed = STATE_S_PER_REPLICA * sum(w.replicas for w in inp.workloads)
        if reasons_by.remaining() < needed:
            log.info("reasons cut by the time limit: %.2f s left, the plan state takes ~%.2f s",
                     reasons_by.remaining(), needed)  # fmt: skip
            return []
    catalog = catalog or default_catalog()
    start = time.perf_counter()
    st = PlanState(inp, plan, catalog, now or plan_time(plan))
    explainer = Explainer(
        st, counterfactuals, solver, time_limit_s, None if budget_s is None else start + budget_s
    )
    targets = [(t, r) for t, r in _targets(st, plan) if only is None or t.key[0] in only]
    # Within a budget, reasons for every replica first, then counterfactuals while time is left.
    first = explainer if budget_s is None or not counterfactuals else replace(explainer, counterfactuals=0)
    out: list[Explanation] = []
    for t, r in targets:
        if reasons_by is not None and reasons_by.expired():
            log.info("reasons cut by the time limit: %d of %d replicas reached", len(out), len(targets))
            break
        out.append(first.explain(t, r))
    if first is not explainer:
        for i, (t, r) in enumerate(targets[: len(out)]):
            if explainer.late():
                log.info("budget spent: %d replicas without counterfactuals", len(out) - i)
                break
            out[i] = explainer.explain(t, r)
    # The sentence on sharing modes is added only where a mode may be why the replica waits.
    moded = {e.workload for e in out if e.alternative is None and _mode_may_block(st.after, catalog, e)}
    notes = mode_notes(st.after, catalog, moded)
    out = [
        e.model_copy(update={"reason": f"{e.reason}; {notes[e.workload]}"})
        if e.alternative is None and e.workload in moded and e.workload in notes
        else e
        for e in out
    ]
    log.info("explained %d replicas in %.2f s", len(out), time.perf_counter() - start)
    return out


def _fits_empty(node: Node, shape: Shape, catalog: HardwareCatalog) -> bool:
    """Whether one replica of ``shape`` (whole GPUs or a fraction) fits ``node`` empty, whatever its mode."""
    allowed = {catalog.canonical(m) for m in shape.gpu_models}
    gpus = sum(
        1 for g in node.gpus if g.mig is None and (not allowed or catalog.canonical(g.model) in allowed)
    )
    return (
        gpus >= max(shape.gpus, 1)
        and node.cpu_milli >= shape.cpu_milli
        and node.memory_mib >= shape.memory_mib
    )


def _mode_may_block(inp: PlanningInput, catalog: HardwareCatalog, e: Explanation) -> bool:
    """Whether a node's sharing mode may be why the waiting replica of ``e`` waits: its code is one a mode
    can be behind, and a replica no node could ever host fits some node of a sharing mode when empty (a
    16-GPU ask on 8-GPU nodes waits whatever the modes)."""
    if e.code not in MODE_MAY_BLOCK:
        return False
    if e.code != NEVER_FITS:
        return True
    w = inp.workload_by_id.get(e.workload)
    moded = [n for n in inp.cluster.nodes if n.sharing is not None]
    return w is not None and any(
        _fits_empty(n, s, catalog) for n in moded for s in w.shapes if s.kind in ("whole", "fraction")
    )


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
