"""The multi-period MILP of a capacity plan over time: what to order when, what to rent in which period
and what demand waits, at the least purchase, rent and waiting cost.

Each period has its own copy of every node type, pooled exactly as in the single-period purchase MILP
(:mod:`planner.capacity.purchase`, whose per-type capacity constraints it reuses): the existing fleet's
groups of identical nodes (:func:`~planner.capacity.bound.fleet_types`) hold their node count in every
period; a purchasable type holds the nodes ordered early enough to have arrived (an order at the start
of period ``q`` with lead time ``L`` days serves from period ``q + ceil(L / period_days)``) plus the
nodes rented for that period. A demand class of a period is served on that period's types (its own
alternatives on the fleet, its like-for-like ones on bought and rented nodes) or waits the whole
period at its tier's price. A budget caps what each period spends on orders and rent.

Money enters as whole currency units (integer coefficients), so the objective of any plan is a whole
number. Two tie-breaks, together worth less than half a unit, keep the money optimum: a GPU shared by
fractions or in MIG mode costs a little more than a whole one (as in the purchase MILP), and an order
costs a little more the earlier it is placed, so that among plans of equal cost an order goes out one
lead time before its demand. HiGHS stops at an absolute gap below half a unit, which proves the money
optimum (``OPTIMAL``); its dual bound, less the tie-breaks, rounded up, is the reported lower bound.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pulp

from gpuplan.planner.capacity import purchase
from gpuplan.planner.capacity.purchase import NO_SOLUTION, TypeSpec, shape_fits
from gpuplan.solvers.problem import ShapeSpec

log = logging.getLogger(__name__)

#: Absolute MIP gap at which HiGHS stops: below half a currency unit, so the money part is proved.
ABS_GAP = 0.499
#: The solver name in reports.
SOLVER = "milp-highs"


@dataclass(frozen=True)
class DemandClass:
    """Replicas that are alike for the MILP: their alternatives on the existing fleet and on bought or
    rented nodes (kept to their GPU class), their GPU-sharing tags, team and tier, the GPU-equivalents
    of their smallest alternative and the price of one replica waiting one period."""

    fleet_shapes: tuple[ShapeSpec, ...]
    bought_shapes: tuple[ShapeSpec, ...]
    tags: tuple[str, ...]
    team: str
    tier: str
    gpu_equivalents: float
    wait_cost: int


@dataclass(frozen=True)
class Offer:
    """A purchasable node type: its compiled node, price, lead time and the price of renting one node
    for one period (``None``: not for rent)."""

    spec: TypeSpec
    unit_cost: int
    lead_time_days: int
    rent_per_period: int | None

    @property
    def name(self) -> str:
        return self.spec.name


@dataclass(frozen=True)
class HorizonProblem:
    """The periods, the demand classes of each period with their replica counts, the fleet and the
    offers, and what the plan may do: rent, keep within ``budget`` per period (``None``: no cap).
    ``fixed_orders`` fixes every order ((type, period) -> count, others none) and drops the budget: a
    given order schedule is costed, not chosen."""

    periods: int
    period_days: int
    demand: tuple[Mapping[DemandClass, int], ...]
    fleet: tuple[TypeSpec, ...]
    offers: tuple[Offer, ...]
    budget: tuple[int | None, ...] = ()
    allow_rent: bool = True
    fixed_orders: Mapping[tuple[str, int], int] | None = None

    def arrival(self, offer: Offer, period: int) -> int:
        """The first period an order placed at the start of ``period`` serves."""
        return period + math.ceil(offer.lead_time_days / self.period_days)

    def can_order(self, offer: Offer, period: int) -> bool:
        """Whether an order of ``offer`` at ``period`` is a variable: fixed to a count, or arriving in
        time to serve a period."""
        if self.fixed_orders is not None:
            return self.fixed_orders.get((offer.name, period), 0) > 0
        return self.arrival(offer, period) < self.periods


@dataclass
class HorizonSolution:
    """Orders and rentals ((type, period) -> nodes), replicas waiting and served ((period, class index)
    and (period, type, class index) -> replicas), MIG-mode GPUs per (type, period), the money objective
    and its proved lower bound, the status and the wall time."""

    orders: dict[tuple[str, int], int] = field(default_factory=dict)
    rents: dict[tuple[str, int], int] = field(default_factory=dict)
    waiting: dict[tuple[int, int], int] = field(default_factory=dict)
    served: dict[tuple[int, str, int], int] = field(default_factory=dict)
    mig_gpus: dict[tuple[str, int], int] = field(default_factory=dict)
    objective: int = 0
    lower_bound: int = 0
    status: str = NO_SOLUTION
    wall_s: float = 0.0


def _at(name: str, period: int) -> str:
    """The name of a type's copy in ``period``."""
    return f"{name}@{period}"


