"""What-if scenarios for capacity planning: demand growth, other node types or prices, policy changes.

Each scenario changes a copy of the inputs and runs the whole capacity-gap plan on it; the results
are tabulated side by side.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.capacity import (
    CapacityGap,
    Growth,
    NodeTypeCatalog,
    Purchase,
    Scenario,
    ScenarioFile,
    ScenarioResult,
)
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.policy import Policy
from gpuplan.models.workload import Workload
from gpuplan.planner.capacity.gap import WARM, capacity_gap
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.io.files import describe, read_structured
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.planning import inputs_digest
from gpuplan.solvers.parallel import run_tasks, slots

log = logging.getLogger(__name__)


def load_scenarios(path: Path) -> ScenarioFile:
    """The scenarios file (YAML/JSON, ``scenarios:`` list)."""
    raw = read_structured(path)
    try:
        return ScenarioFile.model_validate(raw)
    except ValidationError as exc:
        raise InputError(f"{path}: {describe(exc, raw)}") from None


def grow(workloads: tuple[Workload, ...], growth: Growth) -> tuple[Workload, ...]:
    """Replicas multiplied by the team and tier factors that match each workload.

    Within each group of equal factors the total is ``total x factor`` rounded half up, spread by
    largest remainder (earlier workloads first on ties), so that small workloads grow too. A workload
    keeps at least one replica and never fewer than it runs now.
    """
    groups: dict[float, list[int]] = {}
    for i, w in enumerate(workloads):
        factor = growth.teams.get(w.team, 1.0) * growth.tiers.get(w.tier, 1.0)
        if factor != 1.0:
            groups.setdefault(factor, []).append(i)
    replicas = [w.replicas for w in workloads]
    for factor, members in groups.items():
        exact = [workloads[i].replicas * factor for i in members]
        target = math.floor(sum(exact) + 0.5)
        counts = [math.floor(x) for x in exact]
        order = sorted(range(len(members)), key=lambda k: (-(exact[k] - counts[k]), k))
        for k in order[: max(0, target - sum(counts))]:
            counts[k] += 1
        for i, n in zip(members, counts, strict=True):
            replicas[i] = max(1, n, len(workloads[i].running_on))
    return tuple(
        w if n == w.replicas else w.model_copy(update={"replicas": n})
        for w, n in zip(workloads, replicas, strict=True)
    )


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def apply_policy(policy: Policy, overrides: dict[str, Any], scenario: str) -> Policy:
    """The policy with ``overrides`` merged in (mappings merge key by key, lists replace)."""
    if not overrides:
        return policy
    raw = _merge(policy.model_dump(mode="json"), overrides)
    try:
        return Policy.model_validate(raw)
    except ValidationError as exc:
        raise InputError(f"scenario '{scenario}' field policy: {describe(exc, raw)}") from None


def scenario_types(
    base: NodeTypeCatalog, scenario: Scenario, base_dir: Path, catalog: HardwareCatalog
) -> NodeTypeCatalog:
    """The scenario's node types: another catalog file (relative to the scenarios file) and prices."""
    types = base
    if scenario.catalog:
        path = Path(scenario.catalog)
        types = load_node_types(path if path.is_absolute() else base_dir / path, catalog)
    if not scenario.prices:
        return types
    known = {t.name for t in types.node_types}
    for name in scenario.prices:
        if name not in known:
            raise InputError(
                f"scenario '{scenario.name}' field prices: unknown node type '{name}' "
                f"(known: {', '.join(sorted(known))})"
            )
    return types.model_copy(
        update={
            "node_types": tuple(
                t.model_copy(update={"unit_cost": scenario.prices[t.name]})
                if t.name in scenario.prices
                else t
                for t in types.node_types
            )
        }
    )


