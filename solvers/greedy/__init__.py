"""Greedy back-ends: first-fit, best-fit and FGD, sharing one incremental placement loop."""

from solvers.greedy.best_fit import BestFit, BestFitScorer
from solvers.greedy.engine import GANG, NEVER_FITS, NO_CAPACITY, GreedySolver, Placer, Scorer
from solvers.greedy.fgd import Fgd, FgdScorer, fgd_score
from solvers.greedy.first_fit import FirstFit, FirstFitScorer
from solvers.greedy.fragmentation import COVERAGE, Fragmentation, Target, target_mix
from solvers.greedy.options import Option
from solvers.greedy.state import NodeInfo, NodeState

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
