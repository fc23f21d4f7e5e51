"""Best-fit, as the FGD paper's baseline: the node with the least weighted leftover after placement.

The leftover is ``0.5 · CPU left / max CPU + 0.5 · GPU left / max GPU``, normalised by the largest node
of the cluster (the reference simulator's ``MaxSpecCpu``/``MaxSpecGpu``, 128 cores and 8 GPUs, which is
the largest openb node), and the score is ``int((1 - leftover) · 100)`` as the simulator computes it.
Inside the node the option leaving its GPUs tightest wins (for a shared GPU: the least free one).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.solvers.greedy.engine import GreedySolver
from gpuplan.solvers.placement import Scorer
from gpuplan.solvers.placement.options import Option, demand_milli
from gpuplan.solvers.placement.state import NodeInfo, NodeState
from gpuplan.solvers.problem import NodeSpec, PlacementProblem, ShapeSpec

#: Weights of the CPU and GPU leftovers.
CPU_WEIGHT = 0.5
GPU_WEIGHT = 0.5


class BestFitScorer:
    """Higher score for less weighted leftover; the tightest GPU inside the node."""

    def __init__(self, max_cpu_milli: int, max_gpu_milli: int) -> None:
        self.max_cpu = float(max(1, max_cpu_milli))
        self.max_gpu = float(max(1, max_gpu_milli))

    @classmethod
    def for_nodes(cls, nodes: Sequence[NodeSpec]) -> BestFitScorer:
        """Normalised by the largest CPU and GPU capacity of any node."""
        return cls(
            max((n.cpu_milli for n in nodes), default=1),
            max((MILLI_PER_GPU * len(n.gpus) for n in nodes), default=1),
        )

    def score(
        self, info: NodeInfo, state: NodeState, shape: ShapeSpec, opts: Sequence[Option]
    ) -> tuple[float, int]:
        """``int((1 - leftover) · 100)`` of the best option; ties go to the tightest, then the first."""
        free_total = sum(state.free)
        best: tuple[int, int] | None = None
        best_i = 0
        for i, o in enumerate(opts):
            req = demand_milli(info, o)
            leftover = 0.0
            leftover += (state.cpu - shape.cpu_milli) / self.max_cpu * CPU_WEIGHT
            leftover += (free_total - req) / self.max_gpu * GPU_WEIGHT
            key = (int((1.0 - leftover) * 100), req - sum(state.free[p] for p in o.gpus))
            if best is None or key > best:
                best, best_i = key, i
        assert best is not None
        return float(best[0]), best_i


class BestFit(GreedySolver):
    """Best-fit greedy placement."""

    name = "best-fit"

    def scorer(self, problem: PlacementProblem) -> Scorer:
        """The best-fit scorer normalised by the problem's largest node."""
        return BestFitScorer.for_nodes(problem.nodes)
