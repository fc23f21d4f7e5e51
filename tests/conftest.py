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


#: Test modules that run a Ray instance: slow as a whole.
SLOW_MODULES = ("test_ray",)
#: The fixture of the shared real ``gpuplan serve`` (``tests._api.live``): every test that uses it is slow.
LIVE_FIXTURE = "live"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the Ray tests and the tests on the shared live server ``slow``, so that ``pytest -m "not slow"``
    is the fast subset. The API tests in process (FastAPI's ``TestClient``) stay in it; a test that starts
    its own server carries the mark itself (``tests._api.Server`` refuses to start in a test without it),
    and so do long solves."""
    for item in items:
        if item.path.name.startswith(SLOW_MODULES) or LIVE_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


#: Whether the test being set up, run or torn down is marked ``slow`` (``None`` outside a test).
_running_slow: list[bool | None] = [None]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures are set up: note whether it is marked ``slow``."""
    _running_slow[0] = item.get_closest_marker("slow") is not None


def running_slow() -> bool | None:
    """Whether the current test is marked ``slow``; ``None`` when no test has been set up."""
    return _running_slow[0]
