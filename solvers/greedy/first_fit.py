"""First-fit: the first node in cluster order with room, and its first (cheapest) option."""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.solvers.greedy.engine import GreedySolver
from gpuplan.solvers.placement import Scorer
from gpuplan.solvers.placement.options import Option
from gpuplan.solvers.placement.state import NodeInfo, NodeState
from gpuplan.solvers.problem import PlacementProblem, ShapeSpec


class FirstFitScorer:
    """Every feasible node scores the same, so the engine takes the first one in tie-break order."""

    def score(
        self, info: NodeInfo, state: NodeState, shape: ShapeSpec, opts: Sequence[Option]
    ) -> tuple[float, int]:
        """Score 0 and the first option (options come cheapest first)."""
        return 0.0, 0


class FirstFit(GreedySolver):
    """First-fit greedy placement."""

    name = "first-fit"

    def scorer(self, problem: PlacementProblem) -> Scorer:
        """The first-fit scorer."""
        return FirstFitScorer()
