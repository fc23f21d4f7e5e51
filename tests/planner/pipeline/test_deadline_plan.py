"""``--time-limit`` bounds the whole plan: the passes after the solve share what it left, a pass the limit
cuts is labelled, and a deterministic plan is cut by the wall clock only at the limit itself (and then
says so). Behaviour only: a limit of zero has passed before the solve ends, whatever the machine's load;
no test measures time."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime

import pytest

from gpuplan.cli.common import load_input
from gpuplan.models import data_dir
from gpuplan.models.inputs import PlanningInput
from gpuplan.planner.explain import reasons
from gpuplan.planner.explain.reasons import explain_all
from gpuplan.planner.pipeline.deadline import Deadline
from gpuplan.planner.planning import make_plan, post_solve_s
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.base import CUT

EXAMPLES = data_dir() / "examples"
NOW = datetime.fromisoformat((EXAMPLES / "now.txt").read_text().strip())


def _demo() -> PlanningInput:
    return load_input(
        EXAMPLES / "cluster.yaml", EXAMPLES / "workloads.yaml", EXAMPLES / "policy.yaml"
    )  # fmt: skip


@pytest.mark.parametrize("deterministic", [False, True])
def test_a_plan_past_its_limit_is_labelled_valid_and_every_waiting_replica_keeps_a_reason(
    deterministic: bool,
) -> None:
    inp = _demo()
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=0.0, deterministic=deterministic)
    assert plan.unplaced, "the demo leaves replicas waiting"
    assert validate_plan(plan, inp) == []
    assert all(u.code and u.reason for u in plan.unplaced)  # the solver's reasons stay, none dropped
    assert "reasons" in plan.provenance["cut_short"]
    degraded = sum(a.alternative > 0 for a in plan.assignments)
    assert plan.provenance["reasons_not_rederived"] == len(plan.unplaced) + degraded
    # A deterministic plan cut by the wall clock says it may differ between runs; others need not.
    assert (CUT in plan.solver.terms) is deterministic


def test_a_plan_within_its_limit_has_every_reason_from_the_explainer() -> None:
    inp = _demo()
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=60.0, deterministic=True)
    assert "cut_short" not in plan.provenance and CUT not in plan.solver.terms
    found = {(e.workload, e.replica): e for e in explain_all(inp, plan, counterfactuals=0)}
    assert [(u.code, u.reason) for u in plan.unplaced] == [
        (found[u.workload, u.replica].code, found[u.workload, u.replica].reason) for u in plan.unplaced
    ]


def test_the_reasons_pass_stops_at_its_deadline() -> None:
    inp = _demo()
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=60.0)
    passed = Deadline(end=0.0, clock=lambda: 1.0)
    assert explain_all(inp, plan, counterfactuals=0, reasons_by=passed) == []
    later = Deadline(end=2.0, clock=lambda: 1.0)
    assert len(explain_all(inp, plan, counterfactuals=0, reasons_by=later)) == len(plan.unplaced) + sum(
        a.alternative > 0 for a in plan.assignments
    )


def test_the_reasons_pass_does_not_start_when_the_plan_state_alone_would_overrun(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second left, and the plan state of the demo's replicas would take 10 ms each (hundreds of them:
    seconds): no reason is derived, rather than the state being built past the deadline."""
    inp = _demo()
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=60.0)
    assert sum(w.replicas for w in inp.workloads) > 100
    monkeypatch.setattr(reasons, "STATE_S_PER_REPLICA", 0.01)
    later = Deadline(end=2.0, clock=lambda: 1.0)
    assert explain_all(inp, plan, counterfactuals=0, reasons_by=later) == []


def test_the_time_after_the_solve_depends_on_the_limit_and_the_input_alone() -> None:
    """A tenth of the limit, at least 0.4 ms per replica, at most half the limit (hand-computed); the
    solve gets the rest, the same share whether the run is deterministic or not and whatever the clock
    says (the demo's few hundred replicas ask for less than a tenth of 20 s)."""
    assert post_solve_s(10.0, 0) == pytest.approx(1.0)
    assert post_solve_s(10.0, 100) == pytest.approx(1.0)
    assert post_solve_s(10.0, 8000) == pytest.approx(3.2)  # validation and reasons grow with the input
    assert post_solve_s(30.0, 8000) == pytest.approx(3.2)
    assert post_solve_s(2.0, 8000) == pytest.approx(1.0)  # the solve always keeps half
    assert post_solve_s(30.0, 100_000) == pytest.approx(15.0)
    inp = _demo()
    assert sum(w.replicas for w in inp.workloads) < 5000
    for deterministic in (False, True):
        plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=20.0, deterministic=deterministic)
        assert plan.provenance["solve_time_limit_s"] == 18.0


def test_the_input_digests_are_the_sha256_of_the_canonical_json_of_the_input_and_its_parts() -> None:
    # Taken before the solve (so the solve's share leaves their time out); stored plans keep matching.
    inp = _demo()
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=0.0)
    dumped = inp.model_dump(mode="json")

    def sha(value: object) -> str:
        return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    assert plan.provenance["inputs_sha256"] == sha(dumped)
    assert plan.provenance["input_sha256"] == {p: sha(dumped[p]) for p in ("cluster", "workloads", "policy")}
