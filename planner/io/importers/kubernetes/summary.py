"""The import's result (:class:`KubernetesState`) and its summary: what was read, how priority classes
became tiers, what is preemptible, nodes without a topology, warnings, and every pod left out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuplan.models import Cluster, Workload
from gpuplan.planner.io.importers.kubernetes.audit import (
    _REASONS,
    UNKNOWN_PROFILE,
    UNKNOWN_RESOURCE,
    UNREADABLE,
    LeftOut,
)
from gpuplan.planner.io.importers.kubernetes.conventions import MACHINE
from gpuplan.planner.io.importers.kubernetes.tiers import TierChoice


@dataclass(frozen=True)
class KubernetesState:
    """A fleet's state as gpuplan inputs: the cluster, the workloads, and counts for the report."""

    cluster: Cluster
    workloads: tuple[Workload, ...]
    node_entries: tuple[dict[str, Any], ...]
    rows: tuple[dict[str, Any], ...]
    skipped_nodes: int
    #: GPU nodes that take no new pods (``name (cordoned|NotReady)``), left out with their pods.
    unavailable: tuple[str, ...] = ()
    unavailable_pods: int = 0
    #: How each priority class of the imported pods was mapped to a tier.
    tiers: tuple[TierChoice, ...] = ()
    #: The policy's least important tier (its pods are preemptible by default), ``None`` with one tier.
    lowest_tier: str | None = None
    #: Classes whose pods the tier map makes preemptible (``True``) or not.
    preemptible_by_map: tuple[tuple[str, bool], ...] = ()
    #: Every pod left out, and why.
    left_out: tuple[LeftOut, ...] = ()
    #: Multi-GPU nodes without a known topology (their GPUs on NUMA node 0, without NVLink), and the
    #: reference topologies that fit them.
    no_topology: tuple[str, ...] = ()
    topology_hint: str = ""
    #: Warnings: resources and MIG profiles no node can offer, pods left out as unreadable, MIG layouts
    #: guessed, tiers that changed since the previous run, PodDisruptionBudgets.
    warnings: tuple[str, ...] = ()
    #: Whether some class was ranked over the classes of today's pods (no ``--priority-classes``): the
    #: mapping may then change when a class loses its last pod.
    ranked_by_pods: bool = False
    #: Pods kept where they run for a PodDisruptionBudget (``disruptible: false``).
    disruptible_kept: int = 0

    def describe(self) -> str:
        """A short human-readable report of what was read."""
        running = sum(1 for w in self.workloads if w.running_on)
        kinds = Counter(w.shapes[0].kind for w in self.workloads)
        gangs = len({w.gang for w in self.workloads if w.gang})
        away = (
            [
                f"left out: {len(self.unavailable)} GPU nodes that take no new pods "
                f"({', '.join(self.unavailable)}) and the {self.unavailable_pods} pods bound to them"
            ]
            if self.unavailable
            else []
        )
        return "\n".join(
            [
                f"cluster: {len(self.cluster.nodes)} GPU nodes, {self.cluster.gpu_count} GPUs "
                f"({self.skipped_nodes} nodes without GPUs left out)",
                f"workloads: {len(self.workloads)} pods asking for GPUs ({running} running, "
                f"{len(self.workloads) - running} pending; "
                + "; ".join(
                    filter(None, [", ".join(f"{k} {n}" for k, n in sorted(kinds.items())), f"{gangs} gangs"])
                )
                + ")",
                *away,
                *self._audit_lines(),
            ]
        )

    def _audit_lines(self) -> list[str]:
        """The summary's lines on tiers, preemptibility, topology, warnings and pods left out."""
        lines = []
        with_pods = [c for c in self.tiers if c.pods]
        if with_pods:
            mapped = "; ".join(
                f"{c.klass or '(no class)'} -> {c.tier} ({c.why}; {_plural(c.pods, 'pod')})"
                for c in with_pods
            )
            idle = len(self.tiers) - len(with_pods)
            more = (
                f"; {_plural(idle, 'other class', 'other classes')} without pods mapped too" if idle else ""
            )
            how = (
                " (ranked over the classes of today's pods: give --priority-classes for a mapping that does "
                "not change when a class loses its pods)"
                if self.ranked_by_pods
                else ""
            )
            lines.append(f"tiers by priority class: {mapped}{more}{how}")
        rows = self.rows
        flagged = [r for r in rows if r.get("preemptible")]
        why = []
        if self.lowest_tier is not None:
            n = sum(1 for r in flagged if r.get("tier") == self.lowest_tier)
            why.append(f"{n} in {self.lowest_tier}, the policy's least important tier")
        if self.preemptible_by_map:
            said = ", ".join(f"{c} {'yes' if v else 'no'}" for c, v in self.preemptible_by_map)
            why.append(f"tier map: {said}")
        lines.append(
            f"preemptible: {len(flagged)} of {len(rows)} pods" + (f" ({'; '.join(why)})" if why else "")
        )
        if self.disruptible_kept:
            lines.append(
                f"kept in place for PodDisruptionBudgets: {_plural(self.disruptible_kept, 'pod')} "
                "(disruptible: false)"
            )
        if self.no_topology:
            lines.append(
                f"no topology: {_plural(len(self.no_topology), 'node')} ({', '.join(self.no_topology)}) "
                f"without a {MACHINE} label the catalog knows; their GPUs are taken as NUMA node 0 "
                "without NVLink (--topology NODE=FILE|REFERENCE attaches one"
                + (f"; {self.topology_hint})" if self.topology_hint else ")")
            )
        lines += [f"warning: {w}" for w in self.warnings]
        return lines + _left_out_lines(self.left_out)


def _plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``1 pod``, ``2 pods``."""
    return f"{n} {noun}" if n == 1 else f"{n} {nouns or noun + 's'}"


def _left_out_lines(left_out: Sequence[LeftOut]) -> list[str]:
    """The summary's lines naming every pod left out, grouped by reason."""
    if not left_out:
        return []
    groups: dict[str, list[str]] = {}
    for item in left_out:
        shown = item.detail and item.reason in (UNKNOWN_RESOURCE, UNKNOWN_PROFILE)
        if item.reason == UNREADABLE:
            text = item.pod
            groups.setdefault(item.reason, []).append(text)
            continue
        text = f"{item.pod} ({item.detail})" if shown else item.pod
        groups.setdefault(item.reason, []).append(text)
    lines = [f"pods left out: {len(left_out)}"]
    lines += [
        f"  {reason}: {len(groups[reason])}: {', '.join(groups[reason])}"
        for reason in _REASONS
        if reason in groups
    ]
    return lines
