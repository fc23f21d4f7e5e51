"""A proposed policy replayed on the plan history: each of the last stored plans is made again from its
stored cluster and workloads under the proposed policy, with the stored plan's solver, seed, planning
time, determinism, rounds and previous plan, and compared per tier, per team and in total with what was
planned. The evidence a policy owner wants before approving a change: replaying the policy in force
gives back the stored objectives within their gaps.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.policy import Policy
from gpuplan.models.review import ReplayedPlan, ReplayLine, ReplayReport, Tally
from gpuplan.models.workload import Workload
from gpuplan.planner.io.files import planning_input
from gpuplan.planner.planning import make_plan
from gpuplan.planner.policy.measure import Measure, solve_figures, within_gaps
from gpuplan.planner.store.history import PlanHistory, StoredPlan
from gpuplan.planner.store.records import JobRecord

log = logging.getLogger(__name__)


def by_tier(w: Workload) -> str:
    """A workload's tier: the group of the per-tier figures."""
    return w.tier


def by_team(w: Workload) -> str:
    """A workload's team: the group of the per-team figures."""
    return w.team


@dataclass(frozen=True)
class Replayable:
    """A stored plan and the plan stored before it (whose reservations it kept), if any."""

    stored: StoredPlan
    previous: Plan | None


def last_plans(history: PlanHistory, last: int) -> list[Replayable]:
    """The last ``last`` stored plans, oldest first, each with the plan stored before it."""
    recent = history.recent(last + 1)
    return [
        Replayable(history.plan(number), recent[i + 1][2] if i + 1 < len(recent) else None)
        for i, (number, _, _) in enumerate(recent[:last])
    ][::-1]


def with_rounds(policy: Policy, rounds: int) -> Policy:
    """``policy`` with ``rounds`` rounds' worth of moves and preemptions, as ``gpuplan replan --rounds``
    solves with."""
    if rounds <= 1:
        return policy
    b = policy.disruption
    budget = b.model_copy(
        update={
            "max_moves_per_round": b.max_moves_per_round * rounds,
            "max_preemptions_per_round": b.max_preemptions_per_round * rounds,
            "max_moves_per_team": None if b.max_moves_per_team is None else b.max_moves_per_team * rounds,
        }
    )
    return policy.model_copy(update={"disruption": budget})


def _planned_at(stored: StoredPlan) -> datetime:
    """When the stored plan was made for (its provenance's ``now``, else when it was stored)."""
    stamp = stored.plan.provenance.get("now")
    return datetime.fromisoformat(stamp) if isinstance(stamp, str) else stored.created_at


def _lines(stored: dict[str, Tally], replayed: dict[str, Tally]) -> tuple[ReplayLine, ...]:
    return tuple(
        ReplayLine(key=k, stored=stored.get(k, Tally()), replayed=replayed.get(k, Tally()))
        for k in sorted({*stored, *replayed})
    )


def _input(stored: StoredPlan, policy: Policy, source: str, catalog: HardwareCatalog) -> PlanningInput:
    """Stored plan ``stored``'s cluster and workloads under ``policy``, checked (an input error naming
    ``source`` and the plan when the policy does not fit them)."""
    return planning_input(
        stored.inputs.cluster,
        stored.inputs.workloads,
        policy,
        catalog,
        f"{source} on plan {stored.id}'s inputs",
    )


def check_policy(items: Iterable[Replayable], policy: Policy, source: str, catalog: HardwareCatalog) -> None:
    """An input error, before any solve, when ``policy`` does not fit the inputs of one of ``items``."""
    for item in items:
        _input(item.stored, policy, source, catalog)


def replayable_data(item: Replayable) -> dict[str, Any]:
    """``item`` as JSON data (what a replay job of the REST API stores), read back by :func:`replayable`."""
    s = item.stored
    previous = item.previous
    return {
        "id": s.id,
        "job_id": s.job_id,
        "created_at": s.created_at.isoformat(),
        "job": json.loads(s.job.model_dump_json()),
        "plan": json.loads(s.plan.model_dump_json(by_alias=True)),
        "inputs": json.loads(s.inputs.model_dump_json()),
        "previous": None if previous is None else json.loads(previous.model_dump_json(by_alias=True)),
    }


