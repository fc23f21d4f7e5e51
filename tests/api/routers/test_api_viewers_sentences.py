"""A viewer never reads another team's workload id in a sentence: reasons, their details and resources,
the Waiting sheets, the map, its own workload's explanation and a capacity gap's notes speak of other
teams' work by count ("2 replicas of other teams")."""

from __future__ import annotations

import io
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.models.capacity import CapacityGap, Unservable
from gpuplan.models.plan import Assignment, Change, Counterfactual, Plan, ReasonDetail, Unplaced
from gpuplan.planner.explain.team_view import Unnamed, team_gap, team_plan
from tests._api import PLANNER, VIEWER_ML, Server, live, tiny_body

__all__ = ["live"]

SECRET = "SECRETB"


@pytest.fixture(scope="module")
def outranked(live: Server) -> str:
    """A finished plan labelled ``ml``: web's latency-sensitive ``SECRETB-1`` (2 x 4 GPUs) fills both
    nodes, and ml's background ``wait-ml`` (4 GPUs) waits for the capacity it took."""
    body = tiny_body(solver="first-fit")
    body["team"] = "ml"
    body["workloads"] = [
        {"id": f"{SECRET}-1", "team": "web", "tier": "latency-sensitive", "gpus": 4, "replicas": 2},
        {"id": "wait-ml", "team": "ml", "tier": "background", "gpus": 4},
    ]
    with live.client(PLANNER) as c:
        r = c.post("/v1/plans", params={"wait": 30}, json=body)
        assert r.status_code == 200, r.text
        job: str = r.json()["job"]["id"]
    return job


def _get(live: Server, key: str, path: str, **params: Any) -> bytes:
    with live.client(key) as c:
        r = c.get(path, params=params)
        assert r.status_code == 200, r.text
    return r.content


def test_the_planner_reads_the_id_the_viewer_does_not(live: Server, outranked: str) -> None:
    full = _get(live, PLANNER, f"/v1/plans/{outranked}/result").decode()
    assert SECRET in full  # the sentence names it: the viewer's view below is a real rewrite
    seen = _get(live, VIEWER_ML, f"/v1/plans/{outranked}/result")
    assert SECRET.encode() not in seen
    plan = Plan.model_validate_json(seen.decode().split('"plan":', 1)[1][:-1])
    (waiting,) = plan.unplaced
    assert waiting.workload == "wait-ml"
    assert "replica" in waiting.reason and "other team" in waiting.reason, waiting.reason


def test_the_waiting_sheets_name_no_other_team(live: Server, outranked: str) -> None:
    csv = _get(live, VIEWER_ML, f"/v1/plans/{outranked}/export.csv", sheet="Waiting").decode()
    assert SECRET not in csv and "wait-ml" in csv
    book = pd.read_excel(
        io.BytesIO(_get(live, VIEWER_ML, f"/v1/plans/{outranked}/export.xlsx")), sheet_name=None
    )
    for name, frame in book.items():
        assert SECRET not in frame.to_csv(), name
    assert "wait-ml" in book["Waiting"].to_csv()


@pytest.mark.parametrize("fmt", ["html", "svg"])
def test_the_map_names_no_other_team(live: Server, outranked: str, fmt: str) -> None:
    for colour in ("tier", "team"):
        drawn = _get(live, VIEWER_ML, f"/v1/plans/{outranked}/map", format=fmt, colour=colour).decode()
        assert SECRET not in drawn and "wait-ml" in drawn


def test_the_explanation_of_its_own_workload_names_no_other_team(live: Server, outranked: str) -> None:
    seen = _get(
        live, VIEWER_ML, f"/v1/plans/{outranked}/explain/wait-ml", counterfactuals=1, time_limit_s=0.5
    )
    full = _get(live, PLANNER, f"/v1/plans/{outranked}/explain/wait-ml", counterfactuals=1, time_limit_s=0.5)
    assert SECRET in full.decode()
    assert SECRET not in seen.decode() and b"wait-ml" in seen


