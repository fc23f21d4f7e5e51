"""The minimum runtime: a running replica is moved, preempted or drained only after it has run the
policy's ``disruption.min_runtime_s``."""

from __future__ import annotations

from datetime import datetime


def runtime_s(started_at: datetime | None, now: datetime) -> float | None:
    """Seconds a replica started at ``started_at`` has run at ``now`` (0 if it starts later); ``None``
    when its start is unknown."""
    return None if started_at is None else max(0.0, (now - started_at).total_seconds())


def ran_long_enough(ran_s: float | None, min_runtime_s: float) -> bool:
    """Whether a replica that has run ``ran_s`` seconds may be stopped under a minimum runtime of
    ``min_runtime_s``; an unknown runtime (``None``) counts as long enough: nothing says otherwise."""
    return ran_s is None or ran_s >= min_runtime_s


def may_stop(started_at: datetime | None, now: datetime, min_runtime_s: float) -> bool:
    """Whether a replica started at ``started_at`` may be stopped at ``now`` under a minimum runtime of
    ``min_runtime_s`` (an unknown start: yes)."""
    return ran_long_enough(runtime_s(started_at, now), min_runtime_s)
