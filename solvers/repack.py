"""Making room by moving running work: a waiting replica goes onto a node once a few small replicas
move off it to nodes where they fit now.

For each waiting replica (highest queue penalty first), among the nodes that could host it were they
empty, the one needing the fewest evictions is chosen: the node's movable replicas are taken off
smallest first until the waiting replica fits, and each evicted replica must fit on another node as
things stand (placed by the scorer, FGD's on the fleet paths). The whole exchange is kept only if
every piece fits; otherwise it is undone. Every replica that was running before the plan and ends
elsewhere counts once against the move budget. Every placement goes through the placement kernel,
which keeps all the rules of a single placement.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuplan.models.plan import Assignment
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.objective import queue_penalty
from gpuplan.solvers.placement import NodeFilter, Placer
from gpuplan.solvers.placement.options import keep, options
from gpuplan.solvers.placement.state import initial_state
from gpuplan.solvers.problem import PlacementProblem, Request, Running, disturbable

log = logging.getLogger(__name__)

#: At most this many replicas are evicted to make room for one.
MAX_EVICTED = 4
#: Nodes examined for one waiting replica, and exchanges tried for it.
CANDIDATES = 64
MAX_TRIALS = 24

Key = tuple[str, int]


@dataclass
class RepackReport:
    """What the repack did: replicas placed by it, and running replicas it moved."""

    placed: int = 0
    moved: int = 0


def _size(req: Request, a: Assignment) -> int:
    return req.shapes[a.alternative].gpu_milli_total


class _Plan:
    """The plan being repacked: who is where, by node."""

    def __init__(self, problem: PlacementProblem, placer: Placer, start: SolveResult) -> None:
        self.problem = problem
        self.placer = placer
        self.by_key = {q.key: q for q in problem.requests}
        self.pos = {n.name: i for i, n in enumerate(problem.nodes)}
        self.placed: dict[Key, Assignment] = {(a.workload, a.replica): a for a in start.assignments}
        self.on: dict[int, dict[Key, Assignment]] = defaultdict(dict)
        for key, a in self.placed.items():
            self.on[self.pos[a.node]][key] = a

    def movable(self, n: int, moved: set[Key], budget: int) -> list[Key]:
        """Replicas on node ``n`` that may be evicted, smallest first: those the plan placed, those
        already moved (counted once), and running ones while the budget lasts."""
        out = []
        for key, a in self.on[n].items():
            req = self.by_key[key]
            if req.running is None or key in moved or (budget > 0 and disturbable(self.problem.policy, req)):
                out.append((_size(req, a), key))
        return [key for _, key in sorted(out)]

    def pairs(self, keys: Sequence[Key]) -> list[tuple[Request, Assignment]]:
        return [(self.by_key[k], self.placed[k]) for k in keys]


def _eviction_sets(plan: _Plan, n: int, req: Request, movable: list[Key]) -> list[list[Key]]:
    """Sets of movable replicas whose leaving may make room for ``req`` on node ``n``, smallest and
    easiest to re-place first: GPU room is made on the GPUs that hold the fewest movable replicas (only
    if the node lacks it), then CPU and memory by the smallest replica that covers the shortfall (or
    the largest ones together)."""
    info = plan.placer.infos[n]
    state = plan.placer.cluster.states[n]
    shape = req.shapes[0]
    on_gpu: dict[int, list[Key]] = defaultdict(list)
    pinned: set[int] = set()
    allowed = set(movable)
    for key, a in plan.on[n].items():
        for g in a.gpus:
            p = info.position_of[g.index]
            (on_gpu[p] if key in allowed else []).append(key)
            if key not in allowed:
                pinned.add(p)
    gpu_sets: list[list[Key]] = []
    if not any(
        options(info, replace(state, cpu=info.spec.cpu_milli, mem=info.spec.memory_mib), s)
        for s in req.shapes
    ):
        need = max((s.gpus if s.kind == "whole" else 1 for s in req.shapes if s.kind != "cpu"), default=0)
        gpus = sorted((p for p in on_gpu if p not in pinned), key=lambda p: (len(on_gpu[p]), p))
        for first in range(min(len(gpus), 3)):
            chosen = gpus[first : first + need]
            gpu_sets.append(list(dict.fromkeys(key for p in chosen for key in on_gpu[p])))
    else:
        gpu_sets.append([])
    out: list[list[Key]] = []
    for base in gpu_sets:
        cpu = state.cpu + sum(plan.placed[k].cpu_milli for k in base)
        mem = state.mem + sum(plan.placed[k].memory_mib for k in base)
        short_cpu, short_mem = shape.cpu_milli - cpu, shape.memory_mib - mem
        if short_cpu <= 0 and short_mem <= 0:
            out.append(base)
            continue
        rest = [k for k in movable if k not in base]
        covering = [
            k
            for k in rest
            if plan.placed[k].cpu_milli >= short_cpu and plan.placed[k].memory_mib >= short_mem
        ]
        covering.sort(key=lambda k: (_size(plan.by_key[k], plan.placed[k]), plan.placed[k].cpu_milli, k))
        out.extend([*base, k] for k in covering[:3])
        together = list(base)
        for k in sorted(rest, key=lambda k: -plan.placed[k].cpu_milli):
            if short_cpu <= 0 and short_mem <= 0:
                break
            together.append(k)
            short_cpu -= plan.placed[k].cpu_milli
            short_mem -= plan.placed[k].memory_mib
        if short_cpu <= 0 and short_mem <= 0:
            out.append(together)
    return sorted((e for e in out if e and len(e) <= MAX_EVICTED), key=len)


def _room_after(plan: _Plan, n: int, req: Request, evict: list[Key]) -> bool:
    """Whether ``req`` fits on node ``n`` once ``evict`` left it (CPU, memory and GPUs)."""
    info = plan.placer.infos[n]
    state = initial_state(info)
    for key, a in plan.on[n].items():
        if key not in evict:
            state = keep(info, state, plan.by_key[key].shapes[a.alternative], a.gpus)
    return any(options(info, state, s) for s in req.shapes)


def _exchange(plan: _Plan, n: int, req: Request, evict: list[Key]) -> list[Assignment] | None:
    """Evict, place ``req`` on ``n``, re-place the evicted elsewhere: the new assignments (the
    waiting replica's first), or ``None`` with everything undone."""
    placer = plan.placer
    placer.cluster.begin()
    used = list(placer.rules.used)
    stay = [k for k in plan.on[n] if k not in evict]
    placer.release(n, plan.pairs(evict), plan.pairs(stay))
    out: list[Assignment] = []
    first = None
    for k in range(len(req.shapes)):
        first = placer.place_on(req, n, k)
        if first is not None:
            break
    if first is not None:
        out.append(first)
        elsewhere: NodeFilter = lambda info: info.pos != n  # noqa: E731
        for key in evict:
            a = placer.place(plan.by_key[key], within=elsewhere)
            if a is None:
                first = None
                break
            out.append(a)
    if first is None:
        placer.cluster.rollback()
        placer.rules.used = used
        return None
    placer.cluster.commit()
    return out


def repack(
    problem: PlacementProblem, placer: Placer, start: SolveResult, deadline: float, *, moves: int
) -> tuple[SolveResult, RepackReport]:
    """``start`` (whose placements ``placer`` holds) with waiting replicas placed by evictions, at most
    ``moves`` running replicas moved, until ``deadline`` (perf_counter)."""
    plan = _Plan(problem, placer, start)
    report = RepackReport()
    moved: set[Key] = set()
    hosts: dict[tuple[object, ...], list[int]] = {}
    waiting = sorted(
        (q for q in problem.requests if q.key not in plan.placed and q.gang is None),
        key=lambda q: (-queue_penalty(q, problem), q.workload, q.replica),
    )
    for req in waiting:
        if time.perf_counter() >= deadline or len(moved) >= moves:
            break
        key = (req.shapes, req.team)
        if key not in hosts:
            hosts[key] = [n for n in range(len(problem.nodes)) if placer.fits_empty(req, n)]
        ranked = sorted(hosts[key], key=lambda n: -sum(placer.cluster.states[n].free))[:CANDIDATES]
        got = None
        trials = 0
        for n in ranked:
            if got is not None or trials >= MAX_TRIALS:
                break
            movable = plan.movable(n, moved, moves - len(moved))
            for evict in _eviction_sets(plan, n, req, movable):
                fresh = [k for k in evict if plan.by_key[k].running is not None and k not in moved]
                if len(moved) + len(fresh) > moves or not _room_after(plan, n, req, evict):
                    continue
                trials += 1
                got = _exchange(plan, n, req, evict)
                if got is not None or trials >= MAX_TRIALS:
                    break
        if got is None:
            continue
        for a in got:
            k = (a.workload, a.replica)
            old = plan.placed.get(k)
            if old is not None:
                del plan.on[plan.pos[old.node]][k]
            plan.placed[k] = a
            plan.on[plan.pos[a.node]][k] = a
            run = plan.by_key[k].running
            if run is not None:
                if Running(a.node, a.gpus, a.alternative) == run:
                    moved.discard(k)
                else:
                    moved.add(k)
        report.placed += 1
    report.moved = len(moved)
    log.info("repack placed %d waiting replicas, moving %d running ones", report.placed, report.moved)
    return (
        replace(
            start,
            assignments=tuple(sorted(plan.placed.values(), key=lambda a: (a.workload, a.replica))),
            unplaced=tuple(u for u in start.unplaced if (u.workload, u.replica) not in plan.placed),
            mig_layouts=placer.mig_layouts(),
        ),
        report,
    )
