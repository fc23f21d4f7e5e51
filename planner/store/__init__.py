"""The one store of plans and jobs: plans made by ``gpuplan replan`` and jobs of the API, their inputs,
results and audit trail, and the API's keys, in one SQLite file or PostgreSQL database.

``records`` defines a job once (a pydantic model), ``tables`` derives the job table from it, ``migrate``
brings any database (empty, or made by the code before this store) to the current schema with Alembic,
``keys`` defines the API keys (roles, hashes, expiry), ``store`` reads and writes it all, one short
transaction per call, ``db`` makes the engines and ``history`` reads and diffs the plans of ``gpuplan
replan``. The job queue that servers and workers share is the API's (:mod:`gpuplan.api.queue`).
"""
