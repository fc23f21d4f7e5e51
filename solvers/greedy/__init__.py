"""Greedy back-ends: first-fit, best-fit and FGD, sharing one incremental placement loop."""

from gpuplan.solvers.greedy.best_fit import BestFit, BestFitScorer
from gpuplan.solvers.greedy.engine import GANG, NEVER_FITS, NO_CAPACITY, GreedySolver, Placer, Scorer
from gpuplan.solvers.greedy.fgd import Fgd, FgdScorer, fgd_score
from gpuplan.solvers.greedy.first_fit import FirstFit, FirstFitScorer
from gpuplan.solvers.greedy.fragmentation import COVERAGE, Fragmentation, Target, target_mix
from gpuplan.solvers.greedy.options import Option
from gpuplan.solvers.greedy.state import NodeInfo, NodeState

__all__ = [
    "COVERAGE",
    "GANG",
    "NEVER_FITS",
    "NO_CAPACITY",
    "BestFit",
    "BestFitScorer",
    "Fgd",
    "FgdScorer",
    "FirstFit",
    "FirstFitScorer",
    "Fragmentation",
    "GreedySolver",
    "NodeInfo",
    "NodeState",
    "Option",
    "Placer",
    "Scorer",
    "Target",
    "fgd_score",
    "target_mix",
]
