"""Export a plan's MIG layouts as an NVIDIA MIG manager (``nvidia-mig-parted``) configuration file.

The file follows mig-parted's ``v1`` spec (``api/spec/v1/spec.go`` in ``NVIDIA/mig-parted``)::

    version: v1
    mig-configs:
      gpuplan-dgx-01-5d41402a:   # one config per node and layout; the label nvidia.com/mig.config selects it
        - devices: [0, 1]
          mig-enabled: true
          mig-devices: {"3g.40gb": 1, "4g.40gb": 1}
        - devices: [2, 3]
          mig-enabled: false

A GPU whose MIG mode the plan turns off (``set-mig-mode``) gets ``mig-enabled: false``; a node whose
last MIG GPU is turned off keeps its config (all its GPUs ``mig-enabled: false``), so its label changes.
mig-parted takes instance counts per profile and chooses the memory-slice positions itself; gpuplan's
layouts are valid placements for the same counts, so the counts are what carries over. A config's name
ends in a digest of its entries, so a node's label changes exactly when its layout does: the MIG manager
acts on a change of the label.
:func:`check_config` applies the spec's own parsing rules to what we write.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from gpuplan.models.cluster import Cluster
from gpuplan.models.plan import MigLayout, MigMode
from gpuplan.planner.pipeline.layouts import cluster_with_mig_modes

VERSION = "v1"
#: Name prefix of the per-node configs (the value of the node label ``nvidia.com/mig.config``).
PREFIX = "gpuplan-"
_PROFILE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb(\+[a-z]+)?$")
_ENTRY_FIELDS = {"device-filter", "devices", "mig-enabled", "mig-devices"}


def config_name(node: str, entries: list[dict[str, Any]]) -> str:
    """The mig-parted config of ``node`` with ``entries``, usable as a Kubernetes label value (at most 63
    characters): the node's name and a digest of the entries."""
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()[:8]
    node_part = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{PREFIX}{node}")[: 63 - 9].rstrip("-_.")
    return f"{node_part}-{digest}"


def node_configs(
    cluster: Cluster, layouts: tuple[MigLayout, ...], modes: Sequence[MigMode] = ()
) -> dict[str, list[dict[str, Any]]]:
    """The mig-parted entries of each node (by node name) with a MIG GPU in the plan or now, with the
    plan's MIG ``modes`` applied (a GPU turned off is ``mig-enabled: false``, one turned on and given no
    instance ``mig-enabled: true`` with no device); GPUs with equal settings share an entry."""
    target = {(lay.node, lay.gpu): lay.instances for lay in layouts}
    switched = cluster_with_mig_modes(cluster, modes)
    was_mig = {(n.name, g.index) for n in cluster.nodes for g in n.gpus if g.mig is not None}
    configs: dict[str, list[dict[str, Any]]] = {}
    for node in switched.nodes:
        groups: dict[tuple[bool, tuple[tuple[str, int], ...]], list[int]] = {}
        any_mig = False
        for g in sorted(node.gpus, key=lambda g: g.index):
            instances = target.get((node.name, g.index))
            if instances is None and g.mig is not None:
                instances = g.mig.instances
            enabled = instances is not None
            any_mig = any_mig or enabled
            counts = tuple(sorted(Counter(i.profile for i in instances or ()).items()))
            groups.setdefault((enabled, counts), []).append(g.index)
        if not any_mig and not any((node.name, g.index) in was_mig for g in node.gpus):
            continue
        entries: list[dict[str, Any]] = []
        for (enabled, counts), devices in groups.items():
            entry: dict[str, Any] = {"devices": devices, "mig-enabled": enabled}
            if enabled:
                entry["mig-devices"] = dict(counts)
            entries.append(entry)
        configs[node.name] = entries
    return configs


def config_document(configs: Mapping[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The mig-parted file holding the per-node ``configs`` (checked with :func:`check_config`)."""
    doc = {"version": VERSION, "mig-configs": {config_name(n, e): e for n, e in configs.items()}}
    problems = check_config(doc)
    if problems:
        raise ValueError("; ".join(problems))
    return doc


def render(cluster: Cluster, layouts: tuple[MigLayout, ...], modes: Sequence[MigMode] = ()) -> str:
    """The mig-parted config file for the target layouts and MIG modes."""
    return yaml.safe_dump(config_document(node_configs(cluster, layouts, modes)), sort_keys=False)


def check_config(doc: Any) -> list[str]:
    """Every way ``doc`` breaks mig-parted's v1 spec (empty if it parses there)."""
    if not isinstance(doc, Mapping):
        return ["the document is not a mapping"]
    problems = [f"unexpected field: {k}" for k in doc if k not in ("version", "mig-configs")]
    if doc.get("version") != VERSION:
        problems.append(f"unknown version: {doc.get('version')}")
    configs = doc.get("mig-configs")
    if configs is None:
        return problems
    if not isinstance(configs, Mapping) or not configs:
        return [*problems, "at least one entry in 'mig-configs' is required"]
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            problems.append(f"at least one entry in '{name}' is required")
            continue
        for i, entry in enumerate(entries):
            problems.extend(f"{name}[{i}]: {p}" for p in _check_entry(entry))
    return problems


def _check_entry(entry: Any) -> list[str]:
    """The rules of ``MigConfigSpec.UnmarshalJSON`` and ``MigConfig.AssertValidFormat``."""
    if not isinstance(entry, Mapping):
        return ["not a mapping"]
    problems = [f"unexpected field: {k}" for k in entry if k not in _ENTRY_FIELDS]
    problems.extend(f"missing required field: {k}" for k in ("devices", "mig-enabled") if k not in entry)
    devices = entry.get("devices")
    ints = isinstance(devices, list) and all(isinstance(d, int) and not isinstance(d, bool) for d in devices)
    if devices is not None and devices != "all" and not ints:
        problems.append(f"invalid input for 'devices': {devices!r}")
    enabled = entry.get("mig-enabled")
    if enabled is not None and not isinstance(enabled, bool):
        problems.append("'mig-enabled' is not a boolean")
    migs = entry.get("mig-devices")
    if enabled is True and migs is None:
        problems.append("missing required field 'mig-devices' when 'mig-enabled' is true")
    if enabled is False and migs:
        problems.append("MIG devices included when 'mig-enabled' is false")
    if migs is not None:
        if not isinstance(migs, Mapping):
            problems.append("'mig-devices' is not a mapping")
        else:
            for prof, n in migs.items():
                if not isinstance(prof, str) or not _PROFILE.match(prof):
                    problems.append(f"invalid MIG profile name '{prof}'")
                if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                    problems.append(f"invalid count {n!r} for '{prof}'")
    return problems
