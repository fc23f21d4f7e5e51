"""A plan's MIG modes, MIG layouts and sharing modes applied to a cluster: the cluster the plan leaves behind.

This is the one place the planner writes that rule on the models; the solvers keep its counterpart on
their node specs (:func:`gpuplan.solvers.evaluate.with_layouts`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel

from gpuplan.models.cluster import Cluster, Gpu, MigConfig
from gpuplan.models.plan import MigLayout, MigMode, NodeSharing, Plan
from gpuplan.models.rules.scheduling import advertised

M = TypeVar("M", bound=BaseModel)


def _replaced(model: M, **update: Any) -> M:
    """``model`` with ``update`` applied, not validated again, and without the cached properties of the
    original (``model_copy`` would carry over e.g. ``Cluster.node_by_name`` with the old nodes)."""
    values = {name: getattr(model, name) for name in type(model).model_fields}
    fields_set = model.model_fields_set | set(update)
    return type(model).model_construct(fields_set, **{**values, **update})


def cluster_with_layouts(cluster: Cluster, layouts: Iterable[MigLayout]) -> Cluster:
    """``cluster`` with ``layouts`` in place of the current MIG layouts of their GPUs."""
    target = {(lay.node, lay.gpu): lay.instances for lay in layouts}
    if not target:
        return cluster
    nodes = tuple(
        _replaced(
            node,
            gpus=tuple(
                _replaced(g, mig=MigConfig(instances=target[(node.name, g.index)]))
                if (node.name, g.index) in target
                else g
                for g in node.gpus
            ),
        )
        for node in cluster.nodes
    )
    return _replaced(cluster, nodes=nodes)


def cluster_with_mig_modes(cluster: Cluster, modes: Iterable[MigMode]) -> Cluster:
    """``cluster`` with the MIG modes ``modes`` gives its GPUs: MIG off (no ``mig``) or on with no
    instance; a GPU already in the mode asked is left as it is."""
    target = {(m.node, m.gpu): m.enabled for m in modes}
    if not target:
        return cluster

    def switched(node: str, gpu: Gpu) -> Gpu:
        enabled = target.get((node, gpu.index))
        if enabled is None or enabled == (gpu.mig is not None):
            return gpu
        return _replaced(gpu, mig=MigConfig() if enabled else None)

    nodes = tuple(
        _replaced(node, gpus=tuple(switched(node.name, g) for g in node.gpus))
        if any((node.name, g.index) in target for g in node.gpus)
        else node
        for node in cluster.nodes
    )
    return _replaced(cluster, nodes=nodes)


def cluster_with_sharing(cluster: Cluster, modes: Iterable[NodeSharing]) -> Cluster:
    """``cluster`` with the sharing modes ``modes`` gives its nodes (and the device plugin's resources
    each then advertises: :func:`~gpuplan.models.rules.scheduling.advertised`)."""
    target = {m.node: m.sharing for m in modes}
    if not target:
        return cluster
    nodes = tuple(
        _replaced(node, sharing=target[node.name], resources=advertised(node, target[node.name]))
        if node.name in target
        else node
        for node in cluster.nodes
    )
    return _replaced(cluster, nodes=nodes)


def cluster_after(cluster: Cluster, plan: Plan) -> Cluster:
    """``cluster`` as ``plan`` leaves it: its GPUs' MIG modes, MIG layouts and its nodes' sharing modes."""
    moded = cluster_with_mig_modes(cluster, plan.mig_modes)
    return cluster_with_sharing(cluster_with_layouts(moded, plan.mig_layouts), plan.sharing)
