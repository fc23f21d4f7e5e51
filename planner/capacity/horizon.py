"""Capacity plans over time: what to order when, what to rent in which period and what demand waits,
period by period (``gpuplan capacity-plan``).

1. The demand of each period: today's workloads (running and waiting) grown by the growth file
   (:mod:`planner.capacity.growth`); period 0 is today.
2. Each period's replicas become demand classes: their own alternatives on the existing fleet, and
   their like-for-like ones (:func:`~planner.capacity.demand.like_for_like`) on bought and rented
   nodes. A replica no node, existing or offered, can ever host is named and left out.
3. One multi-period MILP (:mod:`planner.capacity.horizon_model`) chooses the orders, the rentals and
   what waits, at the least purchase + rent + waiting cost. Waiting one GPU-hour costs the tier's
   weight times ``wait_price`` (default :data:`DEFAULT_WAIT_PRICE`).
4. The fleet of each period (existing nodes, purchases arrived, nodes rented) is checked by the real
   placement solver (a validated plan) on that period's demand, the last period first, then the others
   while time remains: what it leaves waiting beyond what the plan lets wait is the period's shortfall.
5. The report: the order schedule (dates, arrival, whom each order serves), the rentals, the cost per
   period and the demand served late per tier.

Purchases count at their full price in the period they are ordered; bought nodes keep value past the
last period, which the plan does not count (near the end it leans towards renting). Quotas are left
out of the checks: the plan assumes quotas grow with the demand they cover.

:func:`buy_now` and :func:`myopic` cost two simpler policies with the same MILP (orders fixed, no
rent): buying today what the last period needs, and buying each period's gap when it appears.
"""

from __future__ import annotations

import logging
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from gpuplan.models.capacity import (
    DEFAULT_WAIT_PRICE,
    GrowthFile,
    HorizonOrder,
    HorizonPeriod,
    HorizonPlan,
    HorizonRent,
    NodeTypeCatalog,
    ServedGroup,
    TierWait,
    Unservable,
)
from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import Node
from gpuplan.models.hardware import MILLI_PER_GPU, HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.policy import Policy
from gpuplan.models.rules.quota import gpu_equivalents
from gpuplan.planner.capacity.bound import fleet_types
from gpuplan.planner.capacity.demand import like_for_like
from gpuplan.planner.capacity.gap import EXAMPLE_SOURCE
from gpuplan.planner.capacity.growth import Horizon, demand_per_period
from gpuplan.planner.capacity.horizon_model import (
    SOLVER,
    DemandClass,
    HorizonProblem,
    HorizonSolution,
    Offer,
    solve_horizon,
)
from gpuplan.planner.capacity.node_types import node_for, type_specs
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.capacity.phases import MIN_PHASE_S, placement
from gpuplan.planner.capacity.purchase import NO_SOLUTION, TypeSpec, shape_fits, sharing_tags, solve_purchase
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.planning import inputs_digest
from gpuplan.planner.validation.errors import InvalidPlanError
from gpuplan.solvers.problem import Request, ShapeSpec

log = logging.getLogger(__name__)

#: The GPU-equivalents a CPU-only replica's waiting is priced as (it holds no GPU, but it waits).
MIN_WAIT_GPUS = 0.1
#: Of the run's time, the MILP's share; the placement checks get the rest.
MILP_SHARE = 0.4
#: Of the checks' time, the last period's share; the other periods share what is left.
LAST_CHECK_SHARE = 0.5
#: The phases the report names when the time limit cut them short.
MILP_PHASE, CHECK_PHASE = "horizon MILP", "placement checks"


@dataclass(frozen=True)
class HorizonOptions:
    """A capacity plan's periods and budgets, the price of waiting per GPU-hour per unit of tier weight,
    and the solver settings (the placement solver, seed, workers, planning time)."""

    horizon: Horizon
    wait_price: float = DEFAULT_WAIT_PRICE
    solve: GapOptions = field(default_factory=GapOptions)


