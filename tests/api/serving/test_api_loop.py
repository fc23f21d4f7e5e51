"""Large bodies are parsed and validated off the event loop, in linear time: the server keeps answering
while it checks them."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpuplan.api import bodies, create_app
from gpuplan.api.settings import Settings
from tests._api import KEYS, PLANNER, auth, tiny_body

#: Seconds the test waits for a step that, when the server behaves, happens at once.
WAIT_S = 60.0


def _many_workloads(n: int) -> dict[str, Any]:
    """The tiny body with ``n`` one-GPU workloads (about 40 bytes each), with a time limit that admits
    them (``max_replicas_per_second``)."""
    body = tiny_body(solver="first-fit", time_limit_s=n / 1000)
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


def test_healthz_answers_while_large_bodies_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 workloads froze ``/healthz`` for ~5 s and a node with 40,000 GPUs for ~13 s (the checks ran
    on the event loop). Ordering, not timing: each body's check is held half-way until ``/healthz`` has
    answered, which it can only do if the check runs off the event loop (else the probe never returns,
    and fails after a minute); then the checks finish with their usual answers."""
    entered, release = threading.Event(), threading.Event()
    original = bodies.parse_body

    def held(model: Any, raw: bytes, settings: Settings) -> Any:
        entered.set()
        assert release.wait(WAIT_S), "never released"
        return original(model, raw, settings)

    monkeypatch.setattr(bodies, "parse_body", held)
    settings = Settings(database=str(tmp_path / "gpuplan.db"), api_keys=KEYS, prestart_solvers=False)
    headers = {"content-type": "application/json"}
    answers = []
    with (
        TestClient(create_app(settings), headers=auth(PLANNER)) as c,
        ThreadPoolExecutor(2) as pool,
    ):
        for body in (_many_workloads(20_000), _wide_node(40_000)):
            entered.clear()
            release.clear()
            posted = pool.submit(c.post, "/v1/plans", content=json.dumps(body).encode(), headers=headers)
            try:
                assert entered.wait(WAIT_S), "the body was never checked"
                probe = pool.submit(c.get, "/healthz")
                assert probe.result(timeout=WAIT_S).status_code == 200
                assert not posted.done()  # the check is still held: /healthz answered during it
            finally:
                release.set()
            answers.append(posted.result(timeout=WAIT_S))
    assert [r.status_code for r in answers] == [202, 422], [r.text[:300] for r in answers]
    assert answers[1].json()["detail"][0]["loc"] == ["body", "cluster", "nodes", 0, "gpus"]
