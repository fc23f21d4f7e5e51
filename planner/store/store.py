"""Reads and writes of the one store: jobs (from the API, and plans stored by ``gpuplan replan``), their
inputs, results and audit trail (the API's keys: ``api.keys``). SQLite by default, PostgreSQL by URL."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, RowMapping, Select, func, insert, select, update

from gpuplan.planner.store.db import ADMISSION_LOCK, locked, make_engine
from gpuplan.planner.store.migrate import upgrade
from gpuplan.planner.store.records import (
    ACTIVE,
    RESUBMITTABLE,
    Actor,
    JobInput,
    JobRecord,
    JobStatus,
    as_utc,
    now,
)
from gpuplan.planner.store.tables import (
    JOB_FIELDS,
    audit,
    job_inputs,
    job_results,
    jobs,
    metadata,
)


class ActiveLimitReached(Exception):
    """A job was not stored: ``active`` jobs were already queued or running, the most allowed."""

    def __init__(self, active: int) -> None:
        super().__init__(f"{active} jobs are queued or running")
        self.active = active


def _record(row: RowMapping) -> JobRecord:
    """A job from the job table's columns (``JOB_FIELDS``)."""
    return JobRecord.model_validate(dict(row))


@dataclass(frozen=True)
class StoredJob:
    """A finished job read back whole: its number in the store, the job, its input and its result."""

    number: int
    job: JobRecord
    input: JobInput
    result_json: str


class Store:
    """The store of jobs and plans; every method is one short transaction."""

    def __init__(self, engine: Engine) -> None:
        """Use the database of ``engine``, first brought to the current schema (see ``migrate``)."""
        upgrade(engine)
        self.engine = engine

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
        result_json: str | None = None,
        max_active: int | None = None,
    ) -> int:
        """Insert a job, its input, its result when it comes finished (a plan of ``gpuplan replan``) and
        the audit record of its submission, in one transaction; return the job's number.

        With ``max_active``, the transaction first takes the admission lock (SQLite: ``BEGIN
        IMMEDIATE``; PostgreSQL: an advisory lock) and counts the queued and running jobs: with
        ``max_active`` or more it raises :class:`ActiveLimitReached` and stores nothing. Count and insert
        under one lock, so that concurrent submissions on any number of servers never admit more."""
        if max_active is None:
            with self.engine.begin() as conn:
                return self._insert_job(conn, job, data, actor, detail, result_json)
        with locked(self.engine, ADMISSION_LOCK) as conn:
            active = self._active(conn)
            if active >= max_active:
                raise ActiveLimitReached(active)
            return self._insert_job(conn, job, data, actor, detail, result_json)

    def _insert_job(
        self,
        conn: Connection,
        job: JobRecord,
        data: JobInput,
        actor: Actor,
        detail: dict[str, Any],
        result_json: str | None,
    ) -> int:
        key = conn.execute(insert(jobs).values(job.model_dump())).inserted_primary_key
        conn.execute(
            insert(job_inputs).values(
                job_id=job.id,
                inputs_sha256=data.inputs_sha256,
                input_json=data.input_json,
                options_json=json.dumps(data.options, sort_keys=True),
            )
        )
        if result_json is not None:
            conn.execute(insert(job_results).values(job_id=job.id, plan_json=result_json))
        self._audit(conn, actor, "submit", job.id, detail)
        assert key is not None
        return int(key[0])

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
        return _record(row) if row is not None else None

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
            return [_record(r) for r in rows], total

    def status_counts(self) -> dict[str, int]:
        """How many jobs are in each state."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(jobs.c.status, func.count()).group_by(jobs.c.status)).all()
        return {str(s): int(n) for s, n in rows}

    # --- finished jobs of a kind, whatever their source -------------------------------------------------

    @staticmethod
    def _done(kind: str, *, inputs: bool = True) -> Select[Any]:
        """Finished jobs of ``kind`` with a result, newest first: number, job, result and (unless not
        ``inputs``, which may be large) input."""
        columns = [job_inputs.c.inputs_sha256, job_inputs.c.input_json, job_inputs.c.options_json]
        query = select(jobs.c.number, *JOB_FIELDS, job_results.c.plan_json, *(columns if inputs else []))
        if inputs:
            query = query.join(job_inputs, job_inputs.c.job_id == jobs.c.id)
        return (
            query.join(job_results, job_results.c.job_id == jobs.c.id)
            .where(jobs.c.kind == kind, jobs.c.status == JobStatus.DONE.value)
            .order_by(jobs.c.finished_at.desc(), jobs.c.number.desc())
        )

    @staticmethod
    def _stored(row: RowMapping) -> StoredJob:
        return StoredJob(
            number=int(row["number"]),
            job=_record(row),
            input=JobInput(row["inputs_sha256"], row["input_json"], json.loads(row["options_json"])),
            result_json=row["plan_json"],
        )

    def latest_done(self, kind: str) -> StoredJob | None:
        """The job of ``kind`` that finished last with a result, with its input and result."""
        with self.engine.connect() as conn:
            row = conn.execute(self._done(kind).limit(1)).mappings().first()
        return None if row is None else self._stored(row)

    def done_job(self, kind: str, number: int) -> StoredJob | None:
        """The finished job of ``kind`` with number ``number`` and a result, if there is one."""
        with self.engine.connect() as conn:
            row = conn.execute(self._done(kind).where(jobs.c.number == number)).mappings().first()
        return None if row is None else self._stored(row)

    def done_results(self, kind: str, limit: int) -> list[tuple[int, JobRecord, str]]:
        """The last ``limit`` finished jobs of ``kind`` (newest first): number, job and result, without
        their inputs (which may be large)."""
        with self.engine.connect() as conn:
            rows = conn.execute(self._done(kind, inputs=False).limit(limit)).mappings()
            return [(int(r["number"]), _record(r), r["plan_json"]) for r in rows]

    def count_done(self, kind: str) -> int:
        """How many jobs of ``kind`` finished with a result."""
        with self.engine.connect() as conn:
            return int(
                conn.execute(
                    select(func.count())
                    .select_from(jobs.join(job_results, job_results.c.job_id == jobs.c.id))
                    .where(jobs.c.kind == kind, jobs.c.status == JobStatus.DONE.value)
                ).scalar_one()
            )
