"""The job queue in the store (``api.queue``) on SQLite and PostgreSQL: claims, leases,
heartbeats, expiry, poison jobs and hand-back, with several claimers at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from gpuplan.api.queue import Expired, JobQueue, poison_error
from gpuplan.api.store import Actor, Store
from gpuplan.api.store.tables import jobs
from gpuplan.planner.store.records import JobInput, JobStatus
from tests._factories import queued_job

ACTOR = Actor("abc", "planner")
#: A lease long enough never to run out during a test.
LONG_S = 600.0


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store.open(db_url)
    yield opened
    opened.close()


def _submit(store: Store, n: int) -> list[str]:
    """``n`` queued jobs, oldest first."""
    ids = [f"{i:032x}" for i in range(n)]
    for job_id in ids:
        job = queued_job(job_id)
        store.create_job(job, JobInput("f" * 64, f'{{"job": "{job_id}"}}', {"solver": "cpsat"}), ACTOR, {})
    return ids


def _lease(store: Store, job_id: str) -> tuple[str | None, int]:
    """The job's last holder and how many of its leases ran out."""
    with store.engine.connect() as conn:
        row = conn.execute(select(jobs.c.lease_owner, jobs.c.lease_expiries).where(jobs.c.id == job_id)).one()
    return row[0], row[1]


def _status(store: Store, job_id: str) -> JobStatus:
    job = store.job(job_id)
    assert job is not None
    return job.status


def test_claims_take_the_oldest_job_and_each_job_once(store: Store) -> None:
    """Four claimers at once (threads, each its own connection) take twelve jobs: every job exactly
    once, each held under its claimer's name with its stored input."""
    ids = _submit(store, 13)
    first = JobQueue(store.engine, "first", LONG_S, 3).claim()
    assert first is not None and first.id == ids[0]
    assert first.input.input_json == f'{{"job": "{ids[0]}"}}' and first.input.options == {"solver": "cpsat"}
    claimed: list[tuple[str, str]] = []
    lock = threading.Lock()

    def drain(queue: JobQueue) -> None:
        while (job := queue.claim()) is not None:
            with lock:
                claimed.append((queue.owner, job.id))

    queues = [JobQueue(store.engine, f"claimer-{i}", LONG_S, 3) for i in range(4)]
    threads = [threading.Thread(target=drain, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(job_id for _, job_id in claimed) == ids[1:]
    for owner, job_id in claimed:
        assert _lease(store, job_id) == (owner, 0) and _status(store, job_id) is JobStatus.RUNNING
    assert queues[0].active() == 13


def test_a_lease_that_runs_out_queues_the_job_again_then_fails_it_for_good(store: Store) -> None:
    """A renewed lease is left alone; one that ran out is queued again and its old holder can neither
    renew it nor write a result; the second expiry (``max_expiries`` 2) fails it as a poison job, and a
    resubmission gives it its expiries back."""
    alive, poison = _submit(store, 2)
    holder = JobQueue(store.engine, "alive", LONG_S, 2)
    dead = JobQueue(store.engine, "dead", -1.0, 2)  # its leases have ended already: a holder that died
    other = JobQueue(store.engine, "other", LONG_S, 2)
    assert (c := holder.claim()) is not None and c.id == alive
    assert holder.renew(alive, {"phase": "solving", "incumbent": 3.0})
    assert other.progress(alive) == {"phase": "solving", "incumbent": 3.0}
    assert (c := dead.claim()) is not None and c.id == poison
    assert other.expire() == [Expired(poison, "dead", failed=False)]
    assert _status(store, poison) is JobStatus.QUEUED and _status(store, alive) is JobStatus.RUNNING
    assert not dead.renew(poison, None)
    assert not store.finish(poison, JobStatus.DONE, plan_json="{}", owner="dead")
    assert store.result(poison) is None
    # Claimed again (the oldest queued job) and lost again: failed for good, with the reason.
    assert (c := dead.claim()) is not None and c.id == poison
    assert other.expire() == [Expired(poison, "dead", failed=True)]
    job = store.job(poison)
    assert job is not None and job.status is JobStatus.FAILED and job.error == poison_error(2)
    assert "ran out 2 times" in job.error and _lease(store, poison) == ("dead", 2)
    assert other.expire() == []
    # Resubmitted, it may run out twice again before it fails.
    assert store.requeue(poison, ACTOR) and _lease(store, poison) == (None, 0)
    assert (c := dead.claim()) is not None and c.id == poison
    assert other.expire() == [Expired(poison, "dead", failed=False)]
    # The live holder finishes its job; it writes the result.
    assert store.finish(alive, JobStatus.DONE, plan_json='{"ok": 1}', owner="alive")
    assert store.result(alive) == '{"ok": 1}'


def test_a_cancelled_job_is_no_longer_held_and_a_stopping_holder_hands_jobs_back(store: Store) -> None:
    """Cancelling closes the row: the holder's next renewal fails (and it stops the solve). A holder
    that stops hands its jobs back to the queue at once, without counting an expiry."""
    cancelled, handed = _submit(store, 2)
    holder = JobQueue(store.engine, "holder", LONG_S, 3)
    assert [holder.claim(), holder.claim()] != [None, None]
    assert store.finish(cancelled, JobStatus.CANCELLED)
    assert not holder.renew(cancelled, None) and holder.renew(handed, None)
    assert holder.release() == 1
    assert _status(store, handed) is JobStatus.QUEUED and _lease(store, handed) == (None, 0)
    assert _status(store, cancelled) is JobStatus.CANCELLED and holder.active() == 1
