"""The greedy back-ends' shared loop: keep running work, then place the queue one replica at a time.

:class:`GreedySolver` runs a :class:`~gpuplan.solvers.placement.Placer` with a policy's scorer over a
whole :class:`PlacementProblem` and returns a :class:`SolveResult`.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpuplan.models.plan import Assignment, PlanStatus, Unplaced
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.bounds import never_fitting, objective_bound, queue_lower_bound
from gpuplan.solvers.evaluate import reported
from gpuplan.solvers.placement import GANG, Placer, Scorer
from gpuplan.solvers.placement.options import describe
from gpuplan.solvers.problem import PlacementProblem, Request

log = logging.getLogger(__name__)


class GreedySolver(ABC):
    """A greedy back-end: the shared loop with a policy-specific :class:`Scorer`."""

    name: str

    @abstractmethod
    def scorer(self, problem: PlacementProblem) -> Scorer:
        """The node score used for ``problem``."""

    def placer(self, problem: PlacementProblem) -> Placer:
        """An empty placer for the problem's cluster with this policy's scorer."""
        return Placer(
            problem.nodes,
            problem.catalog,
            self.scorer(problem),
            allow_create=problem.policy.mig.allow_create,
            policy=problem.policy,
        )

    def solve(self, problem: PlacementProblem) -> SolveResult:
        """The greedy plan, reported with its objective terms and the fleet-level queue bound."""
        placers: list[Placer] = []
        result = self.place(problem, on_kept=placers.append)
        bound = objective_bound(problem, queue_lower_bound(problem, never_fitting(problem, placers[0])))
        return reported(problem, replace(result, best_bound=float(bound), bound_source="knapsack"))

    def place(
        self, problem: PlacementProblem, on_kept: Callable[[Placer], None] | None = None
    ) -> SolveResult:
        """Keep running replicas, then place the queue in order; gangs all together or not at all.

        ``on_kept`` sees the placer once running work is kept and before the queue is placed (an exact
        solver reads its candidate rankings there). The result is the bare plan, without its report.
        """
        start = time.perf_counter()
        placer = self.placer(problem)
        kept = [placer.keep(r) for r in problem.requests if r.running is not None]
        if on_kept is not None:
            on_kept(placer)
        queue = [r for r in problem.queue_order() if r.running is None]
        gangs: dict[str, list[Request]] = {}
        for r in queue:
            if r.gang is not None:
                gangs.setdefault(r.gang, []).append(r)
        placed: list[Assignment] = []
        unplaced: list[Unplaced] = []
        for r in queue:
            if r.gang is None:
                a = placer.place(r)
                if a is None:
                    unplaced.append(placer.unplaced(r))
                else:
                    placed.append(a)
                continue
            members = gangs.pop(r.gang, None)
            if members is None:
                continue
            done, blocker = placer.place_gang(members)
            placed.extend(done)
            if blocker is not None:
                unplaced.extend(gang_failure(r.gang, members, blocker, placer))
        wall = time.perf_counter() - start
        log.info(
            "%s placed %d, kept %d, left %d unplaced in %.3f s",
            self.name,
            len(placed),
            len(kept),
            len(unplaced),
            wall,
        )
        return SolveResult(
            status=PlanStatus.FEASIBLE,
            solver=self.name,
            assignments=tuple(kept + placed),
            unplaced=tuple(unplaced),
            mig_layouts=placer.mig_layouts(),
            wall_s=wall,
            terms={"placed": len(placed), "kept": len(kept)},
            model_size={"nodes": len(problem.nodes), "requests": len(problem.requests)},
        )


def gang_failure(gang: str, members: Sequence[Request], blocker: Request, placer: Placer) -> list[Unplaced]:
    """One GANG entry per member, naming the replica that did not fit."""
    what = " or ".join(describe(s) for s in blocker.shapes)
    why = "could never fit" if placer.never_fits(blocker) else "found no room"
    reason = (
        f"gang '{gang}' could not be placed entirely: '{blocker.workload}' replica "
        f"{blocker.replica} ({what}) {why}"
    )
    return [Unplaced(workload=m.workload, replica=m.replica, code=GANG, reason=reason) for m in members]
