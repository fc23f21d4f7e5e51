"""The purchase MILP: the cheapest mix of node types whose capacity can host a set of replicas.

Replicas are grouped into classes of identical shapes; for each class, alternative and node type an
integer counts the replicas served there. Per node type the model keeps whole GPUs, GPUs shared by
fractions and GPUs in MIG mode within the GPUs bought, CPU and memory within the nodes bought, and
bounds how many large or NVLink/NUMA-bound replicas one node can hold. It is a relaxation of exact
per-node placement (capacity is pooled over the nodes of a type), so its optimum is a lower bound on
the cost of any purchase that serves the demand; the caller checks the purchase with the real
placement solver.

A type may also stand for nodes the fleet already has (``TypeSpec.available``: that many, free of
charge), and a replica may have alternatives for those nodes apart from the ones a purchase may serve
(``fleet_shapes``): the same model then bounds the cost of the whole question, the existing fleet
pooled with what is bought (:mod:`planner.capacity.bound`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulp

from gpuplan.models.hardware import MILLI_PER_GPU, GpuModelSpec
from gpuplan.models.policy import Policy
from gpuplan.models.rules.isolation import sharing_group
from gpuplan.models.workload import TopologyNeed
from gpuplan.solvers.milp.engine import engine_name, pulp_engine
from gpuplan.solvers.problem import NodeSpec, Request, ShapeSpec

Key = tuple[str, int]

log = logging.getLogger(__name__)


#: Objective weight of a shared or MIG-mode GPU, far below any price.
TIE = 1e-3


@dataclass(frozen=True)
class TypeSpec:
    """A node type as the MILP sees it: one compiled node, its price and GPU model (``None``: no GPUs).

    ``available`` is ``None`` for a purchasable type (as many as bought), else how many nodes of it the
    fleet has: they are all there, at ``cost`` 0.
    """

    name: str
    cost: float
    node: NodeSpec
    spec: GpuModelSpec | None
    available: int | None = None

    @property
    def gpus(self) -> int:
        """GPUs per node."""
        return len(self.node.gpus)

    def group_capacity(self, shape: ShapeSpec) -> int:
        """An upper bound on how many replicas of ``shape`` (NVLink or NUMA bound) one node holds."""
        if shape.topology is TopologyNeed.NVLINK:
            groups = [len(c) for c in self.node.nvlink_cliques] or [1] * self.gpus
        else:
            by_numa: dict[int, int] = defaultdict(int)
            for g in self.node.gpus:
                by_numa[g.numa] += 1
            groups = list(by_numa.values())
        return min(self.gpus // shape.gpus, sum(size // shape.gpus for size in groups))


def shape_fits(shape: ShapeSpec, t: TypeSpec) -> str | None:
    """Why ``shape`` can never run on a node of type ``t`` (``None`` when it can)."""
    if t.spec is None:
        return None if shape.kind == "cpu" else "the node has no GPUs"
    model = t.spec.name
    if shape.kind != "cpu" and shape.models and model not in shape.models:
        return f"GPU model {model} is not among {sorted(shape.models)}"
    if shape.cpu_milli > t.node.cpu_milli:
        return f"needs {shape.cpu_milli} CPU milli, the node has {t.node.cpu_milli}"
    if shape.memory_mib > t.node.memory_mib:
        return f"needs {shape.memory_mib} MiB memory, the node has {t.node.memory_mib}"
    if shape.kind == "mig" and shape.mig_profile not in t.spec.profile_map:
        return f"{model} does not offer MIG profile '{shape.mig_profile}'"
    if shape.kind != "whole":
        return None
    if shape.gpus > t.gpus:
        return f"needs {shape.gpus} GPUs, the node has {t.gpus}"
    grouped = shape.topology in (TopologyNeed.NVLINK, TopologyNeed.NUMA)
    if shape.gpus > 1 and grouped and t.group_capacity(shape) < 1:
        need = "one NVLink clique" if shape.topology is TopologyNeed.NVLINK else "one NUMA node"
        return f"needs {shape.gpus} GPUs in {need}, the node has no such group"
    return None


@dataclass(frozen=True)
class PurchaseSolution:
    """Nodes to buy per type and how many of their GPUs go into MIG mode."""

    counts: dict[str, int]
    mig_gpus: dict[str, int]
    objective: float
    lower_bound: float
    status: str
    solver: str
    wall_s: float


#: Where an alternative of a replica may be served: on any type, only on the fleet's nodes, or only on
#: purchasable types.
ANY, FLEET, BOUGHT = "any", "fleet", "bought"

#: A replica class: its alternatives, its GPU-sharing tags and where each alternative may be served.
Class = tuple[tuple[ShapeSpec, ...], tuple[str, ...], tuple[str, ...]]


def sharing_tags(policy: Policy, request: Request) -> tuple[str, ...]:
    """``"<rule>=<group>"`` for each isolation rule that keeps the request off other groups' GPUs
    (:func:`~gpuplan.models.rules.isolation.sharing_group`)."""
    groups = ((i, sharing_group(rule, request.team, request.tier)) for i, rule in enumerate(policy.isolation))
    return tuple(f"{i}={group}" for i, group in groups if group is not None)


def _classes(
    requests: list[Request], policy: Policy | None, fleet_shapes: Mapping[Key, tuple[ShapeSpec, ...]]
) -> dict[Class, int]:
    """Replica counts per tuple of alternative shapes, GPU-sharing tags and where the shapes may go: a
    replica in ``fleet_shapes`` has those alternatives on the fleet's types and its own on purchasable
    ones; any other has its own alternatives anywhere."""
    counts: dict[Class, int] = defaultdict(int)
    for r in requests:
        tags = sharing_tags(policy, r) if policy else ()
        fleet = fleet_shapes.get(r.key)
        if fleet is None:
            counts[(r.shapes, tags, (ANY,) * len(r.shapes))] += 1
        else:
            counts[(r.shapes + fleet, tags, (BOUGHT,) * len(r.shapes) + (FLEET,) * len(fleet))] += 1
    return dict(counts)


def _serves(scope: str, t: TypeSpec) -> bool:
    """Whether an alternative of ``scope`` may be served on type ``t``."""
    return scope == ANY or (scope == FLEET) == (t.available is not None)


class _Model:
    """The purchase MILP over replica classes and node types (integer or LP relaxation)."""

    def __init__(self, classes: dict[Class, int], types: list[TypeSpec], *, relax: bool) -> None:
        cat = self.cat = pulp.LpContinuous if relax else pulp.LpInteger
        self.prob = pulp.LpProblem("purchase", pulp.LpMinimize)
        self.types = types
        # The fleet's nodes are all there: their count is fixed.
        self.buy = {
            t.name: self.prob.add_variable(f"buy[{t.name}]", t.available or 0, t.available, cat=cat)
            for t in types
        }
        self.frac = {
            t.name: self.prob.add_variable(f"shared_gpus[{t.name}]", 0, None, cat=cat) for t in types
        }
        self.mig = {t.name: self.prob.add_variable(f"mig_gpus[{t.name}]", 0, None, cat=cat) for t in types}
        self.serve: dict[tuple[int, int, str], pulp.LpVariable] = {}
        for c, (shapes, _, scopes) in enumerate(classes):
            for a, (shape, scope) in enumerate(zip(shapes, scopes, strict=True)):
                for t in types:
                    if _serves(scope, t) and shape_fits(shape, t) is None:
                        name = f"serve[c{c},a{a},{t.name}]"
                        self.serve[(c, a, t.name)] = self.prob.add_variable(name, 0, None, cat=cat)
        self.shapes = {(c, a): s for c, (shapes, _, _) in enumerate(classes) for a, s in enumerate(shapes)}
        self.tags = {c: tags for c, (_, tags, _) in enumerate(classes)}
        for c, n in enumerate(classes.values()):
            self.prob += (
                pulp.lpSum(v for (cc, _, _), v in self.serve.items() if cc == c) == n,
                f"demand[c{c}]",
            )
        for t in types:
            self._capacity(t)
        # A tiny charge per shared or MIG-mode GPU keeps the rest of the GPUs bought whole.
        self.prob += pulp.lpSum(t.cost * self.buy[t.name] for t in types) + TIE * pulp.lpSum(
            [*self.frac.values(), *self.mig.values()]
        )

    def _on(self, t: TypeSpec, tag: str | None = None) -> list[tuple[ShapeSpec, pulp.LpVariable]]:
        return [
            (self.shapes[(c, a)], v)
            for (c, a, name), v in self.serve.items()
            if name == t.name and (tag is None or tag in self.tags[c])
        ]

    def _shared(self, t: TypeSpec, on: list[tuple[ShapeSpec, pulp.LpVariable]], frac: Any, mig: Any) -> None:
        """Fractions within ``frac`` shared GPUs, MIG instances within ``mig`` MIG-mode GPUs."""
        p = self.prob
        p += pulp.lpSum(s.milli * v for s, v in on if s.kind == "fraction") <= MILLI_PER_GPU * frac
        spec = t.spec
        if spec is None:  # a GPU-less node: no MIG instance fits it
            return
        migs = [(spec.profile(s.mig_profile), v) for s, v in on if s.kind == "mig" and s.mig_profile]
        if not migs:
            return
        p += pulp.lpSum(pr.compute_slices * v for pr, v in migs) <= spec.compute_slices * mig
        p += pulp.lpSum(pr.memory_slices * v for pr, v in migs) <= spec.memory_slices * mig
        p += pulp.lpSum(v for _, v in migs) <= spec.max_gpu_instances * mig
        for prof in {pr for pr, _ in migs}:
            p += pulp.lpSum(v for pr, v in migs if pr == prof) <= prof.max_instances * mig

    def _isolated(self, t: TypeSpec) -> None:
        """Per isolation rule, each group's fractions and MIG instances on GPUs of their own."""
        tags = sorted({tag for ts in self.tags.values() for tag in ts})
        by_rule: dict[str, list[str]] = defaultdict(list)
        for tag in tags:
            by_rule[tag.split("=", 1)[0]].append(tag)
        for rule, group in by_rule.items():
            fr, mg = [], []
            for tag in group:
                on = self._on(t, tag)
                if not any(s.kind in ("fraction", "mig") for s, _ in on):
                    continue
                fr.append(self.prob.add_variable(f"shared_gpus[{t.name},{tag}]", 0, None, cat=self.cat))
                mg.append(self.prob.add_variable(f"mig_gpus[{t.name},{tag}]", 0, None, cat=self.cat))
                self._shared(t, on, fr[-1], mg[-1])
            if fr:
                self.prob += pulp.lpSum(fr) <= self.frac[t.name], f"shared_split[{t.name},r{rule}]"
                self.prob += pulp.lpSum(mg) <= self.mig[t.name], f"mig_split[{t.name},r{rule}]"

    def _capacity(self, t: TypeSpec) -> None:
        """GPUs, shared and MIG GPUs, CPU, memory and per-node packing bounds of one node type."""
        on = self._on(t)
        buy, p = self.buy[t.name], self.prob
        whole = pulp.lpSum(s.gpus * v for s, v in on if s.kind == "whole")
        p += whole + self.frac[t.name] + self.mig[t.name] <= t.gpus * buy, f"gpus[{t.name}]"
        self._shared(t, on, self.frac[t.name], self.mig[t.name])
        self._isolated(t)
        p += pulp.lpSum(s.cpu_milli * v for s, v in on) <= t.node.cpu_milli * buy, f"cpu[{t.name}]"
        p += pulp.lpSum(s.memory_mib * v for s, v in on) <= t.node.memory_mib * buy, f"memory[{t.name}]"
        # At most j replicas larger than gpus/(j+1) fit on one node.
        for j in range(1, t.gpus):
            big = [v for s, v in on if s.kind == "whole" and s.gpus * (j + 1) > t.gpus]
            if big:
                p += pulp.lpSum(big) <= j * buy
        # NVLink- or NUMA-bound replicas: disjoint groups of at least g GPUs per node.
        for need in (TopologyNeed.NVLINK, TopologyNeed.NUMA):
            bound = [(s, v) for s, v in on if s.kind == "whole" and s.gpus > 1 and s.topology is need]
            for g in sorted({s.gpus for s, _ in bound}):
                probe = next(s for s, _ in bound if s.gpus == g)
                cap = t.group_capacity(probe)
                p += pulp.lpSum((s.gpus // g) * v for s, v in bound if s.gpus >= g) <= cap * buy

    def solve(self, backend: str, time_limit_s: float, threads: int) -> int:
        self.prob.solve(pulp_engine(backend, time_limit_s, threads))
        return int(self.prob.sol_status)


#: Of a purchase solve's time limit, the share of the integer model; the LP relaxation that gives the
#: lower bound when the MILP stops early gets the rest.
MILP_SHARE = 0.8
#: Solver status of a MILP that found no purchase within its time limit.
NO_SOLUTION = "NO_SOLUTION"


def solve_purchase(
    requests: list[Request],
    types: list[TypeSpec],
    *,
    policy: Policy | None = None,
    backend: str = "highs",
    time_limit_s: float = 30.0,
    threads: int = 2,
    fleet_shapes: Mapping[Key, tuple[ShapeSpec, ...]] | None = None,
) -> PurchaseSolution:
    """The cheapest node counts per type that the relaxation says can host ``requests``.

    Every request must fit at least one purchasable type (the caller removes those that cannot). The
    lower bound is the MILP optimum when proven, else the LP relaxation's optimum. The whole solve keeps
    within ``time_limit_s``; a MILP that finds no purchase in time returns none, with status
    ``NO_SOLUTION``. ``fleet_shapes`` gives replicas other alternatives on the fleet's types
    (``TypeSpec.available``) than on purchasable ones (:func:`_classes`); counts and costs are of
    purchasable types alone.
    """
    t0 = time.perf_counter()
    classes = _classes(requests, policy, fleet_shapes or {})
    model = _Model(classes, types, relax=False)
    log.info(
        "purchase MILP: %d classes, %d types, %d variables",
        len(classes), len(types), len(model.prob.variables()),
    )  # fmt: skip
    status = model.solve(backend, MILP_SHARE * time_limit_s, threads)
    if status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible, pulp.LpSolutionNoSolutionFound):
        raise RuntimeError(f"purchase MILP ended {pulp.LpStatus.get(model.prob.status, status)}")
    found = status != pulp.LpSolutionNoSolutionFound
    bought = [t for t in types if t.available is None]
    counts = {t.name: round(model.buy[t.name].varValue or 0) if found else 0 for t in bought}
    mig = {t.name: round(model.mig[t.name].varValue or 0) if found else 0 for t in bought}
    objective = sum(t.cost * counts[t.name] for t in bought)
    if status == pulp.LpSolutionOptimal:
        bound, label = objective, "OPTIMAL"
    else:
        lp = _Model(classes, types, relax=True)
        lp_status = lp.solve(backend, max(0.01, t0 + time_limit_s - time.perf_counter()), threads)
        solved = lp_status == pulp.LpSolutionOptimal
        bound = sum(t.cost * (lp.buy[t.name].varValue or 0.0) for t in bought) if solved else 0.0
        label = "FEASIBLE" if found else NO_SOLUTION
    name = engine_name(backend)
    return PurchaseSolution(
        counts={k: v for k, v in counts.items() if v},
        mig_gpus={k: v for k, v in mig.items() if v and counts[k]},
        objective=objective,
        lower_bound=min(bound, objective) if found else bound,
        status=label,
        solver=f"milp-{name}",
        wall_s=time.perf_counter() - t0,
    )
