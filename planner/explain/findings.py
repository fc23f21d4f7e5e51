"""Reason codes and the finding that carries one: the code, its sentence, the resources it names and the
counterfactual searches that may lift it. One vocabulary for every diagnosis and for the explainer
that chooses among them.

Codes: ``NO_CAPACITY``, ``NO_NVLINK_CLIQUE`` (no node has, or has free, an all-to-all NVLink group of
the size asked), ``NUMA``, ``GPU_MODEL``, ``MIG_LAYOUT``, ``MIG_MODE`` (no node could host it with its
GPUs' MIG modes as the plan leaves them, but one could with MIG turned off, or on: never
``NEVER_FITS``), ``QUOTA``, ``ISOLATION``, ``OUTRANKED``, ``FAIR_SHARE`` (the room went to work of its
tier and priority from teams with a better fair-share standing), ``GANG``, ``GANG_DOMAIN`` (the gang
fits only across several values of its domain label),
``TAINT``, ``NODE_AFFINITY``, ``RESOURCE`` (kube-scheduler's filters refuse the nodes with room: an
untolerated taint, a node selector or required node affinity not matched, an extended resource not
advertised), ``DISRUPTION_BUDGET``, ``NEVER_FITS``; for a replica that fits on the state the plan leaves,
``RESERVED_FOR_EARLIER`` (the plan reserves room for it later; starting it now would delay a reservation
ahead of it), ``PLANNED_LATER`` (reserved later for another reason, e.g. its MIG instance is created
by a later round), ``SOLVER_LIMIT`` (no reservation: the solver ran out of time) and ``TRADE_OFF`` (a
better alternative fits but the objective preferred the chosen one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuplan.planner.explain.counterfactual import Candidate, Target
from gpuplan.planner.explain.state import PlanState
from gpuplan.planner.pipeline.timeline import RESERVED
from gpuplan.solvers.problem import Request

NO_CAPACITY = "NO_CAPACITY"
NO_NVLINK_CLIQUE = "NO_NVLINK_CLIQUE"
NUMA = "NUMA"
GPU_MODEL = "GPU_MODEL"
MIG_LAYOUT = "MIG_LAYOUT"
QUOTA = "QUOTA"
ISOLATION = "ISOLATION"
OUTRANKED = "OUTRANKED"
FAIR_SHARE = "FAIR_SHARE"
GANG = "GANG"
GANG_DOMAIN = "GANG_DOMAIN"
DISRUPTION_BUDGET = "DISRUPTION_BUDGET"
NEVER_FITS = "NEVER_FITS"
MIG_MODE = "MIG_MODE"
SHARING_MODE = "SHARING_MODE"
SOLVER_LIMIT = "SOLVER_LIMIT"
TRADE_OFF = "TRADE_OFF"
PLANNED_LATER = "PLANNED_LATER"
#: kube-scheduler's filters refuse the node that has room: an untolerated taint, a node selector or
#: required node affinity not matched, an extended resource the node does not advertise.
TAINT_CODE = "TAINT"
NODE_AFFINITY_CODE = "NODE_AFFINITY"
RESOURCE_CODE = "RESOURCE"
#: Codes of a waiting replica that fits on the state the plan leaves.
FITS_NOW = frozenset({SOLVER_LIMIT, RESERVED, PLANNED_LATER})

#: Codes that say the replica could not be placed on the state the plan leaves.
BLOCKED = frozenset(
    {
        NO_CAPACITY, NO_NVLINK_CLIQUE, NUMA, GPU_MODEL, MIG_LAYOUT, MIG_MODE, SHARING_MODE, QUOTA,
        ISOLATION, OUTRANKED, FAIR_SHARE, GANG, GANG_DOMAIN, DISRUPTION_BUDGET, NEVER_FITS, TAINT_CODE,
        NODE_AFFINITY_CODE, RESOURCE_CODE,
    }
)  # fmt: skip

#: Codes a node's sharing mode may be behind (room of the shape absent or taken, or never there); not a
#: replica over its team's quota, or one that fits after moves or fits now.
MODE_MAY_BLOCK = BLOCKED - {QUOTA, DISRUPTION_BUDGET}

Search = Callable[[PlanState, Target, Request, int], list[Candidate]]


@dataclass
class Finding:
    """The diagnosis of one alternative: code, sentence, named resources and counterfactual searches."""

    code: str
    reason: str
    resources: list[str] = field(default_factory=list)
    searches: list[Search] = field(default_factory=list)
    candidates: list[Candidate] = field(default_factory=list)


def listed(items: Sequence[str], limit: int = 4) -> str:
    """The first ``limit`` of ``items`` joined by commas, the rest counted (``a, b and 3 more``)."""
    shown = list(items[:limit])
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return ", ".join(shown) + more
