"""FGD fragmentation as linear costs: for fleet-sized models, and for MIG instances everywhere.

The exact fragmentation term needs auxiliary variables per GPU and target demand; on a fleet that is
most of the model, and it covers only whole and fractional GPUs. Here each GPU variable instead costs
the growth of its node's expected
fragmentation if that placement were made alone from the round's starting state — FGD's own gradient,
measured with FGD's node measure (CPU, MIG slots and multi-GPU targets included) and summed over the
placements, so interactions between placements on one node are ignored.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from gpuplan.solvers.formulation.builder import Expr
from gpuplan.solvers.formulation.variables import Variables
from gpuplan.solvers.placement import (
    FirstFitScorer,
    Fragmentation,
    NodeInfo,
    NodeState,
    Option,
    Placer,
    problem_mix,
)
from gpuplan.solvers.placement.options import apply
from gpuplan.solvers.problem import PlacementProblem, ShapeSpec


def _growth(
    measure: Fragmentation, info: NodeInfo, state: NodeState, shape: ShapeSpec, before: float, option: Option
) -> int:
    """Fragmentation growth of the node when ``option`` alone is taken for ``shape``."""
    return round(measure(info, apply(info, state, shape, option)) - before)


def start_states(
    problem: PlacementProblem, v: Variables
) -> tuple[tuple[NodeInfo, ...], tuple[NodeState, ...]]:
    """Every node as the fixed running work leaves it."""
    placer = Placer(problem.nodes, problem.catalog, FirstFitScorer(), policy=problem.policy)
    for r in sorted(v.fixed):
        placer.keep(problem.requests[r])
    return placer.infos, tuple(placer.cluster.states)


def linear_fragmentation(
    problem: PlacementProblem,
    v: Variables,
    infos: Sequence[NodeInfo],
    states: Sequence[NodeState],
    *,
    only_mig: bool = False,
) -> Expr:
    """Sum over candidate GPU variables of their fragmentation growth (milli-GPU, rounded); with
    ``only_mig``, over MIG instance variables only."""
    measure = Fragmentation(problem_mix(problem))
    terms: list[Expr] = []
    for cand in v.cands.values():
        if only_mig and not cand.mig:
            continue
        info, state = infos[cand.node], states[cand.node]
        shape = problem.requests[cand.req].shapes[cand.alt]
        growth = partial(_growth, measure, info, state, shape, measure(info, state))
        if cand.whole and not only_mig:
            chosen = tuple(sorted(cand.whole))[: shape.gpus]
            per_gpu = growth(Option("whole", gpus=chosen)) // max(1, shape.gpus)
            terms.extend(per_gpu * var for var in cand.whole.values())
        for p, var in () if only_mig else cand.frac.items():
            terms.append(growth(Option("fraction", gpus=(p,), milli=shape.milli)) * var)
        for (p, (prof, start)), var in cand.mig.items():
            size = problem.catalog.model(problem.nodes[cand.node].gpus[p].model).profile(prof).size_at(start)
            slots = state.mig[p]
            if slots is not None and any(
                s < start + size and start < s + z and (pn, s) != (prof, start) for s, pn, z, _ in slots
            ):
                continue
            terms.append(growth(Option("mig", gpus=(p,), profile=prof, start=start, size=size)) * var)
        if shape.kind == "cpu" and not only_mig:
            terms.append(growth(Option("cpu")) * cand.x)
    return v.model.sum(terms)
