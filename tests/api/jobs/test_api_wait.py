"""``?wait=`` the queue cannot meet: answered 429 with ``Retry-After`` at once, not 202 after the wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._api import PLANNER, Server, drain, example_body, tiny_body

#: The whole module runs a real ``gpuplan serve``: slow.
pytestmark = pytest.mark.slow


def test_wait_the_queue_cannot_meet_is_refused_at_once(tmp_path: Path) -> None:
    server = Server(
        str(tmp_path / "gpuplan.db"), tmp_path / "serve.log", env={"GPUPLAN_LIMIT_MAX_ACTIVE_JOBS": "20"}
    )
    try:
        with server.client(PLANNER) as c:
            # Solves of about a second (CP-SAT takes its whole limit on the example) set the recent time;
            # with an empty queue a wait the solver can meet is accepted.
            for _ in range(2):
                done = c.post("/v1/plans", params={"wait": 30}, json=example_body(1.0))
                assert done.status_code == 200, done.text
            # Four more such jobs ahead on the one solver process: about five seconds before a new one ends.
            for _ in range(4):
                assert c.post("/v1/plans", json=example_body(1.0)).status_code == 202
            refused = c.post("/v1/plans", params={"wait": 1}, json=tiny_body())
            assert refused.status_code == 429, refused.text
            assert int(refused.headers["Retry-After"]) >= 1
            assert "wait=1 s" in refused.json()["detail"]
            # Nothing was queued for it; submitting without a wait is still accepted.
            assert len(c.get("/v1/plans", params={"status": "queued"}).json()["items"]) <= 4
            assert c.post("/v1/plans", json=tiny_body()).status_code == 202
    finally:
        drain(server)
        server.stop()
