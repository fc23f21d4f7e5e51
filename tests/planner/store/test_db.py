"""The shared engine factory: SQLite files and PostgreSQL URLs, and clear errors for bad targets."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from gpuplan.models.base import InputError
from gpuplan.planner.store.db import database_url, make_engine


def test_round_trip(db_url: str) -> None:
    engine = make_engine(db_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
        conn.execute(text("INSERT INTO t VALUES (7)"))
    with engine.connect() as conn:
        assert conn.execute(text("SELECT x FROM t")).scalar_one() == 7
    engine.dispose()


def test_path_becomes_sqlite_url(tmp_path: Path) -> None:
    assert database_url(str(tmp_path / "h.db")) == f"sqlite:///{tmp_path / 'h.db'}"
    assert database_url("postgresql://u@h/db").startswith("postgresql+psycopg://")


@pytest.mark.parametrize("target", ["mysql://u@h/db", "sqlite:///nonexistent-dir/x/h.db"])
def test_bad_targets_are_input_errors(target: str) -> None:
    with pytest.raises(InputError, match="database"):
        make_engine(target)