class _Model(purchase._Model):
    """The multi-period MILP; the per-type capacity constraints are the purchase MILP's, applied to each
    type's copy in each period, whose node count is a constant (the fleet) or an expression (orders
    arrived plus rentals)."""

    def __init__(self, problem: HorizonProblem) -> None:  # the parent's model is single-period
        self.cat = pulp.LpInteger
        self.prob = pulp.LpProblem("horizon", pulp.LpMinimize)
        self.problem = problem
        self.types: list[TypeSpec] = []
        self.buy: dict[str, Any] = {}
        self.frac: dict[str, pulp.LpVariable] = {}
        self.mig: dict[str, pulp.LpVariable] = {}
        self.serve: dict[tuple[int, int, str], pulp.LpVariable] = {}
        self.shapes: dict[tuple[int, int], ShapeSpec] = {}
        self.tags: dict[int, tuple[str, ...]] = {}
        #: Global class index -> (period, index within the period).
        self.where: list[tuple[int, int]] = []
        most = max((sum(d.values()) for d in problem.demand), default=0)
        self.order = {
            (o.name, q): self._count(f"order[{o.name},{q}]", most, problem, o, q)
            for o in problem.offers
            for q in range(problem.periods)
            if problem.can_order(o, q)
        }
        self.rent = {
            (o.name, p): self.prob.add_variable(f"rent[{o.name},{p}]", 0, most, cat=self.cat)
            for o in problem.offers
            if problem.allow_rent and o.rent_per_period is not None
            for p in range(problem.periods)
        }
        self.wait: dict[int, pulp.LpVariable] = {}
        for p in range(problem.periods):
            self._period(p)
        if problem.fixed_orders is None:
            self._budget()
        self._objective()

    def _count(self, name: str, most: int, problem: HorizonProblem, o: Offer, q: int) -> pulp.LpVariable:
        """An order variable: at most ``most`` nodes (no period needs more), or fixed."""
        if problem.fixed_orders is not None:
            n = problem.fixed_orders[(o.name, q)]
            return self.prob.add_variable(name, n, n, cat=self.cat)
        return self.prob.add_variable(name, 0, most, cat=self.cat)

    def _period(self, p: int) -> None:
        """Period ``p``'s copies of the types, its classes' serve and wait variables, demand rows and the
        capacity of each copy."""
        problem = self.problem
        fleet = [replace(t, name=_at(t.name, p)) for t in problem.fleet]
        for t, vt in zip(problem.fleet, fleet, strict=True):
            self.buy[vt.name] = t.available or 0
        offers: list[TypeSpec] = []
        for o in problem.offers:
            owned = [
                v for (name, q), v in self.order.items() if name == o.name and problem.arrival(o, q) <= p
            ]
            rented = [self.rent[(o.name, p)]] if (o.name, p) in self.rent else []
            if owned or rented:
                vt = replace(o.spec, name=_at(o.name, p))
                self.buy[vt.name] = pulp.lpSum([*owned, *rented])
                offers.append(vt)
        for vt in [*fleet, *offers]:
            self.types.append(vt)
            self.frac[vt.name] = self.prob.add_variable(f"shared_gpus[{vt.name}]", 0, None, cat=self.cat)
            self.mig[vt.name] = self.prob.add_variable(f"mig_gpus[{vt.name}]", 0, None, cat=self.cat)
        for c, (dc, n) in enumerate(problem.demand[p].items()):
            g = len(self.where)
            self.where.append((p, c))
            self.tags[g] = dc.tags
            alternatives = [(s, offers) for s in dc.bought_shapes] + [(s, fleet) for s in dc.fleet_shapes]
            self.wait[g] = self.prob.add_variable(f"wait[p{p},c{c}]", 0, n, cat=self.cat)
            mine = [self.wait[g]]
            for a, (shape, where) in enumerate(alternatives):
                self.shapes[(g, a)] = shape
                for vt in where:
                    if shape_fits(shape, vt) is None:
                        v = self.prob.add_variable(f"serve[p{p},c{c},a{a},{vt.name}]", 0, n, cat=self.cat)
                        self.serve[(g, a, vt.name)] = v
                        mine.append(v)
            self.prob += pulp.lpSum(mine) == n, f"demand[p{p},c{c}]"
        for vt in [*fleet, *offers]:
            self._capacity(vt)

    def _budget(self) -> None:
        """Orders and rent of each period within its budget."""
        offers = {o.name: o for o in self.problem.offers}
        for q, cap in enumerate(self.problem.budget):
            if cap is None:
                continue
            spend = [offers[n].unit_cost * v for (n, qq), v in self.order.items() if qq == q]
            spend += [(offers[n].rent_per_period or 0) * v for (n, pp), v in self.rent.items() if pp == q]
            self.prob += pulp.lpSum(spend) <= cap, f"budget[{q}]"

    def _objective(self) -> None:
        """Money (purchases, rent, waiting), plus the tie-breaks scaled to stay below half a unit."""
        problem = self.problem
        offers = {o.name: o for o in problem.offers}
        money = pulp.lpSum(
            [offers[n].unit_cost * v for (n, _), v in self.order.items()]
            + [(offers[n].rent_per_period or 0) * v for (n, _), v in self.rent.items()]
            + [dc.wait_cost * self.wait[g] for g, (_, dc) in enumerate(self._classes())]
        )
        # Every shared or MIG GPU and every order-period weighs one tie unit; this many exist at most.
        gpus = sum(vt.gpus * self._nodes_at_most(vt) for vt in self.types)
        orders = sum((v.upBound or 0) * problem.periods for v in self.order.values())
        self.tie = 1 / (2 * (2 * gpus + orders + 1))
        early = pulp.lpSum((problem.periods - q) * v for (_, q), v in self.order.items())
        self.prob += money + self.tie * (pulp.lpSum([*self.frac.values(), *self.mig.values()]) + early)

    def _classes(self) -> list[tuple[int, DemandClass]]:
        """(period, class) of each global class index."""
        keys = [list(d) for d in self.problem.demand]
        return [(p, keys[p][c]) for p, c in self.where]

    def _nodes_at_most(self, vt: TypeSpec) -> int:
        """An upper bound on the nodes of a type's copy (the fleet's count, else its variables' bounds)."""
        nodes = self.buy[vt.name]
        if isinstance(nodes, int):
            return nodes
        return int(sum(abs(coef) * (v.upBound or 0) for v, coef in nodes.items()))

    def money(self) -> tuple[int, int, int]:
        """Purchases, rent and waiting of the solution, in whole currency units."""
        offers = {o.name: o for o in self.problem.offers}
        buy = sum(offers[n].unit_cost * _value(v) for (n, _), v in self.order.items())
        rent = sum((offers[n].rent_per_period or 0) * _value(v) for (n, _), v in self.rent.items())
        wait = sum(dc.wait_cost * _value(self.wait[g]) for g, (_, dc) in enumerate(self._classes()))
        return buy, rent, wait


