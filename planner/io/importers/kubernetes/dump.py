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
from gpuplan.planner.io.files import WORKLOAD_COLUMNS, describe, read_structured
from gpuplan.planner.io.importers.kubernetes.audit import _Audit
from gpuplan.planner.io.importers.kubernetes.budgets import DisruptionBudget, apply_budgets, load_pdbs
from gpuplan.planner.io.importers.kubernetes.conventions import MACHINE
from gpuplan.planner.io.importers.kubernetes.mig_configs import MigPartedConfig, load_mig_parted
from gpuplan.planner.io.importers.kubernetes.nodes import _node, _NodeInfo, _offers_gpus, _unavailable
from gpuplan.planner.io.importers.kubernetes.placements import complete_placements, load_pod_resources
from gpuplan.planner.io.importers.kubernetes.pods import _Pod, _pods
from gpuplan.planner.io.importers.kubernetes.scheduling import keep_selected_labels
from gpuplan.planner.io.importers.kubernetes.summary import KubernetesState
from gpuplan.planner.io.importers.kubernetes.tiers import (
    PriorityClass,
    TierMap,
    _tier_order,
    assign_tiers,
    load_priority_classes,
    load_tier_map,
    mapping_changes,
)
from gpuplan.planner.io.importers.kubernetes.topology import attach_topologies, load_topologies, topology_hint

log = logging.getLogger(__name__)

