"""Room for a waiting replica by preempting lower-tier work on one node, as a scheduler does between
rounds (Kubernetes' preemption: the fewest victims of strictly lower tier on one node).

The executor uses it for work of a tier the policy never preempts (latency-sensitive work), which must
not wait for the next round when background work holds the room it needs. Only running replicas the
policy lets be preempted (:func:`~gpuplan.solvers.problem.may_preempt`: preemptible, their tier open to
preemption, run the minimum time) of a strictly lower tier than the replica are victims, never a gang's
member; the replica then starts on the victims' node, which is what ``preempt_only_for_higher_tier``
asks of a preemption.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gpuplan.models.plan import Assignment
from gpuplan.models.policy import Policy
from gpuplan.planner.pipeline.timeline import quiet_overcommit
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import Request, may_preempt

#: What a placer holds on each node: (request, where it is held), running work and reservations alike.
Held = Mapping[str, Sequence[tuple[Request, Assignment]]]


def victims_of(policy: Policy, req: Request, here: Sequence[tuple[Request, Assignment]]) -> list[Request]:
    """Running replicas of ``here`` that ``req`` may preempt, the cheapest to stop first: lowest tier,
    then the shortest run so far (the least work lost)."""
    out = [
        q
        for q, a in here
        if q.running is not None
        and q.gang is None
        and q.tier_rank > req.tier_rank
        and may_preempt(policy, q)
        and (a.node, a.gpus) == (q.running.node, q.running.gpus)
    ]
    return sorted(out, key=lambda q: (-q.tier_rank, math.inf if q.runtime_s is None else q.runtime_s, q.key))


def _fits(placer: Placer, req: Request, n: int, here: Sequence[tuple[Request, Assignment]],
          gone: set[tuple[str, int]]) -> int | None:  # fmt: skip
    """The first alternative of ``req`` that fits on node ``n`` once the replicas ``gone`` are off it
    (the placer is left as it was), or None."""
    placer.cluster.begin()
    used = list(placer.rules.used)
    try:
        with quiet_overcommit():
            placer.release(
                n, [qa for qa in here if qa[0].key in gone], [qa for qa in here if qa[0].key not in gone]
            )
        for k in range(len(req.shapes)):
            if placer.place_on(req, n, k) is not None:
                return k
        return None
    finally:
        placer.cluster.rollback()
        placer.rules.used = used


def evict_for(
    placer: Placer, policy: Policy, req: Request, held: Held, budget: int
) -> tuple[Assignment, list[Request]] | None:
    """Place ``req`` on the node where preempting the fewest victims (then the least work lost) makes
    room for it, at most ``budget`` of them; return its assignment and the victims (the placer then
    holds ``req`` there and no longer the victims), or None where no node has such room.

    On each node all possible victims go first; if ``req`` fits then, they are reprieved one by one,
    the costliest to stop first, as long as it still fits (Kubernetes' reprieve), so no victim is
    stopped that the room does not need.
    """
    best: tuple[tuple[int, float], int, int, list[Request]] | None = None
    for n, info in enumerate(placer.infos):
        here = held.get(info.name, ())
        candidates = victims_of(policy, req, here)
        if not candidates or not placer.fits_empty(req, n):
            continue
        gone = {q.key for q in candidates}
        if _fits(placer, req, n, here, gone) is None:
            continue
        for q in reversed(candidates):
            gone.discard(q.key)
            if _fits(placer, req, n, here, gone) is None:
                gone.add(q.key)
        chosen = [q for q in candidates if q.key in gone]
        cost = (len(chosen), float(sum(q.runtime_s or 0 for q in chosen)))
        if len(chosen) <= budget and (best is None or cost < best[0]):
            k = _fits(placer, req, n, here, gone)
            assert k is not None
            best = (cost, n, k, chosen)
    if best is None:
        return None
    _, n, k, chosen = best
    here = held.get(placer.infos[n].name, ())
    gone = {q.key for q in chosen}
    with quiet_overcommit():
        placer.release(
            n, [qa for qa in here if qa[0].key in gone], [qa for qa in here if qa[0].key not in gone]
        )
    placed = placer.place_on(req, n, k)
    assert placed is not None
    return placed, chosen
