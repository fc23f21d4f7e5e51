"""Greedy back-ends: first-fit, best-fit and FGD, each a scorer on the shared placement kernel, and the
make-room search and the fairness floor's pass that improve a greedy plan for the exact solver."""

from gpuplan.solvers.greedy.best_fit import BestFit, BestFitScorer
from gpuplan.solvers.greedy.engine import GreedySolver
from gpuplan.solvers.greedy.fgd import Fgd, FgdScorer, fgd_score
from gpuplan.solvers.greedy.first_fit import FirstFit
from gpuplan.solvers.greedy.floor import reach_floors
from gpuplan.solvers.greedy.room import make_room, moved_running
from gpuplan.solvers.placement import FirstFitScorer

__all__ = [
    "BestFit",
    "BestFitScorer",
    "Fgd",
    "FgdScorer",
    "FirstFit",
    "FirstFitScorer",
    "GreedySolver",
    "fgd_score",
    "make_room",
    "moved_running",
    "reach_floors",
]
