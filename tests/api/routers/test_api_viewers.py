"""What a viewer sees of a plan labelled with its team that also holds other teams' workloads: its own
workloads in the result, the exports and the explanations, and the fleet as a whole."""

from __future__ import annotations

import io
from typing import Any

import pandas as pd
import pytest

from gpuplan.models.plan import Change, Counterfactual, Explanation, Plan, Unplaced
from gpuplan.planner.explain.team_view import team_explanations, team_plan
from tests._api import PLANNER, VIEWER_ML, Server, live, tiny_body

__all__ = ["live"]

ML = {"train", "nb", "huge-ml"}
WEB = {"serve", "huge-web"}


@pytest.fixture(scope="module")
def mixed(live: Server) -> str:
    """A finished plan labelled ``ml`` holding workloads of ml and web, one of each team waiting."""
    body = tiny_body(solver="first-fit")
    body["team"] = "ml"
    body["workloads"][1]["team"] = "web"  # "serve"
    body["workloads"] += [
        {"id": "huge-ml", "team": "ml", "gpus": 8},
        {"id": "huge-web", "team": "web", "gpus": 8},
    ]
    with live.client(PLANNER) as c:
        r = c.post("/v1/plans", params={"wait": 30}, json=body)
        assert r.status_code == 200, r.text
        job: str = r.json()["job"]["id"]
    return job


def _result(live: Server, key: str, job: str) -> dict[str, Any]:
    with live.client(key) as c:
        r = c.get(f"/v1/plans/{job}/result")
        assert r.status_code == 200, r.text
        plan: dict[str, Any] = r.json()["plan"]
    return plan


def test_a_viewer_reads_only_its_teams_workloads(live: Server, mixed: str) -> None:
    full, seen = _result(live, PLANNER, mixed), _result(live, VIEWER_ML, mixed)
    assert {a["workload"] for a in full["assignments"]} == {"train", "nb", "serve"}
    assert {u["workload"] for u in full["unplaced"]} == {"huge-ml", "huge-web"}
    assert {a["workload"] for a in seen["assignments"]} == {"train", "nb"}
    assert {u["workload"] for u in seen["unplaced"]} == {"huge-ml"}
    assert {a["workload"] for a in seen["actions"]} <= ML
    # Fleet-level parts stay whole.
    assert seen["metrics"] == full["metrics"] and seen["status"] == full["status"]


def _csv(live: Server, key: str, job: str, sheet: str) -> pd.DataFrame:
    with live.client(key) as c:
        r = c.get(f"/v1/plans/{job}/export.csv", params={"sheet": sheet})
        assert r.status_code == 200, r.text
    return pd.read_csv(io.StringIO(r.text))


def test_a_viewers_exports_hold_only_its_teams_workloads(live: Server, mixed: str) -> None:
    assert set(_csv(live, VIEWER_ML, mixed, "Placements")["workload"]) == {"train", "nb"}
    assert set(_csv(live, VIEWER_ML, mixed, "Waiting")["workload"]) == {"huge-ml"}
    assert set(_csv(live, VIEWER_ML, mixed, "Teams")["team"]) == {"ml"}
    assert set(_csv(live, PLANNER, mixed, "Teams")["team"]) == {"ml", "web"}
    # The fleet sheets are the whole fleet's.
    nodes = [_csv(live, key, mixed, "Nodes")["gpu_equivalents_used"].sum() for key in (VIEWER_ML, PLANNER)]
    assert nodes[0] == pytest.approx(nodes[1])
    with live.client(VIEWER_ML) as c:
        r = c.get(f"/v1/plans/{mixed}/export.xlsx")
        assert r.status_code == 200
    book = pd.read_excel(io.BytesIO(r.content), sheet_name=None)
    assert set(book["Teams"]["Team"]) == {"ml"}
    assert set(book["Placements"]["Workload"]) == {"train", "nb"}
    assert set(book["Waiting"]["Workload"]) == {"huge-ml"}
    assert not set(book["Placements"]["Workload"]) & WEB