@dataclass(frozen=True)
class Prepared:
    """What the MILP is built from: the problem, each period's planning input and demand classes, and
    the replicas left out as unservable (per period)."""

    problem: HorizonProblem
    inputs: tuple[PlanningInput, ...]
    classes: tuple[tuple[DemandClass, ...], ...]
    unservable: tuple[tuple[Unservable, ...], ...]
    types: NodeTypeCatalog
    now: datetime
    description: str = ""


def _shape_gpus(shape: ShapeSpec, spec_models: tuple[str, ...], catalog: HardwareCatalog) -> float:
    """GPU-equivalents of one replica of ``shape``: its GPUs, its share of one, or its MIG instance's
    compute slices on the smallest-sliced model it allows (0 for CPU only)."""
    if shape.kind == "whole":
        return float(shape.gpus)
    if shape.kind == "fraction":
        return shape.milli / MILLI_PER_GPU
    if shape.kind != "mig" or shape.mig_profile is None:
        return 0.0
    specs = [catalog.model(m) for m in (shape.models or spec_models)]
    offered = [s for s in specs if shape.mig_profile in s.profile_map]
    return min((float(gpu_equivalents("mig", None, shape.mig_profile, s)) for s in offered), default=0.0)


def _offers(types: NodeTypeCatalog, catalog: HardwareCatalog, hours: float) -> tuple[Offer, ...]:
    """The node types as offers, money in whole units (rent: one node for one period)."""
    specs = {s.name: s for s in type_specs(types, catalog)}
    return tuple(
        Offer(
            spec=specs[t.name],
            unit_cost=round(t.unit_cost),
            lead_time_days=t.lead_time_days,
            rent_per_period=None
            if t.rent_per_gpu_hour is None
            else round(t.rent_per_gpu_hour * t.gpus * hours),
        )
        for t in types.node_types
    )


def prepare(
    inp: PlanningInput,
    growth: GrowthFile,
    types: NodeTypeCatalog,
    options: HorizonOptions,
    catalog: HardwareCatalog,
    where: str = "growth file",
) -> Prepared:
    """The demand of each period as classes, the fleet pooled and the offers: the MILP's problem."""
    h = options.horizon
    now = options.solve.now or datetime.now(UTC)
    inputs = demand_per_period(inp, growth, h.periods, where, catalog)
    offers = _offers(types, catalog, h.hours)
    fleet: list[TypeSpec] = []
    models = tuple(sorted({g.model for n in inp.cluster.nodes for g in n.gpus}))
    demand: list[dict[DemandClass, int]] = []
    unservable: list[tuple[Unservable, ...]] = []
    for p, inp_p in enumerate(inputs):
        compiled = compile_problem(inp_p, catalog, now)
        if p == 0:
            fleet = fleet_types(compiled.nodes, catalog)
        narrowed = {r.key: r for r in like_for_like(inp_p, list(compiled.requests), options.solve)}
        counts: dict[DemandClass, int] = defaultdict(int)
        lost: list[Unservable] = []
        for r in compiled.requests:
            own = tuple(replace(s, refused=frozenset()) for s in r.shapes)
            bought = tuple(replace(s, refused=frozenset()) for s in narrowed[r.key].shapes)
            if not any(shape_fits(s, o.spec) is None for s in bought for o in offers):
                bought = ()
            if not bought and not any(shape_fits(s, t) is None for s in own for t in fleet):
                lost.append(Unservable(
                    workload=r.workload, replica=r.replica, team=r.team, tier=r.tier,
                    message=f"workload '{r.workload}' replica {r.replica} (period {p}): no existing node "
                    "and no node type of the catalog can ever host it",
                ))  # fmt: skip
                continue
            gpus = min(_shape_gpus(s, models, catalog) for s in own + bought)
            weight = inp.policy.tier(r.tier).weight
            wait = round(options.wait_price * weight * max(gpus, MIN_WAIT_GPUS) * h.hours)
            dc = DemandClass(own, bought, sharing_tags(inp.policy, r), r.team, r.tier, gpus, wait)
            counts[dc] += 1
        demand.append(dict(counts))
        unservable.append(tuple(lost))
    problem = HorizonProblem(
        periods=h.periods,
        period_days=h.period_days,
        demand=tuple(demand),
        fleet=tuple(fleet),
        offers=offers,
        budget=tuple(None if b is None else math.floor(b) for b in h.budget),
    )
    classes = tuple(tuple(d) for d in demand)
    return Prepared(problem, tuple(inputs), classes, tuple(unservable), types, now, growth.description)


