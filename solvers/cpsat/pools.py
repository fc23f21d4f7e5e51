"""POP-style decomposition (Narayanan et al., SOSP 2021) for fleets too large for one model.

The nodes are split into parts that look alike: nodes are grouped by kind (pool and GPU models), and
each kind is dealt at random across the parts. Running work stays with its node's part; each gang
goes to one part whole (the members of a gang that runs in part join its running ones: see
:func:`split`); every other waiting replica goes to the part that can host it with the most GPU
capacity still unclaimed, so the parts get similar load. Team quotas are split so that the parts'
shares add up to the team's quota. The parts are solved in parallel (processes or Ray tasks) and
merged; the merge is valid because parts share no node and no quota unit.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.plan import Unplaced
from gpuplan.models.policy import DisruptionBudget, Quota
from gpuplan.models.rules.disruption import moves_allowed, preemptions_allowed, team_moves_allowed
from gpuplan.models.rules.quota import gpus_for_units, limit_units, quota_unit
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.formulation.constraints import charged_units
from gpuplan.solvers.parallel import run_tasks
from gpuplan.solvers.problem import NodeSpec, PlacementProblem, Request, ShapeSpec, admitted
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Fleets with more GPUs than this are split into parts of about this many GPUs (unless one
#: configuration LP plans them whole: :func:`gpuplan.solvers.cpsat.solver.one_configuration_lp`).
POOL_GPUS = 8000
#: Seconds of CP-SAT a part needs: a part given less gets the FGD plan (a deterministic run gives
#: every part at least this, whatever the share of the time limit).
MIN_PART_S = 1.0


@dataclass(frozen=True)
class Part:
    """One part: its sub-problem, how it is solved and the running replicas (by key) it may move."""

    problem: PlacementProblem
    options: RunOptions
    movable: frozenset[tuple[str, int]]


def part_count(nodes: Sequence[NodeSpec]) -> int:
    """How many parts a fleet of ``nodes`` is split into (1: solve it whole)."""
    gpus = sum(len(n.gpus) for n in nodes)
    return max(1, math.ceil(gpus / POOL_GPUS))


def _node_parts(problem: PlacementProblem, parts: int, rng: random.Random) -> list[int]:
    """Part of each node: every kind of node dealt across the parts in turn, in random order."""
    kinds: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, node in enumerate(problem.nodes):
        models = tuple(sorted(Counter(g.model for g in node.gpus).items()))
        kinds[(node.pool or "", models, node.cpu_milli)].append(i)
    of: list[int] = [0] * len(problem.nodes)
    offset = 0
    for kind in sorted(kinds, key=repr):
        members = kinds[kind]
        rng.shuffle(members)
        for j, n in enumerate(members):
            of[n] = (offset + j) % parts
        offset += len(members)
    return of


def _largest(problem: PlacementProblem, nodes: Sequence[int]) -> dict[str, int]:
    """Most GPUs of each model on one node of ``nodes`` (key ``""``: of any model)."""
    best: dict[str, int] = defaultdict(int)
    for n in nodes:
        count = Counter(g.model for g in problem.nodes[n].gpus)
        for model, k in count.items():
            best[model] = max(best[model], k)
        best[""] = max(best[""], len(problem.nodes[n].gpus))
    return best


def _fits(shape: ShapeSpec, largest: dict[str, int]) -> bool:
    """Whether some node of a part has enough GPUs of an allowed model for ``shape``."""
    need = max(1, shape.gpus) if shape.kind != "cpu" else 0
    if need == 0:
        return True
    if not shape.models:
        return largest.get("", 0) >= need
    return any(largest.get(m, 0) >= need for m in shape.models)


def _admits_some(shape: ShapeSpec, names: Sequence[str]) -> bool:
    """Whether kube-scheduler's filters admit ``shape`` on some node of a part (named ``names``)."""
    return not shape.refused or any(admitted(shape, n) for n in names)


def _demand(q: Request) -> int:
    return min(s.gpu_milli_total for s in q.shapes) or 1


