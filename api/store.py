"""The API's store: the one store of plans and jobs (``planner.store``), under the names the routes use.

Jobs, their inputs and results, the audit trail and the API keys live with the plans of ``gpuplan
replan`` in one database, so a replanned plan is in the API's history and an API plan is what replan
starts from.
"""

from __future__ import annotations

from gpuplan.planner.store.records import Actor, JobInput, JobRecord, JobStatus, now
from gpuplan.planner.store.store import ActiveLimitReached, Store

__all__ = ["Actor", "ActiveLimitReached", "JobInput", "JobRecord", "JobStatus", "Store", "now"]