def _in_service(prep: Prepared, sol: HorizonSolution, name: str, p: int) -> tuple[int, int]:
    """Nodes of type ``name`` bought and arrived by period ``p``, and rented for it."""
    offer = next(o for o in prep.problem.offers if o.name == name)
    owned = sum(n for (t, q), n in sol.orders.items() if t == name and prep.problem.arrival(offer, q) <= p)
    return owned, sol.rents.get((name, p), 0)


def _serves(prep: Prepared, sol: HorizonSolution, name: str, p: int, share: float) -> tuple[ServedGroup, ...]:
    """The teams and tiers served on type ``name`` in period ``p``, ``share`` of their GPU-equivalents
    there (the part of that type's nodes in question), largest first."""
    gpus: dict[tuple[str, str], float] = defaultdict(float)
    for (pp, t, c), n in sol.served.items():
        if pp == p and t == name:
            dc = prep.classes[p][c]
            gpus[(dc.team, dc.tier)] += n * dc.gpu_equivalents * share
    return tuple(
        ServedGroup(team=team, tier=tier, gpu_equivalents=round(v, 2))
        for (team, tier), v in sorted(gpus.items(), key=lambda kv: (-kv[1], kv[0]))
    )


def _period_input(prep: Prepared, sol: HorizonSolution, p: int, catalog: HardwareCatalog) -> PlanningInput:
    """Period ``p``'s demand on its fleet: the existing nodes, the purchases arrived and the nodes rented
    (their MIG-mode GPUs as the MILP chose, last nodes first). The question is what the fleet can hold
    a period from now, not tonight's round: every replica is placed afresh (nothing runs yet), MIG
    layouts may be created and re-partitioned, and quotas are left out."""
    inp = prep.inputs[p]
    nodes: list[Node] = list(inp.cluster.nodes)
    for t in prep.types.node_types:
        owned, rented = _in_service(prep, sol, t.name, p)
        left = sol.mig_gpus.get((t.name, p), 0)
        names = [f"new-{t.name}-{i:02d}" for i in range(1, owned + 1)]
        names += [f"rent-{t.name}-{i:02d}" for i in range(1, rented + 1)]
        for name in reversed(names):
            take = min(left, t.gpus)
            left -= take
            nodes.append(node_for(t, name, take, {}, catalog))
    mig = inp.policy.mig.model_copy(update={"allow_create": True, "allow_repartition": True})
    policy: Policy = inp.policy.model_copy(update={"quotas": (), "mig": mig})
    cluster = inp.cluster.model_copy(update={"nodes": tuple(nodes)})
    fresh = tuple(w.model_copy(update={"running_on": ()}) if w.running_on else w for w in inp.workloads)
    return PlanningInput.model_validate(
        {"cluster": cluster, "workloads": fresh, "policy": policy}, context={"catalog": catalog}
    )


@dataclass
class _Check:
    """The placement check of one period."""

    status: str = ""
    unplaced: int = 0
    shortfall: int = 0
    note: str = ""


def _check(
    prep: Prepared, sol: HorizonSolution, p: int, opts: GapOptions, catalog: HardwareCatalog, seconds: float
) -> _Check:
    """Plan period ``p``'s demand on its fleet with the real placement solver; the replicas it leaves
    waiting beyond those the MILP lets wait (and the unservable) are the shortfall."""
    sub = _period_input(prep, sol, p, catalog)
    try:
        plan = placement(sub, opts, catalog, prep.now, seconds)
    except InvalidPlanError as exc:
        log.warning("the placement check of period %d was rejected: %s", p, exc)
        return _Check("REJECTED", note="the check's plan failed the validator (a planner bug); not verified")
    planned = sum(n for (pp, _), n in sol.waiting.items() if pp == p) + len(prep.unservable[p])
    unplaced = len(plan.unplaced)
    short = max(0, unplaced - planned)
    note = (
        f"placed all but {unplaced} replica(s); the plan lets {planned} wait"
        if not short
        else f"{short} replica(s) more than planned wait ({unplaced} placed nowhere, {planned} planned); "
        "the pooled capacity of the MILP overestimates what these nodes hold"
    )
    return _Check(plan.status.value, unplaced, short, note)


