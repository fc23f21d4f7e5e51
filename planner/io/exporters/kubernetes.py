"""Export a plan as what a GPU Operator cluster applies or runs, one file per step.

**Order.** The plan numbers its actions by round (:mod:`planner.pipeline.actions`: each round keeps the
disruption budget and replays without over-committing anything) and runs a round in phases: stops, MIG
destroys and sharing changes, MIG creates, starts. The export keeps that order (a GPU is drained before
it is re-partitioned, and a replica is stopped before it starts elsewhere) and splits each plan round
into up to five steps, each finished before the next one is applied; each step is one file,
``round-01.yaml`` (objects for ``kubectl apply``) or ``round-02.sh`` (a shell script of ``kubectl`` calls,
for what ``apply`` cannot do: :data:`SCRIPTS`), ...:

0. ``sharing`` (script): a merge patch adding the device plugin's config of each node whose mode the
   round changes (``exclusive`` or ``time-slicing-<r>``, time-slicing with ``renameByDefault``, and the
   node's ``nvidia.com/mig.strategy`` when its label says one) to the ConfigMap the GPU Operator's
   ClusterPolicy names (:class:`ExportOptions`; its other keys stay), and a merge patch of each such
   node's ``nvidia.com/device-plugin.config`` label. A plan changes the mode of a node only when its
   non-MIG GPUs are drained at the start of the round, so this step comes first;
1. ``evict`` (script): a ``policy/v1`` Eviction of each preempted, moved or drained replica's pod,
   posted to the pod's eviction subresource (``kubectl create --raw ... -f -``);
2. ``mig`` (script): for the nodes whose MIG layout or mode the round changes, and only from device
   truth (never a node the import marked ``gpuplan.io/mig-layout: guessed``), one JSON patch of the GPU
   Operator's own mig-parted ConfigMap (:class:`ExportOptions`: as it was read, tested before it is
   replaced by the same configs plus one per such node, every GPU of the node as it stands after the
   step) and a merge patch per such node of its ``nvidia.com/mig.config`` label and the annotation that
   notes the config's entries; without the ConfigMap no MIG change is written (a warning says so);
3. ``start``: a ``scheduling.x-k8s.io/v1alpha1`` PodGroup per gang (coscheduling, ``minMember`` the
   gang's placed replicas) the first time it appears, and a Pod per replica gpuplan creates
   (:func:`creates_pod`);
4. ``place`` (script): the pending pods imported from Kubernetes, placed where they are: a pod behind
   gpuplan's own gate (the policy's ``kubernetes.scheduling_gate``) gets its node selection narrowed and
   that gate removed (:class:`Ungate`), then, when its ``schedulerName`` is the policy's
   ``kubernetes.scheduler_name`` and no other gate remains, a ``v1 Binding``; an ungated pod of that
   scheduler a ``v1 Binding``; a pod behind another controller's gate only, or of another scheduler, is
   left to it (named in the round's comments and a warning).

Empty steps are left out. The PriorityClasses of the tiers of the pods gpuplan creates come first, alone
in ``round-01.yaml``. Work that stays where it runs gets no object. A plan without actions (an older
plan file) gets them from :func:`~planner.pipeline.actions.ordered_actions`, all in one round.

**Pods.** A new pod (work not imported from Kubernetes) is named ``<workload>-<replica>-<plan digest>``
(a moved replica's new pod never collides with the old one), in the export's namespace; an imported
bare pod that moves is re-created as itself (its namespace, name, image and labels), while a
controller re-creates its own pods. Every pod gpuplan creates is pinned to its node (``nodeSelector``
``kubernetes.io/hostname``), tolerates the GPU Operator's ``nvidia.com/gpu`` NoSchedule taint, has the
PriorityClass of its tier (:func:`priority_class_name`) and asks the NVIDIA device plugin for what the
plan gives it: ``nvidia.com/gpu: N`` for whole GPUs, ``nvidia.com/mig-<profile>: 1`` for a MIG instance (the
``mixed`` strategy), ``nvidia.com/gpu.shared: 1`` for a fraction (time-slicing with
``renameByDefault``), with the planned GPU indices and milli-GPU in annotations, and a gang's pods the
policy's ``kubernetes.gang_scheduler_name``. The image is the caller's or the imported pod's own
(:class:`Images`): the planner decides placement and resources, not what runs.

**Evictions** name the running pod: an imported pod by its namespace and name, else the workload id for
a one-replica workload (one pod, one workload), else ``<workload>-<replica>``; see :func:`running_pod`.
A migration back to where the replica runs is a restart (:func:`action_label`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gpuplan.models.base import InputError
from gpuplan.models.cluster import MigInstance, Sharing, TimeSliced
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import (
    CREATE,
    DESTROY,
    MIGRATE,
    PREEMPT,
    SET_MIG_MODE,
    SET_SHARING,
    START,
    Action,
    Assignment,
    MigLayout,
    MigMode,
    Plan,
)
from gpuplan.models.workload import Workload, where
from gpuplan.planner.io.exporters.migparted import config_document, config_name, node_configs
from gpuplan.planner.io.exporters.scheduling import binding_refusal, pod_filters
from gpuplan.planner.io.importers.kubernetes import MigPartedConfig, mig_resource
from gpuplan.planner.io.importers.kubernetes.mig_configs import CONFIG_KEY as MIG_CONFIG_KEY
from gpuplan.planner.pipeline.actions import (
    PHASE,
    instance,
    ordered_actions,
    target_mig_mode,
    target_sharing,
)

GPU = "nvidia.com/gpu"
SHARED_GPU = "nvidia.com/gpu.shared"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
HOSTNAME = "kubernetes.io/hostname"
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: The GPU Operator's namespace (its ConfigMaps).
MIG_NAMESPACE = "gpu-operator"
#: The device plugin's configs: the GPU Operator's ClusterPolicy ``devicePlugin.config.name`` names it.
DEVICE_PLUGIN_CONFIGMAP = "gpuplan-device-plugin-config"
#: The node label that selects a node's device-plugin config (a key of the ConfigMap).
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
#: PriorityClass value per unit of tier weight (latency-sensitive 10 -> 10000, standard 3 -> 3000, ...).
PRIORITY_PER_WEIGHT = 1000
#: The largest value a user-defined PriorityClass may have.
MAX_PRIORITY = 1_000_000_000
#: The node label GPU Feature Discovery sets to the device plugin's MIG strategy (``none``, ``single``,
#: ``mixed``): a MIG instance is ``nvidia.com/gpu`` under ``single``, ``nvidia.com/mig-<profile>`` under
#: ``mixed``, and the device-plugin configs the export writes keep the node's strategy.
MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
#: The Node annotation that notes the mig-parted config gpuplan named on the node (its entries), so that a
#: re-import knows which GPU indices are in MIG mode without the GPU Operator's ConfigMap.
MIG_CONFIG_ANNOTATION = "gpuplan.io/mig-config"
#: The cluster-file label the importer sets on a node whose MIG layout is a guess: never re-partitioned.
MIG_LAYOUT_LABEL, GUESSED = "gpuplan.io/mig-layout", "guessed"
#: Step kinds: the PriorityClasses first, then inside each plan round in the order they are applied.
SETUP, SHARING, EVICT, MIG, STARTS, PLACE = "setup", "sharing", "evict", "mig", "start", "place"
#: Steps that are a shell script of ``kubectl`` calls (``round-NN.sh``), not objects to apply: Evictions
#: and Bindings are posted to a pod's subresource, and ConfigMaps, Nodes and gated pods are patched (only
#: the entries gpuplan owns: a ConfigMap is never replaced, a node keeps every other label).
SCRIPTS = (SHARING, EVICT, MIG, PLACE)
#: What to do after applying a step of each kind, written at the top of its file.
AFTER = {
    SETUP: "kubectl apply -f",
    SHARING: (
        "wait until each node listed offers nvidia.com/gpu.shared (time-slicing) or nvidia.com/gpu "
        "(exclusive); the ClusterPolicy's devicePlugin.config.name must name the ConfigMap patched"
    ),
    EVICT: "wait until those pods are gone",
    MIG: f"wait until each node listed has label {MIG_CONFIG_LABEL}.state=success",
    STARTS: "kubectl apply -f; wait until the pods run",
    PLACE: "wait until those pods run",
}

log = logging.getLogger(__name__)

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_QUANTITY = re.compile(r"^[0-9]+(m|Ki|Mi|Gi|Ti)?$")
#: The apiVersion of each kind the export writes.
API_VERSIONS = {
    "Pod": "v1",
    "Node": "v1",
    "ConfigMap": "v1",
    "Eviction": "policy/v1",
    "Binding": "v1",
    "PriorityClass": "scheduling.k8s.io/v1",
    "PodGroup": "scheduling.x-k8s.io/v1alpha1",
}


def dns_name(text: str, limit: int = 63) -> str:
    """A DNS-1123 name for ``text`` (lower case, ``-`` for other characters; a hash suffix when changed)."""
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.") or "x"
    if name == text and len(name) <= limit:
        return name
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-.')}-{digest}"


@dataclass(frozen=True)
class Images:
    """The container image of each workload's pods: ``per_workload`` (``--images``), else ``default``."""

    default: str = ""
    per_workload: Mapping[str, str] = field(default_factory=dict)

    def of(self, workload: str, own: str | None = None) -> str:
        """The image of ``workload``: ``--images``, else its own (``own``: an imported pod's), else
        ``--image`` (empty when none is known)."""
        return self.per_workload.get(workload) or own or self.default

    def require(self, workloads: Iterable[Workload]) -> None:
        """Raise :class:`InputError` naming the first of ``workloads`` without an image (of its own or
        given)."""
        for w in workloads:
            if not self.of(w.id, w.image):
                raise InputError(
                    f"--image: no container image for workload '{w.id}' (give --image or --images)"
                )