def _value(v: pulp.LpVariable) -> int:
    return round(v.varValue or 0)


def solve_horizon(problem: HorizonProblem, time_limit_s: float) -> HorizonSolution:
    """The cheapest plan of ``problem`` that HiGHS finds within ``time_limit_s``, with its proved bound
    (see the module); ``NO_SOLUTION`` when it finds none in time."""
    t0 = time.perf_counter()
    model = _Model(problem)
    log.info(
        "horizon MILP: %d periods, %d classes, %d type copies, %d variables",
        problem.periods, len(model.where), len(model.types), len(model.prob.variables()),
    )  # fmt: skip
    engine = pulp.HiGHS(msg=False, timeLimit=max(0.1, time_limit_s), gapRel=0.0, gapAbs=ABS_GAP)
    model.prob.solve(engine)
    highs = model.prob.solverModel
    status = model.prob.sol_status
    out = HorizonSolution(wall_s=time.perf_counter() - t0)
    if status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
        return out
    buy, rent, wait = model.money()
    out.objective = buy + rent + wait
    proved = status == pulp.LpSolutionOptimal
    dual = float(highs.getInfo().mip_dual_bound) if not proved else float(out.objective)
    # The tie-breaks weigh less than half a unit: the money optimum is at least the bound less half.
    bound = math.ceil(dual - 0.5 - 1e-6 * max(1.0, abs(dual))) if not proved else out.objective
    out.lower_bound = max(0, min(bound, out.objective))
    out.status = "OPTIMAL" if proved else "FEASIBLE"
    out.orders = {k: n for k, v in model.order.items() if (n := _value(v))}
    out.rents = {k: n for k, v in model.rent.items() if (n := _value(v))}
    out.waiting = {model.where[g]: n for g, v in model.wait.items() if (n := _value(v))}
    for (g, _, name), v in model.serve.items():
        if n := _value(v):
            p, c = model.where[g]
            key = (p, name.rsplit("@", 1)[0], c)
            out.served[key] = out.served.get(key, 0) + n
    migs: dict[tuple[str, int], int] = defaultdict(int)
    for name, v in model.mig.items():
        base, _, period = name.rpartition("@")
        if n := _value(v):
            migs[(base, int(period))] += n
    out.mig_gpus = dict(migs)
    return out