def scenario_input(inp: PlanningInput, scenario: Scenario, catalog: HardwareCatalog) -> PlanningInput:
    """The planning input of a scenario (grown demand, changed policy), cross-checked again."""
    teams = {w.team for w in inp.workloads} | set(inp.policy.teams)
    tiers = {t.name for t in inp.policy.tiers}
    for field, names, known in (
        ("teams", scenario.growth.teams, teams),
        ("tiers", scenario.growth.tiers, tiers),
    ):
        unknown = sorted(set(names) - known)
        if unknown:
            raise InputError(
                f"scenario '{scenario.name}' field growth.{field}: unknown {field[:-1]} '{unknown[0]}' "
                f"(known: {', '.join(sorted(known))})"
            )
    data = {
        "cluster": inp.cluster,
        "workloads": grow(inp.workloads, scenario.growth),
        "policy": apply_policy(inp.policy, scenario.policy, scenario.name),
    }
    try:
        return PlanningInput.model_validate(data, context={"catalog": catalog})
    except ValidationError as exc:
        msg = str(exc.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
        raise InputError(f"scenario '{scenario.name}': {msg}") from None


@dataclass(frozen=True)
class Prepared:
    """One scenario's inputs, and whether its planning input and node types equal the base run's."""

    scenario: Scenario
    inp: PlanningInput
    types: NodeTypeCatalog
    same_input: bool
    same_types: bool

    @property
    def same_gap(self) -> bool:
        """Whether the scenario changes nothing: the base run's gap is its answer."""
        return self.same_input and self.same_types and not self.scenario.allow_other_models

    def options(self, opts: GapOptions) -> GapOptions:
        """``opts`` with the workloads this scenario lets buy other GPU models."""
        names = set(self.scenario.allow_other_models)
        if not names:
            return opts
        return replace(
            opts,
            allow_other_models=opts.allow_other_models or "*" in names,
            other_models_for=opts.other_models_for | (names - {"*"}),
        )


def prepare_scenarios(
    inp: PlanningInput,
    types: NodeTypeCatalog,
    scenarios: ScenarioFile,
    base_dir: Path,
    catalog: HardwareCatalog,
) -> list[Prepared]:
    """Every scenario's inputs, checked before any solve starts."""
    digest = inputs_digest(inp)
    out = []
    for s in scenarios.scenarios:
        unknown = sorted(set(s.allow_other_models) - {"*"} - set(inp.workload_by_id))
        if unknown:
            raise InputError(f"scenario '{s.name}' field allow_other_models: unknown workload '{unknown[0]}'")
        s_inp, s_types = scenario_input(inp, s, catalog), scenario_types(types, s, base_dir, catalog)
        out.append(Prepared(s, s_inp, s_types, inputs_digest(s_inp) == digest, s_types == types))
    return out


def run_scenarios(
    inp: PlanningInput,
    types: NodeTypeCatalog,
    scenarios: ScenarioFile,
    base_dir: Path,
    opts: GapOptions,
    catalog: HardwareCatalog,
    *,
    deadline: Deadline | None = None,
) -> tuple[ScenarioResult, ...]:
    """The capacity gap of every scenario, in file order, all within ``deadline`` (by default
    ``opts.time_limit_s`` from now)."""
    prepared = prepare_scenarios(inp, types, scenarios, base_dir, catalog)
    return run_prepared(prepared, opts, catalog, deadline=deadline or Deadline.after(opts.time_limit_s))


@dataclass(frozen=True)
class _Task:
    """One scenario to solve: its inputs, the fleet plan it may reuse, its place among the ``count``
    scenarios solved, and the deadline of them all."""

    prepared: Prepared
    baseline: Plan | None
    warm: tuple[Purchase, ...]
    index: int
    count: int
    deadline: Deadline


def _scenario_gap(shared: tuple[GapOptions, HardwareCatalog, int], task: _Task) -> CapacityGap:
    """The capacity gap of one scenario (a task): an equal part of the time left when it starts, shared
    with the scenarios that cannot start before it ends (``at_once`` run at once)."""
    opts, catalog, at_once = shared
    waves_left = math.ceil((task.count - task.index) / at_once)
    mine = task.deadline.sub(1 / waves_left)
    log.info("scenario %s: %.1f s", task.prepared.scenario.name, mine.remaining())
    p = task.prepared
    return capacity_gap(
        p.inp,
        p.types,
        p.options(opts),
        baseline=task.baseline,
        catalog=catalog,
        deadline=mine,
        warm=task.warm,
    )


def run_prepared(
    prepared: list[Prepared],
    opts: GapOptions,
    catalog: HardwareCatalog,
    *,
    deadline: Deadline,
    base: tuple[Plan, CapacityGap] | None = None,
) -> tuple[ScenarioResult, ...]:
    """The capacity gap of every prepared scenario, in order, within ``deadline``.

    ``base`` is the fleet plan and gap of the inputs the scenarios were prepared from: a scenario that
    changes nothing reuses that gap, and one that changes only node types or prices reuses that fleet
    plan; each scenario tries the base purchase first (a warm start, kept when it is cheaper than the
    purchase found and passes the placement check). The other scenarios are independent tasks
    (:mod:`gpuplan.solvers.parallel`): one after the other here (each solve uses the machine's
    processes itself), or as Ray tasks with ``opts.ray``. Each gets an equal part of the time left
    when it starts among those that cannot start before it ends, so the time one leaves unused goes to
    those after it.
    """
    todo = [p for p in prepared if base is None or not p.same_gap]
    if opts.ray is not None:  # Ray workers on other machines share the wall clock, not this monotonic one
        deadline = Deadline.after(deadline.remaining(), time.time)
    tasks = [
        _Task(
            p,
            base[0] if base is not None and p.same_input else None,
            base[1].purchases if base is not None else (),
            i,
            len(todo),
            deadline,
        )
        for i, p in enumerate(todo)
    ]
    shared = (opts, catalog, slots(1, opts.ray))
    gaps = iter(run_tasks(_scenario_gap, shared, tasks, processes=1, ray=opts.ray))
    out = []
    for p in prepared:
        if base is not None and p.same_gap:
            log.info("scenario %s: the base gap", p.scenario.name)
            gap = base[1]
        else:
            gap = next(gaps)
        baseline = base[1] if base is not None else None
        out.append(
            ScenarioResult(
                name=p.scenario.name,
                description=p.scenario.description,
                buys=buys(gap),
                vs_baseline=versus(p, gap, baseline) if baseline is not None else "",
                gap=gap,
            )
        )
    return tuple(out)


def buys(gap: CapacityGap) -> str:
    """What a gap buys, in words (``nothing`` when it buys nothing)."""
    return ", ".join(f"{p.count} x {p.node_type}" for p in gap.purchases) or "nothing"


def _flat(mapping: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(a.b, value)`` for every leaf of a nested mapping."""
    out = []
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.extend(_flat(value, f"{prefix}{key}."))
        else:
            out.append((f"{prefix}{key}", value))
    return out


#: Policy switches in words: what ``true`` and ``false`` say.
POLICY_WORDS: dict[str, tuple[str, str]] = {
    "mig.allow_repartition": ("MIG re-partitioning allowed", "MIG re-partitioning forbidden"),
    "mig.allow_create": ("MIG instance creation allowed", "MIG instance creation forbidden"),
    "sharing.allow_change": ("sharing-mode changes allowed", "sharing-mode changes forbidden"),
}


def policy_words(path: str, value: Any) -> str:
    """A policy override in words: a known switch as it reads (``MIG re-partitioning allowed``), any
    other as ``<field words> set to <value>`` (truth values as yes/no)."""
    if path in POLICY_WORDS and isinstance(value, bool):
        on, off = POLICY_WORDS[path]
        return on if value else off
    shown = ("yes" if value else "no") if isinstance(value, bool) else value
    return f"policy {path.replace('.', ' ').replace('_', ' ')} set to {shown}"


def changes(p: Prepared) -> list[str]:
    """What a scenario changes from the inputs as given, in words."""
    s = p.scenario
    out = [f"team {k} x{v:g}" for k, v in s.growth.teams.items()]
    out += [f"tier {k} x{v:g}" for k, v in s.growth.tiers.items()]
    if s.catalog:
        out.append(f"node types from {s.catalog}")
    out += [f"{k} at {v:,.0f}" for k, v in s.prices.items()]
    out += [policy_words(path, value) for path, value in _flat(s.policy)]
    if s.allow_other_models:
        who = "every workload" if "*" in s.allow_other_models else ", ".join(s.allow_other_models)
        out.append(f"other GPU models for {who}")
    return out


#: What a scenario that changes nothing says instead of a comparison with itself.
IS_BASELINE = "this is the baseline: the inputs as given"


def versus(p: Prepared, gap: CapacityGap, base: CapacityGap) -> str:
    """Why a scenario's cost differs from the baseline's (the gap of the inputs as given): what the
    scenario changes, the demand each had to serve, how much re-partitions served, the solves the time
    limit cut short, and whether a cheaper mix was found for the same demand."""
    if p.same_gap:
        return IS_BASELINE
    diff = gap.cost - base.cost
    head = (
        "the same cost as the baseline"
        if abs(diff) < 0.005
        else f"{abs(diff):,.0f} {gap.currency} {'more' if diff > 0 else 'less'} than the baseline"
    )
    why = [f"it changes {', '.join(changes(p))}"] if changes(p) else []
    if gap.input_replicas != base.input_replicas:
        why.append(f"it asks for {gap.input_replicas} replicas (baseline {base.input_replicas})")
    if gap.demand_replicas != base.demand_replicas:
        why.append(
            f"{gap.demand_replicas} replicas wait beyond their target after its fleet plan "
            f"(baseline {base.demand_replicas})"
        )
    if gap.demand_replicas < base.demand_replicas and gap.input_replicas >= base.input_replicas:
        why.append(
            "fewer wait beyond their target for as much or more demand: its fleet plan packs the fleet "
            "better, or predicts more starts within target"
        )
    if gap.served_by_repartition != base.served_by_repartition:
        why.append(f"re-partitions serve {gap.served_by_repartition} (baseline {base.served_by_repartition})")
    if gap.still_unplaced:
        why.append(
            f"its purchase was NOT verified: {gap.still_unplaced} replica(s) still wait, and its cost leaves "
            "them out"
        )
    if len(gap.unservable) != len(base.unservable):
        why.append(
            f"{len(gap.unservable)} replica(s) no node type can host (baseline {len(base.unservable)})"
        )
    if WARM in gap.solver:
        why.append(
            "the baseline's purchase (warm start) served its demand for less than the purchase it found"
        )
    if gap.cut_short:
        why.append(
            f"the time limit cut short its {', '.join(gap.cut_short)}: a longer --time-limit may find a "
            "cheaper purchase"
        )
    if base.cut_short and diff < 0:
        why.append(f"the time limit cut short the baseline's {', '.join(base.cut_short)}")
    if diff < 0 and gap.demand_replicas == base.demand_replicas and not p.same_types:
        why.append("other node types or prices give a cheaper mix")
    elif diff < 0 and gap.demand_replicas == base.demand_replicas:
        why.append("a cheaper mix was found for as much demand")
    if diff > 0 and not gap.cut_short and gap.demand_replicas <= base.demand_replicas and p.same_types:
        why.append(
            "it costs more for no more demand with no solve cut short: its fleet plan left other "
            "replicas waiting, which need other node types"
        )
    return head + (": " + "; ".join(why) if why else "")


def status(gap: CapacityGap) -> str:
    """Whether the placement check placed all of a gap's demand on its purchase, in words."""
    return "verified" if gap.verified else f"NOT verified ({gap.still_unplaced} waiting)"


def scenario_row(name: str, gap: CapacityGap) -> dict[str, Any]:
    """The headline numbers of one scenario (one row of the side-by-side table)."""
    return {
        "scenario": name,
        "status": status(gap),
        "input_replicas": gap.input_replicas,
        "demand_replicas": gap.demand_replicas,
        "served_by_repartition": gap.served_by_repartition,
        "served_by_purchase": gap.served_by_purchase,
        "unservable": len(gap.unservable),
        "nodes_added": gap.nodes_added,
        "gpus_added": gap.gpus_added,
        "cost": gap.cost,
        "lower_bound": gap.lower_bound,
        "gap": gap.gap,
        "max_lead_time_days": gap.max_lead_time_days,
        "verified": gap.verified,
        "cut_short": len(gap.cut_short),
        "wall_s": gap.wall_s,
    }


#: The console's row labels of the side-by-side table (``{money}``: the currency).
ROW_LABELS: dict[str, str] = {
    "input_replicas": "replicas asked",
    "demand_replicas": "waiting beyond target",
    "served_by_repartition": "served by re-partition",
    "served_by_purchase": "served by purchase",
    "unservable": "cannot be served",
    "nodes_added": "nodes to buy",
    "gpus_added": "GPUs to buy",
    "cost": "cost, {money}",
    "lower_bound": "lower bound, {money}",
    "gap": "gap to the bound",
    "max_lead_time_days": "longest lead time, days",
    "verified": "verified by placement",
    "cut_short": "phases cut short",
    "wall_s": "time, s",
}


def _cell(field: str, value: Any, gap: CapacityGap) -> str:
    """One value of the side-by-side table as people read it: yes/no, money and counts without
    decimals, the gap as a percentage (``-`` when the bound is above the cost of a purchase that
    leaves replicas waiting: no gap to speak of)."""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if field == "gap":
        return "-" if gap.lower_bound > gap.cost else f"{100 * value:.1f}%"
    if field == "wall_s":
        return f"{value:.1f}"
    if isinstance(value, float):
        return f"{value:,.0f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def render_table(results: tuple[ScenarioResult, ...]) -> str:
    """Scenarios side by side (one column per scenario, one row per headline number), then each
    scenario's description, what it buys and why it differs from the baseline."""
    rows = [scenario_row(r.name, r.gap) for r in results]
    money = results[0].gap.currency if results else ""
    labels = {f: text.format(money=money) for f, text in ROW_LABELS.items()}
    names = [str(r["scenario"]) for r in rows]
    width = max(len(text) for text in labels.values())
    cols = [max(len(n), 12) for n in names]
    lines = ["".ljust(width) + "  " + "  ".join(n.rjust(c) for n, c in zip(names, cols, strict=True))]
    for f, label in labels.items():
        cells = [_cell(f, row[f], r.gap).rjust(c) for row, r, c in zip(rows, results, cols, strict=True)]
        lines.append(label.ljust(width) + "  " + "  ".join(cells))
    for r in results:
        mark = "" if r.gap.verified else f" [{status(r.gap)}]"
        lines.append(f"{r.name}{mark}: {r.description or '(no description)'}; buys {r.buys or buys(r.gap)}")
        if r.vs_baseline:
            lines.append(f"  vs baseline: {r.vs_baseline}")
        lines.extend(
            f"  moves class: {m.workload} x{m.replicas} from {'|'.join(m.from_models)} to {m.to_model}"
            for m in r.gap.class_moves
        )
    return "\n".join(lines)
