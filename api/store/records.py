"""What the API records of a job beyond the plan history's record (``planner.store.records``): who acted
on it, for the audit trail, and which of its states the queue and admission count."""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.planner.store.records import JobStatus

#: Jobs queued or running: what the active-job limit counts and the queue runs.
ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)
#: Finished jobs that may be submitted again with their stored input.
RESUBMITTABLE = (JobStatus.INTERRUPTED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(frozen=True)
class Actor:
    """Who did something, for the audit trail."""

    key_id: str
    role: str
