"""``GET /v1/plans/{id}/explain/{workload}`` on a real ``gpuplan serve`` gives, for every waiting
replica, the code, sentence and resources the plan the server made carries."""

from __future__ import annotations

from typing import Any

from tests._api import NOW, PLANNER, Server, live

__all__ = ["live"]


def _body() -> dict[str, Any]:
    """Two racks of two 2-GPU nodes with one GPU busy per rack, a gang of four that must stay in one
    rack (GANG_DOMAIN), a team at its quota (QUOTA) and an 8-GPU NVLink job no node can host."""
    gpus = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
    nodes = [
        {"name": name, "cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus, "labels": {"rack": rack}}
        for name, rack in (("a", "r1"), ("b", "r1"), ("c", "r2"), ("d", "r2"))
    ]
    return {
        "cluster": {"nodes": nodes},
        "workloads": [
            {"id": "busy", "team": "ml", "gpus": 1, "replicas": 2, "running_on": "a:0;c:0"},
            {"id": "g", "team": "ml", "gpus": 1, "replicas": 4, "gang": "true", "gang_domain": "rack"},
            {"id": "q", "team": "web", "gpus": 2},
            {"id": "big", "team": "ml", "gpus": 8, "topology": "nvlink"},
        ],
        "policy": {"teams": ["ml", "web"], "quotas": [{"team": "web", "gpus": 1}]},
        "options": {"solver": "cpsat", "time_limit_s": 2.0, "now": NOW},
    }


def test_explain_endpoint_agrees_with_the_plan(live: Server) -> None:
    with live.client(PLANNER) as c:
        out = c.post("/v1/plans", params={"wait": 60}, json=_body()).json()
        job_id = out["job"]["id"]
        unplaced = out["plan"]["unplaced"]
        codes = {u["workload"]: u["code"] for u in unplaced}
        assert codes == {"g": "GANG_DOMAIN", "q": "QUOTA", "big": "NEVER_FITS"}
        for wid in sorted(codes):
            r = c.get(f"/v1/plans/{job_id}/explain/{wid}", params={"counterfactuals": 0})
            assert r.status_code == 200, r.text
            said = {(e["workload"], e["replica"]): e for e in r.json()}
            for u in (u for u in unplaced if u["workload"] == wid):
                e = said[(u["workload"], u["replica"])]
                assert (e["code"], e["reason"], e.get("resources", [])) == (
                    u["code"],
                    u["reason"],
                    u.get("resources", []),
                ), (u, e)
