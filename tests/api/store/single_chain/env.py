"""The single chain of revisions before the plan history and the API had one each, as gpuplan shipped it
(``planner/store/migrations/`` at commit 582b8b0), frozen: ``test_single_chain`` makes databases with it.

Alembic's environment for the store: the migrations run on the connection ``migrate.upgrade`` hands
over, inside its locked transaction (there is no URL to connect to and no ``alembic.ini``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

connection: Connection = context.config.attributes["connection"]
context.configure(connection=connection)
with context.begin_transaction():
    context.run_migrations()
