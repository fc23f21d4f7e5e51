"""The PuLP solver engines: HiGHS when its Python binding is usable, else the CBC that PuLP ships.

One factory for every MILP gpuplan solves (the placement back-end and the capacity purchase), so that
both pick the same engine and prove optimality to the same (zero) gap.
"""

from __future__ import annotations

import warnings
from functools import cache

import pulp


@cache
def highs_available() -> bool:
    """Whether PuLP can drive HiGHS in this environment."""
    return bool(pulp.HiGHS().available())


def engine_name(backend: str) -> str:
    """The engine :func:`pulp_engine` uses for ``backend`` (``highs`` falls back to ``cbc``)."""
    return "highs" if backend == "highs" and highs_available() else "cbc"


def pulp_engine(backend: str, time_limit_s: float, threads: int) -> pulp.LpSolver:
    """A PuLP engine that stops at the time limit and calls a solution optimal only at a zero gap
    (both engines stop at a 0.01% relative gap by default)."""
    if engine_name(backend) == "highs":
        # HiGHS' thread pool is process-wide and set once: a thread count differing from the first
        # one a process used makes every later solve fail, so HiGHS keeps its own default.
        return pulp.HiGHS(msg=False, timeLimit=time_limit_s, gapRel=0.0, gapAbs=0.0)
    with warnings.catch_warnings():
        # PuLP 3.3 deprecates its bundled CBC binary for 4.0; it is the CBC this pinned PuLP ships.
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(msg=False, timeLimit=time_limit_s, threads=threads, gapRel=0.0, gapAbs=0.0)
