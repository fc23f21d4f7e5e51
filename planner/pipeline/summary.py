"""A readable text summary of a plan for the terminal."""

from __future__ import annotations

from collections import Counter

from gpuplan.models.plan import MIGRATE, Plan
from gpuplan.models.problem import PlanningInput
from gpuplan.solvers.base import CUT
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
    # A migration back to where the replica runs (drained for a MIG re-partition) is a restart.
    kinds = Counter("restart" if a.kind == MIGRATE and a.from_ == a.to else a.kind for a in plan.actions)
    if kinds:
        lines.append("actions: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
    undone = int(s.terms.get("idle_moves_undone", 0))
    if undone:
        lines.append(f"undone: {undone} move(s) or preemption(s) that bought nothing (budget left unused)")
    codes = Counter(u.code for u in plan.unplaced)
    if codes:
        lines.append("waiting: " + ", ".join(f"{n} {c}" for c, n in codes.most_common()))
    broken = Counter(b.rule for b in plan.stays_broken)
    if broken:
        lines.append(
            "stays broken (already broken now, only by running work that stays): "
            + ", ".join(f"{n} {rule}" for rule, n in sorted(broken.items()))
        )
    return "\n".join(lines)


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