def replayable(data: dict[str, Any], catalog: HardwareCatalog) -> Replayable:
    """The item :func:`replayable_data` wrote."""
    context = {"catalog": catalog}
    previous = data.get("previous")
    stored = StoredPlan(
        id=int(data["id"]),
        job_id=str(data["job_id"]),
        created_at=datetime.fromisoformat(str(data["created_at"])),
        plan=Plan.model_validate_json(json.dumps(data["plan"])),
        inputs=PlanningInput.model_validate_json(json.dumps(data["inputs"]), context=context),
        job=JobRecord.model_validate_json(json.dumps(data["job"])),
    )
    return Replayable(stored, None if previous is None else Plan.model_validate_json(json.dumps(previous)))


def replay_one(
    item: Replayable,
    policy: Policy,
    source: str,
    seconds: float,
    catalog: HardwareCatalog,
    num_workers: int,
) -> ReplayedPlan:
    """Stored plan ``item`` made again under ``policy`` within ``seconds``, and compared with it on the
    stored policy's tier weights."""
    stored = item.stored
    prov = stored.plan.provenance
    now = _planned_at(stored)
    solver = str(prov.get("solver", stored.plan.solver.name))
    seed = int(prov.get("seed", 0))
    inp = _input(stored, policy, source, catalog)
    rounds = int(prov.get("replan_rounds", 1))
    plan = make_plan(
        inp.model_copy(update={"policy": with_rounds(inp.policy, rounds)}),
        solver=solver,
        catalog=catalog,
        now=now,
        time_limit_s=seconds,
        seed=seed,
        num_workers=num_workers,
        deterministic=bool(prov.get("deterministic", False)),
        previous=item.previous,
    )
    measure = Measure(stored.inputs, catalog, now)
    before = solve_figures(stored.plan, float(prov.get("time_limit_s", 0.0)))
    after = solve_figures(plan, seconds)
    difference = (after.objective or 0.0) - (before.objective or 0.0)
    return ReplayedPlan(
        plan=stored.id,
        created_at=stored.created_at.isoformat(),
        solver=solver,
        seed=seed,
        stored=before,
        replayed=after,
        within_gaps=within_gaps(difference, before, after),
        by_tier=_lines(measure.tallies(stored.plan, by_tier), measure.tallies(plan, by_tier)),
        by_team=_lines(measure.tallies(stored.plan, by_team), measure.tallies(plan, by_team)),
        total=ReplayLine(key="total", stored=measure.total(stored.plan), replayed=measure.total(plan)),
    )


def _sum(tallies: Iterable[Tally]) -> Tally:
    """Tallies added field by field."""
    out: dict[str, float] = dict.fromkeys(Tally.model_fields, 0)
    for t in tallies:
        for name in out:
            out[name] += getattr(t, name)
    return Tally.model_validate({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()})


def _summed(lines: Iterable[ReplayLine]) -> tuple[ReplayLine, ...]:
    """Lines of the same key added over the plans."""
    by_key: dict[str, list[ReplayLine]] = {}
    for line in lines:
        by_key.setdefault(line.key, []).append(line)
    return tuple(
        ReplayLine(key=k, stored=_sum(x.stored for x in v), replayed=_sum(x.replayed for x in v))
        for k, v in sorted(by_key.items())
    )


def replay(
    items: list[Replayable],
    policy: Policy,
    source: str,
    seconds_each: float,
    catalog: HardwareCatalog,
    num_workers: int = 2,
    progress: Callable[[str], None] | None = None,
) -> ReplayReport:
    """Every stored plan of ``items`` made again under ``policy`` (read from ``source``), each within
    ``seconds_each``; the figures per tier, per team and in total over all of them."""
    plans = []
    for i, item in enumerate(items, start=1):
        if progress is not None:
            progress(f"plan {item.stored.id} ({i} of {len(items)})")
        log.info("replaying plan %d under %s", item.stored.id, source)
        plans.append(replay_one(item, policy, source, seconds_each, catalog, num_workers))
    return ReplayReport(
        policy=source,
        seconds_each=round(seconds_each, 3),
        plans=tuple(plans),
        by_tier=_summed(line for p in plans for line in p.by_tier),
        by_team=_summed(line for p in plans for line in p.by_team),
        total=_summed(p.total for p in plans)[0]
        if plans
        else ReplayLine(key="total", stored=Tally(), replayed=Tally()),
    )
