"""Databases made by the single chain of revisions before the split (0001 to 0004 in ``alembic_version``,
every table; ``single_chain/``, frozen as gpuplan shipped it) go on with the two chains: nothing is
migrated or lost, the plan history records its first revision, the API's chain goes on from the
revision that table holds, and the schema is the one the two chains make from scratch."""

from __future__ import annotations

from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from gpuplan.api.keys import KeyStore
from gpuplan.api.queue import JobQueue
from gpuplan.api.store import Actor, Store
from gpuplan.api.store.migrate import API
from gpuplan.api.store.tables import api_keys, audit, jobs, metadata, workers
from gpuplan.planner.store.db import locked, make_engine
from gpuplan.planner.store.history import PlanHistory
from gpuplan.planner.store.migrate import FIRST, PLAN_HISTORY
from gpuplan.planner.store.records import PLAN_KIND, JobInput, JobSource, JobStatus
from tests._factories import queued_job
from tests.api.store.test_store import VERSION_TABLES, schema_diff
from tests.conftest import fresh_postgres

SINGLE_CHAIN = Path(__file__).with_name("single_chain")
SINGLE_REVISIONS = ("0001", "0002", "0003", "0004")
AT = datetime(2026, 12, 1, 9, tzinfo=UTC)
ACTOR = Actor("0123456789ab", "planner")


def _single_chain(conn: sa.Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(SINGLE_CHAIN))
    config.attributes["connection"] = conn
    return config


def _old_database(url: str, revision: str) -> None:
    """A database as the gpuplan of the single chain left it at ``revision``, with a plan of ``gpuplan
    replan`` (number 1), a done API job with its result and audit record (2), a queued job (3), a key,
    and from 0003 on a running job's lease, from 0004 on a worker's heartbeat."""
    engine = make_engine(url)
    with locked(engine) as conn:
        command.upgrade(_single_chain(conn), revision)
    old = sa.MetaData()
    old.reflect(engine)
    t = old.tables
    data = {"inputs_sha256": "e" * 64, "input_json": '{"workloads": []}', "options_json": '{"kind": "plan"}'}
    replanned = queued_job("a" * 32, source=JobSource.REPLAN, status=JobStatus.DONE, submitted_by="cli")
    done = queued_job("b" * 32, status=JobStatus.DONE, plan_status="OPTIMAL")
    queued = queued_job("c" * 32)
    stamp = {"created_at": AT, "finished_at": AT}
    rows = [
        {**replanned.model_dump(), **stamp},
        {**done.model_dump(), **stamp},
        {**queued.model_dump(), "created_at": AT},
    ]
    with engine.begin() as conn:
        conn.execute(t["gpuplan_jobs"].insert(), rows)
        conn.execute(t["gpuplan_job_inputs"].insert(), [{"job_id": i * 32, **data} for i in "abc"])
        conn.execute(t["gpuplan_job_results"].insert(), [{"job_id": i * 32, "plan_json": "{}"} for i in "ab"])
        conn.execute(
            t["gpuplan_audit"]
            .insert()
            .values(
                at=AT, key_id=ACTOR.key_id, role=ACTOR.role, action="submit", job_id="b" * 32, detail="{}"
            )
        )
        conn.execute(
            t["gpuplan_api_keys"].insert().values(key_hash="d" * 64, role="viewer:ml", created_at=AT)
        )
        if revision >= "0003":
            conn.execute(
                t["gpuplan_jobs"].update().where(t["gpuplan_jobs"].c.id == "c" * 32)
                .values(status="running", lease_owner="old-worker", lease_until=AT, lease_expiries=1)
            )  # fmt: skip
        if revision >= "0004":
            conn.execute(
                t["gpuplan_workers"].insert().values(owner="old-worker", processes=2, ready=1, seen_at=AT)
            )
    engine.dispose()


def _versions(url: str) -> dict[str, str | None]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return {"plans": PLAN_HISTORY.revision(conn), "api": API.revision(conn)}
    finally:
        engine.dispose()


def _rows(engine: sa.Engine, table: sa.Table) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        return [
            dict(r) for r in conn.execute(sa.select(table).order_by(*table.primary_key.columns)).mappings()
        ]


