"""Fragmentation Gradient Descent (Weng et al., USENIX ATC 2023).

Each replica goes where the node's expected fragmentation (see :mod:`.fragmentation`) grows least. As
in the reference simulator (``FGDScorePlugin``), a node's score is
``int(sigmoid((frag_before - frag_after) / 1000) · 100)`` for its best option, the option inside the node
is the first one reaching that score (for a shared GPU: the lowest index), and ties between nodes go
to the node of lowest tie-break rank.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.solvers.greedy.engine import GreedySolver
from gpuplan.solvers.placement import Scorer
from gpuplan.solvers.placement.fragmentation import Fragmentation, Target, problem_mix
from gpuplan.solvers.placement.options import Option, apply
from gpuplan.solvers.placement.state import NodeInfo, NodeState
from gpuplan.solvers.problem import PlacementProblem, ShapeSpec

#: The scheduler framework's maximum node score.
MAX_NODE_SCORE = 100


def fgd_score(decrease: float) -> int:
    """Score of a fragmentation decrease (milli-GPU): the simulator's quantised sigmoid."""
    x = max(decrease / MILLI_PER_GPU, -700.0)
    return int(1.0 / (1.0 + math.exp(-x)) * MAX_NODE_SCORE)


class FgdScorer:
    """Scores nodes by how much placing the shape lowers their expected fragmentation."""

    def __init__(self, targets: Sequence[Target]) -> None:
        self.fragmentation = Fragmentation(targets)

    def score(
        self, info: NodeInfo, state: NodeState, shape: ShapeSpec, opts: Sequence[Option]
    ) -> tuple[float, int]:
        """Best quantised fragmentation decrease over the options, first option on ties."""
        before = self.fragmentation(info, state)
        best, best_i = -1, 0
        seen: set[tuple[int, int, int]] = set()
        for i, o in enumerate(opts):
            if info.symmetric and o.kind == "fraction":
                # Interchangeable GPUs with the same free amounts (and shares) give the same state.
                p = o.gpus[0]
                free = (state.free[p], state.gmem[p], 0 if state.shares is None else state.shares[p])
                if free in seen:
                    continue
                seen.add(free)
            after = self.fragmentation(info, apply(info, state, shape, o))
            score = fgd_score(before - after)
            if score > best:
                best, best_i = score, i
        return float(best), best_i


class Fgd(GreedySolver):
    """FGD greedy placement with the problem's target mix (``problem_mix``: the expected arrivals' when
    given, else the problem's own demand)."""

    name = "greedy-fgd"

    def scorer(self, problem: PlacementProblem) -> Scorer:
        """An FGD scorer for the problem's target mix."""
        return FgdScorer(problem_mix(problem))
