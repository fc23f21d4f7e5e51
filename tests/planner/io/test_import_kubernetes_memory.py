"""GPU memory from the pod conventions of memory-based GPU sharing: KAI Scheduler's ``gpu-memory`` and
``gpu-fraction`` annotations, HAMi's ``nvidia.com/gpumem``, ``nvidia.com/gpumem-percentage`` and
``nvidia.com/gpucores`` resources (with HAMi's node annotation), on hand-written kubectl JSON in NVIDIA GPU
Operator conventions; imported, planned and validated by the real commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import main
from gpuplan.planner.io.files import load_plan
from gpuplan.planner.io.importers.kubernetes import read_state
from tests._factories import kube_node

NOW = "2026-11-30T03:00:00+00:00"
#: What HAMi's device plugin writes on a node (one entry per GPU, 10 virtual GPUs each).
HAMI_REGISTER = json.dumps(
    [
        {"id": f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd", "count": 10, "devmem": 46068, "devcore": 100,
         "type": "NVIDIA-NVIDIA L40S", "numa": 0, "mode": "hami-core", "health": True}
        for i in range(2)
    ]
)  # fmt: skip


def _pod(
    name: str,
    node: str | None,
    *,
    annotations: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    minute: int = 0,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "kai-scheduler" if annotations else "hami-scheduler",
        "containers": [{"name": "main", "image": "vllm/vllm-openai:v0.6.3", "resources": {
            "requests": {"cpu": "2", "memory": "8Gi"}, "limits": dict(limits or {})}}],
    }  # fmt: skip
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "serving",
            "annotations": dict(annotations or {}),
            "creationTimestamp": f"2026-11-30T01:{minute:02d}:00Z",
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


#: The GPU Operator's label on a node whose GPUs have MIG off.
MIG_OFF = {"nvidia.com/mig.config": "all-disabled"}
#: A HAMi share of one GPU with 30000 MiB of its memory.
HAMI_SHARE = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"}


def _fleet() -> tuple[dict[str, Any], dict[str, Any]]:
    """An H100 node (device plugin exclusive) where KAI Scheduler shares GPUs by memory, and an L40S node
    under HAMi (``nvidia.com/gpu`` counts 10 virtual GPUs per GPU)."""
    nodes = [
        kube_node(
            "h100-kai", "NVIDIA-H100-80GB-HBM3", 2, {"nvidia.com/gpu": "2"}, labels=MIG_OFF, annotations={}
        ),
        kube_node(
            "l40s-hami",
            "NVIDIA-L40S",
            2,
            {"nvidia.com/gpu": "20"},
            labels=MIG_OFF,
            annotations={"hami.io/node-nvidia-register": HAMI_REGISTER},
        ),
    ]
    pods = [
        _pod("kv-a", "h100-kai", annotations={"gpu-memory": "40960"}, minute=1),
        _pod("kv-b", "h100-kai", annotations={"gpu-memory": "40960"}, minute=2),
        _pod("kv-c", "h100-kai", annotations={"gpu-fraction": "0.5"}, minute=3),
        _pod("train", "h100-kai", limits={"nvidia.com/gpu": "1"}, minute=4),
        _pod("kv-p", None, annotations={"gpu-memory": "15000"}, minute=5),
        _pod("hm-a", "l40s-hami", limits={**HAMI_SHARE, "nvidia.com/gpucores": "30"}, minute=6),
        _pod("hm-b", "l40s-hami", limits=HAMI_SHARE, minute=7),
        _pod("hm-p", None, limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50"}, minute=8),
    ]
    return {"kind": "List", "items": nodes}, {"kind": "List", "items": pods}


def _dump(tmp_path: Path, nodes: dict[str, Any], pods: dict[str, Any]) -> tuple[Path, Path]:
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    return tmp_path / "nodes.json", tmp_path / "pods.json"


def test_kai_and_hami_shares_carry_gpu_memory(tmp_path: Path) -> None:
    state = read_state(*_dump(tmp_path, *_fleet()))
    nodes = {n.name: n for n in state.cluster.nodes}
    # HAMi's 20 virtual GPUs are 2 GPUs; schedulers share GPUs the device plugin offers whole.
    assert len(nodes["l40s-hami"].gpus) == 2 and nodes["l40s-hami"].sharing is None
    assert nodes["h100-kai"].sharing is None
    w = {x.id.removeprefix("serving/"): x for x in state.workloads}
    assert {k: (v.gpu_memory_mib, v.gpu_milli, v.shapes[0].kind) for k, v in w.items()} == {
        "kv-a": (40960, 0, "fraction"),
        "kv-b": (40960, 0, "fraction"),
        "kv-c": (0, 500, "fraction"),
        "train": (0, 0, "whole"),
        "kv-p": (15000, 0, "fraction"),
        "hm-a": (30000, 300, "fraction"),
        "hm-b": (30000, 0, "fraction"),
        "hm-p": (0, 500, "fraction"),
    }
    running = {
        k: [(p.node, [(g.index, g.milli) for g in p.gpus]) for p in v.running_on] for k, v in w.items()
    }
    # Whole GPUs first (train holds GPU 0); two 40 GiB shares fill GPU 1's 80 GiB, and a share without a
    # memory ask still fits beside them; two 30000 MiB shares cannot share one 48 GiB L40S.
    assert running["train"] == [("h100-kai", [(0, None)])]
    assert running["kv-a"] == running["kv-b"] == [("h100-kai", [(1, 1)])]
    assert running["kv-c"] == [("h100-kai", [(1, 500)])]
    assert running["hm-a"] == [("l40s-hami", [(0, 300)])]
    assert running["hm-b"] == [("l40s-hami", [(1, 1)])]


def test_import_plan_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    nodes, pods = _dump(tmp_path, *_fleet())
    out = tmp_path / "fleet"
    assert main(["import", "kubernetes", "--nodes", str(nodes), "--pods", str(pods), "--out", str(out)]) == 0
    header = (out / "workloads.csv").read_text().splitlines()[0]
    assert "gpu_memory_mib" in header.split(",")
    cluster, workloads, plan = out / "cluster.yaml", out / "workloads.csv", out / "plan.json"
    args = ["--cluster", str(cluster), "--workloads", str(workloads)]
    assert main(["plan", *args, "--out", str(plan), "--now", NOW, "--time-limit", "10"]) == 0
    assert main(["validate", *args, "--plan", str(plan)]) == 0
    capsys.readouterr()
    placed = {a.workload: a for a in load_plan(plan).assignments}
    # The pending 15000 MiB share fits beside one 30000 MiB HAMi share, not beside two 40960 MiB ones.
    kv_p = placed["serving/kv-p"]
    assert kv_p.gpu_memory_mib == 15000 and kv_p.node == "l40s-hami"


def _break(nodes: dict[str, Any], pods: dict[str, Any], case: str) -> None:
    items = {p["metadata"]["name"]: p for p in pods["items"]}
    limits = items["hm-a"]["spec"]["containers"][0]["resources"]["limits"]
    if case == "kai-and-gpu":
        items["kv-a"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    elif case == "kai-memory":
        items["kv-a"]["metadata"]["annotations"]["gpu-memory"] = "lots"
    elif case == "kai-fraction":
        items["kv-c"]["metadata"]["annotations"]["gpu-fraction"] = "1.5"
    elif case == "hami-two":
        limits["nvidia.com/gpu"] = "2"
    elif case == "hami-cores":
        limits["nvidia.com/gpucores"] = "150"
    elif case == "overcommitted":
        items["kv-c"]["metadata"]["annotations"] = {"gpu-memory": "40960"}
        nodes["items"][0]["status"]["allocatable"]["nvidia.com/gpu"] = "1"
        nodes["items"][0]["metadata"]["labels"]["nvidia.com/gpu.count"] = "1"
        pods["items"] = [p for p in pods["items"] if p["metadata"]["name"] != "train"]


#: Each broken case and the start of its one-line error.
BAD_SHARES: list[tuple[str, str]] = [
    (
        "kai-and-gpu",
        "pod 'serving/kv-a': metadata.annotations.gpu-memory: a KAI Scheduler GPU share, "
        "but the pod also asks for nvidia.com/gpu",
    ),
    (
        "kai-memory",
        "pod 'serving/kv-a': metadata.annotations.gpu-memory: 'lots' is not a Kubernetes quantity",
    ),
    ("kai-fraction", "pod 'serving/kv-c': metadata.annotations.gpu-fraction: '1.5' is not a fraction"),
    (
        "hami-two",
        "pod 'serving/hm-a': resources.requests.nvidia.com/gpu: 2 HAMi GPU shares; "
        "gpuplan places one share per pod",
    ),
    (
        "hami-cores",
        "pod 'serving/hm-a': resources.requests.nvidia.com/gpucores: '150' is not a percentage",
    ),
    (
        "overcommitted",
        "pod 'serving/kv-c': spec.nodeName 'h100-kai': the node cannot hold it "
        "(no GPU has room for the share; h100-kai:0 lacks GPU memory: 81920 MiB used + 40960 MiB asked > "
        "81920 MiB)",
    ),
]


@pytest.mark.parametrize(("case", "message"), BAD_SHARES)
def test_bad_shares_are_left_out_naming_pod_and_field(
    case: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad share is one warning naming the pod and the field; the pod is left out, the rest imports."""
    nodes, pods = _fleet()
    _break(nodes, pods, case)
    n, p = _dump(tmp_path, nodes, pods)
    code = main(["import", "kubernetes", "--nodes", str(n), "--pods", str(p), "--out", str(tmp_path / "o")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"warning: {message}" in out
    assert f"unreadable (a warning names the field): 1: {message.split(chr(39))[1]}" in out
