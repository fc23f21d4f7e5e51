"""Capacity-gap plans: what to re-partition, then what to buy, so that waiting demand is served.

1. Plan the fleet as it is. The gap demand is every waiting replica that has no predicted start or
   whose predicted start is later than its tier's target wait.
2. No purchase first: when the policy forbids MIG re-partitions or sharing-mode changes, plan again
   with the plan held, allowing them; the gap replicas that this plan places are served by
   re-partitioning (its MIG and ``set-sharing`` actions say how).
3. Replicas that no node type of the catalog can ever host are reported, naming the workload.
4. The rest goes to the purchase MILP (:mod:`planner.capacity.purchase`), whose optimum is a lower bound.
5. The purchase is checked by planning the remaining demand on the purchased nodes alone with the real
   placement solver (validated plan); if anything is left over, the cheapest node type that hosts
   it is added and the check repeats.
6. Each purchased node's GPUs and cost are shared among the replicas placed on it (by
   GPU-equivalents), giving GPUs, nodes and cost per tier and per team.

The purchased nodes serve only the gap demand: free capacity left in the existing fleet is not
counted, so the answer never relies on capacity the plan could not use. The lower bound reported is
not the purchase MILP's (a bound for that demand alone, which a better placement of the fleet may
shrink) but one for the whole question, the fleet pooled with what is bought
(:mod:`planner.capacity.bound`); the answer is ``OPTIMAL`` only when its cost meets that bound.

Like-for-like: a GPU *class* is a GPU model of the hardware catalog. A replica whose workload names
no GPU model is bought for in its own class (:func:`~gpuplan.planner.capacity.demand.home_models`)
unless the options allow other models for it; then the gap lists the workloads that would move class.

This module runs the steps in order (:func:`capacity_gap`); their parts live beside it: ``options`` and
``phases`` (the run's settings and time shares), ``demand`` (steps 1 and 3), ``repartition`` (the input
of step 2), ``node_types`` and ``purchase`` (step 4), ``check`` (step 5), ``accounting`` (step 6) and
``bound`` (the lower bound).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime

from gpuplan.models.capacity import CapacityGap, NodeTypeCatalog, Purchase, Repartition, Unservable
from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import SET_SHARING, Plan
from gpuplan.planner.capacity.accounting import (
    Share,
    class_moves,
    gap_lines,
    node_shares,
    purchased,
    served_by,
)
from gpuplan.planner.capacity.bound import WholeBound, by_type, whole_bound
from gpuplan.planner.capacity.check import Bought, Fleet, check_purchase
from gpuplan.planner.capacity.demand import (
    PREDICTED_STARTS,
    Key,
    gap_demand,
    joined_in_domain,
    kept_models,
    like_for_like,
    planning_now,
    unservable_reasons,
    with_predictions,
)
from gpuplan.planner.capacity.node_types import node_for, type_specs
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.capacity.phases import (
    BOUND,
    CHECK,
    FLEET,
    MIN_PHASE_S,
    PHASE_WEIGHTS,
    PURCHASE,
    REPAIR,
    REPARTITION,
    Labels,
    placement,
    plan_fleet,
    run_phases,
)
from gpuplan.planner.capacity.purchase import NO_SOLUTION, PurchaseSolution, TypeSpec, solve_purchase
from gpuplan.planner.capacity.repartition import held_input
from gpuplan.planner.pipeline.compile import compile_node, compile_problem
from gpuplan.planner.pipeline.deadline import Deadline, Phases
from gpuplan.planner.pipeline.metrics import gpu_equivalents
from gpuplan.planner.planning import inputs_digest
from gpuplan.planner.validation.errors import InvalidPlanError
from gpuplan.solvers.fleet.purchase import Offer, configure_purchase
from gpuplan.solvers.problem import PlacementProblem, Request
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: The solver name of a purchase found by the configuration LP.
CONFIGURED = "configuration-lp"

#: The solver label of a purchase taken over from the baseline.
WARM = "warm start"

#: Of the run's time left after the fleet plan, at most this share completes its predicted starts.
PREDICTIONS_SHARE = 0.25

#: What the price source says for the bundled catalog.
EXAMPLE_SOURCE = (
    "EXAMPLE prices and lead times of the bundled node-type catalog, not quotes: give --catalog with "
    "your own (template: data/examples/node_types.template.yaml)"
)


@dataclass
class _Run:
    """The phases of one capacity-gap run after the fleet plan, each within its share of ``phases``."""

    inp: PlanningInput
    opts: GapOptions
    catalog: HardwareCatalog
    now: datetime | None
    phases: Phases
    labels: Labels = field(default_factory=Labels)
    #: The GPU models each like-for-like workload is bought for.
    keep: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def repartition(self, plan: Plan, demand: list[Key]) -> tuple[list[Key], tuple[Repartition, ...]]:
        """Re-plan with the plan held and MIG re-partitions and sharing-mode changes allowed: the demand
        still waiting and the actions, per GPU re-partitioned (per node whose mode changes), with the gap
        replicas placed there."""
        seconds = self.phases.share(REPARTITION)
        if seconds < MIN_PHASE_S:
            self.labels.cut_short(
                REPARTITION, f"no time was left for the {REPARTITION}; its demand goes to purchases"
            )
            return demand, ()
        held, back = held_input(self.inp, plan, self.catalog)
        try:
            again = placement(held, self.opts, self.catalog, self.now, seconds)
        except InvalidPlanError as exc:
            # Never act on a plan the validator rejects: without re-partitions, the purchase serves all.
            log.warning("the %s was skipped: %s", REPARTITION, exc)
            first = exc.violations[0] if exc.violations else None
            self.labels.notes.append(
                f"the {REPARTITION} produced a plan the validator rejects (a planner bug"
                + (f": {first.rule} on {first.subject}" if first else "")
                + "); it was skipped and its demand goes to purchases"
            )
            return demand, ()
        self.labels.plan(REPARTITION, again, "a longer solve may serve more demand by re-partitioning")
        left = {back[(u.workload, u.replica)] for u in gap_demand(again, held, self.now)}
        served = set(demand) - left
        # Served replicas per GPU, and per node (key GPU ``None``) for the sharing mode of the node.
        on_gpu: dict[tuple[str, int | None], list[tuple[Key, float]]] = defaultdict(list)
        for a in again.assignments:
            key = back[(a.workload, a.replica)]
            if key not in served:
                continue
            node = held.cluster.node_by_name[a.node]
            for g in a.gpus:
                eq = gpu_equivalents(g, node.gpu_by_index[g.index].model, self.catalog)
                on_gpu[(a.node, g.index)].append((key, eq))
                on_gpu[(a.node, None)].append((key, eq))
        by_gpu: dict[tuple[str, int | None], list[str]] = defaultdict(list)
        for act in again.actions:
            if act.kind.endswith("-mig") and act.node is not None and act.gpu is not None:
                by_gpu[(act.node, act.gpu)].append(f"{act.kind} {act.detail} on {act.node} GPU {act.gpu}")
            elif act.kind == SET_SHARING and act.node is not None:
                by_gpu[(act.node, None)].append(f"{act.kind} {act.to or act.detail} on {act.node}")
        # A change that frees room for no gap replica serves nobody here: it is not proposed.
        actions = tuple(
            Repartition(
                node=node, gpu=gpu, actions=tuple(steps), serves=served_by(self.inp, on_gpu[(node, gpu)])
            )
            for (node, gpu), steps in by_gpu.items()
            if on_gpu[(node, gpu)]
        )
        return [k for k in demand if k in left], actions

    def bound(
        self,
        problem: PlacementProblem,
        plan: Plan,
        deferred: set[Key],
        excluded: set[Key],
        specs: list[TypeSpec],
    ) -> WholeBound:
        """The lower bound on the whole question within its share (:mod:`planner.capacity.bound`)."""
        seconds = max(MIN_PHASE_S, min(self.opts.milp_time_limit_s, self.phases.share(BOUND)))
        found = whole_bound(self.inp, problem, plan, deferred, excluded, specs, self.opts, seconds)
        if found.status != "OPTIMAL":
            self.labels.cut_short(
                BOUND, f"the {BOUND} MILP stopped at its {seconds:.1f} s share; the bound is its LP "
                "relaxation's, lower than it may be"
            )  # fmt: skip
        return found

    def _milp(self, requests: list[Request], specs: list[TypeSpec], seconds: float) -> PurchaseSolution:
        return solve_purchase(
            requests,
            specs,
            policy=self.inp.policy,
            time_limit_s=max(MIN_PHASE_S, min(self.opts.milp_time_limit_s, seconds)),
            threads=self.opts.num_workers,
        )

    def _check(self, out: Bought, keys: list[Key], seconds: float, phase: str) -> None:
        out.check, out.sub, out.back = check_purchase(
            self.inp, out.fleet, keys, self.opts, self.now, seconds, self.keep
        )
        self.labels.plan(phase, out.check, "replicas it left waiting may fit the purchase with more time")
        out.waiting = [out.back[(u.workload, u.replica)] for u in out.check.unplaced]

    def _configured(self, buyable: list[Request], types: NodeTypeCatalog, seconds: float) -> PurchaseSolution:
        """The purchase by the configuration LP (node types as priced columns, exact per node), as a
        :class:`PurchaseSolution`; each type is offered with MIG off and, when MIG demand exists and
        the model has MIG, with every GPU in MIG mode. Its lower bound holds for every purchase only
        without MIG demand (mixed-mode nodes are not offered), otherwise it is reported as 0."""
        t0 = time.perf_counter()
        mig_demand = any(s.kind == "mig" for r in buyable for s in r.shapes)
        offers: list[Offer] = []
        mig_of: dict[str, tuple[str, int]] = {}
        for t in types.node_types:
            variants = [0]
            if mig_demand and self.catalog.model(t.gpu_model).mig_capable:
                variants.append(t.gpus)
            for mig in variants:
                name = t.name if not mig else f"{t.name}#mig"
                node = compile_node(node_for(t, name, mig, {}, self.catalog), self.catalog)
                offers.append(Offer(name, t.unit_cost, node))
                mig_of[name] = (t.name, mig)
        problem = PlacementProblem(
            nodes=(),
            requests=tuple(buyable),
            catalog=self.catalog,
            policy=self.inp.policy,
        )
        options = RunOptions(
            time_limit_s=seconds, seed=self.opts.seed, num_workers=self.opts.num_workers, ray=self.opts.ray
        )
        found = configure_purchase(problem, options, offers, t0 + seconds)
        if found is None:
            return PurchaseSolution({}, {}, 0.0, 0.0, NO_SOLUTION, CONFIGURED, time.perf_counter() - t0)
        counts: dict[str, int] = defaultdict(int)
        migs: dict[str, int] = defaultdict(int)
        for name, n in found.counts.items():
            base, mig = mig_of[name]
            counts[base] += n
            migs[base] += n * mig
        lower = 0.0 if mig_demand or found.lower_bound is None else min(found.lower_bound, found.cost)
        return PurchaseSolution(
            dict(counts),
            {k: v for k, v in migs.items() if v},
            found.cost,
            lower,
            "OPTIMAL" if found.converged and found.cost <= lower * (1 + 1e-9) else "FEASIBLE",
            CONFIGURED,
            time.perf_counter() - t0,
        )

    def _warm(
        self,
        buyable: list[Request],
        types: NodeTypeCatalog,
        warm: tuple[Purchase, ...],
        found: PurchaseSolution,
    ) -> Bought | None:
        """The baseline's purchase (``warm``, re-priced with ``types``) when it costs less than the
        purchase ``found`` and the placement check places all of ``buyable`` on it; else ``None``."""
        known = {t.name for t in types.node_types}
        if not warm or any(p.node_type not in known for p in warm):
            return None
        cost = sum(p.count * types.node_type(p.node_type).unit_cost for p in warm)
        if found.status != NO_SOLUTION and cost >= found.objective:
            return None
        domains = {r.gang_domain: "purchase" for r in buyable if r.gang_domain}
        out = Bought(Fleet(types, self.catalog, domains), lower=min(found.lower_bound, cost),
                        solver=f"{found.solver} + {WARM}", status="FEASIBLE")  # fmt: skip
        for p in warm:
            out.fleet.buy(p.node_type, p.count, p.mig_gpus)
        # Half the placement check's share, leaving the schedule as it is for the purchase found.
        todo = self.phases.todo
        self._check(
            out,
            [r.key for r in buyable],
            self.phases.deadline.share(todo[CHECK] / 2 / sum(todo.values())),
            CHECK,
        )
        what = ", ".join(f"{p.count} x {p.node_type}" for p in warm)
        if out.waiting:
            self.labels.notes.append(
                f"{WARM}: the baseline's purchase ({what}) leaves {len(out.waiting)} replica(s) waiting here"
            )
            return None
        self.labels.notes.append(
            f"{WARM}: the baseline's purchase ({what}, {cost:,.0f}) serves this demand and costs less than "
            f"the purchase found ({found.objective:,.0f})"
        )
        return out

    def buy(
        self,
        buyable: list[Request],
        specs: list[TypeSpec],
        types: NodeTypeCatalog,
        warm: tuple[Purchase, ...] = (),
    ) -> Bought:
        """The purchase MILP and the configuration LP's purchase (the cheaper is kept, the better lower
        bound reported), the placement check on the nodes bought, and repair rounds (a MILP for what
        the check leaves waiting, then a check again) while replicas wait and time remains. A ``warm``
        purchase (the baseline's) that costs less and passes the placement check is kept instead."""
        seconds = self.phases.share(PURCHASE)
        pooled = self._milp(buyable, specs, seconds / 2)
        configured = self._configured(buyable, types, seconds / 2)
        solution = pooled
        if configured.status != NO_SOLUTION and (
            pooled.status == NO_SOLUTION or configured.objective < pooled.objective
        ):
            solution = configured
        best_lower = max(pooled.lower_bound, configured.lower_bound)
        solution = replace(
            solution, lower_bound=min(best_lower, solution.objective) if solution.counts else best_lower
        )
        started = self._warm(buyable, types, warm, solution)
        if started is not None:
            return started
        domains = {r.gang_domain: "purchase" for r in buyable if r.gang_domain}
        out = Bought(Fleet(types, self.catalog, domains), lower=solution.lower_bound,
                        solver=solution.solver, status=solution.status)  # fmt: skip
        keys = [r.key for r in buyable]
        within = f"the {PURCHASE} stopped at its {seconds:.1f} s share"
        if solution.status == NO_SOLUTION:
            self.labels.cut_short(PURCHASE, f"{within} with no purchase; none for {len(keys)} replica(s)")
            out.waiting = keys
            return out
        if solution.status != "OPTIMAL":
            self.labels.cut_short(PURCHASE, f"{within}, feasible; the lower bound is the LP relaxation's")
        for name, count in sorted(solution.counts.items()):
            out.fleet.buy(name, count, solution.mig_gpus.get(name, 0))
        self._check(out, keys, self.phases.share(CHECK), CHECK)
        by_key = {r.key: r for r in buyable}
        repair = self.phases.sub(REPAIR)
        milp_part = PHASE_WEIGHTS[PURCHASE] / (PHASE_WEIGHTS[PURCHASE] + PHASE_WEIGHTS[CHECK])
        for attempt in range(self.opts.repair_rounds):
            if not out.waiting:
                break
            this_round = repair.sub(1 / (self.opts.repair_rounds - attempt))
            if this_round.remaining() < 2 * MIN_PHASE_S:
                self.labels.cut_short(REPAIR, f"no time was left to {REPAIR} the purchase; "
                                              f"{len(out.waiting)} replica(s) stay unplaced")  # fmt: skip
                break
            extra = self._milp([by_key[k] for k in out.waiting], specs, this_round.share(milp_part))
            first = out.check.unplaced[0] if out.check is not None else None
            self.labels.notes.append(
                f"the placement check left {len(out.waiting)} replica(s) waiting"
                + (f" (first: '{first.workload}', {first.code}: {first.reason})" if first else "")
                + "; added "
                + (", ".join(f"{n} x {name}" for name, n in sorted(extra.counts.items())) or "nothing")
            )
            if extra.status == NO_SOLUTION:
                self.labels.cut_short(REPAIR, f"the {PURCHASE} of a repair round found no purchase in time")
                break
            for name, count in sorted(extra.counts.items()):
                out.fleet.buy(name, count, extra.mig_gpus.get(name, 0))
            self._check(out, keys, this_round.remaining(), REPAIR)
        return out


def capacity_gap(
    inp: PlanningInput,
    types: NodeTypeCatalog,
    opts: GapOptions | None = None,
    *,
    baseline: Plan | None = None,
    catalog: HardwareCatalog | None = None,
    deadline: Deadline | None = None,
    warm: tuple[Purchase, ...] = (),
) -> CapacityGap:
    """The re-partitions and the cheapest purchase that serve the demand the fleet leaves waiting.

    The whole run keeps within ``deadline`` (by default ``opts.time_limit_s`` from now): each phase
    takes its share of the time left (:data:`PHASE_WEIGHTS`), and a phase the time limit stops keeps
    its best result so far, named in ``cut_short`` and explained in ``notes``. ``baseline`` is the
    fleet plan when the caller has made it already (:func:`plan_fleet`); ``warm`` is a purchase to try
    first (a scenario's baseline purchase), kept when it is cheaper and the placement check passes.
    """
    opts = opts or GapOptions()
    catalog = catalog or default_catalog()
    deadline = deadline or Deadline.after(opts.time_limit_s)
    t0 = time.perf_counter()
    plan = baseline or plan_fleet(inp, opts, deadline, catalog)
    now = planning_now(plan, opts.now)
    run = _Run(inp, opts, catalog, now, run_phases(inp, deadline, fleet=False))
    run.labels.plan(FLEET, plan, "the gap demand may count replicas a longer solve would place")
    plan, complete = with_predictions(plan, inp, catalog, now, deadline.sub(PREDICTIONS_SHARE))
    if not complete:
        run.labels.cut_short(
            FLEET, f"the fleet plan's {PREDICTED_STARTS} were not completed; the gap demand counts the "
            "replicas left without one, some of which may start within their target"
        )  # fmt: skip
    waiting = {(u.workload, u.replica) for u in plan.unplaced}
    demand = [(u.workload, u.replica) for u in gap_demand(plan, inp, now)]
    outcome: dict[Key, str] = {}
    rest = list(demand)
    actions: tuple[Repartition, ...] = ()
    if demand and REPARTITION in run.phases.todo:
        rest, actions = run.repartition(plan, demand)
        outcome.update({k: "served_by_repartition" for k in demand if k not in set(rest)})
    elif demand and inp.policy.mig.allow_repartition:
        run.labels.notes.append(
            "the policy already allows MIG re-partitions (and sharing-mode changes when it allows them); "
            "the fleet plan includes them"
        )

    specs = type_specs(types, catalog)
    problem = compile_problem(inp, catalog, now or datetime.now().astimezone())
    by_key = {r.key: r for r in problem.requests}
    requests = like_for_like(inp, [by_key[k] for k in rest], opts)
    run.keep = kept_models(requests, by_key)
    hosted = unservable_reasons(requests, specs)
    bad = {**joined_in_domain(problem, requests), **hosted}
    unservable = tuple(
        Unservable(
            workload=k[0], replica=k[1], team=by_key[k].team, tier=by_key[k].tier,
            message=msg + (
                f" (like-for-like: bought only as {', '.join(run.keep[k[0]])}; "
                "--allow-other-models lets it move class)" if k[0] in run.keep and k in hosted else ""
            ),
        )
        for k, msg in sorted(bad.items())
    )  # fmt: skip
    outcome.update(dict.fromkeys(bad, "unservable"))
    buyable = [r for r in requests if r.key not in bad]

    purchases: tuple[Purchase, ...] = ()
    share: dict[Key, Share] = {}
    bought = Bought(Fleet(types, catalog, {}))
    whole: WholeBound | None = None
    if buyable:
        whole = run.bound(problem, plan, waiting - set(demand), set(bad), specs)
        bought = run.buy(buyable, specs, types, warm)
        if bought.check is not None and bought.sub is not None:
            share = node_shares(bought.check, bought.sub, bought.back, bought.fleet)
            purchases = purchased(bought, inp, opts.min_use)
        keys = [r.key for r in buyable]
        outcome.update({k: "served_by_purchase" for k in keys if k in share})
        outcome.update({k: "still_unplaced" for k in keys if k not in share})
    counts = {k: outcome.get(k, "unservable") for k in demand}
    cost = round(sum(p.cost for p in purchases), 2)
    lower = round(whole.value, 2) if whole is not None else 0.0
    verified = not bought.waiting
    proved = verified and meets(cost, lower)
    moves = class_moves(inp, bought, by_key, opts) if purchases else ()
    return CapacityGap(
        demand_replicas=len(demand),
        served_by_repartition=sum(1 for v in counts.values() if v == "served_by_repartition"),
        served_by_purchase=sum(1 for v in counts.values() if v == "served_by_purchase"),
        repartition_actions=tuple(step for r in actions for step in r.actions),
        repartitions=actions,
        purchases=purchases,
        nodes_added=sum(p.count for p in purchases),
        gpus_added=sum(p.gpus for p in purchases),
        cost=cost,
        currency=types.currency,
        lower_bound=lower,
        gap=round(max(0.0, cost - lower) / cost, 6) if cost > 0 else 0.0,
        bound_note=bound_note(cost, lower, whole, plan, bought, types.currency),
        purchase_lower_bound=round(bought.lower, 2),
        purchase_status=bought.status,
        input_replicas=sum(w.replicas for w in inp.workloads),
        max_lead_time_days=max((p.lead_time_days for p in purchases), default=0),
        verified=verified,
        still_unplaced=len(bought.waiting),
        solver=bought.solver,
        solver_status=NO_SOLUTION if bought.status == NO_SOLUTION else "OPTIMAL" if proved else "FEASIBLE",
        wall_s=round(time.perf_counter() - t0, 3),
        by_tier=gap_lines(((by_key[k].tier, k) for k in demand), counts, share),
        by_team=gap_lines(((by_key[k].team, k) for k in demand), counts, share),
        unservable=unservable,
        cut_short=tuple(run.labels.cut),
        notes=tuple(run.labels.notes),
        inputs_sha256=inputs_digest(inp),
        example_prices=types.example_prices,
        price_source=EXAMPLE_SOURCE if types.example_prices else types.note or "the given node-type catalog",
        allow_other_models=("*",) if opts.allow_other_models else tuple(sorted(opts.other_models_for)),
        class_moves=moves,
    )


def meets(cost: float, lower: float) -> bool:
    """Whether a cost equals its lower bound within rounding (a cent, or a millionth of the cost)."""
    return cost - lower <= max(0.01, 1e-6 * cost)


def bound_note(
    cost: float, lower: float, whole: WholeBound | None, plan: Plan, bought: Bought, currency: str
) -> str:
    """What the lower bound covers, in words: proved, what the fleet could host if perfectly packed,
    what must be bought even so, or why it is above an incomplete purchase."""
    if whole is None:
        return "nothing to buy: no purchase is needed for the demand"
    money = f"{lower:,.0f} {currency}"
    if bought.waiting and lower > cost:
        return (
            f"lower bound {money} is above the total: the purchase leaves {len(bought.waiting)} replica(s) "
            "waiting, so it is no answer to the whole question yet"
        )
    if not bought.waiting and meets(cost, lower):
        return (
            "proved: no purchase under which all demand meets its tier targets costs less, however the "
            "existing fleet is packed"
        )
    head = (
        f"lower bound {money}: the existing fleet could host this demand if perfectly packed"
        if lower < 0.005
        else f"lower bound {money}: even with the existing fleet perfectly packed (capacity pooled per GPU "
        f"class), at least this much must be bought (the cheapest such purchase: {by_type(whole.buys)})"
    )
    limit = plan.provenance.get("time_limit_s")
    placement = f"a {limit:.1f} s placement" if isinstance(limit, int | float) else "the fleet plan"
    lp = "" if whole.status == "OPTIMAL" else "; the bound is an LP relaxation's, its MILP stopped early"
    return f"{head}; the purchase covers what {placement} ({plan.status.value}) left waiting{lp}"
