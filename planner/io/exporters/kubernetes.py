"""Export a plan as what a GPU Operator cluster applies or runs, one file per step.

**Order.** The plan numbers its actions by round (:mod:`planner.pipeline.actions`: each round keeps the
disruption budget and replays without over-committing anything) and runs a round in phases: stops, MIG
destroys and sharing changes, MIG creates, starts. The export keeps that order (a GPU is drained before
it is re-partitioned, and a replica is stopped before it starts elsewhere) and splits each plan round
into up to five steps, each finished before the next one is applied; each step is one file,
``round-01.yaml`` (objects for ``kubectl apply``) or ``round-02.sh`` (a shell script of ``kubectl`` calls,
for what ``apply`` cannot do: :data:`SCRIPTS`), ...:

0. ``sharing``: the device plugin's configs as the ConfigMap :data:`DEVICE_PLUGIN_CONFIGMAP` in
   :data:`MIG_NAMESPACE` (the GPU Operator's ClusterPolicy ``devicePlugin.config.name`` names it; one
   config per mode: ``exclusive`` and ``time-slicing-<r>``, time-slicing with ``renameByDefault``) and,
   per node whose mode the round changes (every node with a mode in the first such step), a minimal
   Node with the ``nvidia.com/device-plugin.config`` label. A plan changes the mode of a node only when
   its non-MIG GPUs are drained at the start of the round, so this step comes first;
1. ``evict`` (script): a ``policy/v1`` Eviction of each preempted, moved or drained replica's pod,
   posted to the pod's eviction subresource (``kubectl create --raw ... -f -``);
2. ``mig``: the MIG manager's config as the ConfigMap :data:`MIG_CONFIGMAP` in :data:`MIG_NAMESPACE`
   (every node's config as it stands after the step; a GPU whose MIG mode the round turns off
   (``set-mig-mode``) is ``mig-enabled: false``, one it turns on ``mig-enabled: true``) and, per node
   re-partitioned or switched in the round (every MIG node in the first such step), a minimal Node
   (name and the ``nvidia.com/mig.config`` label, a strategic-merge patch);
3. ``start``: a ``scheduling.x-k8s.io/v1alpha1`` PodGroup per gang (coscheduling, ``minMember`` the
   gang's placed replicas) the first time it appears, and a Pod per replica gpuplan creates
   (:func:`creates_pod`);
4. ``place`` (script): the pending pods imported from Kubernetes, placed where they are: a gated pod
   gets its node selection narrowed and its gates removed (:class:`Ungate`, Kueue's convention), a pod
   whose ``schedulerName`` is the policy's ``kubernetes.scheduler_name`` a ``v1 Binding``; a pod of
   another scheduler is left to it (named in the round's comments).

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
from gpuplan.planner.io.importers.kubernetes import mig_resource
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
#: The MIG manager's config: the GPU Operator's ClusterPolicy ``migManager.config.name`` names it.
MIG_CONFIGMAP = "gpuplan-mig-parted-config"
MIG_NAMESPACE = "gpu-operator"
#: The device plugin's configs: the GPU Operator's ClusterPolicy ``devicePlugin.config.name`` names it.
DEVICE_PLUGIN_CONFIGMAP = "gpuplan-device-plugin-config"
#: The node label that selects a node's device-plugin config (a key of the ConfigMap).
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
#: PriorityClass value per unit of tier weight (latency-sensitive 10 -> 10000, standard 3 -> 3000, ...).
PRIORITY_PER_WEIGHT = 1000
#: The largest value a user-defined PriorityClass may have.
MAX_PRIORITY = 1_000_000_000
#: Step kinds: the PriorityClasses first, then inside each plan round in the order they are applied.
SETUP, SHARING, EVICT, MIG, STARTS, PLACE = "setup", "sharing", "evict", "mig", "start", "place"
#: Steps that are a shell script of ``kubectl`` calls (``round-NN.sh``), not objects to apply: Evictions
#: and Bindings are posted to a pod's subresource, and a gated pod is patched.
SCRIPTS = (EVICT, PLACE)
#: What to do after applying a step of each kind, written at the top of its file.
AFTER = {
    SETUP: "kubectl apply -f",
    SHARING: (
        f"kubectl apply -f (the ClusterPolicy's devicePlugin.config.name must be {DEVICE_PLUGIN_CONFIGMAP}); "
        "wait until each node listed offers nvidia.com/gpu.shared (time-slicing) "
        "or nvidia.com/gpu (exclusive)"
    ),
    EVICT: "wait until those pods are gone",
    MIG: f"kubectl apply -f; wait until each node listed has label {MIG_CONFIG_LABEL}.state=success",
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


def gpu_resources(a: Assignment) -> dict[str, str]:
    """The device-plugin resources of one placed replica."""
    if not a.gpus:
        return {}
    first = a.gpus[0]
    if first.mig_profile is not None:
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
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            **({"schedulerName": scheduler} if scheduler else {}),
            "nodeSelector": {HOSTNAME: a.node},
            "priorityClassName": priority_class_name(w.tier),
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "resources": {"requests": requests, "limits": {**requests, **gpu_resources(a)}},
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
class Ungate:
    """A gated pending pod placed where it is: narrow its node selection to ``node`` (a ``nodeSelector``
    entry, which a gated pod may gain), then remove the gates it had when imported (the test fails, and
    the pod is left as it is, when they changed since)."""

    namespace: str
    name: str
    node: str
    gates: tuple[str, ...]

    def commands(self) -> list[str]:
        """The two ``kubectl patch`` calls, in order."""
        pin = {"spec": {"nodeSelector": {HOSTNAME: self.node}}}
        ungate = [
            {"op": "test", "path": "/spec/schedulingGates", "value": [{"name": g} for g in self.gates]},
            {"op": "remove", "path": "/spec/schedulingGates"},
        ]
        target = f"kubectl patch pod -n {shlex.quote(self.namespace)} {shlex.quote(self.name)}"
        return [
            f"{target} --type=strategic -p {shlex.quote(json.dumps(pin, separators=(',', ':')))}",
            f"{target} --type=json -p {shlex.quote(json.dumps(ungate, separators=(',', ':')))}",
        ]


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


def mig_objects(
    inp: PlanningInput,
    layouts: Mapping[tuple[str, int], frozenset[tuple[str, int]]],
    nodes: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """The MIG manager's ConfigMap for ``layouts`` (the instances of each GPU in MIG mode; a GPU the
    cluster has in MIG mode and ``layouts`` lacks has MIG turned off) and a label patch per node of
    ``nodes`` (default: every node in the ConfigMap)."""
    off = [
        MigMode(node=n.name, gpu=g.index, enabled=False)
        for n in inp.cluster.nodes
        for g in n.gpus
        if g.mig is not None and (n.name, g.index) not in layouts
    ]
    configs = node_configs(
        inp.cluster,
        tuple(
            MigLayout(node=n, gpu=g, instances=tuple(MigInstance(profile=p, start=s) for p, s in sorted(i)))
            for (n, g), i in layouts.items()
        ),
        off,
    )
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": MIG_CONFIGMAP, "namespace": MIG_NAMESPACE},
        "data": {"config.yaml": yaml.safe_dump(config_document(configs), sort_keys=False)},
    }
    labels = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n, "labels": {MIG_CONFIG_LABEL: config_name(n, configs[n])}},
        }
        for n in (configs if nodes is None else nodes)
    ]
    return [config_map, *labels]


def device_plugin_config_name(sharing: Sharing) -> str:
    """The device-plugin config of a mode: ``exclusive`` or ``time-slicing-<replicas>``."""
    if isinstance(sharing, TimeSliced):
        return f"time-slicing-{sharing.time_slicing.replicas}"
    return "exclusive"


def device_plugin_config(sharing: Sharing) -> dict[str, Any]:
    """The device plugin's config file for a mode (MIG GPUs keep the ``mixed`` strategy the pods' MIG
    resources use; time-sliced GPUs are renamed ``nvidia.com/gpu.shared``, as the pods ask)."""
    config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": "mixed"}}
    if isinstance(sharing, TimeSliced):
        config["sharing"] = {
            "timeSlicing": {
                "renameByDefault": True,
                "resources": [{"name": GPU, "replicas": sharing.time_slicing.replicas}],
            }
        }
    return config


def sharing_objects(modes: Mapping[str, Sharing], nodes: Sequence[str]) -> list[dict[str, Any]]:
    """The device plugin's ConfigMap with the config of every mode in ``modes`` (by node) and a label
    patch per node of ``nodes`` selecting its config."""
    configs = {device_plugin_config_name(m): m for m in modes.values()}
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": DEVICE_PLUGIN_CONFIGMAP, "namespace": MIG_NAMESPACE},
        "data": {
            name: yaml.safe_dump(device_plugin_config(m), sort_keys=False)
            for name, m in sorted(configs.items())
        },
    }
    labels = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": n,
                "labels": {DEVICE_PLUGIN_CONFIG_LABEL: device_plugin_config_name(modes[n])},
            },
        }
        for n in nodes
    ]
    return [config_map, *labels]


@dataclass(frozen=True)
class Step:
    """One file of the export: the objects of one step (``kind``) of plan round ``plan_round``; a step of
    :data:`SCRIPTS` is a shell script posting its objects (Evictions, Bindings) and patching gated pods
    (``ungates``), with ``notes`` on what is left to controllers and schedulers."""

    plan_round: int
    kind: str
    objects: tuple[dict[str, Any], ...]
    ungates: tuple[Ungate, ...] = ()
    notes: tuple[str, ...] = ()

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
            "# TooManyRequests; a patch whose test finds other gates fails) is reported, the others still",
            "# run, and the script exits 1: run it again later for those.",
            "failed=0",
            'post() { kubectl create --raw "$1" -f - || failed=1; }',
        ]
        for d in self.objects:
            lines.append(f"post {shlex.quote(subresource_path(d))} <<'EOF'")
            lines.append(json.dumps(d, sort_keys=False))
            lines.append("EOF")
        for u in self.ungates:
            first, second = u.commands()
            lines.append(f"{first} && \\\n  {second} || failed=1")
        lines.append('exit "$failed"')
        return "\n".join(lines) + "\n"


def plan_digest(plan: Plan) -> str:
    """Six hex digits that tell this plan's pods from another plan's."""
    return hashlib.sha256(plan.model_dump_json().encode()).hexdigest()[:6]


def steps(plan: Plan, inp: PlanningInput, images: Images, namespace: str = "default") -> list[Step]:
    """The plan as steps (see the module docstring); raises :class:`InputError` when a pod to create has
    no image or an object would break the API's rules (a node name Kubernetes does not allow)."""
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
    modes = {n.name: n.sharing for n in inp.cluster.nodes if n.sharing is not None}
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
        placed = _Placing(inp.policy.kubernetes.scheduler_name)
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
        # The first MIG step labels every MIG node, so that all of them select a config of this ConfigMap
        # (the MIG manager does nothing on a node whose layout is already the one selected).
        first_mig = not any(s.kind == MIG for s in out)
        mig = mig_objects(inp, mig_state, None if first_mig else repartitioned) if repartitioned else []
        # Likewise the first sharing step labels every node with a mode.
        first_sharing = not any(s.kind == SHARING for s in out)
        sharing = sharing_objects(modes, sorted(modes) if first_sharing else switched) if switched else []
        if sharing:
            out.append(Step(rnd, SHARING, tuple(sharing)))
        if evictions:
            out.append(Step(rnd, EVICT, tuple(evictions), notes=tuple(placed.recreated)))
        if mig:
            out.append(Step(rnd, MIG, tuple(mig)))
        if pods:
            out.append(Step(rnd, STARTS, tuple(pods)))
        if placed.bindings or placed.ungates:
            out.append(Step(rnd, PLACE, tuple(placed.bindings), tuple(placed.ungates), tuple(placed.left)))
        elif placed.left and out and out[-1].plan_round == rnd:
            out[-1] = replace(out[-1], notes=(*out[-1].notes, *placed.left))
        elif placed.left:
            log.warning("plan round %d: %s", rnd, "; ".join(placed.left))
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
    pending pods, and notes on pods left to their controller or scheduler."""

    scheduler: str
    bindings: list[dict[str, Any]] = field(default_factory=list)
    ungates: list[Ungate] = field(default_factory=list)
    recreated: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)

    def add(self, w: Workload, a: Action, node: str) -> None:
        """Place the imported pod of ``w`` that action ``a`` starts or moves to ``node``."""
        assert w.namespace is not None and w.pod_name is not None
        what = f"{w.namespace}/{w.pod_name}"
        if w.running_on:
            restart = "restarted in place" if action_label(a) == "restart" else f"planned on {node}"
            self.recreated.append(f"{what}: its controller {w.owner} re-creates it ({restart})")
        elif w.scheduling_gates:
            self.ungates.append(Ungate(w.namespace, w.pod_name, node, w.scheduling_gates))
        elif w.scheduler_name == self.scheduler:
            self.bindings.append(binding(w.namespace, w.pod_name, node))
        else:
            self.left.append(
                f"{what}: pending without a scheduling gate, left to its scheduler "
                f"'{w.scheduler_name or 'default-scheduler'}' (planned on {node})"
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
