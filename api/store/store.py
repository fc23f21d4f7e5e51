"""The API's reads and writes: jobs (its own, and the plans ``gpuplan replan`` stored, which it serves
too), their inputs, results and audit trail, and the admission of new jobs under the active-job limit
(the API's keys: ``api.keys``; the queue's claims and leases: ``api.queue``). SQLite by default,
PostgreSQL by URL."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, func, insert, select, update

from gpuplan.api.store.migrate import upgrade
from gpuplan.api.store.records import ACTIVE, RESUBMITTABLE, Actor
from gpuplan.api.store.tables import JOB_FIELDS, audit, job_inputs, job_results, jobs, metadata
from gpuplan.planner.store.db import ADVISORY_LOCK, locked, make_engine
from gpuplan.planner.store.plans import PlanStore, insert_job, record
from gpuplan.planner.store.records import JobInput, JobRecord, JobStatus, as_utc, now

#: The PostgreSQL advisory lock under which a job is admitted (counted against the active-job limit and
#: inserted): apart from the schema upgrades' (``ADVISORY_LOCK``), so that admissions do not wait for one.
ADMISSION_LOCK = ADVISORY_LOCK + 1


class ActiveLimitReached(Exception):
    """A job was not stored: ``active`` jobs were already queued or running, the most allowed."""

    def __init__(self, active: int) -> None:
        super().__init__(f"{active} jobs are queued or running")
        self.active = active


class Store:
    """The API's store of jobs; every method is one short transaction."""

    def __init__(self, engine: Engine) -> None:
        """Use the database of ``engine``, first brought to the current schema, the plan tables' and the
        API's (see ``migrate``)."""
        upgrade(engine)
        self.engine = engine
        #: The plan history on the same database: the finished plans, whatever their source.
        self.plans = PlanStore(engine)

    @classmethod
    def open(cls, target: str | None, timeout_s: float | None = None) -> Store:
        """Open the database at ``target``: a file path, a URL, or ``None`` for ``gpuplan.db``; with
        ``timeout_s``, no wait for the database lasts much longer (see :func:`make_engine`)."""
        return cls(make_engine(target, timeout_s))

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()

    def integrity_problem(self) -> str | None:
        """The first problem a quick integrity check finds, or None: SQLite's ``quick_check`` (every page
        and index), on PostgreSQL a read of every table."""
        with self.engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                found = [str(r) for r in conn.exec_driver_sql("PRAGMA quick_check").scalars()]
                return None if found == ["ok"] else found[0]
            for table in metadata.sorted_tables:
                conn.execute(select(table).limit(1)).all()
        return None

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        with self.engine.connect() as conn:
            conn.execute(select(1))

    # --- jobs -------------------------------------------------------------------------------------------

    def create_job(
        self,
        job: JobRecord,
        data: JobInput,
        actor: Actor,
        detail: dict[str, Any],
        *,
        max_active: int | None = None,
    ) -> int:
        """Insert a job, its input and the audit record of its submission, in one transaction; return
        the job's number.

        With ``max_active``, the transaction first takes the admission lock (SQLite: ``BEGIN
        IMMEDIATE``; PostgreSQL: an advisory lock) and counts the queued and running jobs: with
        ``max_active`` or more it raises :class:`ActiveLimitReached` and stores nothing. Count and insert
        under one lock, so that concurrent submissions on any number of servers never admit more."""
        if max_active is None:
            with self.engine.begin() as conn:
                return self._insert_job(conn, job, data, actor, detail)
        with locked(self.engine, ADMISSION_LOCK) as conn:
            active = self._active(conn)
            if active >= max_active:
                raise ActiveLimitReached(active)
            return self._insert_job(conn, job, data, actor, detail)

    def _insert_job(
        self,
        conn: Connection,
        job: JobRecord,
        data: JobInput,
        actor: Actor,
        detail: dict[str, Any],
    ) -> int:
        number = insert_job(conn, job, data, None)
        self._audit(conn, actor, "submit", job.id, detail)
        return number

    def record(self, actor: Actor, action: str, job_id: str | None, detail: dict[str, Any]) -> None:
        """Append one audit record."""
        with self.engine.begin() as conn:
            self._audit(conn, actor, action, job_id, detail)

    @staticmethod
    def _audit(
        conn: Connection, actor: Actor, action: str, job_id: str | None, detail: dict[str, Any]
    ) -> None:
        conn.execute(
            insert(audit).values(
                at=now(),
                key_id=actor.key_id,
                role=actor.role,
                action=action,
                job_id=job_id,
                detail=json.dumps(detail, sort_keys=True, default=str),
            )
        )

    def audit_trail(self, job_id: str) -> list[dict[str, Any]]:
        """The audit records of one job, oldest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(audit).where(audit.c.job_id == job_id).order_by(audit.c.id)).all()
        return [
            {
                "at": as_utc(r.at),
                "key_id": r.key_id,
                "role": r.role,
                "action": r.action,
                "detail": json.loads(r.detail),
            }
            for r in rows
        ]

    def finish(
        self,
        job_id: str,
        status: JobStatus,
        *,
        plan_json: str | None = None,
        plan_status: str | None = None,
        outcome: str | None = None,
        error: str | None = None,
        owner: str | None = None,
    ) -> bool:
        """Close an active job; False (and nothing written) when it had already been closed, or, with
        ``owner``, when that process no longer holds its lease (``api.queue``)."""
        conds = [jobs.c.id == job_id]
        if owner is None:
            conds.append(jobs.c.status.in_([s.value for s in ACTIVE]))
        else:
            conds += [jobs.c.status == JobStatus.RUNNING.value, jobs.c.lease_owner == owner]
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(*conds)
                .values(
                    lease_until=None,
                    progress=None,
                    status=status.value,
                    finished_at=now(),
                    plan_status=plan_status,
                    outcome=outcome,
                    error=error,
                )
            )
            if not res.rowcount:
                return False
            if plan_json is not None:
                conn.execute(insert(job_results).values(job_id=job_id, plan_json=plan_json))
        return True

    def requeue(self, job_id: str, actor: Actor, *, max_active: int | None = None) -> bool:
        """A finished, unsuccessful job queued again with its stored input, and the audit record of its
        resubmission, in one transaction; False (and nothing written) if it is not resubmittable.

        With ``max_active``, admitted as :meth:`create_job` admits a new job: under the admission lock,
        :class:`ActiveLimitReached` (and nothing written) when ``max_active`` jobs are queued or running,
        so that concurrent resubmissions and submissions on any number of servers never admit more."""
        if max_active is None:
            with self.engine.begin() as conn:
                return self._requeue(conn, job_id, actor)
        with locked(self.engine, ADMISSION_LOCK) as conn:
            active = self._active(conn)
            if active >= max_active:
                # A job that could not be resubmitted anyway says so (409) rather than "retry later".
                status = conn.execute(select(jobs.c.status).where(jobs.c.id == job_id)).scalar_one_or_none()
                if status not in [s.value for s in RESUBMITTABLE]:
                    return False
                raise ActiveLimitReached(active)
            return self._requeue(conn, job_id, actor)

    def _requeue(self, conn: Connection, job_id: str, actor: Actor) -> bool:
        res = conn.execute(
            update(jobs)
            .where(jobs.c.id == job_id, jobs.c.status.in_([s.value for s in RESUBMITTABLE]))
            .values(
                status=JobStatus.QUEUED.value,
                started_at=None,
                finished_at=None,
                plan_status=None,
                outcome=None,
                error=None,
                attempts=jobs.c.attempts + 1,
                lease_owner=None,
                lease_expiries=0,
            )
        )
        if not res.rowcount:
            return False
        self._audit(conn, actor, "resubmit", job_id, {})
        return True

    @staticmethod
    def _active(conn: Connection) -> int:
        """Jobs queued or running."""
        return int(
            conn.execute(
                select(func.count()).select_from(jobs).where(jobs.c.status.in_([s.value for s in ACTIVE]))
            ).scalar_one()
        )

    def interrupt_active(self) -> int:
        """Mark every queued or running job ``interrupted``: the one server of a SQLite file starts, or
        stops, without them."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(jobs)
                .where(jobs.c.status.in_([s.value for s in ACTIVE]))
                .values(
                    status=JobStatus.INTERRUPTED.value,
                    finished_at=now(),
                    error="the server stopped before this job finished; resubmit it",
                )
            )
        return int(res.rowcount)

    def job(self, job_id: str) -> JobRecord | None:
        """One job, or None."""
        with self.engine.connect() as conn:
            row = conn.execute(select(*JOB_FIELDS).where(jobs.c.id == job_id)).mappings().first()
        return record(row) if row is not None else None

    def job_input(self, job_id: str) -> JobInput | None:
        """The stored input of a job."""
        with self.engine.connect() as conn:
            row = conn.execute(select(job_inputs).where(job_inputs.c.job_id == job_id)).first()
        if row is None:
            return None
        return JobInput(row.inputs_sha256, row.input_json, json.loads(row.options_json))

    def result(self, job_id: str) -> str | None:
        """The plan JSON of a finished job."""
        with self.engine.connect() as conn:
            text: str | None = conn.execute(
                select(job_results.c.plan_json).where(job_results.c.job_id == job_id)
            ).scalar_one_or_none()
        return text

    def history(
        self,
        *,
        team: str | None = None,
        status: JobStatus | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[JobRecord], int]:
        """Jobs newest first, filtered, one page of them, and how many match in all."""
        conds = []
        if team is not None:
            conds.append(jobs.c.team == team)
        if status is not None:
            conds.append(jobs.c.status == status.value)
        if since is not None:
            conds.append(jobs.c.created_at >= since)
        if until is not None:
            conds.append(jobs.c.created_at < until)
        with self.engine.connect() as conn:
            total = int(conn.execute(select(func.count()).select_from(jobs).where(*conds)).scalar_one())
            rows = conn.execute(
                select(*JOB_FIELDS)
                .where(*conds)
                .order_by(jobs.c.created_at.desc(), jobs.c.number.desc())
                .limit(limit)
                .offset(offset)
            ).mappings()
            return [record(r) for r in rows], total

    def status_counts(self) -> dict[str, int]:
        """How many jobs are in each state."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status)).all()
        return {str(s): int(n) for s, n in rows}
