"""Shared fixtures: database URLs for store tests (a SQLite file always, PostgreSQL when CI runs one)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text

from gpuplan.planner.store.db import make_engine, postgres_test_url


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file under ``tmp_path``, or a new schema-less PostgreSQL database."""
    if request.param == "sqlite":
        yield str(tmp_path / "gpuplan.db")
        return
    with fresh_postgres() as url:
        yield url


@contextmanager
def fresh_postgres() -> Iterator[str]:
    """A new database on the CI PostgreSQL (the test skips without one), dropped afterwards."""
    base = postgres_test_url()
    if base is None:
        pytest.skip("no PostgreSQL server (set GPUPLAN_TEST_POSTGRES_URL; .ci/run starts one)")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = make_engine(base).execution_options(isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield base.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


#: Test modules that run real servers on loopback or a Ray instance: slow as a whole.
SLOW_MODULES = ("test_api_", "test_ray")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the live-server and Ray tests ``slow``, so that ``pytest -m "not slow"`` is the fast subset
    (long solves carry the mark themselves)."""
    for item in items:
        if item.path.name.startswith(SLOW_MODULES):
            item.add_marker(pytest.mark.slow)
