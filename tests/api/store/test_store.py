"""The API's store on the plan history's database, on SQLite and PostgreSQL: a replanned plan is in the
API's history and an API plan is what replan starts from; the two Alembic chains (the plan history's,
then the API's) make the schema the tables describe, are a no-op when run again, and convert a database
made by the code before them with every row kept (a database of the single chain before the split:
``test_single_chain``)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.keys import KeyStore
from gpuplan.api.schemas import JobOut
from gpuplan.api.settings import Settings
from gpuplan.api.store import Actor, Store
from gpuplan.api.store.migrate import API, upgrade
from gpuplan.api.store.tables import jobs, metadata
from gpuplan.cli import main
from gpuplan.models.base import InputError
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.planner.planning import make_plan
from gpuplan.planner.store.db import locked, make_engine
from gpuplan.planner.store.history import PlanHistory
from gpuplan.planner.store.migrate import PLAN_HISTORY
from gpuplan.planner.store.records import JobInput, JobRecord, JobSource, JobStatus
from tests._api import KEYS, PLANNER, VIEWER_ML, VIEWER_WEB, auth, tiny_body
from tests._factories import queued_job

NOW = "2026-11-29T12:00:00+00:00"
#: The version tables of the two chains: the API's (the single chain's before the split) and the plan
#: history's.
VERSION_TABLES = {"alembic_version", "gpuplan_history_version"}
#: The plan history's tables.
PLAN_TABLES = {"gpuplan_jobs", "gpuplan_job_inputs", "gpuplan_job_results"}
STORE_TABLES = {
    *VERSION_TABLES,
    "gpuplan_jobs",
    "gpuplan_job_inputs",
    "gpuplan_job_results",
    "gpuplan_audit",
    "gpuplan_api_keys",
    "gpuplan_workers",
}


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


def schema_diff(conn: sa.Connection, meta: sa.MetaData) -> list[Any]:
    """What Alembic finds different between the database and ``meta`` (the version tables aside)."""

    def include(name: str | None, kind: str, _parent: Any) -> bool:
        return not (kind == "table" and name in VERSION_TABLES)

    context = MigrationContext.configure(conn, opts={"include_name": include})
    return list(compare_metadata(context, meta))


def _at_heads(conn: sa.Connection) -> bool:
    return PLAN_HISTORY.revision(conn) == PLAN_HISTORY.head() and API.revision(conn) == API.head()


def _app(url: str) -> TestClient:
    settings = Settings(database=url, api_keys=KEYS, solver_processes=1, prestart_solvers=False)
    return TestClient(create_app(settings), headers=auth(PLANNER))


def _replan_files(tmp_path: Path) -> list[str]:
    body = tiny_body()
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(body["cluster"]))
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump({"workloads": body["workloads"]}))
    return ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.yaml")]


# --- one model of jobs --------------------------------------------------------------------------------


def test_the_job_fields_are_defined_once() -> None:
    """The job table and the API's job body both come from ``JobRecord`` (the table adds the queue's
    lease columns, which are no part of a job's record)."""
    lease = ["lease_owner", "lease_until", "lease_expiries", "progress"]
    assert [c.name for c in jobs.columns] == ["number", *JobRecord.model_fields, *lease]
    assert set(JobOut.model_fields) == {*JobRecord.model_fields, "progress", "links"}
    assert jobs.c.team.nullable and not jobs.c.status.nullable
    assert isinstance(jobs.c.status.type, sa.String) and jobs.c.status.type.length == 16
    assert isinstance(jobs.c.error.type, sa.Text) and isinstance(jobs.c.created_at.type, sa.DateTime)


# --- replan and the API share the plans ---------------------------------------------------------------


