"""Alembic's scripts for the store: ``env.py`` and the revisions in ``versions/``, run by ``migrate``."""
