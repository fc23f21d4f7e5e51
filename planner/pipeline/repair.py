"""Undo moves and preemptions that buy nothing, after any solve.

A solver stopped by its time limit in a late stage (disruption) can return a plan that migrates a
running replica to an identical empty node, or between GPUs of one node, or preempts work whose GPUs
nobody takes, or swaps a running replica with a waiting one of the same shape (the newcomer takes the
runner's place, the runner the place the newcomer could have taken), or moves runners round a cycle.
Each such change disturbs running work for nothing. Here every disturbed running replica is tried in
reverse on the plan's final state, together with whatever blocks its way home: other disturbed
runners on its old place go home too (chains and cycles), and newcomers on it keep their own place
if it still fits, or take a place one of those runners leaves when their shapes use GPUs alike (a
swap), or, asking for whole GPUs, free GPUs of the nodes involved. The change is dropped when it
places the same replicas (or more: a preempted one back), keeps every newcomer on its alternative,
keeps GPU isolation, frees every GPU reserved for a predicted start as early as before (the
predicted starts stay true), and leaves FGD's fragmentation and the link cost of the nodes involved
as good. The repaired plan is checked by the independent validator as a whole; if it breaks a rule
the solver's plan did not, the undoings are redone one at a time, each checked alone.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Assignment, GpuUse, MigLayout, PlanStatus
from gpuplan.planner.pipeline.layouts import cluster_with_layouts
from gpuplan.planner.pipeline.timeline import OVERDUE_S, duration_s
from gpuplan.planner.pipeline.verdict import result_violations
from gpuplan.planner.validation.occupancy import Holding, Key, Occupancy, holding
from gpuplan.solvers.base import SolveResult
from gpuplan.solvers.evaluate import NodeFragmentation
from gpuplan.solvers.placement.rules import Rules, reserved_teams
from gpuplan.solvers.problem import NodeSpec, PlacementProblem, Request, Running, ShapeSpec, admitted

log = logging.getLogger(__name__)

#: Fragmentation (milli-GPU, a float) may differ by rounding only when it counts as "as good".
FRAGMENTATION_EPS = 1e-6

#: Free GPU sets of one node tried for a whole-GPU newcomer pushed off a runner's place (at most).
FREE_SETS = 256

#: A step of the repair: the replicas whose place changes, with their new assignment.
Step = dict[Key, Assignment]


def _origin(req: Request) -> Holding:
    run = req.running
    assert run is not None
    shape = req.shapes[run.alternative]
    return Holding(
        run.node, run.gpus, shape.cpu_milli, shape.memory_mib, run.alternative, shape.gpu_memory_mib
    )


def _disturbed(req: Request, a: Assignment | None) -> bool:
    """Whether a running replica is moved (node, GPUs or alternative changed) or preempted."""
    run = req.running
    assert run is not None
    return a is None or a.node != run.node or set(a.gpus) != set(run.gpus) or a.alternative != run.alternative


def _same_gpu_use(a: ShapeSpec, b: ShapeSpec) -> bool:
    """Whether replicas of shapes ``a`` and ``b`` use GPUs alike, so one can take the other's GPU entries."""
    return (a.kind, a.gpus, a.milli, a.mig_profile) == (b.kind, b.gpus, b.milli, b.mig_profile)


def _idle_created(
    problem: PlacementProblem, layouts: tuple[MigLayout, ...], assignments: tuple[Assignment, ...]
) -> tuple[MigLayout, ...]:
    """The layouts without new MIG instances that no replica uses any more."""
    current = {(n.name, g.index): set(g.mig) for n in problem.nodes for g in n.gpus if g.mig is not None}
    used = {
        (a.node, g.index, g.mig_profile, g.mig_start)
        for a in assignments
        for g in a.gpus
        if g.mig_profile is not None
    }
    out = []
    for lay in layouts:
        old = current.get((lay.node, lay.gpu), set())
        kept = tuple(
            i
            for i in lay.instances
            if (i.profile, i.start) in old or (lay.node, lay.gpu, i.profile, i.start) in used
        )
        out.append(lay.model_copy(update={"instances": kept}) if kept != lay.instances else lay)
    return tuple(out)


@dataclass
class _State:
    """The plan being repaired: where each replica is, per node, and the resources it holds."""

    occ: Occupancy
    placed: dict[Key, Assignment]
    on_node: dict[str, dict[Key, Assignment]]

    def copy(self) -> _State:
        """An independent copy."""
        return _State(
            self.occ.copy(),
            dict(self.placed),
            defaultdict(dict, {n: dict(m) for n, m in self.on_node.items()}),
        )

    def apply(self, step: Step) -> None:
        """Move every replica of ``step`` to its new assignment (all taken off first, then put back)."""
        for key in step:
            old = self.placed.pop(key, None)
            if old is not None:
                self.occ.stop(key)
                del self.on_node[old.node][key]
        for key, a in sorted(step.items()):
            self.occ.start(key, holding(a))
            self.placed[key] = a
            self.on_node[a.node][key] = a