def test_a_viewer_explains_only_its_teams_workloads(live: Server, mixed: str) -> None:
    params = {"counterfactuals": 0, "time_limit_s": 0.5}
    with live.client(VIEWER_ML) as c:
        other = c.get(f"/v1/plans/{mixed}/explain/huge-web", params=params)
        assert other.status_code == 403 and "another team" in other.json()["detail"]
        own = c.get(f"/v1/plans/{mixed}/explain/huge-ml", params=params)
        assert own.status_code == 200, own.text
        assert {e["workload"] for e in own.json()} == {"huge-ml"}
        assert c.get(f"/v1/plans/{mixed}/explain/nothing", params=params).status_code == 404
    with live.client(PLANNER) as c:
        assert c.get(f"/v1/plans/{mixed}/explain/huge-web", params=params).status_code == 200


def test_counterfactuals_naming_another_teams_workload_are_left_out() -> None:
    preempt = Counterfactual(
        summary="preempt serve#0 on n1", kind="preempt", changes=(Change(kind="preempt", workload="serve"),)
    )
    grow = Counterfactual(
        summary="raise quota of ml", kind="quota", changes=(Change(kind="raise_quota", team="ml", index=0),)
    )
    waiting = Unplaced(workload="huge-ml", replica=0, code="X", reason="r", counterfactuals=(preempt, grow))
    other = Unplaced(workload="huge-web", replica=0, code="X", reason="r")
    why = Explanation(workload="huge-ml", replica=0, code="X", reason="r", counterfactuals=(preempt, grow))
    plan = Plan.model_validate(
        {"status": "FEASIBLE", "solver": {"name": "x"}, "unplaced": [waiting, other], "explanations": [why]}
    )
    seen = team_plan(plan, frozenset(ML))
    assert [u.workload for u in seen.unplaced] == ["huge-ml"]
    assert [c.summary for c in seen.unplaced[0].counterfactuals] == ["raise quota of ml"]
    assert [c.summary for c in seen.explanations[0].counterfactuals] == ["raise quota of ml"]
    assert team_explanations([why], frozenset(WEB), frozenset(ML)) == []


def test_a_viewer_reads_its_teams_line_of_a_capacity_gap(live: Server) -> None:
    body = tiny_body(solver="first-fit")
    body["team"] = "ml"
    body["workloads"] += [
        {"id": f"big-{team}", "team": team, "gpus": 4, "replicas": 2} for team in ("ml", "web")
    ]
    with live.client(PLANNER) as c:
        r = c.post("/v1/capacity-gap", params={"wait": 60}, json=body)
        assert r.status_code == 200, r.text
        job = r.json()["job"]["id"]
        full = c.get(f"/v1/plans/{job}/result").json()["capacity_gap"]
    with live.client(VIEWER_ML) as c:
        seen = c.get(f"/v1/plans/{job}/result").json()["capacity_gap"]
    assert {line["key"] for line in full["by_team"]} == {"ml", "web"}
    assert {line["key"] for line in seen["by_team"]} == {"ml"}

    # The purchases are the fleet's, the same for every team; whom they serve of other teams is counted
    # under one unnamed entry.
    def fleet(purchases: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in p.items() if k != "serves"} for p in purchases]

    assert fleet(seen["purchases"]) == fleet(full["purchases"]) and seen["cost"] == full["cost"]
    for bought, whole in zip(seen["purchases"], full["purchases"], strict=True):
        assert "big-web" not in {s["workload"] for s in bought["serves"]}
        assert sum(s["replicas"] for s in bought["serves"]) == sum(s["replicas"] for s in whole["serves"])
        others = [s for s in whole["serves"] if s["team"] != "ml"]
        if others:
            assert bought["serves"][-1]["workload"] == "other teams"
            assert bought["serves"][-1]["replicas"] == sum(s["replicas"] for s in others)
