"""Objective terms: tier-weighted queue time, fragmentation, disruption and topology.

Every term is an integer linear expression, reported separately in the plan. The default is
lexicographic (queue, then fragmentation, then disruption, then topology); the policy may ask for a
weighted sum instead.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.rules.fairness import shortfall_steps
from gpuplan.solvers.formulation.builder import Expr
from gpuplan.solvers.formulation.constraints import quota_units
from gpuplan.solvers.formulation.linear_frag import linear_fragmentation, start_states
from gpuplan.solvers.formulation.variables import GpuKey, Variables
from gpuplan.solvers.placement.fragmentation import problem_mix
from gpuplan.solvers.problem import PlacementProblem, Request, ShapeSpec

#: Waiting time counts in hours on top of a base of 8 h, capped at a week, so that tier weight
#: dominates among recent work and long waits still rise (no starvation).
WAIT_STEP_S = 3600
WAIT_BASE_STEPS = 8
WAIT_CAP_STEPS = 168

#: Preference cost of using alternative k instead of the first one (per alternative rank).
ALTERNATIVE_COST = 10
#: Disruption costs of one migration and one preemption (a re-partition costs the policy's figure).
MOVE_COST = 10
PREEMPT_COST = 30
#: Target popularity is expressed in percent so that fragmentation stays an integer.
POPULARITY_SCALE = 100


def demand_units(shape: ShapeSpec, problem: PlacementProblem) -> int:
    """GPU demand of a shape in hundredths of a GPU (at least 1, so CPU-only work counts too)."""
    if shape.kind == "whole":
        return 100 * shape.gpus
    if shape.kind == "fraction":
        return max(1, -(-shape.milli // 10))
    if shape.kind == "mig":
        assert shape.mig_profile is not None
        fractions = [
            m.profile(shape.mig_profile).compute_slices / m.compute_slices
            for m in problem.catalog.models
            if shape.mig_profile in m.profile_map and (not shape.models or m.name in shape.models)
        ]
        return max(1, round(100 * min(fractions, default=0.01)))
    return 1


def queue_penalty(req: Request, problem: PlacementProblem) -> int:
    """Cost of leaving a replica waiting: tier weight * demand * (8 h + hours waited, capped) * its team's
    fair-share multiplier (1 without a fair-share policy; hundredths of its factor with one, which the
    policy keeps from lifting a lower tier over a higher one)."""
    steps = WAIT_BASE_STEPS + min(req.wait_s // WAIT_STEP_S, WAIT_CAP_STEPS)
    fair = problem.fair_units(req.team)
    return max(1, req.tier_weight) * demand_units(req.shapes[0], problem) * steps * fair


def floor_weight(problem: PlacementProblem) -> int:
    """What one whole GPU-equivalent short of the fairness floor costs in the queue term: more than
    every replica waiting together, so a plan meets the floor whenever any plan can."""
    return 1 + sum(queue_penalty(r, problem) for r in problem.requests)


def floor_shortfall(problem: PlacementProblem, served: Mapping[str, int]) -> int:
    """Whole GPU-equivalents the teams lack to reach the fairness floor, holding ``served`` units
    (:func:`~gpuplan.models.rules.fairness.shortfall_steps`; 0 without a floor)."""
    return sum(
        shortfall_steps(f, served.get(t, 0), problem.floor_unit) for t, f in problem.fair_floor.items()
    )


def _floor_term(problem: PlacementProblem, v: Variables) -> Expr:
    """Whole GPU-equivalents the teams lack of the fairness floor, each team's lack an integer
    ``short >= (floor - held) / unit``, held counting the running work that stays fixed and every GPU
    use the team's candidates may make (the queue term counts it :func:`floor_weight` each)."""
    m = v.model
    unit = problem.floor_unit
    held: dict[str, list[Expr]] = defaultdict(list)
    fixed: dict[str, int] = defaultdict(int)
    for (n, p), users in v.baseline.users.items():
        for r in users:
            req = problem.requests[r]
            assert req.running is not None
            fixed[req.team] += quota_units(problem, req.shapes[req.running.alternative], n, p, unit)
    for cand in v.cands.values():
        req = problem.requests[cand.req]
        shape = req.shapes[cand.alt]
        held[req.team].extend(
            quota_units(problem, shape, cand.node, p, unit) * var for p, var in cand.gpu_vars()
        )
    shorts: list[Expr] = []
    for team, floor in sorted(problem.fair_floor.items()):
        most = shortfall_steps(floor, fixed[team], unit)
        if most == 0:
            continue
        short = m.int_var(0, most, f"fair_floor_short[{team}]")
        m.add(unit * short + m.sum(held[team]) >= floor - fixed[team])
        shorts.append(short)
    return m.sum(shorts)


