"""Large bodies are parsed and validated off the event loop, in linear time: the server keeps answering
while it checks them."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from tests._api import PLANNER, Server, drain, live, tiny_body

__all__ = ["live"]


def _many_workloads(n: int) -> dict[str, Any]:
    """The tiny body with ``n`` one-GPU workloads (about 40 bytes each)."""
    body = tiny_body(solver="first-fit")
    body["workloads"] = [{"id": f"w{i}", "team": "ml", "gpus": 1} for i in range(n)]
    return body


def _wide_node(gpus: int) -> dict[str, Any]:
    """The tiny body with one node of ``gpus`` GPUs."""
    body = tiny_body(solver="first-fit")
    body["cluster"]["nodes"][0] = {
        **body["cluster"]["nodes"][0],
        "gpus": [{"index": i, "model": "L40S-48GB"} for i in range(gpus)],
    }
    return body


def test_healthz_answers_while_large_bodies_are_checked(live: Server) -> None:
    """20,000 workloads froze ``/healthz`` for ~5 s and a node with 40,000 GPUs for ~13 s (quadratic
    checks on the event loop). The time bound is the point of the test, and generous (the target is
    100 ms; this machine has two cores shared with other test runs)."""
    drain(live)
    # Serialised up front: this process's own JSON encoding must not delay the probe.
    bodies = [
        json.dumps(b).encode() for b in (_many_workloads(20_000), _wide_node(40_000), _many_workloads(20_000))
    ]
    slowest = 0.0
    polls = 0
    headers = {"content-type": "application/json"}
    with (
        ThreadPoolExecutor(len(bodies)) as pool,
        httpx.Client(base_url=live.url, timeout=30) as probe,
        live.client(PLANNER) as c,
    ):
        submitted = [pool.submit(c.post, "/v1/plans", content=b, headers=headers) for b in bodies]
        while not all(f.done() for f in submitted):
            start = time.perf_counter()
            assert probe.get("/healthz").status_code == 200
            slowest = max(slowest, time.perf_counter() - start)
            polls += 1
            time.sleep(0.01)
        answers = [f.result() for f in submitted]
    drain(live)
    assert [r.status_code for r in answers] == [202, 422, 202], [r.text[:300] for r in answers]
    assert answers[1].json()["detail"][0]["loc"] == ["body", "cluster", "nodes", 0, "gpus"]
    assert polls > 5
    assert slowest < 1.0, f"/healthz took {slowest:.3f} s while bodies were checked"
