"""kube-scheduler's filters compiled: the nodes of a cluster each alternative of a workload is refused on
(:func:`gpuplan.models.rules.scheduling.admits`), asked once per distinct question.

A fleet has few distinct node descriptions (taints, labels, advertised resources) and few distinct asks
(tolerations, node selector, node affinity, resource), whatever its size: each pair is judged once, and
equal answers are one shared set.
"""

from __future__ import annotations

from collections.abc import Hashable

from gpuplan.models.cluster import Cluster, Node
from gpuplan.models.rules.scheduling import refusal, scheduling_key
from gpuplan.models.workload import ShapeFields, Workload

#: Every node admits the alternative.
NONE_REFUSED: frozenset[str] = frozenset()


class Admission:
    """The refused nodes of ``cluster`` per (workload, alternative)."""

    def __init__(self, cluster: Cluster) -> None:
        groups: dict[Hashable, list[Node]] = {}
        for node in cluster.nodes:
            groups.setdefault(scheduling_key(node), []).append(node)
        self._groups = [(nodes[0], frozenset(n.name for n in nodes)) for nodes in groups.values()]
        self._tainted = any(n.taints for n in cluster.nodes)
        self._listed = any(n.resources for n in cluster.nodes)
        self._found: dict[Hashable, frozenset[str]] = {}

    def refused(self, workload: Workload, shape: ShapeFields) -> frozenset[str]:
        """The nodes that refuse alternative ``shape`` of ``workload`` (empty: none)."""
        selects = bool(workload.node_selector or workload.node_affinity)
        if not (self._tainted or selects or (self._listed and shape.resource is not None)):
            return NONE_REFUSED
        key = (workload.tolerations, workload.node_selector, workload.node_affinity, shape.resource)
        found = self._found.get(key)
        if found is None:
            names: set[str] = set()
            for first, members in self._groups:
                if refusal(first, workload, shape) is not None:
                    names |= members
            found = self._found[key] = frozenset(names) if names else NONE_REFUSED
        return found