@pytest.mark.parametrize("revision", SINGLE_REVISIONS)
def test_a_database_of_the_single_chain_goes_on_with_every_row(db_url: str, revision: str) -> None:
    _old_database(db_url, revision)
    before = _versions(db_url)
    assert before == {"plans": None, "api": revision}
    store = Store.open(db_url)
    # The plan history recorded its first revision; the API's chain went on from where the single chain was.
    assert _versions(db_url) == {"plans": FIRST, "api": API.head()}
    with store.engine.connect() as conn:
        assert schema_diff(conn, metadata) == []
    assert [r["id"] for r in _rows(store.engine, jobs)] == [i * 32 for i in "abc"]
    assert [r["number"] for r in _rows(store.engine, jobs)] == [1, 2, 3]
    assert [(r["action"], r["job_id"]) for r in _rows(store.engine, audit)] == [("submit", "b" * 32)]
    assert (key := KeyStore(store.engine).get("d" * 64)) is not None and key.role == "viewer:ml"
    assert key.expires_at is None and key.revoked_at is None
    assert store.result("b" * 32) == "{}" and store.job_input("c" * 32) == JobInput(
        "e" * 64, '{"workloads": []}', {"kind": "plan"}
    )
    replanned = store.job("a" * 32)
    assert replanned is not None and replanned.source is JobSource.REPLAN
    if revision >= "0003":
        job = _rows(store.engine, jobs)[2]
        assert (job["status"], job["lease_owner"], job["lease_expiries"]) == ("running", "old-worker", 1)
    if revision >= "0004":
        assert [r["owner"] for r in _rows(store.engine, workers)] == ["old-worker"]
    # The stored plans are the plan history's, and new jobs and audit records follow the old ones.
    history = PlanHistory(engine=store.engine)
    assert history.count() == 2 and history.store.done_job(PLAN_KIND, 1) is not None
    assert store.create_job(queued_job("f" * 32), JobInput("e" * 64, "{}", {}), ACTOR, {}) == 4
    assert [r["id"] for r in _rows(store.engine, audit)] == [1, 2]
    store.close()


def test_replan_alone_adopts_the_database_and_leaves_the_api_revision_as_it_was(db_url: str) -> None:
    """``gpuplan replan`` opens a database of the single chain at 0002 without the API: the plan history
    records its revision and stores its plan; the API's revision is left for the API's chain, which
    later adds the queue's columns and the workers' table without running 0002 again."""
    _old_database(db_url, "0002")
    history = PlanHistory(db_url)
    assert _versions(db_url) == {"plans": FIRST, "api": "0002"}
    assert history.count() == 2 and [number for number, _, _ in history.store.done_results(PLAN_KIND, 5)] == [
        2,
        1,
    ]
    history.store.close()
    store = Store.open(db_url)
    assert _versions(db_url) == {"plans": FIRST, "api": API.head()}
    assert store.status_counts() == {"done": 2, "queued": 1}
    assert JobQueue(store.engine, "new-worker", 60.0, 3).claim() is not None
    assert len(_rows(store.engine, api_keys)) == 1
    store.close()


def test_the_two_chains_make_the_schema_of_the_single_chain(tmp_path: Path, db_url: str) -> None:
    """From scratch, the two chains make the tables, columns, indexes and keys the single chain made, and
    the API's revision is the single chain's head: the gpuplan before the split finds it current."""
    with ExitStack() as stack:
        old_url = (
            stack.enter_context(fresh_postgres())
            if db_url.startswith("postgresql")
            else str(tmp_path / "single.db")
        )
        engine = make_engine(old_url)
        stack.callback(engine.dispose)
        with locked(engine) as conn:
            command.upgrade(_single_chain(conn), "head")
        Store.open(db_url).close()
        new = make_engine(db_url)
        stack.callback(new.dispose)
        assert _schema(new) == _schema(engine)
        assert _versions(db_url)["api"] == ScriptDirectory.from_config(_single_chain()).get_current_head()


def _schema(engine: sa.Engine) -> dict[str, Any]:
    """Every table but the version tables: its columns (name, type, nullable, default), primary key,
    foreign keys, unique constraints and indexes."""
    found = sa.inspect(engine)
    out: dict[str, Any] = {}
    for table in sorted(set(found.get_table_names()) - VERSION_TABLES):
        columns = sorted(
            (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
            for c in found.get_columns(table)
        )
        foreign = sorted(
            (tuple(f["constrained_columns"]), f["referred_table"], tuple(f["referred_columns"]))
            for f in found.get_foreign_keys(table)
        )
        unique = sorted((u["name"], tuple(u["column_names"])) for u in found.get_unique_constraints(table))
        indexes = sorted((i["name"], tuple(i["column_names"]), i["unique"]) for i in found.get_indexes(table))
        primary = tuple(found.get_pk_constraint(table)["constrained_columns"])
        out[table] = (columns, primary, foreign, unique, indexes)
    return out