def test_a_replanned_plan_is_in_the_api_history(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["replan", "--db", db_url, "--time-limit", "3", "-q", "--now", NOW, *_replan_files(tmp_path)]
    assert main(args) == 0
    assert "stored as plan 1 (first plan)" in capsys.readouterr().out
    stored = PlanHistory(db_url).latest()
    assert stored is not None
    with _app(db_url) as c:
        page = c.get("/v1/plans").json()
        assert page["total"] == 1
        job = page["items"][0]
        assert job["id"] == stored.job_id
        assert (job["source"], job["status"], job["kind"], job["team"]) == ("replan", "done", "plan", "ml")
        assert (job["nodes"], job["workloads"], job["solver"], job["submitted_by"]) == (2, 3, "cpsat", "cli")
        assert job["plan_status"] == stored.plan.status.value and job["time_limit_s"] == 3.0
        result = c.get(f"/v1/plans/{stored.job_id}/result").json()
        assert Plan.model_validate(result["plan"]) == stored.plan
        provenance = result["plan"]["provenance"]
        assert provenance["inputs_sha256"] and provenance["replan_rounds"] == 1 and provenance["now"] == NOW
        # The audit trail is the API's: what was done through it (nothing yet to a plan of replan).
        assert c.get(f"/v1/plans/{stored.job_id}/audit").json() == []
        assert c.get(f"/v1/plans/{stored.job_id}/export.xlsx").status_code == 200  # its inputs are stored
        assert c.get("/v1/plans", headers=auth(VIEWER_ML)).json()["total"] == 1
        assert c.get("/v1/plans", headers=auth(VIEWER_WEB)).json()["total"] == 0
    store = Store.open(db_url)
    data = store.job_input(stored.job_id)
    store.close()
    assert data is not None and PlanningInput.model_validate_json(data.input_json) == stored.inputs
    assert data.options["rounds"] == 1 and data.options["now"] == NOW


def test_replan_starts_from_a_plan_made_by_the_api(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with _app(db_url) as c:
        done = c.post("/v1/plans", params={"wait": 60}, json=tiny_body(solver="first-fit")).json()
        assert done["job"]["status"] == "done" and done["job"]["source"] == "api"
    history = PlanHistory(db_url)
    latest = history.latest()
    assert latest is not None and latest.job_id == done["job"]["id"] and history.count() == 1
    assert latest.plan == Plan.model_validate(done["plan"])
    assert main(["replan", "--db", db_url, "--time-limit", "3", "-q", "--now", NOW]) == 0
    assert "stored as plan 2 (previous: plan 1)" in capsys.readouterr().out
    replanned = history.latest()
    assert replanned is not None and replanned.job_id != latest.job_id
    assert replanned.inputs == latest.inputs  # the API job's input, replanned
    store = Store.open(db_url)
    rows, total = store.history()
    store.close()
    assert total == 2 and [r.source for r in rows] == [JobSource.REPLAN, JobSource.API]


# --- migrations ---------------------------------------------------------------------------------------


def test_migrations_make_the_tables_of_the_store_and_run_again_as_a_no_op(db_url: str) -> None:
    store = Store.open(db_url)
    engine = store.engine
    with engine.connect() as conn:
        assert _at_heads(conn) and schema_diff(conn, metadata) == []
    assert _tables(db_url) == STORE_TABLES
    record = queued_job("a" * 32).model_copy(update={"created_at": datetime(2026, 11, 29, 12, tzinfo=UTC)})
    store.create_job(record, JobInput("f" * 64, "{}", {}), Actor("abc", "planner"), {})
    again = Store(engine)  # a second start: nothing to do
    with locked(engine) as conn:  # and Alembic itself, asked again, changes nothing
        command.upgrade(PLAN_HISTORY.config(conn), "head")
        command.upgrade(API.config(conn), "head")
    assert again.job(record.id) == record and again.history()[1] == 1
    with engine.connect() as conn:
        assert _at_heads(conn) and schema_diff(conn, metadata) == []
    with locked(engine) as conn:  # the API's chain first: its queue columns are on the plan history's table
        command.downgrade(API.config(conn), "base")
    assert _tables(db_url) == VERSION_TABLES | PLAN_TABLES
    with locked(engine) as conn:
        command.downgrade(PLAN_HISTORY.config(conn), "base")
    assert _tables(db_url) == VERSION_TABLES
    upgrade(engine)
    assert _tables(db_url) == STORE_TABLES and Store(engine).history()[1] == 0
    store.close()


def test_a_database_from_a_newer_gpuplan_is_refused(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A newer API schema is refused by the API; the plan history (replan) goes on without the API's
    tables (a newer plan history: ``tests/planner/store/test_plans.py``)."""
    Store.open(db_url).close()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text("UPDATE alembic_version SET version_num = 'f00d'"))
    engine.dispose()
    with pytest.raises(InputError, match="API schema \\(revision f00d\\) is newer than this gpuplan knows"):
        Store.open(db_url)
    assert PlanHistory(db_url).count() == 0


def test_processes_starting_together_upgrade_once(db_url: str) -> None:
    engines = [make_engine(db_url) for _ in range(4)]
    errors: list[BaseException] = []

    def start(engine: sa.Engine) -> None:
        try:
            Store(engine)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert _tables(db_url) == STORE_TABLES
    for e in engines:
        e.dispose()


# --- a database made before Alembic -------------------------------------------------------------------

#: The tables as ``create_all`` made them before the one store (``planner/store/history.py`` and
#: ``api/store.py`` then), for SQLite; ``{ts}`` and ``{serial}`` are PostgreSQL's ``TIMESTAMP WITH TIME
#: ZONE`` and ``SERIAL`` there.
OLD_SCHEMA = """
CREATE TABLE gpuplan_plan_history (
    id {serial} NOT NULL,
    created_at {ts} NOT NULL,
    planned_for VARCHAR(64) NOT NULL,
    inputs_sha256 VARCHAR(64) NOT NULL,
    solver VARCHAR(64) NOT NULL,
    status VARCHAR(32) NOT NULL,
    seed INTEGER NOT NULL,
    plan_json TEXT NOT NULL,
    inputs_json TEXT NOT NULL,
    provenance_json TEXT NOT NULL,
    PRIMARY KEY (id)
);
CREATE TABLE api_audit (
    id {serial} NOT NULL,
    at {ts} NOT NULL,
    key_id VARCHAR(40) NOT NULL,
    role VARCHAR(200) NOT NULL,
    action VARCHAR(40) NOT NULL,
    job_id VARCHAR(32),
    detail TEXT NOT NULL,
    PRIMARY KEY (id)
);
CREATE INDEX ix_api_audit_job ON api_audit (job_id);
CREATE TABLE api_jobs (
    id VARCHAR(32) NOT NULL,
    status VARCHAR(16) NOT NULL,
    kind VARCHAR(20) NOT NULL,
    team VARCHAR(200),
    solver VARCHAR(40) NOT NULL,
    time_limit_s FLOAT NOT NULL,
    nodes INTEGER NOT NULL,
    workloads INTEGER NOT NULL,
    submitted_by VARCHAR(40) NOT NULL,
    created_at {ts} NOT NULL,
    started_at {ts},
    finished_at {ts},
    attempts INTEGER NOT NULL,
    plan_status VARCHAR(20),
    outcome VARCHAR(200),
    error TEXT,
    PRIMARY KEY (id)
);
CREATE INDEX ix_api_jobs_created ON api_jobs (created_at);
CREATE INDEX ix_api_jobs_team ON api_jobs (team);
CREATE INDEX ix_api_jobs_status ON api_jobs (status);
CREATE TABLE api_keys (
    key_hash VARCHAR(64) NOT NULL,
    role VARCHAR(200) NOT NULL,
    created_at {ts} NOT NULL,
    PRIMARY KEY (key_hash)
);
CREATE TABLE api_job_inputs (
    job_id VARCHAR(32) NOT NULL,
    inputs_sha256 VARCHAR(64) NOT NULL,
    input_json TEXT NOT NULL,
    options_json TEXT NOT NULL,
    PRIMARY KEY (job_id),
    FOREIGN KEY(job_id) REFERENCES api_jobs (id) ON DELETE CASCADE
);
CREATE TABLE api_job_results (
    job_id VARCHAR(32) NOT NULL,
    plan_json TEXT NOT NULL,
    PRIMARY KEY (job_id),
    FOREIGN KEY(job_id) REFERENCES api_jobs (id) ON DELETE CASCADE
);
"""
OLD_TABLES = {
    "gpuplan_plan_history",
    "api_audit",
    "api_jobs",
    "api_keys",
    "api_job_inputs",
    "api_job_results",
}
TS = sa.DateTime(timezone=True)
OLD_HISTORY = sa.table(
    "gpuplan_plan_history",
    *(sa.column(n) for n in ("planned_for", "inputs_sha256", "solver", "status", "seed")),
    *(sa.column(n) for n in ("plan_json", "inputs_json", "provenance_json")),
    sa.column("created_at", TS),
)
OLD_JOBS = sa.table(
    "api_jobs",
    *(sa.column(n) for n in ("id", "status", "kind", "team", "solver", "time_limit_s", "nodes")),
    *(sa.column(n) for n in ("workloads", "submitted_by", "attempts", "plan_status", "outcome", "error")),
    *(sa.column(n, TS) for n in ("created_at", "started_at", "finished_at")),
)
OLD_INPUTS = sa.table(
    "api_job_inputs", *(sa.column(n) for n in ("job_id", "inputs_sha256", "input_json", "options_json"))
)
OLD_RESULTS = sa.table("api_job_results", sa.column("job_id"), sa.column("plan_json"))
OLD_AUDIT = sa.table(
    "api_audit",
    *(sa.column(n) for n in ("key_id", "role", "action", "job_id", "detail")),
    sa.column("at", TS),
)
OLD_KEYS = sa.table("api_keys", sa.column("key_hash"), sa.column("role"), sa.column("created_at", TS))


def _old_database(url: str, *, without_kind: bool = False) -> None:
    """Make the tables of the code before the one store (with ``without_kind``, ``api_jobs`` as the
    first API release made it, before jobs had kinds)."""
    engine = make_engine(url)
    pg = engine.dialect.name == "postgresql"
    ddl = OLD_SCHEMA.format(
        ts="TIMESTAMP WITH TIME ZONE" if pg else "DATETIME", serial="SERIAL" if pg else "INTEGER"
    )
    if without_kind:
        ddl = ddl.replace("    kind VARCHAR(20) NOT NULL,\n", "")
    with engine.begin() as conn:
        for statement in ddl.split(";"):
            if statement.strip():
                conn.exec_driver_sql(statement)
    engine.dispose()


def _at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 11, 29, hour, minute, tzinfo=UTC)


def _made_plan(hour: int) -> tuple[Plan, PlanningInput]:
    body = tiny_body()
    inp = PlanningInput.model_validate({"cluster": body["cluster"], "workloads": body["workloads"]})
    return make_plan(inp, solver="first-fit", now=_at(hour), time_limit_s=2.0), inp


def _old_history_row(plan: Plan, inp: PlanningInput, at: datetime) -> dict[str, Any]:
    """A row as the old ``PlanHistory.save`` wrote it."""
    return {
        "created_at": at,
        "planned_for": str(plan.provenance.get("now", "")),
        "inputs_sha256": str(plan.provenance.get("inputs_sha256", "")),
        "solver": plan.solver.name,
        "status": plan.status.value,
        "seed": int(plan.provenance.get("seed", 0)),
        "plan_json": plan.model_dump_json(by_alias=True),
        "inputs_json": inp.model_dump_json(),
        "provenance_json": json.dumps(plan.provenance, sort_keys=True),
    }


def _api_job(job_id: str, status: JobStatus, kind: str, created: datetime, **fields: Any) -> JobRecord:
    values: dict[str, Any] = {
        "id": job_id,
        "kind": kind,
        "status": status,
        "team": "ml",
        "solver": "first-fit",
        "time_limit_s": 2.0,
        "nodes": 2,
        "workloads": 3,
        "submitted_by": "0123456789ab",
        "created_at": created,
        "started_at": None,
        "finished_at": None,
        "attempts": 1,
        "plan_status": None,
        "outcome": None,
        "error": None,
    }
    return JobRecord.model_validate({**values, **fields})


@dataclass(frozen=True)
class OldRows:
    """What :func:`_fill_old_database` stored: two replanned plans, three API jobs of one input."""

    plans: tuple[Plan, Plan]
    inputs: PlanningInput
    done: JobRecord
    failed: JobRecord
    queued: JobRecord
    data: JobInput

    @property
    def jobs(self) -> tuple[JobRecord, ...]:
        return (self.done, self.failed, self.queued)


def _fill_old_database(url: str) -> OldRows:
    """An old database as the code before the one store left it: two plans of ``gpuplan replan`` (at
    10:00 and 11:00), a done plan job (9:00), a failed capacity-gap job (10:30) and a queued job (12:00)
    of the API with their inputs, the done job's plan, their audit records and a key."""
    _old_database(url)
    plan_a, inp = _made_plan(10)
    plan_b, _ = _made_plan(11)
    rows = OldRows(
        plans=(plan_a, plan_b),
        inputs=inp,
        done=_api_job(
            "1" * 32, JobStatus.DONE, "plan", _at(9), started_at=_at(9), finished_at=_at(9, 1),
            plan_status="OPTIMAL", outcome="optimal",
        ),
        failed=_api_job(
            "2" * 32, JobStatus.FAILED, "capacity-gap", _at(10, 30), team=None, finished_at=_at(10, 31),
            error="input: no node types",
        ),
        queued=_api_job("3" * 32, JobStatus.QUEUED, "plan", _at(12), attempts=2),
        data=JobInput("e" * 64, inp.model_dump_json(), {"kind": "plan", "solver": "first-fit", "seed": 0}),
    )  # fmt: skip
    options_json = json.dumps(rows.data.options, sort_keys=True)
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            OLD_HISTORY.insert(), [_old_history_row(p, inp, _at(10 + i)) for i, p in enumerate(rows.plans)]
        )
        conn.execute(OLD_JOBS.insert(), [j.model_dump(exclude={"source"}) for j in rows.jobs])
        conn.execute(
            OLD_INPUTS.insert(),
            [
                {"job_id": j.id, "inputs_sha256": rows.data.inputs_sha256, "input_json": rows.data.input_json,
                 "options_json": options_json}
                for j in rows.jobs
            ],
        )  # fmt: skip
        conn.execute(OLD_RESULTS.insert().values(job_id=rows.done.id, plan_json=plan_a.model_dump_json()))
        conn.execute(
            OLD_AUDIT.insert(),
            [
                {"at": _at(9), "key_id": "0123456789ab", "role": "planner", "action": "submit",
                 "job_id": j.id, "detail": json.dumps({"kind": j.kind})}
                for j in rows.jobs
            ],
        )  # fmt: skip
        conn.execute(OLD_KEYS.insert().values(key_hash="d" * 64, role="viewer:ml", created_at=_at(8)))
        assert conn.execute(sa.text("SELECT id FROM gpuplan_plan_history ORDER BY id")).scalars().all() == [
            1,
            2,
        ]
    engine.dispose()
    return rows


def _numbered(store: Store) -> list[tuple[int, str, str]]:
    """Number, id and source of every job, by number."""
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.number, jobs.c.id, jobs.c.source).order_by(jobs.c.number))
        return [(n, i, s) for n, i, s in rows]


