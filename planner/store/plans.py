"""Reads and writes of the plan history: jobs (plans of ``gpuplan replan``, and the API's jobs, whose
plans replan reads too), their inputs and results. SQLite by default, PostgreSQL by URL. The API's
reads and writes of the same jobs (admission, the queue, audit) are the API's (``api.store``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, RowMapping, Select, func, insert, select

from gpuplan.planner.store.migrate import upgrade
from gpuplan.planner.store.records import JobInput, JobRecord, JobStatus
from gpuplan.planner.store.tables import JOB_FIELDS, job_inputs, job_results, jobs


def record(row: RowMapping) -> JobRecord:
    """A job from the job table's columns (``JOB_FIELDS``)."""
    return JobRecord.model_validate(dict(row))


def insert_job(conn: Connection, job: JobRecord, data: JobInput, result_json: str | None) -> int:
    """Insert a job, its input and its result, if it has one, on ``conn``; return the job's number."""
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
    assert key is not None
    return int(key[0])


@dataclass(frozen=True)
class StoredJob:
    """A finished job read back whole: its number in the store, the job, its input and its result."""

    number: int
    job: JobRecord
    input: JobInput
    result_json: str


class PlanStore:
    """The plan history's jobs; every method is one short transaction."""

    def __init__(self, engine: Engine) -> None:
        """Use the database of ``engine``, its plan tables first brought to the current schema (see
        ``migrate``)."""
        upgrade(engine)
        self.engine = engine

    def close(self) -> None:
        """Release the connection pool."""
        self.engine.dispose()

    def save(self, job: JobRecord, data: JobInput, result_json: str) -> int:
        """Store a finished job with its input and result in one transaction; return its number."""
        with self.engine.begin() as conn:
            return insert_job(conn, job, data, result_json)

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
            job=record(row),
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
            return [(int(r["number"]), record(r), r["plan_json"]) for r in rows]

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
