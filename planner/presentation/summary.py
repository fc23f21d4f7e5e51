"""A readable text summary of a plan for the terminal."""

from __future__ import annotations

from collections import Counter

from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import MIGRATE, Plan, PlanStatus
from gpuplan.planner.pipeline.metrics import FAIR_SHARE_FIGURES
from gpuplan.solvers.base import CUT, EXACT_SOLVERS, HINT_QUEUE, HINT_QUEUE_FGD, NO_EXACT_SOLUTION
from gpuplan.solvers.greedy.engine import GREEDY_CUT


def render(plan: Plan, inp: PlanningInput) -> str:
    """Status, solver figures, placements per tier, allocation (compute and GPU memory) and the main reasons
    for waiting."""
    s = plan.solver
    lines = [f"status: {plan.status.value}   solver: {s.name}   wall: {s.wall_s:.2f}s"]
    if s.objective is not None:
        bound = "n/a" if s.best_bound is None else f"{s.best_bound:g}"
        gap = "n/a" if s.gap is None else f"{s.gap:.2%}"
        lines.append(f"objective: {s.objective:g}   best bound: {bound}   gap: {gap}")
    lines.extend(status_lines(plan))
    cut = wall_clock_cut(plan)
    if cut:
        lines.append(cut)
    m = plan.metrics
    tiers = [t.name for t in sorted(inp.policy.tiers, key=lambda t: -t.weight)]
    lines.append(f"{'tier':<20}{'placed':>8}{'waiting':>9}")
    for tier in tiers:
        if f"placed_{tier}" in m:
            lines.append(f"{tier:<20}{int(m[f'placed_{tier}']):>8}{int(m[f'unplaced_{tier}']):>9}")
    lines.append(
        f"{'total':<20}{int(m.get('replicas_placed', 0)):>8}"
        f"{int(m.get('replicas_total', 0) - m.get('replicas_placed', 0)):>9}"
    )
    lines.append(
        f"GPU allocation: {m.get('gpus_allocated', 0):.2f} of {int(m.get('gpus_total', 0))} GPUs "
        f"({m.get('allocated_gpu_fraction', 0):.1%})"
    )
    if m.get("gpu_memory_total_mib"):
        lines.append(
            f"GPU memory: {m.get('gpu_memory_allocated_mib', 0) / 1024:.1f} of "
            f"{m['gpu_memory_total_mib'] / 1024:.0f} GiB ({m.get('allocated_gpu_memory_fraction', 0):.1%})"
        )
    if "fragmentation_rate" in m:
        lines.append(
            f"fragmentation: {m['fragmentation_rate']:.1%} of free GPU capacity unusable by the demand mix"
        )
    lines.extend(fair_share_lines(plan, inp))
    # A migration back to where the replica runs (drained for a MIG re-partition) is a restart.
    kinds = Counter("restart" if a.kind == MIGRATE and a.from_ == a.to else a.kind for a in plan.actions)
    if kinds:
        lines.append("actions: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    undone = int(s.terms.get("idle_moves_undone", 0))
    if undone:
        lines.append(f"undone: {undone} move(s) or preemption(s) that bought nothing (budget left unused)")
    lines.extend(waiting_lines(plan))
    broken = Counter(b.rule for b in plan.stays_broken)
    if broken:
        lines.append(
            "stays broken (already broken now, only by running work that stays): "
            + ", ".join(f"{n} {rule}" for rule, n in sorted(broken.items()))
        )
    return "\n".join(lines)


def fair_share_lines(plan: Plan, inp: PlanningInput) -> list[str]:
    """Under a fair-share policy, a table of each team's share, decayed usage, standing and queue factor
    (from the plan's metrics, :func:`gpuplan.planner.pipeline.metrics.fair_share_metrics`)."""
    fair = inp.policy.fair_share
    if fair is None:
        return []
    m = plan.metrics
    teams = sorted(
        {k.removeprefix("fair_share.").rsplit(".", 1)[0] for k in m if k.startswith("fair_share.")}
    )
    lines = [
        f"fair share (usage half-life {fair.half_life_h:g} h)",
        f"  {'team':<18}{'share':>8}{'usage GPU-h':>13}{'of usage':>10}{'standing':>10}{'factor':>8}",
    ]
    for t in teams:
        f = {name: m.get(f"fair_share.{t}.{name}", 0.0) for name in FAIR_SHARE_FIGURES}
        lines.append(
            f"  {t:<18}{f['share']:>8.1%}{f['usage_gpu_hours']:>13.1f}{f['usage_share']:>10.1%}"
            f"{f['standing']:>10.2f}{f['factor']:>8.2f}"
        )
    return lines


#: Waiting workloads named per reason code in the summary; the others are counted.
NAMED_PER_CODE = 3


def waiting_lines(plan: Plan) -> list[str]:
    """``waiting: 41 MIG_LAYOUT, 2 GANG`` and, per code, the first :data:`NAMED_PER_CODE` waiting
    workloads (``NEVER_FITS: big-16 (1 replica)``), so that a newcomer sees which work waits and why."""
    codes = Counter(u.code for u in plan.unplaced)
    if not codes:
        return []
    lines = ["waiting: " + ", ".join(f"{n} {c}" for c, n in codes.most_common())]
    for code, _ in codes.most_common():
        replicas = Counter(u.workload for u in plan.unplaced if u.code == code)
        named = [
            f"{w} ({n} replica{'s' if n > 1 else ''})" if n > 1 else w
            for w, n in list(replicas.items())[:NAMED_PER_CODE]
        ]
        more = len(replicas) - len(named)
        lines.append(f"  {code}: {', '.join(named)}" + (f" and {more} more workload(s)" if more else ""))
    return lines


def not_optimal_because(plan: Plan) -> list[str]:
    """Why a ``FEASIBLE`` plan is not called optimal: the parts of the problem the solve restricted or
    the passes that changed its plan, read from the solver report's terms and the provenance."""
    s, t = plan.solver, plan.solver.terms
    why: list[str] = []
    if s.name not in EXACT_SOLVERS:
        why.append(f"{s.name} is a heuristic (only a proof by the exact model is called OPTIMAL)")
    fixed = int(t.get("sharing_modes_fixed", 0))
    if fixed:
        why.append(f"the pre-pass fixed the sharing modes of {fixed} node(s) whose mode could change")
    switchable = int(t.get("mig_modes_fixed", 0))
    if switchable:
        why.append(f"the pre-pass fixed the MIG modes of {switchable} GPU(s) whose mode could change")
    if s.model_size.get("restricted"):
        why.append("the model was restricted (not every node a candidate for every replica)")
    if t.get("lns_steps"):
        steps, moved = int(t["lns_steps"]), int(t.get("lns_moved", 0))
        did = f", moving {moved} running replica(s)" if moved else ""
        why.append(f"a large-neighbourhood search took {steps} step(s), each a restricted model{did}")
    if t.get("parts", 0) > 1:
        why.append(f"the fleet was split into {int(t['parts'])} parts solved apart")
    if t.get("drains"):
        why.append("it drains running work for a MIG re-partition (the exact model does not count drains)")
    if t.get(NO_EXACT_SOLUTION):
        why.append("the exact model found no plan in its time: this is the best of the searches before it")
    if HINT_QUEUE in t and t[HINT_QUEUE] < t.get(HINT_QUEUE_FGD, 0):
        why.append(
            f"the re-pack, make-room and neighbourhood searches took the FGD start's queue term from "
            f"{t[HINT_QUEUE_FGD]:,.0f} to {t[HINT_QUEUE]:,.0f} before the exact model"
        )
    if t.get("kept_hint"):
        why.append("the search ended worse than its FGD hint, which is returned")
    if t.get("timeline_changed"):
        why.append("the predicted-start pass changed the plan after the solve")
    if t.get("idle_moves_undone"):
        why.append("the repair pass changed the plan after the solve")
    # The stages in the order they ran (the terms keep it).
    stages = [k for k, v in t.items() if k.startswith("stage_") and k.endswith("_optimal") and not v]
    if stages:
        names = ", ".join(k.removeprefix("stage_").removesuffix("_optimal") for k in stages)
        why.append(
            f"the time limit stopped {'stages' if len(stages) > 1 else 'stage'} {names} before a proof"
        )
    if t.get(CUT):
        why.append("the wall clock stopped a deterministic stage")
    return why or ["the solve was not proved optimal within its time limit"]


def status_lines(plan: Plan) -> list[str]:
    """What the status means when it is not ``OPTIMAL``: why a ``FEASIBLE`` plan is not called optimal
    (with a zero gap, that no plan has a lower objective all the same), or that ``FALLBACK`` is the FGD
    plan."""
    s = plan.solver
    if plan.status is PlanStatus.FALLBACK:
        return ["FALLBACK: the exact solver found no plan in time; this is the greedy (FGD) plan"]
    if plan.status is not PlanStatus.FEASIBLE:
        return []
    because = "; ".join(not_optimal_because(plan))
    if s.gap is not None and s.gap <= 0:
        return [
            "gap 0: the objective meets the bound (no plan has a lower objective), "
            f"but it is not called OPTIMAL: {because}"
        ]
    return [f"not proved optimal: {because}"]


def wall_clock_cut(plan: Plan) -> str | None:
    """The line saying the wall clock stopped the solve where its work limits should have, or the
    greedy placement before the end of the queue (``None`` when neither happened): a deterministic
    plan cut so may differ from a repeat with the same input and seed."""
    terms = plan.solver.terms
    reached = int(terms.get(GREEDY_CUT, 0))
    greedy = f"the greedy placement did not reach {reached} replica(s)" if reached else ""
    if terms.get(CUT):
        return (
            "cut by the wall clock: the time limit stopped this deterministic plan before its work limits "
            "did, so a repeat with the same input and seed may differ" + (f"; {greedy}" if greedy else "")
        )
    return f"cut by the time limit: {greedy}" if greedy else None