#: The file beside the import's output that keeps the priority-class to tier mapping it used, read back
#: by the next import into the same directory: a class that maps to another tier is a warning.
MAPPING_FILE = "tier-mapping.yaml"


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
    priority_classes: Sequence[PriorityClass] | None = None,
    pdbs: Sequence[DisruptionBudget] = (),
    mig_parted: MigPartedConfig | None = None,
    previous_mapping: tuple[Mapping[str, str], str] | None = None,
    previous_tiers: tuple[Mapping[str, str], str] | None = None,
) -> KubernetesState:
    """The cluster and workloads of ``kubectl get nodes -o json`` and ``kubectl get pods -A -o json``, with
    the GPUs of running pods from kubelet PodResources dumps when given. Priority classes are mapped onto
    ``tiers`` (the policy's; the default tiers without one), ranked over ``priority_classes`` (``kubectl get
    priorityclasses -o json``) when given; ``topologies`` (node name or pattern to a ``topo -m`` file or
    reference topology) give nodes the topology their labels do not; ``pdbs`` keep the pods a
    PodDisruptionBudget allows no more evictions of where they run; ``mig_parted`` (the GPU Operator's
    mig-parted ConfigMap) says which GPUs a node's named MIG config puts in MIG mode. A mapping of classes
    to tiers that differs from ``previous_mapping`` (class to tier) or, per pod, from ``previous_tiers``
    (workload id to tier, from the plan history) is a warning (each with where it was read).

    A node with a bad value raises :class:`InputError` naming it and the field; a pod with one is left
    out with a warning naming it (the other pods are imported).
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
        info = None if why is not None else _node(raw, cat, mig_parted)
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
    for info in infos.values():
        if info.mig_guess is not None:
            audit.warn(
                f"node '{info.name}': its MIG layout is a guess ({info.mig_guess}); the Kubernetes export "
                "never changes its MIG configuration"
            )
    pods, held, with_absent = _pods(pod_items, infos, audit, team_label, cat, absent)
    policy_tiers = tuple(tiers) if tiers is not None else default_tiers()
    mapping = tier_map or TierMap()
    choices = assign_tiers(pods, mapping, policy_tiers, priority_classes)
    used = {c.klass: c.tier for c in choices if c.klass}
    if previous_mapping is not None:
        for w in mapping_changes(previous_mapping[0], used, previous_mapping[1]):
            audit.warn(w)
    if previous_tiers is not None:
        before = _classes_before(pods, previous_tiers[0])
        for w in mapping_changes(before, used, previous_tiers[1]):
            audit.warn(w)
    for w in apply_budgets(pdbs, pod_items, pods):
        audit.warn(w)
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
    keep_selected_labels(entries, node_items, [p.values for p in pods])
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
    failed = complete_placements(pods, cluster, infos, cat, load_pod_resources(pod_resources))
    for key, why in failed.items():
        audit.unreadable(key, f"{why}; its GPUs count as free in the plan")
    workloads = []
    kept: list[_Pod] = []
    for pod in pods:
        if pod.key in failed:
            continue
        try:
            workloads.append(Workload.model_validate(pod.values))
        except ValidationError as exc:
            audit.unreadable(pod.key, f"pod '{pod.key}': {describe(exc, pod.values)}")
            continue
        kept.append(pod)
    return KubernetesState(
        cluster=cluster,
        workloads=tuple(workloads),
        node_entries=tuple(entries),
        rows=tuple(p.values for p in kept),
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
        ranked_by_pods=priority_classes is None and any(c.why.endswith("ranked") for c in choices),
        disruptible_kept=sum(1 for p in kept if p.values.get("disruptible") == "false"),
    )


def _classes_before(pods: Sequence[_Pod], tiers: Mapping[str, str]) -> dict[str, str]:
    """The tier each priority class had in an earlier plan, read from the tiers its pods had there (a
    pod's class never changes); a class whose pods had several tiers is left out."""
    seen: dict[str, set[str]] = {}
    for pod in pods:
        if pod.klass and pod.key in tiers:
            seen.setdefault(pod.klass, set()).add(tiers[pod.key])
    return {c: next(iter(t)) for c, t in seen.items() if len(t) == 1}


def load_mapping(path: Path) -> dict[str, str] | None:
    """The class-to-tier mapping an earlier import wrote (:data:`MAPPING_FILE`), ``None`` if there is none
    or it cannot be read (it is only compared, never needed)."""
    if not Path(path).is_file():
        return None
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError:
        return None
    return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else None


def read_state_dir(
    folder: Path,
    *,
    tiers: Sequence[Tier] | None = None,
    previous_tiers: tuple[Mapping[str, str], str] | None = None,
) -> KubernetesState:
    """``read_state`` of a state directory (``gpuplan replan --kubernetes-state DIR``): ``nodes.json`` and
    ``pods.json``, and when present ``tier-map.yaml`` (tier map), ``topology.yaml`` (node to topology),
    ``pod-resources*.json`` (PodResources dumps), ``priority-classes.json`` (``kubectl get priorityclasses
    -o json``), ``pdbs.json`` (``kubectl get pdb -A -o json``) and ``mig-parted-config.json`` (the GPU
    Operator's mig-parted ConfigMap)."""
    folder = Path(folder)

    def given(name: str) -> Path | None:
        path = folder / name
        return path if path.is_file() else None

    classes, budgets, mig = (
        given("priority-classes.json"),
        given("pdbs.json"),
        given("mig-parted-config.json"),
    )
    topologies = given("topology.yaml")
    return read_state(
        folder / "nodes.json",
        folder / "pods.json",
        tier_map=load_tier_map(given("tier-map.yaml")),
        pod_resources=sorted(folder.glob("pod-resources*.json")),
        tiers=tiers,
        topologies=load_topologies(topologies) if topologies is not None else None,
        priority_classes=load_priority_classes(classes) if classes is not None else None,
        pdbs=load_pdbs(budgets) if budgets is not None else (),
        mig_parted=load_mig_parted(mig) if mig is not None else None,
        previous_tiers=previous_tiers,
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
    mapping = {c.klass: c.tier for c in state.tiers if c.klass}
    (out / MAPPING_FILE).write_text(
        "# The priority-class to tier mapping of the last `gpuplan import kubernetes` into this directory\n"
        "# (the next import warns about a class that maps to another tier).\n"
        + yaml.safe_dump(mapping, sort_keys=True)
    )
    log.info("kubernetes import: %s", state.describe().replace("\n", "; "))
    return cluster_path, workloads_path
