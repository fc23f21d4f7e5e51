"""The greedy back-ends' shared loop: keep running work, then place the queue one replica at a time.

:class:`GreedySolver` runs a :class:`~gpuplan.solvers.placement.Placer` with a policy's scorer over a
whole :class:`PlacementProblem` and returns a :class:`SolveResult`.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gpuplan.models.plan import Assignment, PlanStatus, Unplaced
from gpuplan.solvers.base import CUT, SolveResult
from gpuplan.solvers.bounds import never_fitting, objective_bound, queue_lower_bound
from gpuplan.solvers.evaluate import reported
from gpuplan.solvers.greedy.orders import best_order
from gpuplan.solvers.placement import GANG, NEVER_FITS, Fragmentation, Placer, Scorer, problem_mix
from gpuplan.solvers.placement.never import gang_never_fits
from gpuplan.solvers.placement.options import describe
from gpuplan.solvers.problem import PlacementProblem, Request, running_members
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: The code of a replica the greedy loop did not reach before its deadline (the explain pass's
#: ``SOLVER_LIMIT``: the solver ran out of time, not the cluster out of room).
NOT_REACHED = "SOLVER_LIMIT"
#: Term: how many waiting replicas the greedy loop did not reach before its deadline.
GREEDY_CUT = "greedy_not_reached"

Clock = Callable[[], float]


class GreedySolver(ABC):
    """A greedy back-end: the shared loop with a policy-specific :class:`Scorer`."""

    name: str

    @abstractmethod
    def scorer(self, problem: PlacementProblem) -> Scorer:
        """The node score used for ``problem``."""

    def rank(self, problem: PlacementProblem) -> Sequence[int] | None:
        """The nodes' tie-break rank: the placer's own (ties spread over the fleet) unless a policy
        defines its order."""
        return None

    def placer(self, problem: PlacementProblem) -> Placer:
        """An empty placer for the problem's cluster with this policy's scorer and tie-break rank."""
        return Placer(
            problem.nodes,
            problem.catalog,
            self.scorer(problem),
            allow_create=problem.policy.mig.allow_create,
            rank=self.rank(problem),
            policy=problem.policy,
        )

    def solve(self, problem: PlacementProblem, options: RunOptions) -> SolveResult:
        """The greedy plan within the options' time limit, reported with its objective terms and the
        fleet-level queue bound."""
        placers: list[Placer] = []
        deadline = time.perf_counter() + options.time_limit_s
        result = self.place(problem, options, on_kept=placers.append, deadline=deadline)
        bound = objective_bound(problem, queue_lower_bound(problem, never_fitting(problem, placers[0])))
        return reported(problem, replace(result, best_bound=float(bound), bound_source="knapsack"))

    def place(
        self,
        problem: PlacementProblem,
        options: RunOptions,
        on_kept: Callable[[Placer], None] | None = None,
        *,
        deadline: float | None = None,
        clock: Clock | None = None,
        orders: int = 1,
        orders_until: float | None = None,
    ) -> SolveResult:
        """Keep running replicas, then place the queue in order; gangs all together or not at all (the
        waiting members of a gang that runs in part: all together beside its running ones, or none).

        ``on_kept`` sees the placer once running work is kept and before the queue is placed (an exact
        solver reads its candidate rankings there). With ``orders`` above 1 the queue is placed in the
        best of that many orders (:func:`~gpuplan.solvers.greedy.orders.best_order`, shuffled by the
        options' seed; the trials stop at ``orders_until``). The loop stops at ``deadline`` (on
        ``clock``, ``time.perf_counter`` by default): the replicas it has not reached wait, labelled
        :data:`NOT_REACHED`, and their count is the :data:`GREEDY_CUT` term (with :data:`CUT` in a
        deterministic run, whose plan then depends on the clock). The result is the bare plan,
        without its report.
        """
        start = time.perf_counter()
        now = clock or time.perf_counter
        placer = self.placer(problem)
        kept = [placer.keep(r) for r in problem.requests if r.running is not None]
        if on_kept is not None:
            on_kept(placer)
        queue = [r for r in problem.queue_order() if r.running is None]
        running = running_members(problem.requests)

        def loop(order: Sequence[Request]) -> _Outcome:
            return _place_queue(placer, order, deadline, now, running)

        if orders > 1 and len(queue) > 1:
            measure = Fragmentation(problem_mix(problem))

            def waiting(order: Sequence[Request]) -> list[Request]:
                out = loop(order)
                return out.waiting + out.not_reached

            queue = best_order(
                problem,
                placer,
                queue,
                waiting,
                measure,
                tries=orders,
                until=orders_until,
                now=now,
                seed=options.seed,
            )
        done = loop(queue)
        unplaced = done.unplaced + _not_reached(done.not_reached)
        wall = time.perf_counter() - start
        log.info(
            "%s placed %d, kept %d, left %d unplaced (%d not reached by the deadline) in %.3f s",
            self.name,
            len(done.placed),
            len(kept),
            len(unplaced),
            len(done.not_reached),
            wall,
        )
        cut = {GREEDY_CUT: float(len(done.not_reached))} if done.not_reached else {}
        if done.not_reached and options.deterministic:
            cut[CUT] = 1.0
        return SolveResult(
            status=PlanStatus.FEASIBLE,
            solver=self.name,
            assignments=tuple(kept + done.placed),
            unplaced=tuple(unplaced),
            mig_layouts=placer.mig_layouts(),
            wall_s=wall,
            terms={"placed": len(done.placed), "kept": len(kept), **cut},
            model_size={"nodes": len(problem.nodes), "requests": len(problem.requests)},
        )


@dataclass
class _Outcome:
    """One pass of the greedy loop: placements, replicas left waiting (with why, and the requests), and
    the replicas the deadline stopped it from reaching."""

    placed: list[Assignment] = field(default_factory=list)
    unplaced: list[Unplaced] = field(default_factory=list)
    waiting: list[Request] = field(default_factory=list)
    not_reached: list[Request] = field(default_factory=list)


def _place_queue(
    placer: Placer,
    queue: Sequence[Request],
    deadline: float | None,
    now: Clock,
    running: Mapping[str, Sequence[tuple[Request, str]]],
) -> _Outcome:
    """Place ``queue`` in order on ``placer``: single replicas one at a time, a gang's members all
    together (at its first member, beside its ``running`` members kept where they run) or not at all;
    stop at ``deadline``."""
    gangs: dict[str, list[Request]] = {}
    for r in queue:
        if r.gang is not None:
            gangs.setdefault(r.gang, []).append(r)
    out = _Outcome()
    for r in queue:
        if out.not_reached or (deadline is not None and now() >= deadline):
            if r.gang is None or r.gang in gangs:  # a gang already handled is not cut
                out.not_reached.append(r)
            continue
        if r.gang is None:
            a = placer.place(r)
            if a is None:
                out.unplaced.append(placer.unplaced(r))
                out.waiting.append(r)
            else:
                out.placed.append(a)
            continue
        members = gangs.pop(r.gang, None)
        if members is None:
            continue
        done, blocker = placer.place_gang(members, running.get(r.gang, ()))
        out.placed.extend(done)
        if blocker is not None:
            out.unplaced.extend(gang_failure(r.gang, members, blocker, placer, running.get(r.gang, ())))
            out.waiting.extend(members)
    return out


def _not_reached(requests: Sequence[Request]) -> list[Unplaced]:
    """One :data:`NOT_REACHED` entry per replica the loop did not reach (a gang's members together,
    since the loop stops between gangs)."""
    return [
        Unplaced(
            workload=r.workload,
            replica=r.replica,
            code=NOT_REACHED,
            reason="not reached: the greedy placement stopped at the time limit",
        )
        for r in requests
    ]


def gang_failure(
    gang: str,
    members: Sequence[Request],
    blocker: Request,
    placer: Placer,
    running: Sequence[tuple[Request, str]] = (),
) -> list[Unplaced]:
    """One entry per waiting member: NEVER_FITS when the gang (``members`` and its ``running`` ones) can
    never be placed whole, else GANG naming the replica that did not fit."""
    short = gang_never_fits(placer.policy, placer, [*members, *(q for q, _ in running)])
    if short is not None:
        return [
            Unplaced(workload=m.workload, replica=m.replica, code=NEVER_FITS, reason=short.reason)
            for m in members
        ]
    what = " or ".join(describe(s) for s in blocker.shapes)
    why = "could never fit" if placer.never_fits(blocker) else "found no room"
    reason = (
        f"gang '{gang}' could not be placed entirely: '{blocker.workload}' replica "
        f"{blocker.replica} ({what}) {why}"
    )
    return [Unplaced(workload=m.workload, replica=m.replica, code=GANG, reason=reason) for m in members]
