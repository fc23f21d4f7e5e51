"""Plan jobs over HTTP against a real ``gpuplan serve``: submit, wait, poll, result, cancel, history."""

from __future__ import annotations

import csv
import io
import time
from typing import Any

import httpx
import openpyxl

from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.planner.validation.validate import validate_plan
from tests._api import (
    ADMIN,
    PLANNER,
    VIEWER_ML,
    Server,
    example_body,
    live,
    solver_processes,
    tiny_body,
    wait_gone,
    wait_status,
)

__all__ = ["live"]


def _valid(body: dict[str, Any], plan: dict[str, Any]) -> Plan:
    parsed = Plan.model_validate(plan)
    inp = PlanningInput.model_validate({k: body[k] for k in ("cluster", "workloads") if k in body})
    assert validate_plan(parsed, inp, default_catalog()) == []
    return parsed


def test_submit_poll_and_result(live: Server) -> None:
    body = tiny_body()
    with live.client(PLANNER) as c:
        r = c.post("/v1/plans", json=body)
        assert r.status_code == 202
        job = r.json()
        assert r.headers["location"] == f"/v1/plans/{job['id']}"
        assert job["status"] == "queued" and job["team"] == "ml" and job["workloads"] == 3
        done = wait_status(c, job["id"], {"done", "failed"})
        assert done["status"] == "done", done
        assert done["plan_status"] == "OPTIMAL" and done["outcome"] == "optimal"
        result = c.get(f"/v1/plans/{job['id']}/result")
        assert result.status_code == 200
        plan = _valid(body, result.json()["plan"])
        assert {a.workload for a in plan.assignments} == {"train", "serve", "nb"}
        assert result.json()["job"]["id"] == job["id"]