def frag_thresholds(problem: PlacementProblem) -> list[tuple[int, int]]:
    """(per-GPU demand in milli, popularity in percent) of the GPU-using target shapes, merged by
    demand: free capacity of a shared GPU below a target's demand is fragmentation for that target."""
    merged: dict[int, float] = defaultdict(float)
    for t in problem_mix(problem):
        if t.shape.kind in ("whole", "fraction"):
            merged[MILLI_PER_GPU if t.shape.kind == "whole" else t.shape.milli] += t.weight
    return [
        (d, round(w * POPULARITY_SCALE)) for d, w in sorted(merged.items()) if round(w * POPULARITY_SCALE)
    ]


@dataclass
class Terms:
    """The four objective terms as linear expressions, and the fairness floor's lack (whole
    GPU-equivalents; the queue term counts it, a stage of its own minimises it first; ``None`` without
    a floor, or once the model keeps it at 0)."""

    floor: Expr | None
    queue: Expr
    fragmentation: Expr
    disruption: Expr
    topology: Expr


def _fragmentation(problem: PlacementProblem, v: Variables) -> Expr:
    """FGD fragmentation of every GPU that may be shared: for each target demand d with weight w,
    w * free if free < d, else 0, linearised with ``covered[g,d] = free * [free >= d]``."""
    m = v.model
    uses: dict[GpuKey, list[Expr]] = defaultdict(list)
    shared: set[GpuKey] = set()
    for cand in v.cands.values():
        shape = problem.requests[cand.req].shapes[cand.alt]
        for p, var in cand.whole.items():
            uses[(cand.node, p)].append(MILLI_PER_GPU * var)
        for p, var in cand.frac.items():
            uses[(cand.node, p)].append(shape.milli * var)
            shared.add((cand.node, p))
    thresholds = frag_thresholds(problem)
    total = sum(w for _, w in thresholds)
    terms: list[Expr] = []
    for n, p in sorted(shared):
        tag = f"{problem.nodes[n].name},g{problem.nodes[n].gpus[p].index}"
        free = m.int_var(0, MILLI_PER_GPU, f"free[{tag}]")
        m.add(free == v.free_milli((n, p)) - m.sum(uses[(n, p)]))
        terms.append(total * free)
        for d, w in thresholds:
            fits = m.bool_var(f"fits[{tag},{d}]")
            covered = m.int_var(0, MILLI_PER_GPU, f"covered[{tag},{d}]")
            m.add(free >= d * fits)
            m.add(covered <= free)
            m.add(covered <= MILLI_PER_GPU * fits)
            terms.append(-w * covered)
    return m.sum(terms)


def _mig_fragmentation(problem: PlacementProblem, v: Variables) -> Expr:
    """FGD fragmentation growth of each new MIG instance, on the exact term's scale (the exact term
    covers whole and fractional GPUs only)."""
    if not any(cand.mig for cand in v.cands.values()):
        return v.model.sum([])
    infos, states = start_states(problem, v)
    return POPULARITY_SCALE * linear_fragmentation(problem, v, infos, states, only_mig=True)


def build_terms(problem: PlacementProblem, v: Variables, fragmentation: Expr | None = None) -> Terms:
    """Create the auxiliary variables and return the four objective terms (``fragmentation``, when
    given, replaces the exact fragmentation term)."""
    m = v.model
    queue = m.sum(queue_penalty(problem.requests[r], problem) * (1 - p) for r, p in v.placed.items())
    floor = _floor_term(problem, v) if problem.fair_floor else None
    if floor is not None:
        queue += floor_weight(problem) * floor

    repartition = problem.policy.mig.repartition_cost
    destroyed = [
        1 - inst
        for mg in v.mig_gpus.values()
        for slot, inst in mg.inst.items()
        if slot in mg.existing and not isinstance(inst, int)
    ]
    moves = [v.placed[r] - s for r, s in v.stay.items()]
    preempted = [1 - v.placed[r] for r in v.stay]
    disruption = m.sum(
        [MOVE_COST * m.sum(moves), PREEMPT_COST * m.sum(preempted), repartition * m.sum(destroyed)]
    )

    topo: list[Expr] = []
    for cand in v.cands.values():
        shape = problem.requests[cand.req].shapes[cand.alt]
        cost = ALTERNATIVE_COST * cand.alt
        if cand.whole and shape.gpus > 1:
            node = problem.nodes[cand.node]
            idx = sorted(node.gpus[p].index for p in cand.whole)
            cost += node.cost(idx[: shape.gpus])
        if cost:
            topo.append(cost * cand.x)
    return Terms(
        floor=floor,
        queue=queue,
        fragmentation=_fragmentation(problem, v) + _mig_fragmentation(problem, v)
        if fragmentation is None
        else fragmentation,
        disruption=disruption,
        topology=m.sum(topo),
    )
