"""Run a solver on a planning input and turn its result into a validated, reproducible Plan."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import replace
from datetime import UTC, datetime
from functools import cache
from importlib import metadata
from typing import Any

from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import MigMode, NodeSharing, Plan, SolverReport, StaysBroken
from gpuplan.planner.explain.reasons import explain_all, with_explanations
from gpuplan.planner.pipeline.actions import plan_actions
from gpuplan.planner.pipeline.collector import collector_spaced_out
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.deadline import MIN_SOLVE_S, Deadline, Stopwatch
from gpuplan.planner.pipeline.greedy_guard import better_than_fgd
from gpuplan.planner.pipeline.layouts import cluster_with_mig_modes, cluster_with_sharing
from gpuplan.planner.pipeline.metrics import fragmentation, plan_metrics
from gpuplan.planner.pipeline.migmode import (
    choose_mig_modes,
    mig_modes_fixed,
    used_modes,
    without_dropped,
)
from gpuplan.planner.pipeline.migmode import modes_left as mig_modes_left
from gpuplan.planner.pipeline.repair import without_idle_moves
from gpuplan.planner.pipeline.sharing import (
    busy_changes,
    choose_sharing,
    keeps_busy,
    modes_fixed,
    modes_left,
    used_changes,
)
from gpuplan.planner.pipeline.timeline import TIMELINE_CUT, previous_reservations, with_reservations
from gpuplan.planner.validation.errors import InvalidPlanError
from gpuplan.planner.validation.validate import check_plan
from gpuplan.solvers.base import CUT, SolveResult, get_solver
from gpuplan.solvers.evaluate import evaluate, reported
from gpuplan.solvers.greedy import GreedySolver, moved_running
from gpuplan.solvers.problem import PlacementProblem
from gpuplan.solvers.run_options import RunOptions

log = logging.getLogger(__name__)

#: Share of ``make_plan``'s time limit kept for the passes after the solve (predicted starts, idle
#: moves, actions, metrics, validation, reasons), at least ``POST_SOLVE_S_PER_REPLICA`` seconds per
#: replica (building and validating the plan took 1.6-2.8 s and the reasons 0.7-1.4 s for 8k replicas
#: on 1,213 nodes on a busy 2-core machine, B12) and at most ``POST_SOLVE_MAX_SHARE`` of the limit.
POST_SOLVE_SHARE = 0.1
POST_SOLVE_S_PER_REPLICA = 0.0004
POST_SOLVE_MAX_SHARE = 0.5
#: Share of the time the solve left the predicted-start pass may take; the rest, and whatever it leaves
#: unused, is the build's, the validation's (never cut) and the explanations'. Half: on the bundled
#: example (durations) the pass takes 0.12 s and the reasons 0.05 s, while on the openb fleet (no
#: durations) the pass takes 0.01 s and the reasons up to 3 s. The explanations' own share is not kept
#: from it: a solve that overruns its share (CP-SAT on a loaded machine) would leave the pass nothing,
#: and its predicted starts are part of the plan while counterfactuals are extras.
TIMELINE_SHARE = 0.5
#: Time kept, before the predicted-start pass takes its share, for the passes after it that are never
#: cut: building and validating the plan, seconds per replica (0.8-1.1 s for 8,130 replicas on 1,213
#: nodes in a saturated B2-m round), and undoing idle moves, seconds per running replica the plan moves
#: (0.5-0.8 s for 133-150). Without it the pass's half of what the solve left made such rounds overrun
#: their 5 s limit by up to a second.
UNCUT_S_PER_REPLICA = 0.00013
UNCUT_S_PER_MOVE = 0.005
#: Largest share of the time limit the sharing-mode pre-pass may take (its trials stop after it).
SHARING_SHARE = 0.1
#: Largest share of the time limit the MIG-mode pre-pass may take (its trials stop after it); a
#: deterministic plan bounds it by replicas placed instead (the same every run): the greedy places about
#: ``TRIAL_REPLICAS_PER_S`` replicas a second on a loaded 2-core machine (1,600 in 0.4-1.2 s, B17).
MIG_MODE_SHARE = 0.1
TRIAL_REPLICAS_PER_S = 1000
#: Inputs up to this many replicas are solved both with the pre-pass's MIG mode switches and without
#: them, and (by the exact solvers) with the sharing-mode changes of busy nodes a plan could drain and
#: without them (each solve on its part of the share); larger ones with the pre-pass's choices only,
#: their solve keeping its share.
DUAL_SOLVE_REPLICAS = 200
#: Largest share of the time limit the explanations of waiting replicas may take; the share of it kept
#: from the solve (the rest they take only when the solve leaves it: on the bundled example the reasons
#: and counterfactuals took 0.7 s of the 2.1 s kept, and the command ended 2.5 s early; what is kept
#: also absorbs a solve that overruns its share on a loaded machine), and the inputs
#: (in replicas) on which it is kept at all: on a fleet the solve needs it (openb at 10 s: 8,152
#: replicas, whose FGD start alone takes 2.2 s, got 2.6 s and returned a partial FGD plan).
EXPLAIN_SHARE = 0.25
EXPLAIN_KEPT_SHARE = 0.2
EXPLAIN_KEPT_REPLICAS = 2000


@cache
def _version(dist: str) -> str:
    """The installed version of ``dist`` (read once per process: reading package metadata is slow)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def _canonical(data: Any) -> str:
    """The canonical JSON of ``data``: keys sorted, no spaces."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def inputs_digest(inp: PlanningInput) -> str:
    """SHA-256 of the canonical JSON of the planning input."""
    return _all_digests(inp)[0]


def input_digests(inp: PlanningInput) -> dict[str, str]:
    """SHA-256 of the cluster, the workloads and the policy each, so that a plan read against other
    inputs can say which one differs."""
    return _all_digests(inp)[1]


def _all_digests(inp: PlanningInput) -> tuple[str, dict[str, str]]:
    """:func:`inputs_digest` and :func:`input_digests` from one dump of the input: the whole input's
    canonical JSON is put together from its parts' (what ``json.dumps`` of the whole writes), so no part
    is encoded twice (dumping 66k workloads takes 1.5 s)."""
    dumped = inp.model_dump(mode="json")
    texts = {part: _canonical(value) for part, value in dumped.items()}
    whole = "{" + ",".join(f"{_canonical(part)}:{texts[part]}" for part in sorted(texts)) + "}"
    return _digest(whole), {part: _digest(texts[part]) for part in ("cluster", "workloads", "policy")}


def _planned_at(provenance: dict[str, Any]) -> datetime | None:
    stamp = provenance.get("now")
    return datetime.fromisoformat(stamp) if isinstance(stamp, str) else None


def assemble_plan(
    inp: PlanningInput,
    problem: PlacementProblem,
    result: SolveResult,
    catalog: HardwareCatalog,
    provenance: dict[str, Any],
    sharing: tuple[NodeSharing, ...] = (),
    mig_modes: tuple[MigMode, ...] = (),
) -> Plan:
    """A Plan from a solver result, the sharing modes it gives nodes and the MIG modes it gives GPUs
    (actions, metrics); not yet checked (:func:`checked`)."""
    return Plan(
        status=result.status,
        solver=SolverReport(
            name=result.solver,
            objective=result.objective,
            best_bound=result.best_bound,
            bound_source=result.bound_source,
            gap=result.gap,
            wall_s=round(result.wall_s, 4),
            terms=result.terms,
            model_size=result.model_size,
        ),
        assignments=result.assignments,
        unplaced=result.unplaced,
        mig_layouts=result.mig_layouts,
        mig_modes=mig_modes,
        sharing=sharing,
        actions=plan_actions(
            inp,
            result.assignments,
            result.mig_layouts,
            catalog,
            _planned_at(provenance),
            sharing=sharing,
            mig_modes=mig_modes,
        ),
        metrics={
            **plan_metrics(inp, result.assignments, catalog),
            **({"sharing_changes": float(len(sharing))} if sharing else {}),
            **({"mig_mode_changes": float(len(mig_modes))} if mig_modes else {}),
            **fragmentation(problem, result.assignments, result.mig_layouts),
        },
        provenance=provenance,
    )


def checked(plan: Plan, inp: PlanningInput, catalog: HardwareCatalog) -> Plan:
    """``plan`` once the independent validator finds nothing wrong with it (else
    :class:`InvalidPlanError`), with the rules the current state already breaks and the plan keeps
    broken (``stays_broken``). Never cut by a time limit: no plan leaves unchecked."""
    report = check_plan(plan, inp, catalog)
    if report.violations:
        raise InvalidPlanError(plan.solver.name, list(report.violations))
    kept = tuple(StaysBroken(rule=k.rule, subject=k.subject, message=k.message) for k in report.kept)
    return plan.model_copy(update={"stays_broken": kept}) if kept else plan


def post_solve_s(time_limit_s: float, replicas: int) -> float:
    """Seconds of ``make_plan``'s time limit kept for the passes after the solve: a share of the limit,
    at least :data:`POST_SOLVE_S_PER_REPLICA` per replica (validation and reasons grow with the input),
    at most :data:`POST_SOLVE_MAX_SHARE` of the limit. It depends on the limit and the input alone, so a
    deterministic solve gets the same share every run."""
    wanted = max(POST_SOLVE_SHARE * time_limit_s, POST_SOLVE_S_PER_REPLICA * replicas)
    return min(POST_SOLVE_MAX_SHARE * time_limit_s, wanted)


def uncut_s(problem: PlacementProblem, result: SolveResult) -> float:
    """Seconds kept for the passes after the predicted starts that are never cut (building, validating,
    undoing idle moves): they grow with the replicas and with the running replicas ``result`` moves."""
    return UNCUT_S_PER_REPLICA * len(problem.requests) + UNCUT_S_PER_MOVE * moved_running(problem, result)


def _cut(plan: Plan, phases: list[str], not_rederived: int, *, deterministic: bool) -> Plan:
    """``plan`` labelled with the passes the time limit cut short (provenance ``cut_short``) and the
    waiting replicas whose reason is still the solver's (``reasons_not_rederived``); a deterministic plan
    cut by the wall clock also carries the solver's :data:`CUT` term (it may differ between runs)."""
    if not phases:
        return plan
    log.warning("the time limit cut short: %s", ", ".join(phases))
    update: dict[str, Any] = {
        "provenance": {
            **plan.provenance,
            "cut_short": phases,
            **({"reasons_not_rederived": not_rederived} if not_rederived else {}),
        }
    }
    if deterministic:
        update["solver"] = plan.solver.model_copy(update={"terms": {**plan.solver.terms, CUT: 1.0}})
    return plan.model_copy(update=update)


