"""The job table as a queue that any number of processes share: claims, leases, heartbeats and expiry.

A process claims the oldest queued job with ``SELECT ... FOR UPDATE SKIP LOCKED`` (two claimers never
take the same row and never wait for each other; SQLite, which has one writer at a time, ignores the
clause) and holds it under a lease: its id (``lease_owner``) and an end (``lease_until``) that its
heartbeats push on while it solves. A job whose holder died keeps its lease until the end; then any
process queues it again from its stored input, and after ``max_expiries`` expired leases fails it for
good (a poison job: the one that kills whoever runs it). A renewal fails once the job is no longer the
caller's (cancelled, or expired and taken by another): the holder then stops its solve, and its result,
if it comes, is not written (:meth:`Store.finish <gpuplan.api.store.store.Store.finish>` with the
owner).

Every process that runs jobs also writes a heartbeat (``beat``) in the worker table, so that a server
without solver processes can tell whether any process will run what it queues (``alive``).

Lease and heartbeat times come from the clocks of the processes: keep the hosts' clocks in step (NTP)
well within a lease.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Engine, delete, func, insert, or_, select, update

from gpuplan.api.store.records import ACTIVE
from gpuplan.api.store.tables import job_inputs, jobs, workers
from gpuplan.planner.store.records import JobInput, JobStatus, now

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claimed:
    """A job this process now holds: its id and its stored input (the plan history's record of it),
    what it needs to run it."""

    id: str
    input: JobInput


@dataclass(frozen=True)
class Expired:
    """A running job whose lease ran out: queued again, or failed for good (``failed``)."""

    id: str
    owner: str | None
    failed: bool


def poison_error(expiries: int) -> str:
    """The error of a job failed for good after ``expiries`` expired leases."""
    return (
        f"not run again: its lease ran out {expiries} times (the server or worker running it stopped "
        "answering each time; the job may be what stops them); resubmit it to try once more"
    )


class JobQueue:
    """The queue as one process (``owner``) uses it; every method is one short transaction."""

    def __init__(self, engine: Engine, owner: str, lease_s: float, max_expiries: int) -> None:
        self.engine = engine
        self.owner = owner
        self.lease = timedelta(seconds=lease_s)
        self.max_expiries = max_expiries

    @property
    def shared(self) -> bool:
        """Several processes may use this database at once (PostgreSQL; a SQLite file has one server)."""
        return self.engine.dialect.name != "sqlite"

    def claim(self) -> Claimed | None:
        """Take the oldest queued job under a new lease, or None when none is queued.

        One ``UPDATE`` whose subquery picks the row: PostgreSQL locks it (``FOR UPDATE SKIP LOCKED``),
        and SQLite takes its write lock at the statement's start, so no other claim reads it between."""
        t = now()
        oldest = (
            select(jobs.c.id)
            .where(jobs.c.status == JobStatus.QUEUED.value)
            .order_by(jobs.c.number)
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        with self.engine.begin() as conn:
            found = conn.execute(
                update(jobs)
                .where(jobs.c.id == oldest, jobs.c.status == JobStatus.QUEUED.value)
                .values(
                    status=JobStatus.RUNNING.value,
                    started_at=t,
                    lease_owner=self.owner,
                    lease_until=t + self.lease,
                    progress=None,
                )
                .returning(jobs.c.id)
            ).scalar_one_or_none()
            if found is None:
                return None
            row = conn.execute(select(job_inputs).where(job_inputs.c.job_id == found)).one()
        return Claimed(found, JobInput(row.inputs_sha256, row.input_json, json.loads(row.options_json)))

    def renew(self, job_id: str, progress: dict[str, Any] | None) -> bool:
        """Push the lease of a job held here on, storing its progress; False when it is no longer held
        here (cancelled, or its lease expired and the job was queued again)."""
        t = now()
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(
                    jobs.c.id == job_id,
                    jobs.c.lease_owner == self.owner,
                    jobs.c.status == JobStatus.RUNNING.value,
                )
                .values(
                    lease_until=t + self.lease,
                    progress=json.dumps(progress) if progress is not None else None,
                )
            )
        return bool(res.rowcount)

    def expire(self) -> list[Expired]:
        """Queue again every running job whose lease ran out (a running job without a lease, left by a
        gpuplan before leases, too), or fail it when that was its ``max_expiries``-th expiry.

        Each is one ``UPDATE``: a job whose holder renews its lease meanwhile is re-read after the
        renewal (PostgreSQL) and left alone, and two processes never count one expiry twice. The job
        keeps the name of its last holder (only a running job is held: see ``renew``)."""
        t = now()
        expired = (
            jobs.c.status == JobStatus.RUNNING.value,
            or_(jobs.c.lease_until < t, jobs.c.lease_until.is_(None)),
        )
        left = {"lease_until": None, "lease_expiries": jobs.c.lease_expiries + 1, "progress": None}
        with self.engine.begin() as conn:
            failed = conn.execute(
                update(jobs)
                .where(*expired, jobs.c.lease_expiries + 1 >= self.max_expiries)
                .values(
                    status=JobStatus.FAILED.value,
                    finished_at=t,
                    error=poison_error(self.max_expiries),
                    **left,
                )
                .returning(jobs.c.id, jobs.c.lease_owner)
            ).all()
            queued = conn.execute(
                update(jobs)
                .where(*expired)
                .values(status=JobStatus.QUEUED.value, started_at=None, **left)
                .returning(jobs.c.id, jobs.c.lease_owner)
            ).all()
        done = [Expired(i, o, True) for i, o in failed] + [Expired(i, o, False) for i, o in queued]
        for e in done:
            what = "failed for good" if e.failed else "queued again"
            log.warning("job %s: the lease of %s ran out; %s", e.id, e.owner or "(no holder)", what)
        return done

    def release(self) -> int:
        """Queue again, at once, every job held here: this process stops without them (not an expiry)."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(
                    jobs.c.lease_owner == self.owner,
                    jobs.c.status == JobStatus.RUNNING.value,
                )
                .values(
                    status=JobStatus.QUEUED.value,
                    started_at=None,
                    lease_owner=None,
                    lease_until=None,
                    progress=None,
                )
            )
        return int(res.rowcount)

    def active(self) -> int:
        """Jobs queued or running, on every process."""
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    select(func.count()).select_from(jobs).where(jobs.c.status.in_([s.value for s in ACTIVE]))
                ).scalar_one()
            )

    def progress(self, job_id: str) -> dict[str, Any] | None:
        """The last progress the holder of a running job stored."""
        with self.engine.connect() as conn:
            text = conn.execute(select(jobs.c.progress).where(jobs.c.id == job_id)).scalar_one_or_none()
        return json.loads(text) if text else None

    def beat(self, processes: int, ready: int) -> None:
        """Record that this process runs ``processes`` solver processes, ``ready`` of them up, now."""
        values = {"processes": processes, "ready": ready, "seen_at": now()}
        with self.engine.begin() as conn:
            res = conn.execute(update(workers).where(workers.c.owner == self.owner).values(**values))
            if not res.rowcount:
                conn.execute(insert(workers).values(owner=self.owner, **values))

    def leave(self) -> None:
        """Remove this process's heartbeat: it runs no more jobs."""
        with self.engine.begin() as conn:
            conn.execute(delete(workers).where(workers.c.owner == self.owner))

    def alive(self) -> int:
        """Processes with a solver process up whose heartbeat is younger than a lease (on every host);
        older rows, left by processes that died, are removed."""
        cutoff = now() - self.lease
        with self.engine.begin() as conn:
            conn.execute(delete(workers).where(workers.c.seen_at < cutoff))
            found = conn.execute(
                select(func.count())
                .select_from(workers)
                .where(workers.c.ready > 0, workers.c.seen_at >= cutoff)
            ).scalar_one()
        return int(found)
