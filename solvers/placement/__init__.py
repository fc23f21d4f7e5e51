"""The placement kernel shared by every back-end: node states, options, rules and FGD's measure."""

from gpuplan.solvers.placement.fragmentation import (
    COVERAGE,
    Fragmentation,
    Target,
    problem_mix,
    shape_mix,
    target_mix,
)
from gpuplan.solvers.placement.options import Option
from gpuplan.solvers.placement.placer import (
    GANG,
    NEVER_FITS,
    NO_CAPACITY,
    FirstFitScorer,
    NodeFilter,
    Placer,
    Scorer,
)
from gpuplan.solvers.placement.state import NodeInfo, NodeState

__all__ = [
    "COVERAGE",
    "GANG",
    "FirstFitScorer",
    "NEVER_FITS",
    "NO_CAPACITY",
    "Fragmentation",
    "NodeFilter",
    "NodeInfo",
    "NodeState",
    "Option",
    "Placer",
    "Scorer",
    "Target",
    "problem_mix",
    "shape_mix",
    "target_mix",
]