@dataclass(frozen=True)
class ExportOptions:
    """Where the export merges gpuplan's configs: the GPU Operator's mig-parted ConfigMap as it stands
    (``mig_parted``, from ``kubectl get configmap -n gpu-operator default-mig-parted-config -o json``:
    gpuplan adds its per-node configs to it and never replaces it; without it no MIG change is exported),
    and the device plugin's ConfigMap (the ClusterPolicy's ``devicePlugin.config.name``), whose keys
    gpuplan adds to."""

    mig_parted: MigPartedConfig | None = None
    device_plugin_configmap: str = DEVICE_PLUGIN_CONFIGMAP
    namespace: str = MIG_NAMESPACE


def priority_class_name(tier: str) -> str:
    """The PriorityClass of a tier: ``gpuplan-<tier>``."""
    return dns_name(f"gpuplan-{tier}", 253)


def running_pod(w: Workload, replica: int, namespace: str) -> tuple[str, str]:
    """The (namespace, name) of the pod a running replica is taken to have: a workload imported from
    Kubernetes (``gpuplan import kubernetes``) is its pod ``<namespace>/<pod>``; otherwise the pod is in
    ``namespace``, named by the workload id for a one-replica workload, else ``<workload>-<replica>``
    (pods carry no gpuplan id until gpuplan starts them)."""
    if w.namespace is not None and w.pod_name is not None:
        return w.namespace, w.pod_name
    pod_namespace, slash, name = w.id.partition("/")
    if slash and w.replicas == 1 and _DNS_LABEL.match(pod_namespace) and _SUBDOMAIN.match(name):
        return pod_namespace, name
    return namespace, dns_name(w.id if w.replicas == 1 else f"{w.id}-{replica}", 253)