def _checks(
    prep: Prepared, sol: HorizonSolution, opts: GapOptions, catalog: HardwareCatalog, deadline: Deadline
) -> tuple[dict[int, _Check], list[str]]:
    """The placement checks: the last period within its share, then the others from the last back while
    at least :data:`MIN_PHASE_S` per period remains; the periods not checked are named."""
    checks: dict[int, _Check] = {}
    order = list(range(prep.problem.periods - 1, -1, -1))
    for i, p in enumerate(order):
        left = deadline.remaining()
        seconds = left * LAST_CHECK_SHARE if i == 0 and len(order) > 1 else left / (len(order) - i)
        if seconds < MIN_PHASE_S:
            break
        t0 = time.perf_counter()
        checks[p] = _check(prep, sol, p, opts, catalog, seconds)
        log.info("placement check of period %d: %s in %.1f s", p, checks[p].note, time.perf_counter() - t0)
    missed = [p for p in order if p not in checks]
    notes = [
        f"time limit: no time was left to check periods {', '.join(map(str, sorted(missed)))} by placement"
    ]
    return checks, notes if missed else []


def _date(prep: Prepared, days: float) -> str:
    return (prep.now + timedelta(days=days)).date().isoformat()


def capacity_plan(
    inp: PlanningInput,
    growth: GrowthFile,
    types: NodeTypeCatalog,
    options: HorizonOptions,
    *,
    catalog: HardwareCatalog | None = None,
    deadline: Deadline | None = None,
    where: str = "growth file",
) -> HorizonPlan:
    """The cheapest order, rent and wait schedule over the periods, each period's fleet checked by
    placement (see the module); all within ``deadline`` (default ``options.solve.time_limit_s``)."""
    t0 = time.perf_counter()
    catalog = catalog or default_catalog()
    deadline = deadline or Deadline.after(options.solve.time_limit_s)
    prep = prepare(inp, growth, types, options, catalog, where)
    seconds = max(MIN_PHASE_S, min(options.solve.milp_time_limit_s, deadline.share(MILP_SHARE)))
    sol = solve_horizon(prep.problem, seconds)
    cut: list[str] = []
    notes: list[str] = []
    if sol.status != "OPTIMAL":
        cut.append(MILP_PHASE)
        notes.append(
            f"time limit: the {MILP_PHASE} stopped at its {seconds:.1f} s share "
            + ("with no plan" if sol.status == NO_SOLUTION else "before proving its plan optimal")
        )
    checks: dict[int, _Check] = {}
    if sol.status != NO_SOLUTION:
        checks, missed = _checks(prep, sol, options.solve, catalog, deadline)
        notes += missed
        if missed:
            cut.append(CHECK_PHASE)
    notes += _notes(prep, options)
    return _report(prep, sol, checks, options, cut, notes, inp, time.perf_counter() - t0)


def _notes(prep: Prepared, options: HorizonOptions) -> list[str]:
    """What the numbers assume."""
    out = [
        f"waiting one GPU-hour costs the tier's weight x {options.wait_price:g} {prep.types.currency} "
        "(--wait-price); purchases count at their full price when ordered, and bought nodes keep value past "
        "the last period, which the plan does not count",
        "capacity is pooled per node type and per group of identical existing nodes; the checks place each "
        "period's demand afresh on its nodes with the real placement solver (MIG re-partitions allowed, "
        "quotas left out)",
    ]
    if not any(o.rent_per_period is not None for o in prep.problem.offers):
        out.append("no node type of the catalog gives rent_per_gpu_hour: nothing can be rented")
    return out