def test_a_database_made_before_alembic_is_converted_with_every_row(db_url: str) -> None:
    old = _fill_old_database(db_url)
    plan_a, plan_b = old.plans
    history = PlanHistory(db_url)  # what gpuplan replan opens: the plans and jobs are converted first
    # The old audit records and keys wait for the API's chain, which the API's store runs.
    assert _tables(db_url) == {"gpuplan_history_version", *PLAN_TABLES, "api_audit", "api_keys"}
    store = Store.open(db_url)
    assert _tables(db_url) == STORE_TABLES
    # The plans keep the numbers replan printed; the API's jobs follow, oldest first.
    numbered = _numbered(store)
    assert [(n, s) for n, _, s in numbered] == [
        (1, "replan"),
        (2, "replan"),
        (3, "api"),
        (4, "api"),
        (5, "api"),
    ]
    assert [i for _, i, _ in numbered[2:]] == [j.id for j in old.jobs]
    latest = history.latest()
    assert latest is not None and latest.id == 2 and latest.job_id == numbered[1][1]
    assert (latest.plan, latest.inputs, latest.created_at) == (plan_b, old.inputs, _at(11))
    assert history.count() == 3  # the two plans and the API's done plan job
    # The API's rows, as they were.
    for job in old.jobs:
        assert store.job(job.id) == job and store.job_input(job.id) == old.data
        trail = [(r["action"], r["at"], r["detail"]) for r in store.audit_trail(job.id)]
        assert trail == [("submit", _at(9), {"kind": job.kind})]
    assert store.result(old.done.id) == plan_a.model_dump_json() and store.result(old.failed.id) is None
    assert (key := KeyStore(store.engine).get("d" * 64)) is not None and key.role == "viewer:ml"
    # A stored plan as a done job of source replan, with its plan, inputs and the options it was made with.
    first = store.job(numbered[0][1])
    assert first is not None
    assert (first.source, first.status, first.kind, first.team, first.solver) == (
        JobSource.REPLAN, JobStatus.DONE, "plan", "ml", "first-fit"
    )  # fmt: skip
    assert (first.nodes, first.workloads, first.created_at) == (2, 3, _at(10))
    assert first.plan_status == plan_a.status.value
    assert Plan.model_validate_json(store.result(first.id) or "") == plan_a
    data = store.job_input(first.id)
    assert data is not None and PlanningInput.model_validate_json(data.input_json) == old.inputs
    assert (data.options["now"], data.options["seed"]) == (_at(10).isoformat(), 0)
    rows, total = store.history(limit=200)
    assert total == 5 and [r.id for r in rows][:2] == [old.queued.id, numbered[1][1]]
    store.close()


