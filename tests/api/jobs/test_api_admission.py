"""``max_active_jobs`` under concurrency: counting the active jobs and storing a new one happen under one
lock, so that simultaneous submissions (on one server or several) never admit more than the limit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpuplan.api.store import ActiveLimitReached, Actor, Store
from gpuplan.planner.store.records import JobInput, JobStatus
from tests._api import PLANNER, Server, at_once, auth, drain, example_body
from tests._factories import queued_job

LIMIT = 4
CALLERS = 40




@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store.open(db_url)
    yield opened
    opened.close()


def test_concurrent_creates_admit_exactly_the_limit(store: Store) -> None:
    data = JobInput("f" * 64, "{}", {})
    out = at_once(
        CALLERS,
        lambda i: store.create_job(
            queued_job(f"{i:032x}"), data, Actor("abc", "planner"), {}, max_active=LIMIT
        ),
    )
    stored = [o for o in out if isinstance(o, int)]
    refused = [o for o in out if isinstance(o, ActiveLimitReached)]
    assert len(stored) == LIMIT and len(refused) == CALLERS - LIMIT, out
    assert all(r.active == LIMIT for r in refused)
    assert store.status_counts() == {"queued": LIMIT}


def test_finished_jobs_free_their_place(store: Store) -> None:
    data = JobInput("f" * 64, "{}", {})
    actor = Actor("abc", "planner")
    store.create_job(queued_job(f"{0:032x}"), data, actor, {}, max_active=1)
    with pytest.raises(ActiveLimitReached):
        store.create_job(queued_job(f"{1:032x}"), data, actor, {}, max_active=1)
    assert store.finish(queued_job(f"{0:032x}").id, JobStatus.CANCELLED)
    store.create_job(queued_job(f"{1:032x}"), data, actor, {}, max_active=1)
    assert store.status_counts() == {"cancelled": 1, "queued": 1}


@pytest.mark.slow  # its own gpuplan serve
def test_forty_simultaneous_posts_with_a_limit_of_four_accept_four(db_url: str, tmp_path: Path) -> None:
    # One solver process on jobs of a minute: the first job runs, every other one stays queued.
    server = Server(
        db_url,
        tmp_path / "serve.log",
        env={"GPUPLAN_LIMIT_MAX_ACTIVE_JOBS": str(LIMIT), "GPUPLAN_LIMIT_MAX_TIME_LIMIT_S": "120"},
    )
    body = example_body(time_limit_s=60)
    try:
        with httpx.Client(base_url=server.url, headers=auth(PLANNER), timeout=60.0) as c:
            out = at_once(CALLERS, lambda _: c.post("/v1/plans", json=body))
        codes = sorted(r.status_code for r in out)
        assert codes == [202] * LIMIT + [429] * (CALLERS - LIMIT), codes
        refused = [r for r in out if r.status_code == 429]
        assert all(r.json()["limit"] == "max_active_jobs" for r in refused)
        assert all(int(r.headers["Retry-After"]) >= 1 for r in refused)
        with server.client(PLANNER) as c:
            listed = c.get("/v1/plans", params={"limit": 200}).json()["items"]
        assert len(listed) == LIMIT
        drain(server)
    finally:
        server.stop()