def test_a_capacity_gap_names_no_other_team(live: Server) -> None:
    body = tiny_body(solver="first-fit")
    body["team"] = "ml"
    body["workloads"] = [
        {"id": f"{SECRET}-2", "team": "web", "tier": "latency-sensitive", "gpus": 4, "replicas": 3},
        {"id": "grow-ml", "team": "ml", "gpus": 4, "replicas": 2},
    ]
    with live.client(PLANNER) as c:
        r = c.post("/v1/capacity-gap", params={"wait": 60}, json=body)
        assert r.status_code == 200, r.text
        job = r.json()["job"]["id"]
    assert SECRET.encode() not in _get(live, VIEWER_ML, f"/v1/plans/{job}/result")


def test_team_gap_rewrites_notes_and_messages() -> None:
    gap = CapacityGap(
        demand_replicas=3,
        notes=("time limit: SECRETB-2#0 and SECRETB-2#1 were left unplaced beside grow-ml#0",),
        repartition_actions=("re-partition n1 GPU 0 for SECRETB-2#2",),
        unservable=(
            Unservable(workload="grow-ml", replica=0, team="ml", tier="batch", message="as big as SECRETB-2"),
            Unservable(workload="SECRETB-2", replica=2, team="web", tier="batch", message="too big"),
        ),
    )
    seen = team_gap(gap, "ml", frozenset({"grow-ml"}), frozenset({"SECRETB-2"}))
    assert seen.notes == ("time limit: 2 replicas of other teams were left unplaced beside grow-ml#0",)
    assert seen.repartition_actions == ("re-partition n1 GPU 0 for 1 replica of another team",)
    assert [u.message for u in seen.unservable] == ["as big as 1 replica of another team"]


def test_team_plan_rewrites_every_sentence_it_keeps() -> None:
    why = "the capacity on n1 went to higher-tier or older work placed in this plan: b#0, mine#1, b#1 and c"
    waiting = Unplaced(
        workload="mine",
        replica=0,
        code="OUTRANKED",
        reason=why,
        resources=("n1", "b#0", "mine#1", "b#1", "c"),
        details=(ReasonDetail(alternative=1, code="OUTRANKED", reason="c took it"),),
        counterfactuals=(
            Counterfactual(
                summary="raise quota of ml above c's use", kind="quota", changes=(Change(kind="q"),)
            ),
            Counterfactual(summary="preempt c", kind="preempt", changes=(Change(kind="p", workload="c"),)),
        ),
    )
    plan = Plan.model_validate(
        {
            "status": "FEASIBLE",
            "solver": {"name": "x"},
            "assignments": [
                Assignment.model_validate({"workload": w, "replica": r, "node": "n1", "gpus": []})
                for w, r in (("b", 0), ("b", 1), ("c", 0), ("mine", 1), ("abc", 0))
            ],
            "unplaced": [waiting],
        }
    )
    seen = team_plan(plan, frozenset({"mine"})).unplaced[0]
    assert seen.reason == (
        "the capacity on n1 went to higher-tier or older work placed in this plan: "
        "1 replica of another team, mine#1, 2 replicas of other teams"
    )
    assert seen.resources == ("n1", "mine#1", "3 replicas of other teams")
    assert seen.details[0].reason == "1 replica of another team took it"
    assert [c.summary for c in seen.counterfactuals] == [
        "raise quota of ml above 1 replica of another team's use"
    ]


ids = st.text(alphabet="abcdefgh-#", min_size=1, max_size=6).filter(lambda s: "#" not in s)


@given(
    st.lists(ids, min_size=1, max_size=6, unique=True), st.lists(st.integers(0, 5), min_size=1, max_size=8)
)
def test_no_other_id_survives_a_list_of_names(others: list[str], picks: list[int]) -> None:
    names = [f"{others[p % len(others)]}#{p}" for p in picks]
    text = "waits for " + ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1]
    out = Unnamed(set(others))(text)
    expected = "1 replica of another team" if len(names) == 1 else f"{len(names)} replicas of other teams"
    assert out == f"waits for {expected}"
