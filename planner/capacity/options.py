"""The settings of one capacity-gap run (solver, time limits, seed, like-for-like), in a module of
their own so that every step of the run and its callers share one definition without importing the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class GapOptions:
    """Solver settings of one capacity-gap run.

    ``time_limit_s`` bounds the whole run (without an explicit deadline): every phase takes a share of
    it. ``milp_time_limit_s`` caps each purchase MILP within its share. A purchase line whose replicas
    use less than ``min_use`` of its GPUs says so (:attr:`~gpuplan.models.capacity.Purchase.use_note`).
    """

    solver: str = "cpsat"
    time_limit_s: float = 30.0
    milp_time_limit_s: float = 30.0
    seed: int = 0
    num_workers: int = 2
    now: datetime | None = None
    repair_rounds: int = 3
    #: Ray address the independent pieces (scenarios, pricing problems, fleet parts) run on.
    ray: str | None = None
    #: Buy any GPU model for workloads without a GPU-model constraint (a what-if), or only for the
    #: workloads in ``other_models_for``; by default each keeps its class
    #: (:func:`~gpuplan.planner.capacity.demand.home_models`).
    allow_other_models: bool = False
    other_models_for: frozenset[str] = frozenset()
    min_use: float = 0.25

    def other_models(self, workload: str) -> bool:
        """Whether ``workload`` may be bought for in another GPU class than its own."""
        return self.allow_other_models or workload in self.other_models_for