class _Repair:
    """The undo search on one solve result (see the module doc)."""

    def __init__(
        self, inp: PlanningInput, problem: PlacementProblem, result: SolveResult, catalog: HardwareCatalog
    ) -> None:
        self.inp, self.problem, self.result, self.catalog = inp, problem, result, catalog
        self.by_key = {q.key: q for q in problem.requests}
        self.nodes: Mapping[str, NodeSpec] = {n.name: n for n in problem.nodes}
        self.rules = Rules(problem.policy, catalog)
        self.meter = NodeFragmentation(problem, result.mig_layouts)
        #: GPU entries the plan reserves for waiting replicas' predicted starts, which assume who holds
        #: them now (by node and GPU; a MIG instance is told apart from the others of its GPU).
        self.reserved = {
            (u.reserved_node, g.index, g.mig_profile, g.mig_start)
            for u in result.unplaced
            if u.reserved_node
            for g in u.reserved_gpus
        }
        self.reserved_gpus = {r[:2] for r in self.reserved}

    def initial(self) -> _State:
        """The solver's plan as a state."""
        occ = Occupancy.empty(cluster_with_layouts(self.inp.cluster, self.result.mig_layouts), self.catalog)
        on_node: dict[str, dict[Key, Assignment]] = defaultdict(dict)
        for a in self.result.assignments:
            occ.start((a.workload, a.replica), holding(a), force=True)
            on_node[a.node][(a.workload, a.replica)] = a
        return _State(occ, {(a.workload, a.replica): a for a in self.result.assignments}, on_node)

    def disturbed(self, state: _State) -> list[Request]:
        """The running replicas ``state`` moves or preempts, by key."""
        return sorted(
            (
                q
                for q in self.problem.requests
                if q.running is not None and _disturbed(q, state.placed.get(q.key))
            ),
            key=lambda q: q.key,
        )

    def step(self, state: _State, start: Request) -> Step | None:
        """Send ``start`` home with the disturbed runners in its way; ``None`` if that loses anything."""
        home_of: dict[Key, Holding] = {start.key: _origin(start)}
        newcomers: set[Key] = set()
        todo = [start.key]
        while todo:
            home = home_of[todo.pop()]
            for use in home.gpus:
                gpu = state.occ.gpus.get((home.node, use.index))
                for k in sorted(gpu.users if gpu is not None else ()):
                    r = self.by_key[k]
                    if k in home_of or k in newcomers:
                        continue
                    if r.running is None:
                        newcomers.add(k)
                    elif _disturbed(r, state.placed.get(k)):
                        home_of[k] = _origin(r)
                        todo.append(k)
        # Tried on the state itself and undone before returning: no copy of a whole fleet per step.
        occ = state.occ
        stopped = {k: occ.stop(k) for k in [*home_of, *newcomers]}
        try:
            step: Step = {}
            for k in sorted(home_of):
                if occ.problem(k, home_of[k]) is not None:
                    return None
                occ.start(k, home_of[k])
                q = self.by_key[k]
                assert q.running is not None
                step[k] = q.assignment(q.running)
            if not all(self._apart(occ, self.by_key[k], a) for k, a in step.items()):
                return None
            left = [state.placed[k] for k in sorted(home_of) if k in state.placed]
            # Newcomers pushed off first try their own place, then a place a runner leaves; or the other
            # way round (fractions: one newcomer of the runner's size leaves, its neighbours stay).
            for stay_first in (True, False):
                found = self._new_places(occ, sorted(newcomers), state.placed, left, stay_first=stay_first)
                if found is not None and self._as_good(state, step | found):
                    return step | found
            return None
        finally:
            for k in home_of:
                occ.stop(k)
            for k, hold in stopped.items():
                if hold is not None:
                    occ.start(k, hold, force=True)

    def _new_places(
        self,
        trial: Occupancy,
        newcomers: list[Key],
        placed: Mapping[Key, Assignment],
        left: list[Assignment],
        *,
        stay_first: bool,
    ) -> Step | None:
        """A place for each newcomer pushed off a runner's home (``trial`` is left as it was): its own
        if it still fits, or the place a runner of the step leaves, when the newcomer's shape can take
        that place's GPU entries; ``None`` if one finds none."""
        found: Step = {}
        try:
            for k in newcomers:
                req, now = self.by_key[k], placed[k]
                where = None
                for a in self._places(trial, req, now, left, stay_first=stay_first):
                    if trial.problem(k, holding(a)) is None and (
                        self._apart(trial, req, a) if a is now else self._allowed(trial, req, now, a)
                    ):
                        where = a
                        break
                if where is None:
                    return None
                trial.start(k, holding(where))
                found[k] = where
            return found
        finally:
            for k in found:
                trial.stop(k)

    def _places(
        self, trial: Occupancy, req: Request, now: Assignment, left: list[Assignment], *, stay_first: bool
    ) -> list[Assignment]:
        """The newcomer's own place, the places runners leave that its shape can take and, for whole
        GPUs, the free GPU sets of those nodes, in the order to try them."""
        shape = req.shapes[now.alternative]
        others = [
            req.assignment(Running(a.node, a.gpus, now.alternative))
            for a in left
            if _same_gpu_use(shape, self.by_key[(a.workload, a.replica)].shapes[a.alternative])
        ]
        if shape.kind == "whole" and shape.gpus > 0:
            for node in dict.fromkeys([now.node, *(a.node for a in left)]):
                free = [
                    g.index
                    for g in self.nodes[node].gpus
                    if not trial.gpus[(node, g.index)].users and trial.gpus[(node, g.index)].mig is None
                ]
                sets = itertools.islice(itertools.combinations(free, shape.gpus), FREE_SETS)
                uses = (tuple(GpuUse(index=i) for i in s) for s in sets)
                others += [req.assignment(Running(node, u, now.alternative)) for u in uses]
        return [now, *others] if stay_first else [*others, now]

    def _allowed(self, trial: Occupancy, req: Request, now: Assignment, where: Assignment) -> bool:
        """Whether ``where`` keeps the request's own rules: GPU models, kube-scheduler's filters (a
        running replica may go back where it runs), topology, reserved nodes, GPU sharing isolation and
        its gang's domain (capacity is the occupancy's; the validator checks
        the whole plan in the end)."""
        node = self.nodes[where.node]
        shape = req.shapes[where.alternative]
        models = {g.index: g.model for g in node.gpus}
        if shape.models and any(models[g.index] not in shape.models for g in where.gpus):
            return False
        run = req.running
        home = run is not None and (run.node, set(run.gpus)) == (where.node, set(where.gpus))
        if not admitted(shape, where.node) and not home:  # kube-scheduler's filters; staying is kept
            return False
        if shape.kind == "whole" and shape.gpus > 1:
            position = {g.index: p for p, g in enumerate(node.gpus)}
            taken = {position[g.index] for g in where.gpus}
            if not any(taken <= set(group) for group in node.topology_groups(shape, list(position.values()))):
                return False
        teams = reserved_teams(self.problem.policy, node)
        if teams is not None and req.team not in teams:
            return False
        if req.gang_domain is not None:
            old = self.nodes[now.node].labels.get(req.gang_domain)
            if node.labels.get(req.gang_domain) != old:
                return False
        return self._apart(trial, req, where)

    def _apart(self, trial: Occupancy, req: Request, where: Assignment) -> bool:
        """Whether ``req`` at ``where`` shares no GPU with a team or tier it is kept apart from."""
        mine = dict(t.split("=", 1) for t in self.rules.demand(req).tags)
        if not mine:
            return True
        for use in where.gpus:
            for k in trial.gpus[(where.node, use.index)].users:
                if k == req.key:
                    continue
                theirs = dict(t.split("=", 1) for t in self.rules.demand(self.by_key[k]).tags)
                if any(rule in theirs and theirs[rule] != group for rule, group in mine.items()):
                    return False
        return True

    def _entries(self, a: Assignment) -> set[tuple[str, int, str | None, int | None]]:
        """The GPU entries of ``a`` that the plan reserves for predicted starts: the same MIG instance,
        or its GPU outside MIG (as ``(node, gpu, None, None)``)."""
        out: set[tuple[str, int, str | None, int | None]] = set()
        for g in a.gpus:
            if g.mig_profile is not None:
                if (a.node, g.index, g.mig_profile, g.mig_start) in self.reserved:
                    out.add((a.node, g.index, g.mig_profile, g.mig_start))
            elif (a.node, g.index) in self.reserved_gpus:
                out.add((a.node, g.index, None, None))
        return out

    def _remaining(self, key: Key) -> float:
        """Expected seconds until ``key`` ends, as the predicted starts count them (infinite: unknown)."""
        q = self.by_key[key]
        d = duration_s(self.inp.workload_by_id[q.workload], self.inp.policy)
        if d is None:
            return math.inf
        return d if q.running is None else max(OVERDUE_S, d - (q.runtime_s or 0))

    def _last_end(
        self, on_node: Mapping[str, Mapping[Key, Assignment]], entry: tuple[str, int, str | None, int | None]
    ) -> float:
        """When the last replica holding ``entry`` ends (0: nobody holds it)."""
        return max(
            (self._remaining(k) for k, a in on_node.get(entry[0], {}).items() if entry in self._entries(a)),
            default=0.0,
        )

    def _cost(
        self, on_node: Mapping[str, Mapping[Key, Assignment]], nodes: Iterable[str]
    ) -> tuple[float, int]:
        """(FGD fragmentation, link cost) of ``nodes`` holding ``on_node``'s replicas."""
        fragmented = 0.0
        links = 0
        for n in nodes:
            placed = list(on_node.get(n, {}).values())
            fragmented += self.meter.of(n, placed)
            for a in placed:
                shape = self.by_key[(a.workload, a.replica)].shapes[a.alternative]
                if shape.kind == "whole" and shape.gpus > 1:
                    links += self.nodes[n].cost([g.index for g in a.gpus])
        return fragmented, links

    def _as_good(self, state: _State, step: Step) -> bool:
        """Whether the nodes ``step`` touches are as little fragmented, with as cheap links, after it,
        and every GPU reserved for a predicted start that it touches is free as early as before."""
        nodes = {a.node for a in step.values()} | {state.placed[k].node for k in step if k in state.placed}
        after: dict[str, dict[Key, Assignment]] = {n: dict(state.on_node.get(n, {})) for n in nodes}
        for k in step:
            old = state.placed.get(k)
            if old is not None:
                del after[old.node][k]
        for k, a in step.items():
            after[a.node][k] = a
        touched = {e for k, a in step.items() if state.placed.get(k) != a for e in self._entries(a)}
        touched |= {e for k in step if k in state.placed for e in self._entries(state.placed[k])}
        if any(self._last_end(after, e) > self._last_end(state.on_node, e) for e in touched):
            return False
        frag_before, links_before = self._cost(state.on_node, nodes)
        frag_after, links_after = self._cost(after, nodes)
        return frag_after <= frag_before + FRAGMENTATION_EPS and links_after <= links_before

    def search(self, accept: Callable[[_State], bool] | None = None) -> tuple[_State, int]:
        """Undo steps until none is left; ``accept`` (if given) vets each state a step leads to. The
        state reached and the number of runners sent home."""
        state = self.initial()
        undone = 0
        progress = True
        while progress:
            progress = False
            for q in self.disturbed(state):
                if not _disturbed(q, state.placed.get(q.key)):
                    continue  # sent home by an earlier step of this pass
                step = self.step(state, q)
                if step is None:
                    continue
                if accept is None:
                    state.apply(step)
                else:
                    nxt = state.copy()
                    nxt.apply(step)
                    if not accept(nxt):
                        continue
                    state = nxt
                undone += sum(self.by_key[k].running is not None for k in step)
                progress = True
        return state, undone

    def result_of(self, state: _State, undone: int) -> SolveResult:
        """The solve result with ``state``'s assignments."""
        assignments = tuple(sorted(state.placed.values(), key=lambda a: (a.workload, a.replica)))
        return replace(
            self.result,
            status=PlanStatus.FEASIBLE if self.result.status is PlanStatus.OPTIMAL else self.result.status,
            assignments=assignments,
            unplaced=tuple(u for u in self.result.unplaced if (u.workload, u.replica) not in state.placed),
            mig_layouts=_idle_created(self.problem, self.result.mig_layouts, assignments),
            terms={**self.result.terms, "idle_moves_undone": float(undone)},
        )

    def broken(self, result: SolveResult) -> set[tuple[str, str]]:
        """The rules (with their subjects) ``result``'s plan breaks, the disruption budget aside (the
        repair only lowers the disruption)."""
        return {
            (v.rule, v.subject)
            for v in result_violations(result, self.inp, self.catalog)
            if not v.rule.startswith("disruption")
        }


def without_idle_moves(
    inp: PlanningInput, problem: PlacementProblem, result: SolveResult, catalog: HardwareCatalog
) -> SolveResult:
    """``result`` with every move or preemption undone whose undoing loses nothing (see module doc)."""
    placed = {(a.workload, a.replica): a for a in result.assignments}
    if not any(q.running is not None and _disturbed(q, placed.get(q.key)) for q in problem.requests):
        return result
    repair = _Repair(inp, problem, result, catalog)
    state, undone = repair.search()
    if not undone:
        return result
    repaired = repair.result_of(state, undone)
    broken = repair.broken(repaired)
    if broken:
        before = repair.broken(result)
        if not broken <= before:
            log.info(
                "undoing idle moves together breaks %s; undoing them one at a time",
                sorted(broken - before)[0],
            )
            state, undone = repair.search(lambda s: repair.broken(repair.result_of(s, 0)) <= before)
            if not undone:
                return result
            repaired = repair.result_of(state, undone)
    log.info("undid %d move(s) or preemption(s) that bought nothing", undone)
    return repaired