def imported(w: Workload) -> bool:
    """Whether the workload is a pod imported from Kubernetes (it has its namespace and pod name)."""
    return w.pod_name is not None


def gpu_resources(a: Assignment, strategy: str | None = None) -> dict[str, str]:
    """The device-plugin resources of one placed replica (a MIG instance is ``nvidia.com/gpu`` on a node
    whose MIG ``strategy`` is ``single``, else ``nvidia.com/mig-<profile>``)."""
    if not a.gpus:
        return {}
    first = a.gpus[0]
    if first.mig_profile is not None:
        if strategy == "single":
            return {GPU: str(len(a.gpus))}
        return {mig_resource(first.mig_profile): str(len(a.gpus))}
    if first.milli is not None:
        return {SHARED_GPU: "1"}
    return {GPU: str(len(a.gpus))}


def pod(a: Assignment, inp: PlanningInput, namespace: str, image: str, name: str) -> dict[str, Any]:
    """The pod of one placed replica: a new one, or an imported bare pod re-created as itself (its own
    labels besides gpuplan's). A gang's pods go to the scheduler the policy names for gangs."""
    w = inp.workload_by_id[a.workload]
    requests = {"cpu": f"{a.cpu_milli}m", "memory": f"{a.memory_mib}Mi"}
    annotations = {"gpuplan.io/placement": where(a.node, a.gpus)}
    if a.gpus and a.gpus[0].milli is not None:
        annotations["gpuplan.io/gpu-milli"] = str(a.gpus[0].milli)
    labels = {
        "gpuplan.io/workload": dns_name(a.workload),
        "gpuplan.io/replica": str(a.replica),
        "gpuplan.io/tier": dns_name(w.tier),
        "gpuplan.io/team": dns_name(w.team),
    }
    if w.gang_id is not None:
        labels[POD_GROUP_LABEL] = dns_name(w.gang_id)
    labels = {**dict(w.labels), **labels} if imported(w) else labels
    scheduler = inp.policy.kubernetes.gang_scheduler_name if w.gang_id is not None else None
    filters = pod_filters(w)  # its own tolerations, node selector and required node affinity
    gpu_taint = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
    node = next((n for n in inp.cluster.nodes if n.name == a.node), None)
    strategy = node.labels.get(MIG_STRATEGY_LABEL) if node is not None else None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            **({"schedulerName": scheduler} if scheduler else {}),
            "nodeSelector": {**filters.get("nodeSelector", {}), HOSTNAME: a.node},
            **({"affinity": filters["affinity"]} if "affinity" in filters else {}),
            "priorityClassName": priority_class_name(w.tier),
            "tolerations": [gpu_taint, *(t for t in filters.get("tolerations", []) if t != gpu_taint)],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "resources": {"requests": requests, "limits": {**requests, **gpu_resources(a, strategy)}},
                }
            ],
        },
    }