def _split_quota(
    problem: PlacementProblem, q: Quota, part_of: dict[tuple[str, int], int], parts: int
) -> list[float]:
    """The quota's GPU-equivalents per part: what each part's running work holds, plus the rest of the
    quota shared in proportion to the team's waiting demand in each part (none at all when the running
    work is already over the quota), each exact to the catalog's quota unit
    (:func:`~gpuplan.models.rules.quota.gpus_for_units`). An infinite quota stays whole in every part."""
    unit = quota_unit(problem.catalog)
    total = limit_units(q.gpus, unit)
    if total is None:
        return [q.gpus] * parts
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    held = [0] * parts
    wanted = [0] * parts
    for req in problem.requests:
        if req.team != q.team or req.key not in part_of:
            continue
        p = part_of[req.key]
        if req.running is None:
            wanted[p] += _demand(req)
            continue
        held[p] += charged_units(problem, q, req, node_pos[req.running.node], req.running, unit)
    if sum(held) > total:
        # Running work alone is over the quota: the plan may keep it but place nothing new that counts
        # (the validator keeps the violation only then), so every part gets none and keeps what stays.
        return [0.0] * parts
    rest = total - sum(held)
    weight = sum(wanted) or parts
    share = [rest * (w if sum(wanted) else 1) // weight for w in wanted]
    share[max(range(parts), key=lambda i: wanted[i])] += rest - sum(share)
    return [gpus_for_units(held[i] + share[i], unit) for i in range(parts)]


def _shares(total: int, weights: Sequence[int]) -> list[int]:
    """``total`` dealt out in whole units: evenly, the remainder to the heaviest parts (ties: first)."""
    out = [total // len(weights)] * len(weights)
    for p in sorted(range(len(weights)), key=lambda p: (-weights[p], p))[: total % len(weights)]:
        out[p] += 1
    return out


def _split_budget(problem: PlacementProblem, movable: Sequence[int]) -> list[DisruptionBudget]:
    """Each part's disruption budget: the round's moves and preemptions, and each team's moves, shared
    out (more to parts with more running replicas that may be disturbed), so that the merged plan keeps
    the whole budget."""
    budget = problem.policy.disruption
    moves = _shares(moves_allowed(budget), movable)
    preempts = _shares(preemptions_allowed(budget), movable)
    cap = team_moves_allowed(budget)
    teams = [None] * len(moves) if cap is None else _shares(cap, movable)
    return [
        budget.model_copy(
            update={"max_moves_per_round": m, "max_preemptions_per_round": k, "max_moves_per_team": t}
        )
        for m, k, t in zip(moves, preempts, teams, strict=True)
    ]


def split(problem: PlacementProblem, options: RunOptions, parts: int, movable: set[int]) -> list[Part]:
    """The parts of ``problem`` (``movable``: indices of running replicas that may move), each solved
    with a seed of its own on one worker."""
    rng = random.Random(options.seed)
    node_of = _node_parts(problem, parts, rng)
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    members = [[n for n in range(len(problem.nodes)) if node_of[n] == p] for p in range(parts)]
    largest = [_largest(problem, m) for m in members]
    names = [[problem.nodes[n].name for n in m] for m in members]
    room = [sum(MILLI_PER_GPU * len(problem.nodes[n].gpus) for n in m) for m in members]
    part_of: dict[tuple[str, int], int] = {}
    running_in: dict[str, set[int]] = defaultdict(set)
    for q in problem.requests:
        if q.running is not None:
            part_of[q.key] = node_of[node_pos[q.running.node]]
            room[part_of[q.key]] -= q.shapes[q.running.alternative].gpu_milli_total
            if q.gang is not None:
                running_in[q.gang].add(part_of[q.key])
    # A gang running in several parts is held where it runs: no part sees it whole to move or stop it.
    spanning = {g for g, ps in running_in.items() if len(ps) > 1}
    movable = {r for r in movable if problem.requests[r].gang not in spanning}
    units: dict[str, list[Request]] = defaultdict(list)
    for q in problem.queue_order():
        if q.running is None:
            units[q.gang or f"\0{q.workload}/{q.replica}"].append(q)
    hosts: dict[tuple[ShapeSpec, ...], list[int]] = {}
    for unit in units.values():
        gang = unit[0].gang
        if gang is not None and gang in running_in:
            # The other members of a gang that runs in part join its running ones (all together or
            # none, in a part that holds them), or wait (no part) when those sit in several parts
            # outside one value of the gang's domain labels.
            if _joinable(problem, gang, node_pos, len(running_in[gang]) > 1):
                best = min(running_in[gang])
                for q in unit:
                    part_of[q.key] = best
                room[best] -= sum(_demand(q) for q in unit)
            continue
        ok = set(range(parts))
        for q in unit:
            if q.shapes not in hosts:
                hosts[q.shapes] = [
                    p
                    for p in range(parts)
                    if any(_fits(s, largest[p]) and _admits_some(s, names[p]) for s in q.shapes)
                ]
            ok &= set(hosts[q.shapes])
        best = max(ok or range(parts), key=lambda p: (room[p], -p))
        for q in unit:
            part_of[q.key] = best
        room[best] -= sum(_demand(q) for q in unit)
    quotas = [(q, _split_quota(problem, q, part_of, parts)) for q in problem.policy.quotas]
    reqs: list[list[Request]] = [[] for _ in range(parts)]
    for q in problem.requests:
        if q.key in part_of:
            reqs[part_of[q.key]].append(q)
    in_part = Counter(part_of[problem.requests[r].key] for r in movable)
    budgets = _split_budget(problem, [in_part[p] for p in range(parts)])
    out: list[Part] = []
    for p in range(parts):
        policy = problem.policy.model_copy(
            update={
                "quotas": tuple(q.model_copy(update={"gpus": s[p]}) for q, s in quotas),
                "disruption": budgets[p],
            }
        )
        out.append(
            Part(
                replace(
                    problem,
                    nodes=tuple(problem.nodes[n] for n in members[p]),
                    requests=tuple(reqs[p]),
                    policy=policy,
                ),
                replace(options, seed=options.seed + p, num_workers=1),
                frozenset(problem.requests[r].key for r in movable if part_of[problem.requests[r].key] == p),
            )
        )
    log.info(
        "split %d nodes and %d replicas into %d parts of %s nodes",
        len(problem.nodes), len(problem.requests), parts, [len(m) for m in members],
    )  # fmt: skip
    return out


def _joinable(problem: PlacementProblem, gang: str, node_pos: dict[str, int], spanning: bool) -> bool:
    """Whether the waiting members of ``gang``, which runs in part, may join its running members in the
    part of the first of them: always when those all run in one part (its model sees the whole gang),
    else when the gang has no domain label or its running members all sit in one value of it."""
    if not spanning:
        return True
    members = [q for q in problem.requests if q.gang == gang]
    domains = sorted({q.gang_domain for q in members if q.gang_domain})
    values = {
        tuple(problem.nodes[node_pos[q.running.node]].labels.get(d) for d in domains)
        for q in members
        if q.running is not None
    }
    return not domains or (len(values) == 1 and None not in next(iter(values)))


def left_out(problem: PlacementProblem, parts: Sequence[Part]) -> tuple[Unplaced, ...]:
    """The replicas no part holds (the waiting members of a gang that runs in parts outside one value of
    its domain labels: :func:`split`), which wait."""
    held = {q.key for part in parts for q in part.problem.requests}
    return tuple(
        Unplaced(
            workload=q.workload,
            replica=q.replica,
            code="GANG",
            reason=f"gang '{q.gang}' runs on nodes of several values of its domain label: it cannot be "
            "completed inside one",
        )
        for q in problem.requests
        if q.key not in held
    )


#: Solves one part (a module-level function, so that workers import it by name).
PartSolver = Callable[[Part], SolveResult]


def _solve_part(solve: PartSolver, part: Part) -> SolveResult:
    return solve(part)


def solve_parts(
    parts: list[Part], processes: int, solve: PartSolver, ray: str | None = None
) -> list[SolveResult]:
    """Solve the parts in ``processes`` worker processes (forked: they inherit the parts), or as Ray
    tasks on the cluster at ``ray`` (:mod:`gpuplan.solvers.parallel`)."""
    return run_tasks(_solve_part, solve, parts, processes=processes, ray=ray)