def test_wait_returns_the_plan(live: Server) -> None:
    body = tiny_body(solver="greedy-fgd")
    with live.client(ADMIN) as c:
        r = c.post("/v1/plans", params={"wait": 30}, json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["job"]["status"] == "done" and out["job"]["solver"] == "greedy-fgd"
        assert out["job"]["outcome"] == "heuristic plan (greedy-fgd)"
        _valid(body, out["plan"])


def test_wait_too_short_answers_202_with_progress(live: Server) -> None:
    with live.client(PLANNER) as c:
        r = c.post("/v1/plans", params={"wait": 0.2}, json=example_body(time_limit_s=2.0))
        assert r.status_code == 202
        job_id = r.json()["id"]
        running = wait_status(c, job_id, {"running"})
        assert running["status"] == "running"
        assert running["progress"]["phase"] in ("compiling", "solving")
        assert c.get(f"/v1/plans/{job_id}/result").status_code == 409
        done = wait_status(c, job_id, {"done", "failed"})
        assert done["status"] == "done", done
        assert done["plan_status"] in ("OPTIMAL", "FEASIBLE", "FALLBACK")
        if done["plan_status"] != "OPTIMAL":
            assert "time limit" in done["outcome"]
        # The job's limit reached the solver, and the solve ended within it: a solve running past it
        # (plus the server's grace) is killed and the job fails, which the "done" above rules out.
        plan = c.get(f"/v1/plans/{job_id}/result").json()["plan"]
        assert plan["provenance"]["time_limit_s"] == 2.0


def test_cancel_running_job_at_once(live: Server) -> None:
    """Cancelling a running job kills its solver process instead of waiting for the solve: the job is
    cancelled while its solve is under way (it never ends ``done``) and that process is gone."""
    with live.client(PLANNER) as c:
        job_id = c.post("/v1/plans", json=example_body(time_limit_s=2.0)).json()["id"]
        assert wait_status(c, job_id, {"running"})["status"] == "running"
        (solver,) = solver_processes(live)
        r = c.delete(f"/v1/plans/{job_id}")
        assert r.status_code == 200
        assert r.json()["status"] == "cancelled"
        assert wait_gone(solver)
        assert c.get(f"/v1/plans/{job_id}").json()["status"] == "cancelled"
        assert c.delete(f"/v1/plans/{job_id}").status_code == 409
        assert c.get(f"/v1/plans/{job_id}/result").status_code == 409
        # The killed solver process is replaced by a new one: the next job still runs.
        r = c.post("/v1/plans", params={"wait": 60}, json=tiny_body(solver="first-fit"))
        assert r.status_code == 200 and r.json()["job"]["status"] == "done"
        assert solver not in solver_processes(live)
        # A cancelled job can be resubmitted with its stored input.
        r = c.post(f"/v1/plans/{job_id}/resubmit")
        assert r.status_code == 202 and r.json()["attempts"] == 2
        assert c.delete(f"/v1/plans/{job_id}").status_code == 200
        actions = [a["action"] for a in c.get(f"/v1/plans/{job_id}/audit").json()]
        assert actions == ["submit", "cancel", "resubmit", "cancel"]


def test_cancel_queued_job(live: Server) -> None:
    """A job cancelled while queued never runs: the runner, which takes jobs in order, skips it."""
    with live.client(PLANNER) as c:
        first = c.post("/v1/plans", json=example_body(time_limit_s=2.0)).json()["id"]
        second = c.post("/v1/plans", json=tiny_body()).json()["id"]
        assert c.get(f"/v1/plans/{second}").json()["status"] == "queued"
        assert c.delete(f"/v1/plans/{second}").json()["status"] == "cancelled"
        assert c.delete(f"/v1/plans/{first}").json()["status"] == "cancelled"
        # A job queued after it has run: the runner has passed the cancelled one by now.
        third = c.post("/v1/plans", params={"wait": 60}, json=tiny_body(solver="first-fit"))
        assert third.json()["job"]["status"] == "done"
        assert c.get(f"/v1/plans/{second}").json()["status"] == "cancelled"
        assert c.get(f"/v1/plans/{second}/result").status_code == 409
        assert [a["action"] for a in c.get(f"/v1/plans/{second}/audit").json()] == ["submit", "cancel"]


def test_history_filters_and_pages(live: Server) -> None:
    with live.client(PLANNER) as c:
        ids = [
            c.post("/v1/plans", json=tiny_body(team="hist", solver="best-fit")).json()["id"] for _ in range(3)
        ]
        for i in ids:
            wait_status(c, i, {"done"})
        page = c.get("/v1/plans", params={"team": "hist", "limit": 2}).json()
        assert page["total"] == 3 and len(page["items"]) == 2
        assert [j["id"] for j in page["items"]] == ids[::-1][:2]
        rest = c.get("/v1/plans", params={"team": "hist", "limit": 2, "offset": 2}).json()
        assert [j["id"] for j in rest["items"]] == [ids[0]]
        assert c.get("/v1/plans", params={"team": "hist", "status": "failed"}).json()["total"] == 0
        future = c.get("/v1/plans", params={"team": "hist", "since": "2999-01-01T00:00:00Z"}).json()
        assert future["total"] == 0
        past = c.get("/v1/plans", params={"team": "hist", "until": "2000-01-01T00:00:00Z"}).json()
        assert past["total"] == 0
        audit = c.get(f"/v1/plans/{ids[0]}/audit").json()
        assert audit[0]["action"] == "submit" and audit[0]["role"] == "planner"
        assert audit[0]["detail"]["policy"]["tiers"][0]["name"] == "latency-sensitive"
        assert len(audit[0]["detail"]["policy_sha256"]) == 64


def test_validate_endpoint(live: Server) -> None:
    body = tiny_body(solver="first-fit")
    with live.client(PLANNER) as c:
        plan = c.post("/v1/plans", params={"wait": 30}, json=body).json()["plan"]
        ok = c.post(
            "/v1/validate", json={"cluster": body["cluster"], "workloads": body["workloads"], "plan": plan}
        )
        assert ok.status_code == 200 and ok.json() == {"valid": True, "violations": []}
        broken = dict(plan)
        a = dict(broken["assignments"][0])
        a["node"] = "n1"
        a["gpus"] = [{"index": 9}]
        broken["assignments"] = [a, *broken["assignments"][1:]]
        bad = c.post("/v1/validate", json={"cluster": body["cluster"], "plan": broken}).json()
        assert bad["valid"] is False and bad["violations"]


def test_health_ready_and_metrics(live: Server) -> None:
    assert httpx.get(f"{live.url}/healthz").json()["status"] == "ok"
    deadline = time.monotonic() + 60
    while (r := httpx.get(f"{live.url}/readyz")).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert r.json()["checks"] == {"solvers": "ok", "database": "ok"}
    with live.client(PLANNER) as c:
        c.post("/v1/plans", params={"wait": 30}, json=tiny_body(solver="first-fit"))
    text = httpx.get(f"{live.url}/metrics").text
    assert 'gpuplan_http_requests_total{method="POST",route="/v1/plans",status="200"}' in text
    assert "gpuplan_queue_depth" in text and "gpuplan_solves_running" in text
    assert 'gpuplan_solve_duration_seconds_count{solver="first-fit"}' in text
    assert 'gpuplan_jobs{status="done"}' in text
    assert 'gpuplan_jobs_finished_total{plan_status="FEASIBLE",status="done"}' in text


def test_viewer_sees_its_team_only(live: Server) -> None:
    with live.client(PLANNER) as c:
        ml = c.post("/v1/plans", params={"wait": 30}, json=tiny_body(team="ml", solver="first-fit")).json()
        web = c.post("/v1/plans", params={"wait": 30}, json=tiny_body(team="web", solver="first-fit")).json()
    with live.client(VIEWER_ML) as v:
        assert v.get(f"/v1/plans/{ml['job']['id']}").status_code == 200
        assert v.get(f"/v1/plans/{ml['job']['id']}/result").status_code == 200
        assert v.get(f"/v1/plans/{web['job']['id']}").status_code == 403
        assert v.get(f"/v1/plans/{web['job']['id']}/result").status_code == 403
        teams = {j["team"] for j in v.get("/v1/plans", params={"limit": 200}).json()["items"]}
        assert teams == {"ml"}
        assert v.get("/v1/plans", params={"team": "web"}).status_code == 403


def test_exports(live: Server) -> None:
    body = tiny_body(solver="first-fit")
    with live.client(PLANNER) as c:
        job_id = c.post("/v1/plans", params={"wait": 30}, json=body).json()["job"]["id"]
        xlsx = c.get(f"/v1/plans/{job_id}/export.xlsx")
        assert xlsx.status_code == 200 and xlsx.headers["content-type"].startswith("application/vnd.openxml")
        book = openpyxl.load_workbook(io.BytesIO(xlsx.content))
        assert "Placements" in book.sheetnames and "Summary" in book.sheetnames
        placed = [row[0] for row in book["Placements"].iter_rows(min_row=2, values_only=True)]
        assert sorted(set(placed)) == ["nb", "serve", "train"]
        csv_text = c.get(f"/v1/plans/{job_id}/export.csv").text
        rows = list(csv.DictReader(io.StringIO(csv_text)))
        assert {r["workload"] for r in rows} == {"nb", "serve", "train"}
        nodes = c.get(f"/v1/plans/{job_id}/export.csv", params={"sheet": "Nodes"}).text
        assert nodes.splitlines()[0].split(",")[:2] == ["level", "node"]
        assert c.get(f"/v1/plans/{job_id}/export.csv", params={"sheet": "Nope"}).status_code == 422
        queued = c.post("/v1/plans", json=example_body(time_limit_s=2.0)).json()["id"]
        assert c.get(f"/v1/plans/{queued}/export.xlsx").status_code == 409
        c.delete(f"/v1/plans/{queued}")


def test_capacity_gap_job(live: Server) -> None:
    body = tiny_body(solver="first-fit")
    body["workloads"].append({"id": "big", "team": "ml", "gpus": 4, "replicas": 2})
    with live.client(PLANNER) as c:
        r = c.post("/v1/capacity-gap", params={"wait": 60}, json=body)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["job"]["kind"] == "capacity-gap" and out["job"]["plan_status"] == "OK"
        gap = out["capacity_gap"]
        assert gap["demand_replicas"] >= 1 and gap["gpus_added"] >= 4 and gap["purchases"]
        assert "GPUs to add" in out["job"]["outcome"]
        job_id = out["job"]["id"]
        assert c.get(f"/v1/plans/{job_id}/result").json()["capacity_gap"] == gap
        assert c.get(f"/v1/plans/{job_id}/export.xlsx").status_code == 409


def test_explain_a_waiting_workload(live: Server) -> None:
    body = tiny_body(solver="first-fit")
    body["workloads"].append({"id": "big", "team": "ml", "gpus": 4, "replicas": 2})
    with live.client(PLANNER) as c:
        out = c.post("/v1/plans", params={"wait": 60}, json=body).json()
        job_id = out["job"]["id"]
        waiting = {u["workload"] for u in out["plan"]["unplaced"]}
        assert "big" in waiting
        r = c.get(f"/v1/plans/{job_id}/explain/big", params={"counterfactuals": 1, "time_limit_s": 1})
        assert r.status_code == 200, r.text
        found = r.json()
        assert found and all(e["workload"] == "big" and e["code"] for e in found)
        assert c.get(f"/v1/plans/{job_id}/explain/train").json() == []
        assert c.get(f"/v1/plans/{job_id}/explain/ghost").status_code == 404
        capped = c.get(f"/v1/plans/{job_id}/explain/big", params={"time_limit_s": 99})
        assert capped.status_code == 413 and capped.json()["limit"] == "max_time_limit_s"
