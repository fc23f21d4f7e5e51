"""Alembic's scripts for the API's tables: ``env.py`` and the revisions in ``versions/``, run by
``api.store.migrate``."""
