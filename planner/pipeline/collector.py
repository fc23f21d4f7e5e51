"""CPython's cyclic garbage collector run rarely while a plan is made.

Planning a fleet allocates millions of small objects (requests, node states, assignments, actions)
that live until the plan is returned. With the interpreter's default thresholds the collector passes
over them every 700 net allocations and rescans the older generations again and again as they grow: on
a 12,258-replica round of the openb fleet (1,213 nodes) it took 1.1-1.5 s of a 5 s ``make_plan``
(compile 0.5 → 0.3 s, building the plan 2.2 → 1.2 s; B2, ``benchmarks/README.md``). While a plan is
made the youngest generation's threshold is raised to :data:`YOUNG_THRESHOLD` (the collector still
runs, so reference cycles are still freed) and the older generations' passes are spaced out; the
process's own thresholds come back when the last plan being made returns. Plans made at once on several
threads share one raised setting.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Net allocations between passes over the youngest generation while a plan is made (default 700).
YOUNG_THRESHOLD = 100_000
#: Passes of each generation between passes over the next older one while a plan is made (default 10).
OLDER_EVERY = (50, 100)


class _Raised:
    """How many plans are being made, and the thresholds to put back after the last one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = 0
        self.saved: tuple[int, int, int] = gc.get_threshold()


_RAISED = _Raised()


@contextmanager
def collector_spaced_out() -> Iterator[None]:
    """Raise the collector's thresholds for the block (see the module docstring); restore them after
    the last such block on any thread ends. Thresholds already higher are kept."""
    with _RAISED.lock:
        if _RAISED.active == 0:
            _RAISED.saved = gc.get_threshold()
            young, older, oldest = _RAISED.saved
            if young:  # a threshold of 0 turns automatic collection off: left so
                gc.set_threshold(
                    max(young, YOUNG_THRESHOLD), max(older, OLDER_EVERY[0]), max(oldest, OLDER_EVERY[1])
                )
        _RAISED.active += 1
    try:
        yield
    finally:
        with _RAISED.lock:
            _RAISED.active -= 1
            if _RAISED.active == 0:
                gc.set_threshold(*_RAISED.saved)