def requests(inp: PlanningInput) -> list[tuple[str, int]]:
    """Every replica of the input (running or waiting)."""
    return [(w.id, r) for w in inp.workloads for r in range(w.replicas)]


#: The sharing-mode changes and MIG mode switches a solve is given.
Modes = tuple[tuple[NodeSharing, ...], tuple[MigMode, ...]]


def _rank(problem: PlacementProblem, result: SolveResult, modes: Modes, busy: int) -> tuple[float, ...]:
    """How good a solve on ``modes`` is: its objective, then its disruption with the switches it uses,
    then more switches and changes last; never a solve that keeps running work on a busy node it
    changes (the last ``busy`` changes of ``modes``), which is no plan of that change."""
    changes, switches = modes
    if busy and keeps_busy(problem, result, changes[-busy:]):
        return (float("inf"),)
    used = used_modes(switches, result.assignments, result.mig_layouts, result.unplaced)
    ev = evaluate(problem, result.assignments, result.mig_layouts, 0, len(used))
    return (ev.objective(problem), ev.disruption, len(switches), len(changes))


@collector_spaced_out()
def make_plan(
    inp: PlanningInput,
    *,
    solver: str = "cpsat",
    catalog: HardwareCatalog | None = None,
    now: datetime | None = None,
    time_limit_s: float = 30.0,
    seed: int = 0,
    num_workers: int = 2,
    deterministic: bool = False,
    explain: bool = False,
    explain_budget_s: float = 3.0,
    previous: Plan | None = None,
    ray: str | None = None,
    work_limit_s: float | None = None,
) -> Plan:
    """Plan ``inp`` with the named solver; the result is validated before it is returned.

    ``time_limit_s`` bounds the whole call. The solve gets it less the time kept for the passes after
    it (:func:`post_solve_s`) and for the explanations, shares fixed by the limit and the input alone;
    the passes after the solve share what it left. Each waiting replica's reason is the explainer's
    (the one ``gpuplan explain`` gives), and replicas on worse alternatives get theirs too; ``explain``
    adds counterfactuals (verified by greedy re-solves) for at most ``explain_budget_s`` seconds (and a
    quarter of the time limit). A pass the time limit cuts short is named in the provenance
    (``cut_short``): the predicted starts keep the solver's plan for the replicas not reached, the
    reasons not re-derived stay the solver's (``reasons_not_rederived`` counts them). A deterministic
    plan is cut by the wall clock only at the time limit itself, and then says so (:data:`CUT`).
    ``ray`` runs the solver's independent pieces on that Ray cluster (``local``: a Ray instance here)
    instead of local processes; the plan is the same. The seed, workers, determinism and Ray address
    reach the solver as its :class:`RunOptions`, with the solve's share of the time limit.
    ``work_limit_s`` (default ``time_limit_s``) is the limit the searches' work budgets are sized from: a
    command whose start-up cut its time limit passes the limit it was given, so that the solve does the
    same work, later, on a busy machine (:attr:`RunOptions.work_s`).
    """
    options = RunOptions(
        time_limit_s=time_limit_s, seed=seed, num_workers=num_workers, deterministic=deterministic, ray=ray
    )
    deadline = Deadline.after(time_limit_s)
    watch = Stopwatch()
    explain_s = min(explain_budget_s, EXPLAIN_SHARE * time_limit_s) if explain else 0.0
    replicas = sum(w.replicas for w in inp.workloads)
    post_s = post_solve_s(time_limit_s, replicas)
    # Counterfactuals are extras: kept from the solve on inputs of a request's size only; on a fleet
    # they take what the solve and the reasons leave (the plan comes first).
    kept_s = min(explain_s, EXPLAIN_KEPT_SHARE * time_limit_s) if replicas <= EXPLAIN_KEPT_REPLICAS else 0.0
    solve_s = max(MIN_SOLVE_S, time_limit_s - post_s - kept_s)
    # The solve's work budgets scale with the limit the command was given, not the one its start-up left.
    work_s = solve_s if work_limit_s is None or time_limit_s <= 0 else solve_s * work_limit_s / time_limit_s
    catalog = catalog or default_catalog()
    now = now or datetime.now(UTC)
    # The input's digests first: the solve's share then leaves out what they take (1.5 s for 66k
    # workloads, after the solve they overran its reserve).
    whole, parts = _all_digests(inp)
    watch.lap("digests")
    # Drained nodes whose mode blocks waiting demand change mode first; the solvers see the new modes.
    changes = choose_sharing(inp, catalog, now, None if deterministic else SHARING_SHARE * time_limit_s)
    planned = (
        inp.model_copy(update={"cluster": cluster_with_sharing(inp.cluster, changes)}) if changes else inp
    )
    small = len(requests(inp)) <= DUAL_SOLVE_REPLICAS
    # Busy nodes a plan could drain are changed only in a solve of their own, by a solver that may take
    # their running work off (the greedy trials never do).
    exact = not isinstance(get_solver(solver), GreedySolver)
    busy = busy_changes(inp, catalog, now, changes) if small and exact else ()
    watch.lap("sharing")
    # Idle MIG-capable GPUs whose MIG mode keeps waiting demand off switch next (policy permitting).
    budget = None if deterministic else MIG_MODE_SHARE * time_limit_s
    trial_replicas = int(TRIAL_REPLICAS_PER_S * MIG_MODE_SHARE * time_limit_s)
    switches = choose_mig_modes(planned, catalog, now, budget, trial_replicas)
    watch.lap("mig_modes")
    variants: list[Modes] = [(changes, switches)]
    variants += [(changes, ())] if switches and small else []
    variants += [((*changes, *busy), switches)] if busy else []
    compiled = {
        modes: compile_problem(
            inp.model_copy(
                update={
                    "cluster": cluster_with_mig_modes(cluster_with_sharing(inp.cluster, modes[0]), modes[1])
                }
            ),
            catalog,
            now,
        )
        for modes in variants
    }
    watch.lap("compile")
    # A deterministic solve keeps the share fixed by the limit and the input (so it repeats); others give
    # up what the pre-pass and the compile took (the provenance keeps the fixed share: it repeats too).
    left = max(MIN_SOLVE_S, min(solve_s, deadline.reserve(post_s + kept_s).remaining()))
    share = (solve_s if deterministic else left) / len(compiled)
    solved = {}
    for modes, problem in compiled.items():
        log.info(
            "planning %d replicas on %d nodes with %s", len(problem.requests), len(problem.nodes), solver
        )
        run = replace(options, time_limit_s=max(MIN_SOLVE_S, share), work_s=work_s / len(compiled))
        result = get_solver(solver).solve(problem, run)
        solved[modes] = (problem, result)
    # The pre-pass's greedy trials neither move nor preempt work; a solver that does may do better with
    # the GPUs as they are, or with busy nodes drained and changed, so on a small input each variant is
    # solved (on its part of the share) and the best plan is kept (ties: fewer switches and changes).
    prepass = changes
    chosen = min(solved, key=lambda m: _rank(*solved[m], m, len(busy) if m[0] != prepass else 0))
    problem, result = solved[chosen]
    changes, switches = chosen
    drains = changes != prepass  # busy nodes changed: the FGD plan (which keeps their work) is no plan
    planned = inp.model_copy(
        update={"cluster": cluster_with_mig_modes(cluster_with_sharing(inp.cluster, changes), switches)}
    )
    result = mig_modes_fixed(inp, catalog, problem, modes_fixed(inp, problem, result))
    watch.lap("solve")
    # The passes after the solve share what it left; a deterministic plan's are cut only at the limit.
    cut: list[str] = []
    # Predicted starts and reservations; ``previous`` keeps the last plan's reservations that still fit.
    reserved = previous_reservations(previous, inp) if previous is not None else None
    if deterministic:
        timeline_by = deadline
    else:  # the predicted starts take their share of what the passes never cut leave
        timeline_by = deadline.reserve(uncut_s(problem, result)).sub(TIMELINE_SHARE)
    result = with_reservations(planned, problem, result, catalog, now, reserved, timeline_by)
    if exact and not drains:  # a heuristic asked for is returned as it is
        result = better_than_fgd(planned, problem, result, catalog, now, options, reserved, timeline_by)
    if TIMELINE_CUT in result.terms:
        cut.append("predicted starts")
    watch.lap("timeline")
    result = without_idle_moves(planned, problem, result, catalog)  # linear: never cut
    watch.lap("idle_moves")
    # The report describes the plan returned, after every pass that changed it, in the modes it leaves.
    kept = used_changes(changes, result.assignments, result.unplaced)
    problem = modes_left(inp, problem, changes, kept)
    kept_switches = used_modes(switches, result.assignments, result.mig_layouts, result.unplaced)
    problem = mig_modes_left(inp, problem, switches, kept_switches)
    result = without_dropped(result, switches, kept_switches)
    result = reported(problem, result, len(kept), len(kept_switches))
    provenance = {
        "inputs_sha256": whole,
        "input_sha256": parts,
        "gpuplan_version": _version("gpuplan"),
        "ortools_version": _version("ortools"),
        "pydantic_version": _version("pydantic"),
        "solver": solver,
        "seed": seed,
        "time_limit_s": time_limit_s,
        "solve_time_limit_s": round(solve_s, 3),
        "num_workers": num_workers,
        "deterministic": deterministic,
        "now": now.isoformat(),
        # The expected arrival mix fragmentation was measured against, when the input gave one.
        **({"arrival_replicas": len(problem.arrivals)} if problem.arrivals else {}),
    }
    plan = assemble_plan(inp, problem, result, catalog, provenance, kept, kept_switches)
    watch.lap("build")
    plan = checked(plan, inp, catalog)
    watch.lap("validate")
    # Every waiting replica gets its reason from the explainer, as ``gpuplan explain`` would give it.
    found = explain_all(
        inp,
        plan,
        catalog=catalog,
        now=now,
        counterfactuals=3 if explain else 0,
        solver="greedy-fgd",
        budget_s=deadline.remaining() if deterministic else min(explain_s, deadline.remaining()),
        reasons_by=deadline,  # reasons before counterfactuals: they may use the explanations' time too
    )
    targets = len(plan.unplaced) + sum(a.alternative > 0 for a in plan.assignments)
    if len(found) < targets:
        cut.append("reasons")
    elif deterministic and explain and deadline.expired():
        cut.append("counterfactuals")  # only the time limit itself stops a deterministic search
    plan = _cut(with_explanations(plan, found), cut, targets - len(found), deterministic=deterministic)
    watch.lap("reasons")
    log.info("plan phases: %s", watch.line())
    return plan
