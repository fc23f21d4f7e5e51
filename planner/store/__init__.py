"""The plan history: plans made by ``gpuplan replan`` and by the API's jobs, their inputs and results, in
one SQLite file or PostgreSQL database, which the API's store (``api.store``) shares.

``records`` defines a job once (a pydantic model) and its input, ``tables`` derives the job table from
it, ``migrate`` brings any database (empty, made before Alembic, or upgraded by the single chain of
revisions before the API had its own) to the current plan tables with Alembic (the plan history's chain;
the API's runs after it), ``plans`` reads and writes the plans, one short transaction per call, ``db``
makes the engines and ``history`` reads and diffs the plans of ``gpuplan replan``. The API's tables
(keys, the audit trail, workers, the job queue's columns), admission and queue are the API's.
"""
