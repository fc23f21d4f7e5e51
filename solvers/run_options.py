"""How one solve runs (time limit, seed, workers, determinism, where its pieces run), given next to the
:class:`~gpuplan.solvers.problem.PlacementProblem` rather than stored in it: the problem says what to
place, these say how long and how to search for it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunOptions:
    """The run options every back-end's ``solve`` receives."""

    #: Wall-clock seconds the solve may take.
    time_limit_s: float = 30.0
    #: Seed of every random choice (orders, neighbourhoods, parts, CP-SAT's search).
    seed: int = 0
    #: Solver threads, and processes for the independent pieces.
    num_workers: int = 2
    #: Same input and seed give the same plan: searches stop on work done, not on the clock (slower).
    deterministic: bool = False
    #: Ray address the independent pieces (pricing problems, parts of a split fleet) run on (``local``:
    #: a Ray instance started here); ``None``: the local process pool (:mod:`gpuplan.solvers.parallel`).
    ray: str | None = None
    #: Seconds the work budgets of the searches (trials, deterministic time) are sized from: the share the
    #: limit gives the solve before a slow start-up cut it (``None``: ``time_limit_s``), so that a busy
    #: machine does the same work, later, rather than less of it.
    work_s: float | None = None

    @property
    def work_limit_s(self) -> float:
        """Seconds the work budgets are sized from (:attr:`work_s`, else the time limit)."""
        return self.time_limit_s if self.work_s is None else self.work_s
