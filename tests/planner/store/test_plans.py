"""The plan history's own tables and chain, on SQLite and PostgreSQL: ``gpuplan replan`` makes only the
plan tables (the API's come with the API's store), their schema is the one ``tables`` describes, plans
are numbered in the order they were stored, and a plan history a newer gpuplan upgraded is refused."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext

from gpuplan.cli import main
from gpuplan.models.base import InputError
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.planner.planning import make_plan
from gpuplan.planner.store.db import locked, make_engine
from gpuplan.planner.store.history import PlanHistory
from gpuplan.planner.store.migrate import FIRST, PLAN_HISTORY
from gpuplan.planner.store.records import PLAN_KIND, JobSource, JobStatus
from gpuplan.planner.store.tables import metadata
from tests._api import tiny_body

PLAN_TABLES = {"gpuplan_history_version", "gpuplan_jobs", "gpuplan_job_inputs", "gpuplan_job_results"}
NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def _diff(conn: sa.Connection) -> list[Any]:
    """What Alembic finds different between the database and the plan tables (the version table aside)."""

    def include(name: str | None, kind: str, _parent: Any) -> bool:
        return not (kind == "table" and name == PLAN_HISTORY.version_table)

    return list(compare_metadata(MigrationContext.configure(conn, opts={"include_name": include}), metadata))


def _plan() -> tuple[Plan, PlanningInput]:
    body = tiny_body()
    inp = PlanningInput.model_validate({"cluster": body["cluster"], "workloads": body["workloads"]})
    return make_plan(inp, solver="first-fit", now=NOW, time_limit_s=2.0), inp


def test_the_plan_history_makes_only_its_tables_and_stores_plans(db_url: str) -> None:
    history = PlanHistory(db_url)
    engine = history.store.engine
    assert _tables(engine) == PLAN_TABLES
    with engine.connect() as conn:
        assert PLAN_HISTORY.revision(conn) == PLAN_HISTORY.head() == FIRST and _diff(conn) == []
    plan, inp = _plan()
    assert [history.save(plan, inp), history.save(plan, inp)] == [1, 2]
    latest = history.latest()
    assert latest is not None and latest.id == 2 and latest.inputs == inp
    assert (latest.job.source, latest.job.status, latest.job.submitted_by) == (
        JobSource.REPLAN,
        JobStatus.DONE,
        "cli",
    )
    assert history.count() == 2 and history.store.done_job(PLAN_KIND, 1) is not None
    with locked(engine) as conn:
        command.downgrade(PLAN_HISTORY.config(conn), "base")
    assert _tables(engine) == {PLAN_HISTORY.version_table}
    PlanHistory(engine=engine)
    assert _tables(engine) == PLAN_TABLES and PlanHistory(engine=engine).count() == 0
    engine.dispose()


def test_a_plan_history_from_a_newer_gpuplan_is_refused(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    PlanHistory(db_url).store.close()
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {PLAN_HISTORY.version_table} SET version_num = 'f00d'"))
    engine.dispose()
    with pytest.raises(InputError, match="plan history schema \\(revision f00d\\) is newer"):
        PlanHistory(db_url)
    assert main(["replan", "--db", db_url]) == 2
    assert "newer than this gpuplan knows" in capsys.readouterr().err
