"""Candidate placements and the decision variables of the exact (per-GPU) placement model.

Only feasible pairs get variables: a replica alternative gets a node variable only on nodes whose GPU
models, MIG mode, CPU/memory, isolation rules and gang domains admit it, and GPU variables only on the
GPUs of that node it could use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuplan.models.hardware import MILLI_PER_GPU, GpuModelSpec
from gpuplan.models.plan import GpuUse
from gpuplan.models.rules.isolation import reserved_teams, team_allowed
from gpuplan.solvers.formulation.builder import LinearBuilder, Var
from gpuplan.solvers.problem import (
    NodeSpec,
    PlacementProblem,
    Request,
    Running,
    ShapeSpec,
    admitted,
    disturbable,
    memory_room,
)

#: One GPU of the cluster: (node position, GPU position on the node).
GpuKey = tuple[int, int]
#: A MIG instance slot on a GPU: (profile name, start memory slice).
Slot = tuple[str, int]

#: A replica alternative on a node: (request position, alternative, node position).
CandKey = tuple[int, int, int]


@dataclass
class Candidate:
    """One replica alternative on one node, with the GPU variables it may use."""

    req: int
    alt: int
    node: int
    x: Var
    whole: dict[int, Var] = field(default_factory=dict)
    frac: dict[int, Var] = field(default_factory=dict)
    mig: dict[tuple[int, Slot], Var] = field(default_factory=dict)
    groups: list[tuple[frozenset[int], Var]] = field(default_factory=list)

    def var_for(self, p: int, use: GpuUse) -> Var | None:
        """The variable of GPU entry ``use`` on GPU position ``p`` (None if not a candidate)."""
        if use.mig_profile is not None and use.mig_start is not None:
            return self.mig.get((p, (use.mig_profile, use.mig_start)))
        if use.milli is not None:
            return self.frac.get(p)
        return self.whole.get(p)

    def gpu_vars(self) -> Iterable[tuple[int, Var]]:
        """(GPU position, variable) of every GPU use this candidate may make."""
        yield from self.whole.items()
        yield from self.frac.items()
        for (p, _), v in self.mig.items():
            yield p, v


@dataclass
class MigGpu:
    """Instance variables of a MIG-enabled GPU (1 = the instance exists in the target layout)."""

    key: GpuKey
    spec: GpuModelSpec
    existing: frozenset[Slot]
    inst: dict[Slot, Var | int] = field(default_factory=dict)


@dataclass
class Baseline:
    """Resources held by running work that this solve may not move (constants of the model)."""

    cpu: dict[int, int] = field(default_factory=dict)
    memory: dict[int, int] = field(default_factory=dict)
    milli: dict[GpuKey, int] = field(default_factory=dict)
    gpu_memory: dict[GpuKey, int] = field(default_factory=dict)
    busy: dict[GpuKey, set[Slot]] = field(default_factory=dict)
    users: dict[GpuKey, list[int]] = field(default_factory=dict)

    def hold(self, problem: PlacementProblem, r: int, n: int, run: Running) -> None:
        """Take the resources of running replica ``r`` on node ``n``."""
        shape = problem.requests[r].shapes[run.alternative]
        self.cpu[n] = self.cpu.get(n, 0) + shape.cpu_milli
        self.memory[n] = self.memory.get(n, 0) + shape.memory_mib
        pos = {g.index: p for p, g in enumerate(problem.nodes[n].gpus)}
        for use in run.gpus:
            key = (n, pos[use.index])
            self.users.setdefault(key, []).append(r)
            if use.mig_profile is not None and use.mig_start is not None:
                self.busy.setdefault(key, set()).add((use.mig_profile, use.mig_start))
            else:
                self.milli[key] = self.milli.get(key, 0) + (MILLI_PER_GPU if use.milli is None else use.milli)
                if use.milli is not None:
                    self.gpu_memory[key] = self.gpu_memory.get(key, 0) + shape.gpu_memory_mib


@dataclass
class Variables:
    """Every decision variable of the model, indexed for the constraint and objective builders.

    Running replicas that may not move are *fixed*: they get no variables, their ``placed`` is the
    constant 1 and their resources are held in :attr:`baseline`.
    """

    model: LinearBuilder
    cands: dict[CandKey, Candidate] = field(default_factory=dict)
    by_req: dict[int, list[Candidate]] = field(default_factory=dict)
    placed: dict[int, Var | int] = field(default_factory=dict)
    mig_gpus: dict[GpuKey, MigGpu] = field(default_factory=dict)
    stay: dict[int, Var] = field(default_factory=dict)
    fixed: dict[int, int] = field(default_factory=dict)
    baseline: Baseline = field(default_factory=Baseline)
    #: Running replicas free to move, by the GPUs their current place uses.
    running_at: dict[GpuKey, list[int]] = field(default_factory=dict)
    #: Per gang with a running member: 1 only when the plan keeps it as it runs (every running member
    #: where it runs, no other member placed; ``constraints.gang_kept``).
    gang_kept: dict[str, Var | int] = field(default_factory=dict)
    #: Why each replica that never fits waits (``solvers.placement.never``), worked out when a result
    #: first needs it.
    never_fitting: dict[tuple[str, int], str] | None = None

    def free_milli(self, key: GpuKey) -> int:
        """Milli-GPU of a GPU not held by fixed work."""
        return MILLI_PER_GPU - self.baseline.milli.get(key, 0)

    def free_gpu_memory(self, problem: PlacementProblem, key: GpuKey) -> int:
        """GPU memory (MiB) of a GPU not held by fixed fractions."""
        return problem.nodes[key[0]].gpus[key[1]].memory_mib - self.baseline.gpu_memory.get(key, 0)


def gpu_spec(problem: PlacementProblem, node: NodeSpec, pos: int) -> GpuModelSpec:
    """Catalog spec of the GPU at ``pos`` of ``node``."""
    return problem.catalog.model(node.gpus[pos].model)


def eligible_gpus(
    problem: PlacementProblem, node: NodeSpec, shape: ShapeSpec, *, any_model: bool = False
) -> list[int]:
    """GPU positions of ``node`` that ``shape`` may use (model allowed unless ``any_model``, right MIG or
    sharing mode, profile offered)."""
    out = []
    for p, g in enumerate(node.gpus):
        if (shape.models and not any_model and g.model not in shape.models) or not g.offers(shape.kind):
            continue
        if shape.kind == "mig":
            if g.mig is None or shape.mig_profile not in gpu_spec(problem, node, p).profile_map:
                continue
        elif g.mig is not None:
            continue
        out.append(p)
    return out


def whole_groups(node: NodeSpec, shape: ShapeSpec, gpus: list[int]) -> list[frozenset[int]] | None:
    """GPU groups that must hold all of a multi-GPU replica (None: no grouping needed)."""
    if shape.gpus < 2:
        return None
    groups = sorted(
        {frozenset(g) for g in node.topology_groups(shape, gpus) if len(g) >= shape.gpus}, key=sorted
    )
    if len(groups) == 1 and groups[0] == set(gpus):
        return None
    return groups


def mig_slots(spec: GpuModelSpec, profile: str) -> list[Slot]:
    """Every valid (profile, start) slot of ``profile`` on a GPU model."""
    return [(profile, pl.start) for pl in spec.profile(profile).placements]


def _name(req: Request) -> str:
    return f"{req.workload}#{req.replica}"


def node_admits(problem: PlacementProblem, req: Request, node: NodeSpec) -> bool:
    """Static checks of a node for a request: team-exclusive rules and gang domain label."""
    if not team_allowed(reserved_teams(problem.policy.isolation, node.name, node.pool), req.team):
        return False
    return not (req.gang_domain and req.gang_domain not in node.labels)


def _free_gpus(v: Variables, n: int, shape: ShapeSpec, gpus: list[int]) -> list[int]:
    """The GPUs of ``gpus`` that fixed work leaves room on for ``shape``."""
    if shape.kind == "whole":
        return [p for p in gpus if v.free_milli((n, p)) == MILLI_PER_GPU]
    if shape.kind == "fraction":
        return [p for p in gpus if v.free_milli((n, p)) >= shape.milli]
    return gpus


def add_candidate(
    v: Variables, problem: PlacementProblem, r: int, k: int, n: int, *, allow_create: bool
) -> Candidate | None:
    """Variables for alternative ``k`` of request ``r`` on node ``n`` (None if it can never fit)."""
    req = problem.requests[r]
    shape = req.shapes[k]
    node = problem.nodes[n]
    if not admitted(shape, node.name):
        return None  # kube-scheduler's filters refuse it there (staying is ``keep_current``'s)
    if shape.cpu_milli > node.cpu_milli - v.baseline.cpu.get(n, 0):
        return None
    if shape.memory_mib > node.memory_mib - v.baseline.memory.get(n, 0):
        return None
    m = v.model
    tag = f"{_name(req)},a{k},{node.name}"
    if shape.kind == "cpu":
        cand = Candidate(r, k, n, m.bool_var(f"x[{tag}]"))
    else:
        gpus = _free_gpus(v, n, shape, eligible_gpus(problem, node, shape))
        if shape.kind == "fraction":
            gpus = [p for p in gpus if memory_room(shape, v.free_gpu_memory(problem, (n, p))) > 0]
        if shape.kind == "whole":
            if len(gpus) < shape.gpus:
                return None
            groups = whole_groups(node, shape, gpus)
            if groups is not None:
                if not groups:
                    return None
                gpus = sorted(set().union(*groups))
        if not gpus:
            return None
        cand = Candidate(r, k, n, m.bool_var(f"x[{tag}]"))
        if shape.kind == "whole":
            cand.whole = {p: m.bool_var(f"whole[{tag},g{node.gpus[p].index}]") for p in gpus}
            for i, grp in enumerate(groups or ()):
                cand.groups.append((grp, m.bool_var(f"group[{tag},{i}]")))
        elif shape.kind == "fraction":
            cand.frac = {p: m.bool_var(f"frac[{tag},g{node.gpus[p].index}]") for p in gpus}
        else:
            assert shape.mig_profile is not None
            for p in gpus:
                mg = v.mig_gpus[(n, p)]
                busy = v.baseline.busy.get((n, p), set())
                for slot in mig_slots(mg.spec, shape.mig_profile):
                    if (slot not in mg.existing and not allow_create) or slot in busy:
                        continue
                    gtag = f"{node.name},g{node.gpus[p].index},{slot[0]}@{slot[1]}"
                    cand.mig[(p, slot)] = m.bool_var(f"mig[{tag},{gtag}]")
                    if slot not in mg.inst:
                        mg.inst[slot] = m.bool_var(f"inst[{gtag}]")
            if not cand.mig:
                return None
    v.cands[(r, k, n)] = cand
    v.by_req.setdefault(r, []).append(cand)
    return cand


def build_variables(
    builder: LinearBuilder,
    problem: PlacementProblem,
    candidate_nodes: dict[int, list[int]] | None = None,
    movable_running: set[int] | None = None,
) -> Variables:
    """Create every variable: candidates per replica, MIG instance slots, placed and stay flags.

    ``candidate_nodes`` restricts the nodes tried for a request (all nodes when absent);
    ``movable_running`` restricts which running replicas may move (all that the budget allows when
    absent); the others are fixed where they run.
    """
    v = Variables(builder)
    mig_policy = problem.policy.mig
    node_pos = {node.name: n for n, node in enumerate(problem.nodes)}
    for r, req in enumerate(problem.requests):
        if req.running is None:
            continue
        if disturbable(problem.policy, req) and (movable_running is None or r in movable_running):
            continue
        n = node_pos[req.running.node]
        v.fixed[r] = n
        v.placed[r] = 1
        v.baseline.hold(problem, r, n, req.running)
    for n, node in enumerate(problem.nodes):
        for p, g in enumerate(node.gpus):
            if g.mig is None:
                continue
            spec = gpu_spec(problem, node, p)
            existing = frozenset(g.mig)
            mg = MigGpu((n, p), spec, existing)
            busy = v.baseline.busy.get((n, p), set())
            for slot in sorted(existing):
                mg.inst[slot] = (
                    v.model.bool_var(f"inst[{node.name},g{g.index},{slot[0]}@{slot[1]}]")
                    if mig_policy.allow_repartition and slot not in busy
                    else 1
                )
            for slot in busy - existing:
                mg.inst[slot] = 1
            v.mig_gpus[(n, p)] = mg
    all_nodes = list(range(len(problem.nodes)))
    for r, req in enumerate(problem.requests):
        if r in v.fixed:
            continue
        nodes = candidate_nodes.get(r, all_nodes) if candidate_nodes is not None else all_nodes
        for n in nodes:
            if not node_admits(problem, req, problem.nodes[n]):
                continue
            for k in range(len(req.shapes)):
                add_candidate(v, problem, r, k, n, allow_create=mig_policy.allow_create)
        if req.running is not None:
            n = node_pos[req.running.node]
            pos = {g.index: p for p, g in enumerate(problem.nodes[n].gpus)}
            for use in req.running.gpus:
                v.running_at.setdefault((n, pos[use.index]), []).append(r)
            keep_current(v, problem, r, n)
        v.placed[r] = v.model.bool_var(f"placed[{_name(req)}]")
    return v


def keep_current(v: Variables, problem: PlacementProblem, r: int, n: int) -> None:
    """Let running replica ``r`` stay exactly where it runs (node ``n``) when a rule it already breaks
    there (a team-exclusive node, a node outside its gang's domain, an NVLink or NUMA need, a GPU model it
    no longer allows, a node kube-scheduler's filters now refuse it on) left its place
    out of its candidates: the validator keeps such a violation when the replica stays, so the model
    offers staying, and only staying (no other GPU of a node reserved for another team, of a model not
    allowed, no other GPU set that breaks the need). Places that break other rules (sharing mode, busy
    GPUs) stay out."""
    req = problem.requests[r]
    run = req.running
    assert run is not None
    node = problem.nodes[n]
    shape = req.shapes[run.alternative]
    pos = {g.index: p for p, g in enumerate(node.gpus)}
    if any(u.index not in pos for u in run.gpus):
        return
    here = sorted({pos[u.index] for u in run.gpus})
    cand = v.cands.get((r, run.alternative, n))
    grouped = cand is None or not cand.groups or any(set(here) <= grp for grp, _ in cand.groups)
    if current_vars(v, problem, r) is not None and grouped:
        return
    if not set(here) <= set(_free_gpus(v, n, shape, eligible_gpus(problem, node, shape, any_model=True))):
        return
    if shape.cpu_milli > node.cpu_milli - v.baseline.cpu.get(n, 0):
        return
    if shape.memory_mib > node.memory_mib - v.baseline.memory.get(n, 0):
        return
    slot: Slot | None = None
    if shape.kind == "whole" and len(here) != shape.gpus:
        return
    if shape.kind == "mig":
        use = run.gpus[0]
        mg = v.mig_gpus.get((n, here[0]))
        if use.mig_profile is None or use.mig_start is None or mg is None:
            return
        slot = (use.mig_profile, use.mig_start)
        if slot not in mg.inst:
            return
    m = v.model
    tag = f"{_name(req)},a{run.alternative},{node.name}"
    if cand is None:
        cand = Candidate(r, run.alternative, n, m.bool_var(f"x[{tag}]"))
        v.cands[(r, run.alternative, n)] = cand
        v.by_req.setdefault(r, []).append(cand)
    if shape.kind == "whole":
        for p in here:
            if p not in cand.whole:
                cand.whole[p] = m.bool_var(f"whole[{tag},g{node.gpus[p].index}]")
        if cand.groups:
            cand.groups.append((frozenset(here), m.bool_var(f"group[{tag},current]")))
    elif shape.kind == "fraction":
        cand.frac.setdefault(here[0], m.bool_var(f"frac[{tag},g{node.gpus[here[0]].index}]"))
    elif slot is not None:
        gtag = f"{node.name},g{node.gpus[here[0]].index},{slot[0]}@{slot[1]}"
        cand.mig.setdefault((here[0], slot), m.bool_var(f"mig[{tag},{gtag}]"))


def current_vars(v: Variables, problem: PlacementProblem, r: int) -> list[Var] | None:
    """The variables that are 1 when running replica ``r`` stays exactly where it runs (None if its
    current placement is not among its candidates)."""
    req = problem.requests[r]
    run = req.running
    assert run is not None
    n = next((i for i, node in enumerate(problem.nodes) if node.name == run.node), None)
    if n is None:
        return None
    cand = v.cands.get((r, run.alternative, n))
    if cand is None:
        return None
    pos = {g.index: p for p, g in enumerate(problem.nodes[n].gpus)}
    out: list[Var] = [cand.x]
    for use in run.gpus:
        p = pos.get(use.index)
        if p is None:
            return None
        var = cand.var_for(p, use)
        if var is None:
            return None
        out.append(var)
    return out
