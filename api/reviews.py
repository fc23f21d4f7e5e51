"""Policy reviews as jobs of the REST API: the kinds ``api/routers/policy.py`` submits and what each runs
in a solver process, around the planner's review functions (``planner.policy``: ``relax``, ``cost``,
``replay``, ``frontier``, with the seconds each plan gets from ``budget``).

Each kind is a :class:`ReviewKind` in :data:`KINDS`: its job kind, the key of its result in
``GET /v1/plans/{id}/result``, and ``run``, which the solver process calls with the job's stored input
and options (``seconds_each`` among them, fixed when the job was submitted) and which returns the result
JSON, a status and a one-line outcome. Another kind of review is one more entry here and one more route.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter

from gpuplan.models.capacity import NodeTypeCatalog
from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.policy import Policy
from gpuplan.models.review import RuleCost
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.policy.cost import Prices, Run, policy_cost
from gpuplan.planner.policy.frontier import DEFAULT_POINTS, DEFAULT_PROBES, frontier
from gpuplan.planner.policy.relax import input_relaxations
from gpuplan.planner.policy.replay import replay, replayable

#: Job kinds: what each rule of a policy costs, a proposed policy replayed on the stored plans, and the
#: throughput-vs-fairness frontier.
POLICY_COST, REPLAY, FRONTIER = "policy-cost", "replay", "frontier"
#: How a replay names the policy it replays (the CLI names its file).
PROPOSED = "the proposed policy"
#: The longest outcome a job stores.
_OUTCOME_CHARS = 200

#: What a review's run returns: the result JSON, a status and a one-line outcome.
Outcome = tuple[str, str, str]


@dataclass(frozen=True)
class ReviewKind:
    """One kind of review job: its ``kind``, the key of its result beside the job (``result_key``) and
    what the solver process runs for it (``run``, on the stored input JSON and options)."""

    kind: str
    result_key: str
    run: Callable[[str, dict[str, Any]], Outcome]


def _now(options: dict[str, Any]) -> datetime:
    text = options.get("now")
    return datetime.fromisoformat(text) if isinstance(text, str) else datetime.now(UTC)


def _prices(options: dict[str, Any], catalog: HardwareCatalog) -> Prices:
    """The prices of the job's node types (the bundled catalog's without)."""
    raw = options.get("node_types")
    types = (
        NodeTypeCatalog.model_validate(raw, context={"catalog": catalog})
        if raw
        else load_node_types(None, catalog)
    )
    return Prices.of(types, catalog)


def _run(options: dict[str, Any], catalog: HardwareCatalog, *, deterministic: bool) -> Run:
    """How every plan of the job is made: its solver, seed, threads and planning time, each plan within
    ``options["seconds_each"]``."""
    return Run(
        solver=str(options["solver"]),
        seed=int(options.get("seed", 0)),
        num_workers=int(options.get("num_workers", 1)),
        deterministic=deterministic,
        now=_now(options),
        catalog=catalog,
        seconds_each=float(options["seconds_each"]),
    )


def run_policy_cost(input_json: str, options: dict[str, Any]) -> Outcome:
    """The rules of the input's policy by cost (:func:`gpuplan.planner.policy.cost.policy_cost`), each
    plan deterministic within ``options["seconds_each"]``."""
    catalog = default_catalog()
    inp = PlanningInput.model_validate_json(input_json, context={"catalog": catalog})
    rules, _ = input_relaxations(inp.policy, inp.workloads)
    costs = policy_cost(inp, rules, _run(options, catalog, deterministic=True), _prices(options, catalog))
    text = TypeAdapter(list[RuleCost]).dump_json(costs, exclude_none=True).decode()
    significant = sum(c.significant for c in costs)
    label = f"{len(costs)} rule(s) priced, {significant} significant"
    if costs:
        label += f"; costliest {costs[0].rule}: {costs[0].cost:,.0f}"
    return text, "OK", label[:_OUTCOME_CHARS]


def run_replay(input_json: str, options: dict[str, Any]) -> Outcome:
    """The stored plans of the input made again under its proposed policy
    (:func:`gpuplan.planner.policy.replay.replay`), each within ``options["seconds_each"]``."""
    catalog = default_catalog()
    data = json.loads(input_json)
    policy = Policy.model_validate_json(json.dumps(data["policy"]), context={"catalog": catalog})
    items = [replayable(d, catalog) for d in data["plans"]]
    seconds = float(options["seconds_each"])
    report = replay(items, policy, PROPOSED, seconds, catalog, int(options.get("num_workers", 1)))
    beyond = sum(not p.within_gaps for p in report.plans)
    n = len(report.plans)
    if beyond:
        label, status = f"{n} plan(s) replayed: {beyond} beyond the gaps", "CHANGED"
    else:
        label, status = f"{n} plan(s) replayed: every objective within the gaps", "OK"
    return report.model_dump_json(exclude_none=True), status, label[:_OUTCOME_CHARS]


def run_frontier(input_json: str, options: dict[str, Any]) -> Outcome:
    """The throughput-vs-fairness frontier of the input (:func:`gpuplan.planner.policy.frontier.frontier`)
    at ``options["levels"]``, or found with ``points`` and ``probes``."""
    catalog = default_catalog()
    inp = PlanningInput.model_validate_json(input_json, context={"catalog": catalog})
    levels = options.get("levels")
    result = frontier(
        inp,
        _run(options, catalog, deterministic=bool(options.get("deterministic", False))),
        _prices(options, catalog),
        points=int(options.get("points", DEFAULT_POINTS)),
        probes=int(options.get("probes", DEFAULT_PROBES)),
        levels=None if levels is None else [float(x) for x in levels],
    )
    reached = [p for p in result.points if p.reached]
    top = max(reached, key=lambda p: p.level)
    label = f"{len(reached)} of {len(result.points)} floor(s) reached, up to {top.level:g}"
    if top.price_queue_share is not None:
        label += f" at {top.price_queue_share:+.1%} queue term"
    return result.model_dump_json(exclude_none=True), "OK", label[:_OUTCOME_CHARS]


#: The review kinds by job kind.
KINDS: dict[str, ReviewKind] = {
    k.kind: k
    for k in (
        ReviewKind(POLICY_COST, "policy_cost", run_policy_cost),
        ReviewKind(REPLAY, "replay", run_replay),
        ReviewKind(FRONTIER, "frontier", run_frontier),
    )
}
