"""Pricing problems in parallel: each node class is priced on its own, so a round's pricing problems are
independent tasks (:mod:`gpuplan.solvers.parallel`: forked worker processes that inherit the node and
request classes, Ray tasks, or this process when there is one worker).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType

from gpuplan.solvers.fleet.classes import NodeClass, RequestClass
from gpuplan.solvers.fleet.pricing import Priced, price
from gpuplan.solvers.parallel import TaskPool

#: What every pricing task reads: the node classes and the request classes.
Classes = tuple[Sequence[NodeClass], Sequence[RequestClass]]


@dataclass(frozen=True)
class _Pricing:
    """One pricing task: node class ``node`` at ``reduced`` values, until ``until`` (a ``time.time``
    reading: comparable on every machine of a cluster, unlike ``perf_counter``)."""

    node: int
    reduced: Mapping[int, float]
    until: float
    pricing_s: float
    deterministic_s: float | None
    seed: int


def _price_one(shared: Classes, task: _Pricing) -> Priced | None:
    """One pricing solve within ``pricing_s`` and the deadline (``None``: no time was left)."""
    nodes, classes = shared
    left = task.until - time.time()
    if left <= 0:
        return None
    limit = min(task.pricing_s, left)
    return price(
        nodes[task.node], classes, task.reduced,
        time_limit_s=limit, deterministic_s=task.deterministic_s, seed=task.seed,
    )  # fmt: skip


class Pricers:
    """Prices the node classes of one column generation, with ``workers`` processes at most, or as Ray
    tasks on the cluster at ``ray``."""

    def __init__(
        self,
        nodes: Sequence[NodeClass],
        classes: Sequence[RequestClass],
        workers: int,
        ray: str | None = None,
    ) -> None:
        self.nodes = nodes
        self.classes = classes
        processes = min(workers, len(nodes))
        self.pool = TaskPool((nodes, classes), processes=processes, ray=ray if len(nodes) > 1 else None)

    def __enter__(self) -> Pricers:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.pool.__exit__(kind, exc, tb)

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
        until = time.time() + (deadline - time.perf_counter())
        tasks = [
            _Pricing(i, reduced, until, pricing_s, deterministic_s, seed) for i in range(len(self.nodes))
        ]
        return self.pool.map(_price_one, tasks)