def _report(
    prep: Prepared,
    sol: HorizonSolution,
    checks: dict[int, _Check],
    options: HorizonOptions,
    cut: list[str],
    notes: list[str],
    inp: PlanningInput,
    wall_s: float,
) -> HorizonPlan:
    """The plan as the report gives it: orders, rentals, periods, waiting per tier and the totals."""
    problem, h = prep.problem, options.horizon
    offers = {o.name: o for o in problem.offers}
    types = {t.name: t for t in prep.types.node_types}
    orders = []
    for (name, q), n in sorted(sol.orders.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        t, a = types[name], problem.arrival(offers[name], q)
        owned, rented = _in_service(prep, sol, name, a) if a < problem.periods else (n, 0)
        orders.append(HorizonOrder(
            period=q, order_date=_date(prep, q * h.period_days),
            arrives_date=_date(prep, q * h.period_days + t.lead_time_days), arrives_period=a,
            node_type=name, gpu_model=t.gpu_model, count=n, gpus=n * t.gpus,
            unit_cost=offers[name].unit_cost, cost=n * offers[name].unit_cost,
            lead_time_days=t.lead_time_days,
            serves=_serves(prep, sol, name, a, n / (owned + rented)) if a < problem.periods else (),
        ))  # fmt: skip
    rents = []
    for (name, p), n in sorted(sol.rents.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        t, owned = types[name], _in_service(prep, sol, name, p)[0]
        rents.append(HorizonRent(
            period=p, node_type=name, gpu_model=t.gpu_model, count=n, gpus=n * t.gpus, hours=h.hours,
            rent_per_gpu_hour=t.rent_per_gpu_hour or 0.0, cost=n * (offers[name].rent_per_period or 0),
            serves=_serves(prep, sol, name, p, n / (owned + n)),
        ))  # fmt: skip
    fleet_gpus = sum(t.gpus * (t.available or 0) for t in problem.fleet)
    periods = []
    for p in range(problem.periods):
        classes = problem.demand[p]
        waiting = {c: n for (pp, c), n in sol.waiting.items() if pp == p}
        arrived = {name: _in_service(prep, sol, name, p) for name in offers}
        check = checks.get(p)
        periods.append(HorizonPeriod(
            period=p, start=_date(prep, p * h.period_days),
            replicas=sum(classes.values()) + len(prep.unservable[p]),
            gpu_equivalents=round(sum(n * dc.gpu_equivalents for dc, n in classes.items()), 2),
            served=sum(classes.values()) - sum(waiting.values()),
            waiting=sum(waiting.values()) + len(prep.unservable[p]),
            waiting_gpu_hours=round(sum(n * prep.classes[p][c].gpu_equivalents * h.hours
                                        for c, n in waiting.items()), 1),
            buy_cost=sum(o.cost for o in orders if o.period == p),
            rent_cost=sum(r.cost for r in rents if r.period == p),
            wait_cost=sum(n * prep.classes[p][c].wait_cost for c, n in waiting.items()),
            budget=h.budget[p],
            nodes_arrived=sum(a for a, _ in arrived.values()),
            nodes_rented=sum(r for _, r in arrived.values()),
            gpus_in_service=fleet_gpus + sum((a + r) * types[n].gpus for n, (a, r) in arrived.items()),
            checked=check is not None, check_status=check.status if check else "",
            check_unplaced=check.unplaced if check else 0, shortfall=check.shortfall if check else 0,
            check_note=check.note if check else "not checked",
        ))  # fmt: skip
    buy, rent = sum(o.cost for o in orders), sum(r.cost for r in rents)
    wait = sum(pp.wait_cost for pp in periods)
    total = buy + rent + wait
    return HorizonPlan(
        periods=problem.periods,
        period_days=h.period_days,
        start=prep.now.isoformat(),
        currency=prep.types.currency,
        example_prices=prep.types.example_prices,
        price_source=EXAMPLE_SOURCE if prep.types.example_prices else prep.types.note or "the given catalog",
        growth_description=prep.description,
        wait_price_per_gpu_hour=options.wait_price,
        orders=tuple(orders),
        rents=tuple(rents),
        per_period=tuple(periods),
        waiting_by_tier=_tier_waits(prep, sol, options),
        buy_cost=buy,
        rent_cost=rent,
        wait_cost=wait,
        total_cost=total,
        status=sol.status,
        objective=sol.objective,
        lower_bound=sol.lower_bound,
        gap=round((sol.objective - sol.lower_bound) / sol.objective, 6) if sol.objective else 0.0,
        solver=SOLVER,
        milp_wall_s=round(sol.wall_s, 3),
        wall_s=round(wall_s, 3),
        verified=bool(checks) and all(c.shortfall == 0 and c.status != "REJECTED" for c in checks.values()),
        unservable=tuple(u for period in prep.unservable for u in period),
        cut_short=tuple(cut),
        notes=tuple(notes),
        inputs_sha256=inputs_digest(inp),
    )


def _tier_waits(prep: Prepared, sol: HorizonSolution, options: HorizonOptions) -> tuple[TierWait, ...]:
    """Replica-periods and GPU-hours waiting per tier, and their cost."""
    hours = options.horizon.hours
    rows: dict[str, list[float]] = {t.name: [0, 0.0, 0] for t in prep.inputs[0].policy.tiers}
    for (p, c), n in sol.waiting.items():
        dc = prep.classes[p][c]
        row = rows.setdefault(dc.tier, [0, 0.0, 0])
        row[0] += n
        row[1] += n * dc.gpu_equivalents * hours
        row[2] += n * dc.wait_cost
    policy = prep.inputs[0].policy
    return tuple(
        TierWait(
            tier=name, weight=policy.tier(name).weight,
            price_per_gpu_hour=policy.tier(name).weight * options.wait_price,
            replica_periods=int(n), gpu_hours=round(gh, 1), cost=cost,
        )
        for name, (n, gh, cost) in rows.items()
    )  # fmt: skip


def _gap_orders(
    prep: Prepared, policy: Policy, p: int, owned: dict[str, int], seconds: float
) -> dict[str, int]:
    """What a capacity gap would buy at period ``p`` for that period's whole demand: the purchase MILP
    with the fleet and the nodes ordered so far (arrived or not) free. Classes no offer can host are
    left to the fleet."""
    problem = prep.problem
    requests: list[Request] = []
    fleet_shapes: dict[tuple[str, int], tuple[ShapeSpec, ...]] = {}
    for c, (dc, n) in enumerate(problem.demand[p].items()):
        if not dc.bought_shapes:
            continue
        for i in range(n):
            requests.append(Request(
                workload=f"class-{c}", replica=i, team=dc.team, tier=dc.tier, tier_weight=0, tier_rank=0,
                priority=0, wait_s=0, shapes=dc.bought_shapes,
            ))  # fmt: skip
            fleet_shapes[(f"class-{c}", i)] = dc.fleet_shapes
    offers = {o.name: o for o in problem.offers}
    mine = [
        replace(offers[name].spec, name=f"owned-{name}", cost=0.0, available=n) for name, n in owned.items()
    ]
    found = solve_purchase(
        requests, [*problem.fleet, *mine, *(o.spec for o in problem.offers)],
        policy=policy, time_limit_s=seconds, fleet_shapes=fleet_shapes,
    )  # fmt: skip
    return found.counts


def buy_now(prep: Prepared, policy: Policy, seconds: float) -> HorizonSolution:
    """The policy that buys today what the last period's demand needs (no rent), costed by the MILP."""
    counts = _gap_orders(prep, policy, prep.problem.periods - 1, {}, seconds / 2)
    fixed = {(name, 0): n for name, n in counts.items()}
    return solve_horizon(replace(prep.problem, fixed_orders=fixed, allow_rent=False), seconds / 2)


def myopic(prep: Prepared, policy: Policy, seconds: float) -> HorizonSolution:
    """The policy that buys each period's gap when it appears (what capacity-gap would buy then, the
    nodes ordered before counted as there; no rent), costed by the MILP."""
    owned: dict[str, int] = defaultdict(int)
    fixed: dict[tuple[str, int], int] = {}
    periods = prep.problem.periods
    for p in range(periods):
        for name, n in _gap_orders(prep, policy, p, dict(owned), seconds / 2 / periods).items():
            fixed[(name, p)] = n
            owned[name] += n
    return solve_horizon(replace(prep.problem, fixed_orders=fixed, allow_rent=False), seconds / 2)
