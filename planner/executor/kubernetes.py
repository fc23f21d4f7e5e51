"""Export a plan as the Kubernetes objects a real cluster applies: pods and node MIG labels.

Each placed replica becomes a ``v1`` Pod pinned to its node (``nodeSelector``
``kubernetes.io/hostname``) that asks the NVIDIA device plugin for what the plan gives it:
``nvidia.com/gpu: N`` for whole GPUs, ``nvidia.com/mig-<profile>: 1`` for a MIG instance (the
plugin's ``mixed`` strategy), and ``nvidia.com/gpu.shared: 1`` for a fraction (time-slicing with
``renameByDefault``), with the planned GPU indices and milli-GPU in annotations. Each node with MIG
GPUs gets the label ``nvidia.com/mig.config`` naming its config in the mig-parted file
(:mod:`planner.executor.migparted`), which the NVIDIA MIG manager watches. The container image is the
caller's: the planner decides placement and resources, not what runs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

import yaml

from gpuplan.models.plan import Assignment, Plan
from gpuplan.models.problem import PlanningInput
from gpuplan.planner.actions import where
from gpuplan.planner.executor.migparted import config_name, node_configs

GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
HOSTNAME = "kubernetes.io/hostname"

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_QUANTITY = re.compile(r"^[0-9]+(m|Ki|Mi|Gi|Ti)?$")


def dns_name(text: str, limit: int = 63) -> str:
    """A DNS-1123 name for ``text`` (lower case, ``-`` for other characters; a hash suffix when changed)."""
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.") or "x"
    if name == text and len(name) <= limit:
        return name
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-.')}-{digest}"


def gpu_resources(a: Assignment) -> dict[str, str]:
    """The device-plugin resources of one placed replica."""
    if not a.gpus:
        return {}
    first = a.gpus[0]
    if first.mig_profile is not None:
        return {f"{MIG_PREFIX}{first.mig_profile}": str(len(a.gpus))}
    if first.milli is not None:
        return {SHARED_GPU: "1"}
    return {GPU: str(len(a.gpus))}


def pod(a: Assignment, inp: PlanningInput, namespace: str, image: str) -> dict[str, Any]:
    """The pod of one placed replica."""
    w = inp.workload_by_id[a.workload]
    requests = {"cpu": f"{a.cpu_milli}m", "memory": f"{a.memory_mib}Mi"}
    annotations = {"gpuplan.io/placement": where(a.node, a.gpus)}
    if a.gpus and a.gpus[0].milli is not None:
        annotations["gpuplan.io/gpu-milli"] = str(a.gpus[0].milli)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": dns_name(f"{a.workload}-{a.replica}", 253),
            "namespace": namespace,
            "labels": {
                "gpuplan.io/workload": dns_name(a.workload),
                "gpuplan.io/replica": str(a.replica),
                "gpuplan.io/tier": dns_name(w.tier),
                "gpuplan.io/team": dns_name(w.team),
            },
            "annotations": annotations,
        },
        "spec": {
            "nodeSelector": {HOSTNAME: a.node},
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "resources": {"requests": requests, "limits": {**requests, **gpu_resources(a)}},
                }
            ],
        },
    }


def node_labels(plan: Plan, inp: PlanningInput) -> list[dict[str, Any]]:
    """A Node object (for ``kubectl apply`` as a label patch) per node with MIG GPUs."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node, "labels": {MIG_CONFIG_LABEL: config_name(node)}},
        }
        for node in node_configs(inp.cluster, plan.mig_layouts)
    ]


def objects(
    plan: Plan, inp: PlanningInput, namespace: str = "default", image: str = ""
) -> list[dict[str, Any]]:
    """Node labels first (the MIG manager re-partitions), then one pod per placed replica."""
    if not image:
        raise ValueError("a container image is needed for the exported pods")
    docs = node_labels(plan, inp) + [pod(a, inp, namespace, image) for a in plan.assignments]
    problems = [p for d in docs for p in check_object(d)]
    if problems:
        raise ValueError("; ".join(problems))
    return docs


def render(plan: Plan, inp: PlanningInput, namespace: str = "default", image: str = "") -> str:
    """The objects as one multi-document YAML stream."""
    return yaml.safe_dump_all(objects(plan, inp, namespace, image), sort_keys=False)


def _labels(where_: str, labels: Any) -> list[str]:
    if not isinstance(labels, Mapping):
        return [f"{where_}: labels is not a mapping"]
    out = []
    for k, v in labels.items():
        prefix, _, name = str(k).rpartition("/")
        if (prefix and not _SUBDOMAIN.match(prefix)) or not name or len(name) > 63:
            out.append(f"{where_}: invalid label key '{k}'")
        if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
            out.append(f"{where_}: invalid value {v!r} of label '{k}'")
    return out


def check_object(doc: Any) -> list[str]:
    """Every way a pod or node object we write breaks the Kubernetes API's rules for those fields."""
    if (
        not isinstance(doc, Mapping)
        or doc.get("apiVersion") != "v1"
        or doc.get("kind") not in ("Pod", "Node")
    ):
        return ["not a v1 Pod or Node"]
    meta = doc.get("metadata") or {}
    name = meta.get("name", "")
    what = f"{doc['kind']} '{name}'"
    problems = [] if _SUBDOMAIN.match(name) and len(name) <= 253 else [f"{what}: invalid name"]
    problems.extend(_labels(what, meta.get("labels", {})))
    if doc["kind"] == "Node":
        return problems
    containers = (doc.get("spec") or {}).get("containers") or []
    if not containers:
        return [*problems, f"{what}: no containers"]
    for c in containers:
        if not _DNS_LABEL.match(c.get("name", "")) or not c.get("image"):
            problems.append(f"{what}: a container needs a DNS-1123 name and an image")
        res = c.get("resources", {})
        limits, requests = res.get("limits", {}), res.get("requests", {})
        for key, value in {**requests, **limits}.items():
            if not isinstance(value, str) or not _QUANTITY.match(value):
                problems.append(f"{what}: invalid quantity {value!r} for '{key}'")
            if "/" in key and (key in requests and requests[key] != limits.get(key)):
                problems.append(f"{what}: extended resource '{key}' must have requests equal to limits")
            if "/" in key and not str(value).isdigit():
                problems.append(f"{what}: extended resource '{key}' must be a whole number")
    return problems
