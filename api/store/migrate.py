"""Schema upgrades of the API's tables with Alembic, run on start by the API's store.

The API's chain (:data:`API`) keeps the revisions 0002 to 0004 of the single chain from before the
split, their ids and its version table (``alembic_version``), and has a first revision of its own, 0001,
the API's part of that chain's 0001: a database that chain upgraded is where this chain says it is,
without any change. :func:`upgrade` runs the plan history's chain (``planner.store.migrate``, whose
tables the API's refer to) and then the API's, in one locked transaction, so that a conversion that
fails in either leaves the database as it was.
"""

from __future__ import annotations

from sqlalchemy import Engine

from gpuplan.planner.store import migrate as plan_migrate
from gpuplan.planner.store.db import locked
from gpuplan.planner.store.migrate import Chain

#: The API's chain: audit trail, keys, the queue's columns, workers.
API = Chain("API", "gpuplan.api.store", plan_migrate.SINGLE_CHAIN_VERSIONS)


def upgrade(engine: Engine) -> None:
    """Bring the plan tables and the API's tables to their newest revisions; a no-op, without a lock,
    when both are there already."""
    plans_at, api_at = plan_migrate.PLAN_HISTORY.current(engine), API.current(engine)
    if plans_at == plan_migrate.PLAN_HISTORY.head() and api_at == API.head():
        return
    with locked(engine) as conn:
        plan_migrate.upgrade_on(conn)
        API.upgrade_on(conn)
