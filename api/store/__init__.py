"""The API's store: its tables (keys, the audit trail, workers, the job queue's columns on the plan
history's job table), their Alembic migrations, and admission of jobs, on the database of the plan
history (``planner.store``), which it shares.

``records`` holds what only the API records of a job (who acted, which states are active or may be
resubmitted; the job and its input are the plan history's, ``planner.store.records``), ``tables`` the
API's view of the schema, ``migrate`` brings a database to it (the plan history's chain first, then the
API's), and ``store`` reads and writes jobs, their audit trail and admissions, one short transaction per
call. The queue's claims and leases are ``api.queue``; the key rows ``api.keys``.
"""

from __future__ import annotations

from gpuplan.api.store.records import Actor
from gpuplan.api.store.store import ActiveLimitReached, Store

__all__ = ["ActiveLimitReached", "Actor", "Store"]