def eviction(a: Action, w: Workload, namespace: str) -> dict[str, Any]:
    """The Eviction of the pod of a replica that is preempted, moved or drained."""
    assert a.replica is not None
    annotations = {"gpuplan.io/action": action_label(a), "gpuplan.io/placement": a.from_ or ""}
    pod_namespace, name = running_pod(w, a.replica, namespace)
    return {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {
            "name": name,
            "namespace": pod_namespace,
            "annotations": annotations,
        },
    }


def action_label(a: Action) -> str:
    """What a stop is called: ``restart`` for a migration back to where it runs (same node, GPUs and MIG
    instance: drained for a re-partition, or restarted), else its detail or kind."""
    if a.kind == MIGRATE and a.from_ is not None and a.from_ == a.to:
        return "restart"
    return a.detail or a.kind


def binding(namespace: str, name: str, node: str) -> dict[str, Any]:
    """The ``v1 Binding`` that places a pending pod on ``node`` (what a scheduler posts)."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }


def subresource_path(doc: Mapping[str, Any]) -> str:
    """The API path an Eviction or a Binding is posted to (``kubectl apply`` takes neither)."""
    meta = doc["metadata"]
    sub = "eviction" if doc["kind"] == "Eviction" else "binding"
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/{sub}"


@dataclass(frozen=True)
class Patch:
    """One ``kubectl patch`` of an object gpuplan changes in place: ``kind`` (``configmap``, ``node``,
    ``pod``), its namespace (``None`` for a node), name, patch type (``merge``, ``json``, ``strategic``)
    and body. Only what gpuplan owns is in the body: a ConfigMap's own keys (or, for the MIG manager's
    ``config.yaml``, a JSON patch that tests the text it read before replacing it), a node's own labels."""

    kind: str
    name: str
    type: str
    body: Any
    namespace: str | None = None

    def command(self) -> str:
        """The ``kubectl patch`` call."""
        ns = f" -n {shlex.quote(self.namespace)}" if self.namespace else ""
        body = shlex.quote(json.dumps(self.body, separators=(",", ":")))
        return f"kubectl patch {self.kind}{ns} {shlex.quote(self.name)} --type={self.type} -p {body}"


@dataclass(frozen=True)
class Ungate:
    """A pending pod behind gpuplan's own scheduling gate placed where it is: narrow its node selection to
    ``node`` (a ``nodeSelector`` entry, which a gated pod may gain), then remove gpuplan's gate only (entry
    ``index`` of ``spec.schedulingGates``, tested to be ``gate`` first: the patch fails, and the pod is left
    as it is, when the gates changed since the import), and when the pod's ``schedulerName`` is
    gpuplan's and no other gate remains, post its Binding (``bind``). Another controller's gate is never
    removed: the pod then waits for that controller too (``others``)."""

    namespace: str
    name: str
    node: str
    gates: tuple[str, ...]
    gate: str = "gpuplan.io/placement"
    bind: bool = False

    @property
    def index(self) -> int:
        """gpuplan's gate's position in the pod's gates."""
        return self.gates.index(self.gate)

    @property
    def others(self) -> tuple[str, ...]:
        """The gates of other controllers, left on the pod."""
        return tuple(g for g in self.gates if g != self.gate)

    def patches(self) -> list[Patch]:
        """The node pin, then the removal of gpuplan's gate."""
        pin = {"spec": {"nodeSelector": {HOSTNAME: self.node}}}
        path = f"/spec/schedulingGates/{self.index}"
        ungate = [
            {"op": "test", "path": f"{path}/name", "value": self.gate},
            {"op": "remove", "path": path},
        ]
        return [
            Patch("pod", self.name, "strategic", pin, self.namespace),
            Patch("pod", self.name, "json", ungate, self.namespace),
        ]

    def commands(self) -> list[str]:
        """The ``kubectl`` calls, in order: pin, ungate, and the Binding when ``bind``."""
        out = [p.command() for p in self.patches()]
        if self.bind:
            doc = binding(self.namespace, self.name, self.node)
            out.append(
                f"printf '%s\\n' {shlex.quote(json.dumps(doc))} | kubectl create --raw "
                f"{shlex.quote(subresource_path(doc))} -f -"
            )
        return out


