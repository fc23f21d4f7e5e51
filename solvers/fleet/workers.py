"""Pricing problems in parallel: each node class is priced on its own, so a round's pricing problems
run in worker processes (forked, so that they inherit the node and request classes instead of
unpickling them for every task), or in this process when there is one worker or no fork.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from types import TracebackType

from gpuplan.solvers.fleet.classes import NodeClass, RequestClass
from gpuplan.solvers.fleet.pricing import Priced, price

#: The classes being priced, read by forked workers (inherited memory).
_SHARED: list[tuple[Sequence[NodeClass], Sequence[RequestClass]]] = []


def _priced(
    nc: NodeClass,
    classes: Sequence[RequestClass],
    reduced: Mapping[int, float],
    deadline: float,
    pricing_s: float,
    deterministic_s: float | None,
    seed: int,
) -> Priced | None:
    """One pricing solve within ``pricing_s`` and the deadline (``None``: no time was left)."""
    left = deadline - time.perf_counter()
    if left <= 0:
        return None
    limit = min(pricing_s, left)
    return price(nc, classes, reduced, time_limit_s=limit, deterministic_s=deterministic_s, seed=seed)


def _price_one(
    i: int,
    reduced: Mapping[int, float],
    deadline: float,
    pricing_s: float,
    deterministic_s: float | None,
    seed: int,
) -> Priced | None:
    nodes, classes = _SHARED[0]
    return _priced(nodes[i], classes, reduced, deadline, pricing_s, deterministic_s, seed)


class Pricers:
    """Prices the node classes of one column generation, with ``workers`` processes at most."""

    def __init__(self, nodes: Sequence[NodeClass], classes: Sequence[RequestClass], workers: int) -> None:
        self.nodes = nodes
        self.classes = classes
        self.pool: ProcessPoolExecutor | None = None
        can_fork = "fork" in multiprocessing.get_all_start_methods()
        if workers > 1 and len(nodes) > 1 and can_fork and not multiprocessing.current_process().daemon:
            _SHARED[:] = [(nodes, classes)]
            self.pool = ProcessPoolExecutor(
                max_workers=min(workers, len(nodes)), mp_context=multiprocessing.get_context("fork")
            )

    def __enter__(self) -> Pricers:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            _SHARED.clear()

    def price_all(
        self,
        reduced: Mapping[int, float],
        *,
        deadline: float,
        pricing_s: float,
        deterministic_s: float | None,
        seed: int,
    ) -> list[Priced | None]:
        """Every node class priced at ``reduced``, in node-class order (``None`` for those the
        deadline, a ``time.perf_counter`` value, left no time for)."""
        if self.pool is None:
            return [
                _priced(nc, self.classes, reduced, deadline, pricing_s, deterministic_s, seed)
                for nc in self.nodes
            ]
        futures: list[Future[Priced | None]] = [
            self.pool.submit(_price_one, i, reduced, deadline, pricing_s, deterministic_s, seed)
            for i in range(len(self.nodes))
        ]
        return [f.result() for f in futures]
