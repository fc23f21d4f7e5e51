"""The gang rule: the replicas of a gang (workloads sharing ``gang``) are placed all together or not at all,
inside one value of its domain label (``gang_domain``).

A gang that runs only in part now (fleets drift, and a partly started gang is legal input) is a broken
gang. A plan may keep it broken only as it runs: every running member stays exactly where it runs and
no other member is placed (the validator reports it under ``stays_broken``); or it completes the gang
(the members that do not run are placed, all of them together, the running ones kept or moved), or stops
it (every running member preempted, where the policy allows). A plan never places in part a gang that
does not run in part now. The validator judges a plan with :func:`kept_in_part`; the exact formulation,
the placement kernel's callers, the decompositions and the explanations keep the same rule through
:func:`runs_in_part` (with ``solvers.problem``'s requests: ``gangs_in_part``).

A gang placed whole or not at all can never be placed when no value of its domain label (the whole
cluster, for a gang without one) could hold all its replicas even with every node empty
(:func:`never_fits`; ``solvers.placement.never`` counts the room for the solvers, the bounds and the
explanations).
"""

from __future__ import annotations

from collections.abc import Iterable

#: Rule name, as the validator reports it.
GANG = "gang"


def runs_in_part(running: int, total: int) -> bool:
    """Whether a gang of ``total`` replicas, ``running`` of which run now, runs only in part."""
    return 0 < running < total


def kept_in_part(total: int, running: int, placed: int, staying: int) -> bool:
    """Whether a plan that places ``placed`` of a gang's ``total`` replicas in part (0 < ``placed`` <
    ``total``) only keeps the part that runs now: the gang runs in part (``running`` replicas) and the
    plan places exactly those, each where it runs (``staying`` of the placed replicas stay where they
    run)."""
    return runs_in_part(running, total) and placed == staying == running


def never_fits(replicas: int, room: Iterable[int]) -> bool:
    """Whether a gang of ``replicas`` can never be placed: ``room`` holds, per value of its domain label
    (one entry, the whole cluster, without a label), at most how many of its replicas that value's nodes
    could hold were they all empty; none holds them all (no value at all: never)."""
    return all(r < replicas for r in room)
