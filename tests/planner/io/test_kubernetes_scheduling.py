"""kube-scheduler's filters through the Kubernetes round trip (issue 40): the importer reads node taints
and advertised resources, pod tolerations, node selectors, required node affinity and the GPU resource
asked for (keeping the node labels the selections name); plans never bind a pod where the scheduler
would refuse it; the export re-checks every Binding against the rule and leaves a refused one out with a
warning naming why; a pod gpuplan creates carries its workload's tolerations and selection."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpuplan.models import Policy
from gpuplan.models.rules.scheduling import admits
from gpuplan.planner.io.exporters import kubernetes
from gpuplan.planner.io.files import planning_input
from gpuplan.planner.io.importers.kubernetes import KubernetesState, read_state
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import validate_plan
from tests._factories import assign, kube_node, plan, wait, whole, with_actions

NOW = datetime(2026, 11, 30, 3, tzinfo=UTC)
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TOLERATE_GPU = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def _node(name: str, *args: Any, taints: list[dict[str, str]] | None = None, **kw: Any) -> dict[str, Any]:
    item = kube_node(name, *args, **kw)
    item["metadata"]["labels"]["kubernetes.io/hostname"] = name
    if taints:
        item["spec"] = {"taints": list(taints)}
    return item


NODES = [
    _node("gpu-vision", "NVIDIA-H100-80GB-HBM3", 8, {"nvidia.com/gpu": "8"},
          labels={"zone": "a", "accelerator": "h100"},
          taints=[GPU_TAINT, {"key": "dedicated", "value": "vision", "effect": "NoSchedule"},
                  {"key": "spot", "effect": "PreferNoSchedule"}]),
    _node("gpu-plain", "NVIDIA-H100-80GB-HBM3", 2, {"nvidia.com/gpu": "2", "nvidia.com/gpu.shared": "0"},
          labels={"zone": "b", "accelerator": "h100"}, taints=[GPU_TAINT]),
    _node("gpu-ts", "NVIDIA-L40S", 2, {"nvidia.com/gpu.shared": "8"},
          labels={"zone": "b", "nvidia.com/gpu.sharing-strategy": "time-slicing",
                  "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.product": "NVIDIA-L40S-SHARED"},
          taints=[GPU_TAINT]),
    _node("gpu-hami", "NVIDIA-L40S", 1, {"nvidia.com/gpu": "10"}, labels={"zone": "c"},
          annotations={"hami.io/node-nvidia-register": '[{"id": "GPU-0"}]'}),
]  # fmt: skip


def _pod(name: str, limits: dict[str, str], *, node: str | None = None, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "creationTimestamp": "2026-11-30T01:00:00Z"},
        "spec": {
            **({"nodeName": node} if node else {}),
            "schedulerName": "gpuplan",
            "containers": [{"name": "c", "image": "run:1", "resources": {"limits": limits}}],
            **spec,
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def _zone(*zones: str, key: str = "zone", op: str = "In") -> dict[str, Any]:
    expr = {"key": key, "operator": op, **({"values": list(zones)} if zones else {})}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr]}]
            }
        }
    }


PODS = [
    _pod("vision", {"nvidia.com/gpu": "4"},
         tolerations=[TOLERATE_GPU, {"key": "dedicated", "operator": "Equal", "value": "vision",
                                     "effect": "NoSchedule"}]),
    # No toleration of the dedicated taint: only gpu-plain (whose two GPUs it fills).
    _pod("plain", {"nvidia.com/gpu": "2"}, tolerations=[TOLERATE_GPU]),
    # A time-sliced share: only gpu-ts offers nvidia.com/gpu.shared.
    _pod("share", {"nvidia.com/gpu.shared": "1"}, tolerations=[TOLERATE_GPU]),
    # Zone b by selector, whole GPU: gpu-plain is full, gpu-ts offers shares only: waits.
    _pod("zonal", {"nvidia.com/gpu": "1"}, tolerations=[TOLERATE_GPU], nodeSelector={"zone": "b"}),
    # Required affinity on the node name (matchFields) and a label.
    _pod("named", {"nvidia.com/gpu": "1"},
         tolerations=[{"operator": "Exists"}],
         affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
             {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-vision"]}],
              "matchExpressions": [{"key": "accelerator", "operator": "Exists"}]}]}}}),
    # HAMi's memory share: only the node HAMi registered.
    _pod("hami", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}),
    # Runs on gpu-ts with a selector (kept on the workload).
    _pod("running", {"nvidia.com/gpu.shared": "1"}, node="gpu-ts", tolerations=[TOLERATE_GPU],
         nodeSelector={"zone": "b"}, affinity=_zone("b")),
]  # fmt: skip


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> KubernetesState:
    folder = tmp_path_factory.mktemp("dump")
    (folder / "nodes.json").write_text(json.dumps({"items": NODES}))
    (folder / "pods.json").write_text(json.dumps({"items": PODS}))
    return read_state(folder / "nodes.json", folder / "pods.json")


def test_the_import_reads_what_the_filters_read(state: KubernetesState) -> None:
    nodes = state.cluster.node_by_name
    vision = nodes["gpu-vision"]
    assert [(t.key, t.value, str(t.effect)) for t in vision.taints] == [
        ("nvidia.com/gpu", "present", "NoSchedule"),
        ("dedicated", "vision", "NoSchedule"),
        ("spot", "", "PreferNoSchedule"),
    ]
    assert vision.resources == ("nvidia.com/gpu",)
    assert nodes["gpu-plain"].resources == ("nvidia.com/gpu",)  # a zero amount is not offered
    assert nodes["gpu-ts"].resources == ("nvidia.com/gpu.shared",)
    assert {"nvidia.com/gpu", "nvidia.com/gpumem"} <= set(nodes["gpu-hami"].resources)
    # The labels the pods select on are kept (zone, accelerator, the node name for matchFields).
    assert vision.labels["zone"] == "a" and vision.labels["accelerator"] == "h100"
    assert vision.labels["metadata.name"] == "gpu-vision"
    assert "kubernetes.io/hostname" not in vision.labels  # no pod selects on it
    by_id = {w.id: w for w in state.workloads}
    assert [s.resource for s in by_id["ml/share"].shapes] == ["nvidia.com/gpu.shared"]
    assert [s.resource for s in by_id["ml/hami"].shapes] == ["nvidia.com/gpumem"]
    assert by_id["ml/zonal"].node_selector == (("zone", "b"),)
    assert by_id["ml/running"].node_selector == (("zone", "b"),) and by_id["ml/running"].running_on
    (term,) = by_id["ml/named"].node_affinity
    assert [(e.key, str(e.operator), e.values) for e in term] == [
        ("accelerator", "Exists", ()),
        ("metadata.name", "In", ("gpu-vision",)),
    ]
    assert len(by_id["ml/vision"].tolerations) == 2


@pytest.fixture(scope="module")
def planned(state: KubernetesState) -> tuple[Any, Any]:
    inp = planning_input(state.cluster, state.workloads, Policy(), source="test")
    return inp, make_plan(inp, solver="greedy-fgd", now=NOW)


def test_plans_bind_only_where_the_scheduler_would(planned: tuple[Any, Any]) -> None:
    inp, p = planned
    assert validate_plan(p, inp) == []
    where = {a.workload: a.node for a in p.assignments}
    assert where["ml/vision"] == "gpu-vision"
    assert where["ml/plain"] == "gpu-plain"
    assert where["ml/share"] == "gpu-ts"
    assert where["ml/named"] == "gpu-vision"
    assert where["ml/hami"] == "gpu-hami"
    codes = {u.workload: u.code for u in p.unplaced}
    assert codes["ml/zonal"] in ("NODE_AFFINITY", "TAINT", "RESOURCE", "SHARING_MODE", "NO_CAPACITY")
    steps = kubernetes.steps(p, inp, kubernetes.Images())
    bound = [d for s in steps for d in s.objects if d["kind"] == "Binding"]
    assert {d["metadata"]["name"] for d in bound} == {"vision", "plain", "share", "named", "hami"}
    nodes = inp.cluster.node_by_name
    for d in bound:
        w = inp.workload_by_id[f"ml/{d['metadata']['name']}"]
        assert admits(nodes[d["target"]["name"]], w, w.shapes[0]) is None


def test_the_export_leaves_out_a_binding_the_filters_refuse(
    planned: tuple[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    inp, _ = planned
    # A hand plan that binds ml/plain onto the dedicated node (and leaves the rest waiting).
    others = [wait(w.id, 0) for w in inp.workloads if w.id not in ("ml/plain", "ml/running")]
    keep = inp.workload_by_id["ml/running"].running_on[0]
    bad = with_actions(
        plan(
            [assign("ml/plain", 0, "gpu-vision", whole(0, 1)), assign("ml/running", 0, keep.node, keep.gpus)],
            others,
        ),
        inp,
    )
    assert [v.rule for v in validate_plan(bad, inp)] == ["scheduling"]
    with caplog.at_level(logging.WARNING):
        steps = kubernetes.steps(bad, inp, kubernetes.Images())
    assert not [d for s in steps for d in s.objects if d["kind"] == "Binding"]
    why = "ml/plain: not bound to gpu-vision, which kube-scheduler's filters refuse it (no toleration for "
    assert why in caplog.text


def test_a_created_pod_carries_its_workload_s_filters() -> None:
    from gpuplan.models import Cluster, PlanningInput, Workload

    cluster = Cluster.model_validate(
        {
            "nodes": [
                {
                    "name": "n1",
                    "cpu_milli": 64000,
                    "memory_mib": 262144,
                    "labels": {"zone": "a"},
                    "taints": ["dedicated=vision:NoSchedule"],
                    "gpus": [{"index": 0, "model": "H100-80GB"}],
                }
            ]
        }
    )
    w = Workload.model_validate(
        {
            "id": "train",
            "gpus": 1,
            "tolerations": "dedicated=vision:NoSchedule,spot",
            "node_selector": "zone=a",
            "node_affinity": "zone in (a,b),!spot | cores>4",
        }
    )
    inp = PlanningInput(cluster=cluster, workloads=(w,), policy=Policy())
    p = make_plan(inp, solver="greedy-fgd", now=NOW)
    (pod,) = [
        d
        for s in kubernetes.steps(p, inp, kubernetes.Images("run:1"), "ns")
        for d in s.objects
        if d["kind"] == "Pod"
    ]
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"zone": "a", "kubernetes.io/hostname": "n1"}
    assert spec["tolerations"][1:] == [
        {"operator": "Equal", "key": "dedicated", "value": "vision", "effect": "NoSchedule"},
        {"operator": "Exists", "key": "spot"},
    ]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms == [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]},
                              {"key": "spot", "operator": "DoesNotExist"}]},
        {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["4"]}]},
    ]  # fmt: skip
    kubernetes_validate.validate(pod, "1.31", strict=True)


def test_the_csv_round_trip_keeps_the_filters(state: KubernetesState, tmp_path: Path) -> None:
    from gpuplan.planner.io.files import load_cluster, load_workloads
    from gpuplan.planner.io.importers.kubernetes import write_state

    cluster_path, workloads_path = write_state(state, tmp_path)
    again = {w.id: w for w in load_workloads(workloads_path)}
    for w in state.workloads:
        twin = again[w.id]
        assert (twin.tolerations, twin.node_selector, twin.node_affinity) == (
            w.tolerations,
            w.node_selector,
            w.node_affinity,
        )
        assert [s.resource for s in twin.shapes] == [s.resource for s in w.shapes]
    nodes = load_cluster(cluster_path).node_by_name
    assert all(
        nodes[n.name].taints == n.taints and nodes[n.name].resources == n.resources
        for n in state.cluster.nodes
    )