def priority_class(tier: str, weight: int) -> dict[str, Any]:
    """The PriorityClass of a tier. ``preemptionPolicy: Never``: the plan preempts, through Evictions;
    the scheduler must not preempt on its own."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": priority_class_name(tier)},
        "value": min(MAX_PRIORITY, PRIORITY_PER_WEIGHT * weight),
        "preemptionPolicy": "Never",
        "globalDefault": False,
        "description": f"gpuplan tier '{tier}'",
    }


def pod_group(gang: str, members: int, namespace: str) -> dict[str, Any]:
    """The coscheduling PodGroup of a gang: its ``members`` pods start together or not at all."""
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": dns_name(gang), "namespace": namespace},
        "spec": {"minMember": members},
    }


def mig_patches(
    inp: PlanningInput,
    layouts: Mapping[tuple[str, int], frozenset[tuple[str, int]]],
    nodes: Sequence[str],
    current: MigPartedConfig,
) -> tuple[list[Patch], MigPartedConfig]:
    """The MIG changes of ``nodes`` (each re-partitioned or switched in the step, with ``layouts``: the
    instances of each GPU in MIG mode after it; a GPU the cluster has in MIG mode and ``layouts`` lacks
    has MIG turned off): one JSON patch of the GPU Operator's mig-parted ConfigMap that adds a config per
    node (every GPU of the node, as it is or as the plan leaves it) to the document as ``current`` holds
    it, testing that text first, then per node a merge patch of its ``nvidia.com/mig.config`` label and
    the annotation that notes the config. Returns the patches and the ConfigMap as they leave it."""
    wanted = set(nodes)
    off = [
        MigMode(node=n.name, gpu=g.index, enabled=False)
        for n in inp.cluster.nodes
        if n.name in wanted
        for g in n.gpus
        if g.mig is not None and (n.name, g.index) not in layouts
    ]
    configs = node_configs(
        inp.cluster,
        tuple(
            MigLayout(node=n, gpu=g, instances=tuple(MigInstance(profile=p, start=s) for p, s in sorted(i)))
            for (n, g), i in layouts.items()
            if n in wanted
        ),
        off,
    )
    configs = {n: configs[n] for n in nodes if n in configs}
    ours = config_document(configs)["mig-configs"]
    document = {**current.document, "version": current.document.get("version", "v1")}
    document["mig-configs"] = {**(current.document.get("mig-configs") or {}), **ours}
    text = yaml.safe_dump(document, sort_keys=False)
    path = f"/data/{MIG_CONFIG_KEY}"
    patches = [
        Patch(
            "configmap",
            current.name or "",
            "json",
            [
                {"op": "test", "path": path, "value": current.text},
                {"op": "replace", "path": path, "value": text},
            ],
            current.namespace,
        )
    ]
    for n, entries in configs.items():
        name = config_name(n, entries)
        note = json.dumps({"name": name, "entries": entries}, separators=(",", ":"))
        meta = {"labels": {MIG_CONFIG_LABEL: name}, "annotations": {MIG_CONFIG_ANNOTATION: note}}
        patches.append(Patch("node", n, "merge", {"metadata": meta}))
    after = replace(
        current,
        text=text,
        document=document,
        configs={k: tuple(v) for k, v in document["mig-configs"].items()},
    )
    return patches, after


def device_plugin_config_name(sharing: Sharing, strategy: str | None = None) -> str:
    """The device-plugin config of a mode (and of the node's MIG strategy, when its label says one):
    ``exclusive`` or ``time-slicing-<replicas>``, ``-mig-<strategy>`` appended."""
    base = f"time-slicing-{sharing.time_slicing.replicas}" if isinstance(sharing, TimeSliced) else "exclusive"
    return f"{base}-mig-{strategy}" if strategy else base


def device_plugin_config(sharing: Sharing, strategy: str | None = None) -> dict[str, Any]:
    """The device plugin's config file for a mode: the node's MIG ``strategy`` (from its
    ``nvidia.com/mig.strategy`` label; without one the flag is left out and the GPU Operator's own
    applies); time-sliced GPUs are renamed ``nvidia.com/gpu.shared``, as the pods ask."""
    config: dict[str, Any] = {"version": "v1"}
    if strategy:
        config["flags"] = {"migStrategy": strategy}
    if isinstance(sharing, TimeSliced):
        config["sharing"] = {
            "timeSlicing": {
                "renameByDefault": True,
                "resources": [{"name": GPU, "replicas": sharing.time_slicing.replicas}],
            }
        }
    return config


def sharing_patches(
    modes: Mapping[str, tuple[Sharing, str | None]], nodes: Sequence[str], configmap: str, namespace: str
) -> list[Patch]:
    """A merge patch adding the config of each switched node's mode (and MIG strategy) to the device
    plugin's ConfigMap (its other keys stay), and a merge patch per node of ``nodes`` of its
    ``nvidia.com/device-plugin.config`` label."""
    data = {
        device_plugin_config_name(*modes[n]): yaml.safe_dump(device_plugin_config(*modes[n]), sort_keys=False)
        for n in nodes
    }
    out = [Patch("configmap", configmap, "merge", {"data": dict(sorted(data.items()))}, namespace)]
    out.extend(
        Patch(
            "node",
            n,
            "merge",
            {"metadata": {"labels": {DEVICE_PLUGIN_CONFIG_LABEL: device_plugin_config_name(*modes[n])}}},
        )
        for n in nodes
    )
    return out


@dataclass(frozen=True)
class Step:
    """One file of the export: the objects of one step (``kind``) of plan round ``plan_round``; a step of
    :data:`SCRIPTS` is a shell script posting its objects (Evictions, Bindings), patching what gpuplan
    changes in place (``patches``: ConfigMap entries, node labels; ``ungates``: gated pods) after the
    ``prelude`` calls, with ``notes`` on what is left to controllers and schedulers."""

    plan_round: int
    kind: str
    objects: tuple[dict[str, Any], ...]
    ungates: tuple[Ungate, ...] = ()
    notes: tuple[str, ...] = ()
    patches: tuple[Patch, ...] = ()
    prelude: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        """The objects the step applies, posts or patches (a gated pod counts once)."""
        return len(self.objects) + len(self.patches) + len(self.ungates)

    def file_name(self, number: int) -> str:
        """``round-NN.yaml``, or ``round-NN.sh`` for a script."""
        return f"round-{number:02d}.{'sh' if self.kind in SCRIPTS else 'yaml'}"

    def render(self, number: int) -> str:
        """The step's file, headed by comments saying what it is and what to do after it."""
        name = self.file_name(number)
        then = (
            f"Run: sh {name}; then {AFTER[self.kind]}"
            if self.kind in SCRIPTS
            else f"Then: {AFTER[self.kind]}"
        )
        head = [f"# {name}: plan round {self.plan_round}, {self.kind}. {then}"]
        head.extend(f"# {n}" for n in self.notes)
        if self.kind not in SCRIPTS:
            return "\n".join(head) + "\n" + yaml.safe_dump_all(self.objects, sort_keys=False)
        lines = [
            "#!/bin/sh",
            *head,
            "# Each call stands alone: a refused one (an Eviction a PodDisruptionBudget forbids answers 429",
            "# TooManyRequests; a patch whose test finds the object changed since the import fails) is",
            "# reported, the others still run, and the script exits 1: run it again later for those.",
            "failed=0",
            'post() { kubectl create --raw "$1" -f - || failed=1; }',
        ]
        lines.extend(f"{c} || failed=1" for c in self.prelude)
        for d in self.objects:
            lines.append(f"post {shlex.quote(subresource_path(d))} <<'EOF'")
            lines.append(json.dumps(d, sort_keys=False))
            lines.append("EOF")
        lines.extend(f"{p.command()} || failed=1" for p in self.patches)
        for u in self.ungates:
            lines.append(" && \\\n  ".join(u.commands()) + " || failed=1")
        lines.append('exit "$failed"')
        return "\n".join(lines) + "\n"


def plan_digest(plan: Plan) -> str:
    """Six hex digits that tell this plan's pods from another plan's."""
    return hashlib.sha256(plan.model_dump_json().encode()).hexdigest()[:6]


def steps(
    plan: Plan,
    inp: PlanningInput,
    images: Images,
    namespace: str = "default",
    options: ExportOptions | None = None,
) -> list[Step]:
    """The plan as steps (see the module docstring); raises :class:`InputError` when a pod to create has
    no image or an object would break the API's rules (a node name Kubernetes does not allow). What the
    export leaves alone (a MIG change it cannot write from device truth, a pod behind another
    controller's gate) is logged as a warning and noted in the round's file."""
    opts = options or ExportOptions()
    actions = list(plan.actions) or ordered_actions(
        inp, plan.assignments, plan.mig_layouts, plan.sharing, plan.mig_modes
    )
    target = {(a.workload, a.replica): a for a in plan.assignments}
    started = [a for a in actions if a.kind in (MIGRATE, START)]
    created = list({w.id: w for w in (inp.workload_by_id[a.workload or ""] for a in started)}.values())
    created = [w for w in created if creates_pod(w)]
    images.require(created)
    tag = plan_digest(plan)
    members = (inp.workload_by_id[p.workload] for p in plan.assignments)
    gang_size = Counter(w.gang_id for w in members if w.gang_id is not None and not imported(w))
    mig_state = {
        (n.name, g.index): frozenset((i.profile, i.start) for i in g.mig.instances)
        for n in inp.cluster.nodes
        for g in n.gpus
        if g.mig is not None
    }
    nodes = {n.name: n for n in inp.cluster.nodes}
    strategy = {n.name: n.labels.get(MIG_STRATEGY_LABEL) or None for n in inp.cluster.nodes}
    modes = {n.name: n.sharing for n in inp.cluster.nodes if n.sharing is not None}
    mig_parted = opts.mig_parted
    out: list[Step] = []
    gangs_done: set[str] = set()
    for rnd in sorted({a.round for a in actions}):
        here = sorted((a for a in actions if a.round == rnd), key=lambda a: PHASE[a.kind])
        stops = [a for a in here if a.kind in (PREEMPT, MIGRATE)]
        evictions = [eviction(a, inp.workload_by_id[a.workload or ""], namespace) for a in stops]
        repartitioned: list[str] = []
        switched: list[str] = []
        for a in here:
            if a.kind == SET_SHARING:
                target_mode = target_sharing(a)
                modes[target_mode.node] = target_mode.sharing
                switched.append(target_mode.node)
            if a.kind == SET_MIG_MODE:
                mode = target_mig_mode(a)
                if mode.enabled:
                    mig_state[(mode.node, mode.gpu)] = frozenset()
                else:
                    mig_state.pop((mode.node, mode.gpu), None)
                if mode.node not in repartitioned:
                    repartitioned.append(mode.node)
            if a.kind in (DESTROY, CREATE):
                assert a.node is not None and a.gpu is not None
                now = mig_state.get((a.node, a.gpu), frozenset())
                change = frozenset({instance(a)})
                mig_state[(a.node, a.gpu)] = now - change if a.kind == DESTROY else now | change
                if a.node not in repartitioned:
                    repartitioned.append(a.node)
        pods: list[dict[str, Any]] = []
        placed = _Placing(inp.policy.kubernetes.scheduler_name, inp.policy.kubernetes.scheduling_gate)
        for a in stops:
            w = inp.workload_by_id[a.workload or ""]
            if a.kind == PREEMPT and imported(w) and w.owner is not None:
                placed.recreated.append(
                    f"{w.namespace}/{w.pod_name}: preempted; its controller {w.owner} re-creates it pending"
                )
        for a in here:
            if a.kind not in (MIGRATE, START):
                continue
            assignment = target[(a.workload or "", a.replica or 0)]
            w = inp.workload_by_id[assignment.workload]
            if not creates_pod(w):
                bound_to = nodes.get(assignment.node)
                refused = binding_refusal(bound_to, w, assignment, modes.get(assignment.node))
                if refused is not None:  # a Binding skips the scheduler: never one its filters refuse
                    placed.left.append(refused)
                    continue
                placed.add(w, a, assignment.node)
                continue
            gang = w.gang_id
            if gang is not None and gang not in gangs_done and not imported(w):
                gangs_done.add(gang)
                pods.append(pod_group(gang, gang_size[gang], namespace))
            if imported(w):
                pod_namespace, name = running_pod(w, assignment.replica, namespace)
            else:
                pod_namespace, name = namespace, dns_name(f"{assignment.workload}-{assignment.replica}-{tag}")
            image = images.of(w.id, w.image)
            pods.append(pod(assignment, inp, pod_namespace, image, name))
        # MIG configs only for the nodes this round re-partitions or switches, and only from device truth.
        left_alone: list[str] = []
        guessed = [n for n in repartitioned if nodes[n].labels.get(MIG_LAYOUT_LABEL) == GUESSED]
        if guessed:
            left_alone.append(
                f"MIG changes on {', '.join(guessed)} not written: the import only guessed their MIG layout "
                "(label gpuplan.io/mig-layout=guessed), and a config written from a guess would make the MIG "
                "manager re-partition busy GPUs; pods planned on their new instances stay pending"
            )
        known = [n for n in repartitioned if n not in guessed]
        if known and (mig_parted is None or not mig_parted.name):
            left_alone.append(
                f"MIG changes on {', '.join(known)} not written: give the GPU Operator's mig-parted "
                "ConfigMap (--mig-parted-config FILE: kubectl get configmap -n gpu-operator "
                "default-mig-parted-config -o json; a bare mig-parted file does not say which ConfigMap to "
                "patch), which gpuplan adds its configs to and never replaces"
            )
            known = []
        mig: list[Patch] = []
        if known and mig_parted is not None:
            mig, mig_parted = mig_patches(inp, mig_state, known, mig_parted)
        sharing = (
            sharing_patches(
                {n: (modes[n], strategy.get(n)) for n in switched},
                switched,
                opts.device_plugin_configmap,
                opts.namespace,
            )
            if switched
            else []
        )
        for note in left_alone:
            log.warning("plan round %d: %s", rnd, note)
        if sharing:
            cm = f"-n {shlex.quote(opts.namespace)} {shlex.quote(opts.device_plugin_configmap)}"
            ensure = f"kubectl get configmap {cm} >/dev/null 2>&1 || kubectl create configmap {cm}"
            out.append(Step(rnd, SHARING, (), patches=tuple(sharing), prelude=(ensure,)))
        if evictions:
            out.append(Step(rnd, EVICT, tuple(evictions), notes=tuple(placed.recreated)))
        if mig:
            out.append(Step(rnd, MIG, (), patches=tuple(mig)))
        if pods:
            out.append(Step(rnd, STARTS, tuple(pods), notes=tuple(left_alone)))
            left_alone = []
        notes = (*left_alone, *placed.left)
        if placed.bindings or placed.ungates:
            out.append(Step(rnd, PLACE, tuple(placed.bindings), tuple(placed.ungates), notes))
        elif notes and out and out[-1].plan_round == rnd:
            out[-1] = replace(out[-1], notes=(*out[-1].notes, *notes))
        for note in placed.left:
            log.warning("plan round %d: %s", rnd, note)
    tiers = sorted({w.tier for w in created})
    classes = [priority_class(t, inp.policy.tier(t).weight) for t in tiers]
    if classes:
        out.insert(0, Step(out[0].plan_round, SETUP, tuple(classes)))
    problems = [p for s in out for d in s.objects for p in check_object(d)]
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise InputError(f"Kubernetes export: {problems[0]}{more}")
    return out


def creates_pod(w: Workload) -> bool:
    """Whether placing ``w`` takes a pod the export writes: work not imported from Kubernetes (a new pod)
    and an imported bare pod that runs now (re-created as itself after its Eviction). A pending imported
    pod is placed where it is, and a controller re-creates its own pods."""
    if not imported(w):
        return True
    return bool(w.running_on) and w.owner is None


@dataclass
class _Placing:
    """What one round does with imported pods it does not create: Bindings and ungating patches of
    pending pods, and notes on pods left to their controller or scheduler. Only pods whose
    ``schedulerName`` is gpuplan's (``scheduler``) are bound, and only gpuplan's own ``gate`` is removed."""

    scheduler: str
    gate: str = "gpuplan.io/placement"
    bindings: list[dict[str, Any]] = field(default_factory=list)
    ungates: list[Ungate] = field(default_factory=list)
    recreated: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    def add(self, w: Workload, a: Action, node: str) -> None:
        """Place the imported pod of ``w`` that action ``a`` starts or moves to ``node``."""
        assert w.namespace is not None and w.pod_name is not None
        what = f"{w.namespace}/{w.pod_name}"
        ours = w.scheduler_name == self.scheduler
        if w.running_on:
            restart = "restarted in place" if action_label(a) == "restart" else f"planned on {node}"
            self.recreated.append(
                f"{what}: its controller {w.owner} re-creates it ({restart}; the replacement lands there "
                f"only behind gpuplan's gate {self.gate} with the planned node injected at admission, and "
                "waits in the next plan until it does)"
            )
        elif self.gate in w.scheduling_gates:
            others = tuple(g for g in w.scheduling_gates if g != self.gate)
            self.ungates.append(
                Ungate(w.namespace, w.pod_name, node, w.scheduling_gates, self.gate, bind=ours and not others)
            )
            if others:
                self.left.append(
                    f"{what}: gpuplan's gate removed, but it still waits for {', '.join(others)} "
                    f"(planned on {node})"
                )
        elif w.scheduling_gates:
            self.left.append(
                f"{what}: gated by {', '.join(w.scheduling_gates)}, not gpuplan's gate {self.gate}: left to "
                f"that controller (planned on {node}; gpuplan never removes another controller's gate)"
            )
        elif ours:
            self.bindings.append(binding(w.namespace, w.pod_name, node))
        else:
            self.left.append(
                f"{what}: pending without gpuplan's gate, left to its scheduler "
                f"'{w.scheduler_name or 'default-scheduler'}' (planned on {node}; only pods of "
                f"schedulerName '{self.scheduler}' are bound)"
            )


def write_rounds(out: Sequence[Step], directory: Path) -> list[Path]:
    """Write ``round-01.yaml``, ``round-02.sh``, ... to ``directory`` (made if missing), removing the
    round files of an earlier export there first; scripts are made executable."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in (*directory.glob("round-*.yaml"), *directory.glob("round-*.sh")):
        old.unlink()
    paths = []
    for number, step in enumerate(out, start=1):
        path = directory / step.file_name(number)
        path.write_text(step.render(number))
        if step.kind in SCRIPTS:
            path.chmod(0o755)
        paths.append(path)
    return paths


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
    """Every way an object we write breaks the Kubernetes API's rules for its name, labels and (of a
    pod) containers and resources; the OpenAPI schemas are checked in the tests."""
    if not isinstance(doc, Mapping) or API_VERSIONS.get(doc.get("kind", "")) != doc.get("apiVersion"):
        return [f"not one of the kinds the export writes: {sorted(API_VERSIONS)}"]
    meta = doc.get("metadata") or {}
    name = meta.get("name", "")
    what = f"{doc['kind']} '{name}'"
    problems = [] if _SUBDOMAIN.match(name) and len(name) <= 253 else [f"{what}: invalid name"]
    problems.extend(_labels(what, meta.get("labels", {})))
    if doc["kind"] != "Pod":
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
