"""Best of several queue orders: the greedy loop run on a few orders of the same queue, the best kept.

A greedy placement depends on the order it meets the queue in, and a planner sees a whole queue at once
(a round's arrivals), not one replica at a time. So the loop is tried on the queue's own order and on
up to ``tries - 1`` seeded shuffles of it, each within the policy's order (replicas of equal tier,
priority and wait change places, never others), every trial on the same placer and undone after. The
order kept is the one that leaves the least queue penalty waiting and, among those, adds the least
fragmentation (FGD's measure, summed over the nodes the trial changed: every other node is the same in
all trials). Sorting the queue instead (largest or smallest first) lost up to 0.9 point of allocation
against arrival order in greedy-only openb rounds (benchmarks/README.md, B2 ablation), so shuffles, not
sorts, are tried.
"""

from __future__ import annotations

import itertools
import logging
import random
from collections.abc import Callable, Sequence

from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.placement import Fragmentation, Placer
from gpuplan.solvers.problem import PlacementProblem, Request

log = logging.getLogger(__name__)

#: Runs the greedy loop over a queue on the placer; returns the replicas it left waiting.
Loop = Callable[[Sequence[Request]], Sequence[Request]]


def shuffled(queue: Sequence[Request], rng: random.Random) -> list[Request]:
    """``queue`` (in the policy's order) with each run of equal tier, priority and wait shuffled."""
    out: list[Request] = []
    for _, run in itertools.groupby(queue, key=lambda r: (r.tier_rank, r.priority, r.wait_s)):
        part = list(run)
        rng.shuffle(part)
        out.extend(part)
    return out


def best_order(
    problem: PlacementProblem,
    placer: Placer,
    queue: Sequence[Request],
    loop: Loop,
    measure: Fragmentation,
    *,
    tries: int,
    until: float | None,
    now: Callable[[], float],
    seed: int,
) -> list[Request]:
    """The order of ``queue`` (the given one or a shuffle seeded by ``seed``, ``tries`` in all) whose greedy
    placement leaves the least queue penalty waiting, then adds the least fragmentation; each trial
    runs on ``placer`` and is undone. Trials after the first stop at ``until`` (so a caller that needs
    the same plan on every run passes ``None`` and a number of trials it can afford)."""
    rng = random.Random(seed)
    best: tuple[int, float] | None = None
    chosen = list(queue)
    for t in range(tries):
        if t and until is not None and now() >= until:
            break
        order = list(queue) if t == 0 else shuffled(queue, rng)
        before = list(placer.cluster.states)
        used = list(placer.rules.used)
        placer.cluster.begin()
        left = loop(order)
        waiting = sum(queue_penalty(r, problem) for r in left)
        added = sum(
            measure(placer.infos[n], s) - measure(placer.infos[n], before[n])
            for n, s in enumerate(placer.cluster.states)
            if s is not before[n]
        )
        placer.cluster.rollback()
        placer.rules.used = used
        score = (waiting, added)
        if best is None or score < best:
            best, chosen = score, order
    log.debug("best of %d queue orders: waiting %s, fragmentation added %s", tries, *(best or (0, 0)))
    return chosen
