"""Which running replicas a round may move: those on the most fragmented nodes (a large-neighbourhood
choice), so that a small migration budget goes where repacking frees the most usable capacity."""

from __future__ import annotations

from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.placement import Fragmentation, target_mix
from gpuplan.solvers.problem import PlacementProblem


def fragmented_running(problem: PlacementProblem, limit: int) -> set[int]:
    """Up to ``limit`` running replicas, taken node by node from the most fragmented node down."""
    if limit <= 0:
        return set()
    placer = Fgd().placer(problem)
    on_node: dict[str, list[int]] = {}
    for r, q in enumerate(problem.requests):
        if q.running is not None:
            placer.keep(q)
            on_node.setdefault(q.running.node, []).append(r)
    measure = Fragmentation(target_mix(problem.requests))
    scored = sorted(
        (
            (measure(info, state), info.name)
            for info, state in zip(placer.infos, placer.cluster.states, strict=True)
        ),
        key=lambda x: (-x[0], x[1]),
    )
    chosen: set[int] = set()
    for frag, name in scored:
        if frag <= 0 or len(chosen) >= limit:
            break
        chosen.update(on_node.get(name, [])[: limit - len(chosen)])
    return chosen
