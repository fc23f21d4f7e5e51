"""Schema upgrades with Alembic, run on start by the store itself (no ``alembic`` command needed).

The migration scripts ship inside the package (``migrations/``). :func:`upgrade` brings a database to
the newest revision in one locked transaction: an empty database gets the current schema, a database
made before Alembic (whose tables ``create_all`` made) is converted with every row kept, a database
already at the newest revision is left alone without taking any lock, and one that a newer gpuplan
upgraded past the revisions shipped here is refused with an input error.
"""

from __future__ import annotations

import logging
from functools import cache
from importlib.resources import files

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine

from gpuplan.models.base import InputError
from gpuplan.planner.store.db import locked

log = logging.getLogger(__name__)

#: Where the migration scripts are: ``env.py`` and ``versions/``.
MIGRATIONS = str(files("gpuplan.planner.store") / "migrations")


def alembic_config(conn: Connection | None = None) -> Config:
    """An Alembic configuration for the shipped scripts, running on ``conn`` (see ``migrations/env.py``)."""
    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    config.attributes["connection"] = conn
    return config


@cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


def head() -> str:
    """The newest revision."""
    revision = _scripts().get_current_head()
    assert revision is not None
    return revision


def known(revision: str) -> bool:
    """Whether ``revision`` is one of the shipped revisions."""
    return any(script.revision == revision for script in _scripts().walk_revisions())


def revision(conn: Connection) -> str | None:
    """The revision the database is at (``None``: empty, or made before Alembic)."""
    return MigrationContext.configure(conn).get_current_revision()


def upgrade(engine: Engine) -> None:
    """Bring the database to the newest revision; a no-op when it is there already."""
    with engine.connect() as conn:
        current = revision(conn)
    if current == head():
        return
    if current is not None and not known(current):
        where = engine.url.render_as_string(hide_password=True)
        raise InputError(
            f"database '{where}': its schema (revision {current}) is newer than this gpuplan knows "
            f"(revision {head()}); use the gpuplan that upgraded it, or a newer one"
        )
    with locked(engine) as conn:
        before = revision(conn)  # another process may have upgraded it while this one waited
        if before == head():
            return
        log.info("upgrading the database schema from %s to %s", before or "none", head())
        command.upgrade(alembic_config(conn), "head")
