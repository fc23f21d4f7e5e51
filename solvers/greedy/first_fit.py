"""First-fit: the first node in cluster order with room, and its first (cheapest) option."""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.solvers.greedy.engine import GreedySolver
from gpuplan.solvers.placement import FirstFitScorer, Scorer
from gpuplan.solvers.problem import PlacementProblem


class FirstFit(GreedySolver):
    """First-fit greedy placement."""

    name = "first-fit"

    def scorer(self, problem: PlacementProblem) -> Scorer:
        """The first-fit scorer."""
        return FirstFitScorer()

    def rank(self, problem: PlacementProblem) -> Sequence[int]:
        """Cluster order: first-fit takes the first node listed."""
        return range(len(problem.nodes))
