"""Per-key rate limits (429 with ``Retry-After``), and explanations on their own capacity so that viewers
cannot lock planners out."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.settings import Limits, Settings
from tests._api import (
    KEYS,
    MAX_ACTIVE,
    PLANNER,
    VIEWER_ML,
    VIEWER_WEB,
    Server,
    auth,
    drain,
    example_body,
    live,
    tiny_body,
)

__all__ = ["live"]


def test_each_key_has_its_own_rate_limit(tmp_path: Path) -> None:
    limits = Limits(rate_per_minute=6, rate_burst=2)
    settings = Settings(database=str(tmp_path / "r.db"), api_keys=KEYS, limits=limits, prestart_solvers=False)
    with TestClient(create_app(settings)) as client:
        for _ in range(2):
            assert client.get("/v1/plans", headers=auth(VIEWER_ML)).status_code == 200
        refused = client.get("/v1/plans", headers=auth(VIEWER_ML))
        assert refused.status_code == 429, refused.text
        assert refused.json()["limit"] == "rate_per_minute" and refused.json()["value"] == 6
        # Six calls a minute: the next token comes in at most ten seconds.
        assert 1 <= int(refused.headers["Retry-After"]) <= 10
        # Other keys, and the anonymous health checks, are not held back.
        assert client.get("/v1/plans", headers=auth(VIEWER_WEB)).status_code == 200
        assert client.get("/healthz").status_code == 200
        # An unknown key is 401, not a rate limit.
        assert client.get("/v1/plans", headers=auth("unknown-key-0123456789")).status_code == 401


def _queued(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    found = re.search(r"^gpuplan_queue_depth (\S+)$", text, re.MULTILINE)
    return float(found[1]) if found else 0.0


def test_explanations_do_not_use_up_the_planners_jobs(live: Server) -> None:
    """With the one solver process busy, viewers ask for more explanations than ``max_read_jobs``: the
    extra one is refused (429 naming max_read_jobs, retry after the time limit left to the first of
    them) and a planner can still submit."""
    with live.client(PLANNER) as planner:
        done = planner.post("/v1/plans", params={"wait": 30}, json=tiny_body(solver="first-fit"))
        job = done.json()["job"]["id"]
        busy = planner.post("/v1/plans", json=example_body(time_limit_s=2.0))
        assert busy.status_code == 202, busy.text
    answers: list[httpx.Response] = []

    def explain() -> None:
        with live.client(VIEWER_ML) as viewer:
            params = {"counterfactuals": 0, "time_limit_s": 1.5}
            answers.append(viewer.get(f"/v1/plans/{job}/explain/train", params=params))

    threads = [threading.Thread(target=explain) for _ in range(MAX_ACTIVE - 1)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while not (answers and _queued(live) >= 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [a.status_code for a in answers] == [429]
        assert answers[0].json()["limit"] == "max_read_jobs"
        # Two explanations hold the places, each with a budget of (0 counterfactuals + 2) x 1.5 s: the
        # first is bound to end within 3 s (less once it has started).
        assert answers[0].headers["Retry-After"] in {"2", "3"}
        # Counted as jobs, the plan job and the three explanations would fill max_active_jobs (4) and
        # lock the planner out; on their own capacity they do not.
        with live.client(PLANNER) as planner:
            later = planner.post("/v1/plans", json=tiny_body(solver="first-fit"))
            assert later.status_code == 202, later.text
    finally:
        drain(live)
        for t in threads:
            t.join(timeout=60)
    assert sorted(a.status_code for a in answers) == [200, 200, 429]
