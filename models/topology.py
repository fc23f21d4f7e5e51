"""Intra-node link graphs: link classes and costs of GPU pairs, and NVLink cliques."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

import networkx as nx

from gpuplan.models.cluster import Node

_NV = re.compile(r"^NV(\d+)$")

#: Cost of one GPU pair by link class (lower is better; integers for the solvers).
PCIE_COST: dict[str, int] = {"PIX": 4, "PXB": 6, "PHB": 8, "NODE": 10, "SYS": 12}


def nvlink_bonds(kind: str) -> int:
    """Number of bonded NVLinks in a link class (0 for PCIe classes)."""
    m = _NV.match(kind)
    return int(m.group(1)) if m else 0


def pair_cost(kind: str) -> int:
    """Cost of a link class: NVLink 1 (2 for a single link), then PIX < PXB < PHB < NODE < SYS."""
    bonds = nvlink_bonds(kind)
    if bonds:
        return 1 if bonds >= 2 else 2
    return PCIE_COST[kind]


def link_graph(node: Node) -> nx.Graph:
    """Every GPU pair of ``node`` as an edge with its link class and cost.

    Pairs the node does not list get ``NODE`` on one NUMA node and ``SYS`` across, as
    ``nvidia-smi topo -m`` would print for GPUs behind different host bridges.
    """
    graph = nx.Graph()
    for g in node.gpus:
        graph.add_node(g.index, numa=g.numa, model=g.model)
    listed = {(min(lk.a, lk.b), max(lk.a, lk.b)): lk.kind for lk in node.links}
    for a, b in itertools.combinations(sorted(node.gpu_by_index), 2):
        kind = listed.get((a, b))
        if kind is None:
            kind = "NODE" if node.gpu_by_index[a].numa == node.gpu_by_index[b].numa else "SYS"
        graph.add_edge(a, b, kind=kind, cost=pair_cost(kind), nvlink=nvlink_bonds(kind) > 0)
    return graph


def nvlink_cliques(node: Node, graph: nx.Graph | None = None) -> list[frozenset[int]]:
    """Maximal sets of GPUs in which every pair is joined by NVLink (NVSwitch: the whole board);
    ``graph`` is the node's :func:`link_graph` when the caller has it."""
    graph = link_graph(node) if graph is None else graph
    nv = nx.Graph()
    nv.add_nodes_from(graph.nodes)
    nv.add_edges_from((a, b) for a, b, d in graph.edges(data=True) if d["nvlink"])
    cliques = [frozenset(c) for c in nx.find_cliques(nv)]
    return sorted(cliques, key=lambda c: (-len(c), sorted(c)))


def is_nvlink_clique(node: Node, gpus: Iterable[int]) -> bool:
    """Whether every pair of ``gpus`` is joined by NVLink."""
    graph = link_graph(node)
    return all(graph.edges[a, b]["nvlink"] for a, b in itertools.combinations(sorted(set(gpus)), 2))
