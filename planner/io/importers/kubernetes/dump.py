"""Reading ``kubectl get nodes -o json`` and ``kubectl get pods -A -o json`` dumps (and kubelet
PodResources dumps) into a :class:`KubernetesState`, and writing it as a cluster file and a workloads
CSV."""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gpuplan.models import Cluster, HardwareCatalog, Workload, default_catalog
from gpuplan.models.base import InputError
from gpuplan.models.policy import Tier, default_tiers
from gpuplan.planner.io.importers.kubernetes.audit import _Audit
from gpuplan.planner.io.importers.kubernetes.conventions import MACHINE
from gpuplan.planner.io.importers.kubernetes.nodes import _node, _NodeInfo, _offers_gpus, _unavailable
from gpuplan.planner.io.importers.kubernetes.placements import complete_placements, load_pod_resources
from gpuplan.planner.io.importers.kubernetes.pods import _pods
from gpuplan.planner.io.importers.kubernetes.summary import KubernetesState
from gpuplan.planner.io.importers.kubernetes.tiers import TierMap, _tier_order, assign_tiers
from gpuplan.planner.io.importers.kubernetes.topology import attach_topologies, topology_hint
from gpuplan.planner.pipeline.files import WORKLOAD_COLUMNS, describe, read_structured

log = logging.getLogger(__name__)


def _items(path: Path, kind: str) -> list[Mapping[str, Any]]:
    """The ``items`` of a ``kubectl get … -o json`` list (or a bare list, or one object)."""
    raw = read_structured(path)
    if isinstance(raw, dict) and str(raw.get("kind", "")).lower() == kind.rstrip("s"):
        raw = [raw]
    items = raw.get("items") if isinstance(raw, dict) else raw
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise InputError(f"{path}: expected the output of `kubectl get {kind} -o json` (a list with 'items')")
    wanted = kind.rstrip("s").capitalize()
    other = next(
        ((i, str(it["kind"])) for i, it in enumerate(items) if it.get("kind", wanted) != wanted), None
    )
    if other is not None:
        raise InputError(
            f"{path}: items[{other[0]}]: a {other[1]}, expected a {wanted} (`kubectl get {kind}`)"
        )
    return items


def read_state(
    nodes_json: Path,
    pods_json: Path,
    *,
    tier_map: TierMap | None = None,
    team_label: str | None = None,
    pod_resources: Iterable[Path] = (),
    catalog: HardwareCatalog | None = None,
    tiers: Sequence[Tier] | None = None,
    topologies: Mapping[str, str] | None = None,
) -> KubernetesState:
    """The cluster and workloads of ``kubectl get nodes -o json`` and ``kubectl get pods -A -o json``, with
    the GPUs of running pods from kubelet PodResources dumps when given. Priority classes are mapped onto
    ``tiers`` (the policy's; the default tiers without one), and ``topologies`` (node name or pattern to a
    ``topo -m`` file or reference topology) give nodes the topology their labels do not.

    Raises :class:`InputError` naming the node or pod and the field of the first bad value.
    """
    cat = catalog or default_catalog()
    node_items = _items(Path(nodes_json), "nodes")
    infos: dict[str, _NodeInfo] = {}
    skipped = 0
    absent: dict[str, str] = {}
    for raw in node_items:
        why = _unavailable(raw)
        if why is not None and _offers_gpus(raw):
            absent[str((raw.get("metadata") or {}).get("name") or "")] = why
            continue
        info = None if why is not None else _node(raw, cat)
        if info is None:
            skipped += 1
        elif info.name in infos:
            raise InputError(f"node '{info.name}': appears more than once")
        else:
            infos[info.name] = info
    if absent:
        log.warning("left out, taking no new pods: %s", ", ".join(f"{n} ({w})" for n, w in absent.items()))
    pod_items = _items(Path(pods_json), "pods")
    offered = frozenset(
        str(k) for raw in node_items for k in ((raw.get("status") or {}).get("allocatable") or {})
    )
    models = tuple(sorted({i.model.name for i in infos.values()}))
    audit = _Audit(offered=offered, catalog=cat, models=models)
    pods, held, with_absent = _pods(pod_items, infos, audit, team_label, cat, absent)
    policy_tiers = tuple(tiers) if tiers is not None else default_tiers()
    mapping = tier_map or TierMap()
    choices = assign_tiers(pods, mapping, policy_tiers)
    shared_by_scheduler = any(p.scheduler_share for p in pods)
    entries = []
    for info in infos.values():
        cpu, mem = held[info.name]
        entry = {**info.entry, "cpu_milli": max(0, info.entry["cpu_milli"] - cpu),
                 "memory_mib": max(0, info.entry["memory_mib"] - mem)}  # fmt: skip
        if shared_by_scheduler and entry.get("sharing") == "exclusive":
            # A scheduler (KAI, HAMi) shares GPUs the device plugin offers whole: the node takes both.
            del entry["sharing"]
        entries.append(entry)
    no_topology = attach_topologies(entries, infos, topologies or {}, cat)
    hint = topology_hint(no_topology, infos, cat)
    if no_topology:
        log.warning(
            "no topology for %s: no %s label the catalog knows, so their GPUs are taken as NUMA node 0 "
            "without NVLink; attach one with --topology NODE=FILE|REFERENCE%s",
            ", ".join(no_topology),
            MACHINE,
            f" ({hint})" if hint else "",
        )
    try:
        cluster = Cluster.model_validate({"nodes": entries}, context={"catalog": cat})
    except ValidationError as exc:
        raise InputError(f"{nodes_json}: {describe(exc, {'nodes': entries})}") from None
    complete_placements(pods, cluster, infos, cat, load_pod_resources(pod_resources))
    workloads = []
    for pod in pods:
        try:
            workloads.append(Workload.model_validate(pod.values))
        except ValidationError as exc:
            raise InputError(f"pod '{pod.key}': {describe(exc, pod.values)}") from None
    return KubernetesState(
        cluster=cluster,
        workloads=tuple(workloads),
        node_entries=tuple(entries),
        rows=tuple(p.values for p in pods),
        skipped_nodes=skipped,
        unavailable=tuple(f"{n} ({w})" for n, w in sorted(absent.items())),
        unavailable_pods=with_absent,
        tiers=choices,
        lowest_tier=_tier_order(policy_tiers)[-1] if len(policy_tiers) > 1 else None,
        preemptible_by_map=tuple(sorted(mapping.preemptible.items())),
        left_out=tuple(audit.left_out),
        no_topology=tuple(no_topology),
        topology_hint=hint,
        warnings=tuple(audit.warnings),
    )


def write_state(state: KubernetesState, out_dir: Path) -> tuple[Path, Path]:
    """Write ``out_dir/cluster.yaml`` and ``out_dir/workloads.csv`` (the columns of docs/FORMATS.md,
    ``running_on`` included)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cluster_path = out / "cluster.yaml"
    workloads_path = out / "workloads.csv"
    cluster_path.write_text(yaml.safe_dump({"nodes": list(state.node_entries)}, sort_keys=False))
    with workloads_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(WORKLOAD_COLUMNS)
        writer.writerows([str(r.get(c, "")) for c in WORKLOAD_COLUMNS] for r in state.rows)
    log.info("kubernetes import: %s", state.describe().replace("\n", "; "))
    return cluster_path, workloads_path