def test_a_converted_database_goes_on(db_url: str) -> None:
    """New jobs and audit records are numbered after the copied ones; the API serves the old rows."""
    old = _fill_old_database(db_url)
    history = PlanHistory(db_url)
    store = Store.open(db_url)
    assert history.save(old.plans[1], old.inputs) == 6
    assert store.interrupt_active() == 1 and store.requeue(old.queued.id, Actor("abc", "planner"))
    assert [r["action"] for r in store.audit_trail(old.queued.id)] == ["submit", "resubmit"]
    replanned = _numbered(store)[1][1]
    with _app(db_url) as c:
        listed = c.get("/v1/plans", params={"limit": 200}).json()
        assert listed["total"] == 6 and [j["source"] for j in listed["items"]].count("replan") == 3
        assert Plan.model_validate(c.get(f"/v1/plans/{replanned}/result").json()["plan"]) == old.plans[1]
        assert c.get(f"/v1/plans/{old.queued.id}").json()["attempts"] == 3
    store.close()


def test_jobs_from_before_job_kinds_are_plan_jobs(db_url: str) -> None:
    _old_database(db_url, without_kind=True)
    job = _api_job("4" * 32, JobStatus.CANCELLED, "plan", _at(9), finished_at=_at(9, 2))
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(OLD_JOBS.insert().values(job.model_dump(exclude={"source", "kind"})))
    engine.dispose()
    store = Store.open(db_url)
    assert store.job(job.id) == job and store.history()[1] == 1
    store.close()


def test_a_conversion_that_fails_leaves_the_old_database_as_it_was(db_url: str) -> None:
    _old_database(db_url)
    plan, inp = _made_plan(10)
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(
            OLD_HISTORY.insert(),
            [
                _old_history_row(plan, inp, _at(10)),
                {**_old_history_row(plan, inp, _at(11)), "provenance_json": "{"},
            ],
        )
        conn.execute(OLD_KEYS.insert().values(key_hash="d" * 64, role="viewer:ml", created_at=_at(8)))
    with pytest.raises(json.JSONDecodeError):
        Store(engine)
    assert _tables(db_url) == OLD_TABLES  # no new table, no alembic_version: the DDL was rolled back too
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM gpuplan_plan_history")).scalar_one() == 2
        assert conn.execute(sa.text("SELECT count(*) FROM api_keys")).scalar_one() == 1
    engine.dispose()
