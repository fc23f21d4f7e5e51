"""A database outage as one process sees it: requests answered 503 with ``Retry-After`` meanwhile, one log
line when it starts and one when it ends (not a traceback per call), and no lease expired until the
holders have had a lease's time to renew theirs after it.

An outage is an error that says the database cannot be reached (:func:`unreachable`: the connection
refused, lost or timed out), not one that says a statement is wrong, which stays a 500 with its traceback.
It ends at the first database call of this process that succeeds after it (the runner's loops make one
every second or two).
"""

from __future__ import annotations

import logging
import math
import time

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from gpuplan.planner.store.db import driver_reason

log = logging.getLogger(__name__)

#: The longest ``Retry-After`` of an outage, in seconds.
MAX_RETRY_S = 30


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the database cannot be reached now (rather than that a statement is wrong)."""
    if isinstance(exc, OperationalError | InterfaceError | PoolTimeout):
        return True
    return isinstance(exc, DBAPIError) and exc.connection_invalidated


class Outage:
    """This process's view of the database: up, or down since a moment (``since``); ``lease_s`` is how
    long after an outage leases are left alone (see :meth:`expiry_paused`)."""

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        self.since: float | None = None
        #: When the last outage ended (``-inf``: none seen).
        self.ended = -math.inf
        #: Database calls that failed during the current outage.
        self.failures = 0

    @property
    def down(self) -> bool:
        """The database was unreachable at the last call."""
        return self.since is not None

    def failed(self, exc: SQLAlchemyError) -> None:
        """A call found the database unreachable: log it if that starts an outage."""
        self.failures += 1
        if self.since is None:
            self.since = time.monotonic()
            log.warning(
                "database unreachable (%s): requests are answered 503 and finished results are kept "
                "until it returns",
                driver_reason(exc),
            )

    def succeeded(self) -> None:
        """A call reached the database: log the end of an outage."""
        if self.since is None:
            return
        took = time.monotonic() - self.since
        log.warning(
            "database reachable again after %.1f s (%d call(s) failed meanwhile)", took, self.failures
        )
        self.since = None
        self.failures = 0
        self.ended = time.monotonic()

    def retry_after(self) -> int:
        """Seconds a client should wait before retrying: half the outage's length so far (an outage that
        has lasted long is likely to last a while yet), at least 1 and at most ``MAX_RETRY_S``."""
        if self.since is None:
            return 1
        return min(MAX_RETRY_S, max(1, math.ceil((time.monotonic() - self.since) / 2)))

    def expiry_paused(self) -> bool:
        """Leave expired leases alone: during an outage, and for a lease's time after it, so that the
        holders that lived through it renew their leases first. A lease that ran out because the
        database was down is not the holder's failure and must not count against its job."""
        return self.since is not None or time.monotonic() - self.ended < self.lease_s
