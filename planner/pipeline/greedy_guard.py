"""After predicted starts, the better of the solver's plan and the FGD plan.

The solver's objective sees only who starts now; the predicted-start pass then holds back a start that
would delay the reservation of a replica ahead of it in the queue (conservative backfill: tier,
priority, time waited). The two can disagree, for example when the solver starts a replica of lower
priority in place of one that fits only later, and the pass then holds back a chain of starts. FGD
places in queue order, so its plan rarely loses starts to the pass. When the pass changed the solver's
plan, the FGD plan is put through the same pass, and the one that leaves less waiting is returned; the
solver's bound stays (it holds for every plan), so the gap says how far the plan returned is from it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import PlanStatus
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.pipeline.timeline import TIMELINE_CUT, Reservation, with_reservations
from gpuplan.planner.validation.occupancy import Key
from gpuplan.solvers.base import SolveResult, instead_of
from gpuplan.solvers.evaluate import queue_term
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.problem import PlacementProblem
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Term set when the FGD plan, after predicted starts, left less waiting than the solver's and was kept.
KEPT_FGD = "kept_fgd_after_timeline"
#: Waiting replicas times nodes above which the FGD plan is not made again (on a fleet in rounds it
#: takes a good part of a round's few seconds; the solver's own plan starts from it there).
MAX_PAIRS = 20_000


def better_than_fgd(
    inp: PlanningInput,
    problem: PlacementProblem,
    result: SolveResult,
    catalog: HardwareCatalog,
    now: datetime,
    options: RunOptions,
    previous: Mapping[Key, Reservation] | None,
    deadline: Deadline,
) -> SolveResult:
    """``result`` (the solver's plan after predicted starts), or the FGD plan after the same pass when
    that leaves less waiting; only when the pass changed the solver's plan, time is left and the input
    is not fleet-sized (:data:`MAX_PAIRS`)."""
    if not result.terms.get("timeline_changed") or TIMELINE_CUT in result.terms or deadline.expired():
        return result
    if sum(r.running is None for r in problem.requests) * len(problem.nodes) > MAX_PAIRS:
        return result
    greedy = Fgd().solve(problem, options)
    ours = with_reservations(inp, problem, greedy, catalog, now, previous, deadline)
    if TIMELINE_CUT in ours.terms or ours.status is PlanStatus.FALLBACK:
        return result
    mine, theirs = queue_term(problem, ours), queue_term(problem, result)
    if mine >= theirs:
        return result
    log.info(
        "predicted starts held back %d of %s's starts: the FGD plan leaves less waiting (%d against %d)",
        int(result.terms["timeline_changed"]), result.solver, mine, theirs,
    )  # fmt: skip
    return instead_of(result, ours, {**result.terms, **ours.terms, KEPT_FGD: 1.0})
