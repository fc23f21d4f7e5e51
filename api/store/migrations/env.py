"""Alembic's environment for the API's tables: the migrations run on the connection ``api.store.migrate``
hands over, inside its locked transaction (there is no URL to connect to and no ``alembic.ini``), and
record their revision in the API's version table."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

connection: Connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=context.config.attributes["version_table"])
with context.begin_transaction():
    context.run_migrations()
