"""Schema upgrades with Alembic, run on start by the stores themselves (no ``alembic`` command needed).

Each store keeps its own line of revisions (a :class:`Chain`): its scripts ship inside its package
(``migrations/``) and a version table of its own records where a database is on it. The plan history's
chain (:data:`PLAN_HISTORY`, here) makes the plan tables; the API's chain (``gpuplan.api.store``) makes
the API's tables and runs after it. :meth:`Chain.upgrade` brings a database to a chain's newest revision
in one locked transaction: an empty database gets the current schema, a database made before Alembic
(whose tables ``create_all`` made) is converted with every row kept, a database already at the newest
revision is left alone without taking any lock, and one that a newer gpuplan upgraded past the revisions
shipped here is refused with an input error.

Before the two chains, one chain (revisions 0001 to 0004, recorded in ``alembic_version``) made every
table. Its revisions 0002 to 0004 and its table are the API's chain's now, which keeps their ids; its
0001 made the plan tables and the API's first ones. A database that single chain upgraded has a revision
in ``alembic_version`` and no plan history version table: its plan tables are those of
:data:`PLAN_HISTORY`'s first revision, which is recorded for it (:func:`adopted`) and nothing else is
changed, so that the API's chain goes on from the revision that table holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect

from gpuplan.models.base import InputError
from gpuplan.planner.store.db import locked

log = logging.getLogger(__name__)

#: The version table of the single chain before the stores had one each (the API's chain's now).
SINGLE_CHAIN_VERSIONS = "alembic_version"


@dataclass(frozen=True)
class Chain:
    """One store's line of Alembic revisions: where its scripts are and which table records where a
    database is on it."""

    #: What the chain makes, for messages (``plan history``).
    name: str
    #: The package whose ``migrations/`` folder holds ``env.py`` and ``versions/``.
    package: str
    #: The table that records the chain's revision in a database.
    version_table: str

    def config(self, conn: Connection | None = None) -> Config:
        """An Alembic configuration for the chain's scripts, running on ``conn`` (see ``env.py``)."""
        config = Config()
        config.set_main_option("script_location", str(files(self.package) / "migrations"))
        config.attributes["connection"] = conn
        config.attributes["version_table"] = self.version_table
        return config

    def head(self) -> str:
        """The newest revision."""
        revision = _scripts(self).get_current_head()
        assert revision is not None
        return revision

    def known(self, revision: str) -> bool:
        """Whether ``revision`` is one of the chain's shipped revisions."""
        return any(script.revision == revision for script in _scripts(self).walk_revisions())

    def revision(self, conn: Connection) -> str | None:
        """The chain's revision in the database (``None``: none yet, or made before Alembic)."""
        context = MigrationContext.configure(conn, opts={"version_table": self.version_table})
        return context.get_current_revision()

    def current(self, engine: Engine) -> str | None:
        """The chain's revision in the database; an input error when a newer gpuplan upgraded it past
        the revisions shipped here."""
        with engine.connect() as conn:
            found = self.revision(conn)
        if found is not None and not self.known(found):
            where = engine.url.render_as_string(hide_password=True)
            raise InputError(
                f"database '{where}': its {self.name} schema (revision {found}) is newer than this "
                f"gpuplan knows (revision {self.head()}); use the gpuplan that upgraded it, or a newer one"
            )
        return found

    def upgrade_on(self, conn: Connection) -> None:
        """Bring the database to the newest revision on ``conn``, which holds the write lock
        (:func:`~gpuplan.planner.store.db.locked`); a no-op when it is there already."""
        before = self.revision(conn)  # another process may have upgraded it while this one waited
        if before == self.head():
            return
        log.info("upgrading the %s schema from %s to %s", self.name, before or "none", self.head())
        command.upgrade(self.config(conn), "head")

    def upgrade(self, engine: Engine) -> None:
        """Bring the database to the newest revision in one locked transaction; a no-op, without a
        lock, when it is there already."""
        if self.current(engine) == self.head():
            return
        with locked(engine) as conn:
            self.upgrade_on(conn)


@cache
def _scripts(chain: Chain) -> ScriptDirectory:
    return ScriptDirectory.from_config(chain.config())


#: The plan history's chain: the plan tables (``tables``).
PLAN_HISTORY = Chain("plan history", "gpuplan.planner.store", "gpuplan_history_version")
#: The plan history's first revision: the plan tables as the single chain's revision 0001 made them.
FIRST = "history_0001"


def adopted(conn: Connection) -> bool:
    """Record :data:`FIRST` for a database that the single chain upgraded (a revision in
    :data:`SINGLE_CHAIN_VERSIONS`, none in the plan history's table), on ``conn``, which holds the write
    lock; whether it did. Nothing else is changed."""
    if PLAN_HISTORY.revision(conn) is not None:
        return False
    if SINGLE_CHAIN_VERSIONS not in inspect(conn).get_table_names():
        return False
    single = MigrationContext.configure(conn, opts={"version_table": SINGLE_CHAIN_VERSIONS})
    if single.get_current_revision() is None:
        return False
    log.info("the plan tables were made by the single chain before the split: recorded as %s", FIRST)
    command.stamp(PLAN_HISTORY.config(conn), FIRST)
    return True


def upgrade_on(conn: Connection) -> None:
    """Bring the plan tables to the newest revision on ``conn``, which holds the write lock; a database
    that the single chain upgraded is adopted first (:func:`adopted`)."""
    adopted(conn)
    PLAN_HISTORY.upgrade_on(conn)


def upgrade(engine: Engine) -> None:
    """Bring the plan tables to the newest revision; a no-op, without a lock, when they are there."""
    if PLAN_HISTORY.current(engine) == PLAN_HISTORY.head():
        return
    with locked(engine) as conn:
        upgrade_on(conn)
