"""``gpuplan import kubernetes`` and ``gpuplan replan --kubernetes-state``: kubectl JSON dumps written to
NVIDIA GPU Operator conventions (``tests/data/kubernetes``) in, a cluster and workloads with completed
running placements out, planned and validated by the real commands."""

from __future__ import annotations

import copy
import json
from collections import Counter, defaultdict
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.models import Workload
from gpuplan.models.base import InputError
from gpuplan.planner.io.files import load_cluster, load_plan, load_workloads
from gpuplan.planner.io.importers.kubernetes import KubernetesState, quantity, read_state
from gpuplan.planner.store.history import PlanHistory
from tests._factories import kube_node
from tests._paths import TESTS_DATA

DATA = TESTS_DATA / "kubernetes"
NOW = "2026-11-30T03:00:00+00:00"


def _load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name).read_text())
    return data


def _dump(tmp_path: Path, nodes: dict[str, Any], pods: dict[str, Any]) -> tuple[Path, Path]:
    """Write node and pod lists as ``nodes.json`` and ``pods.json`` under ``tmp_path``."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    return tmp_path / "nodes.json", tmp_path / "pods.json"


def _item(items: dict[str, Any], name: str) -> dict[str, Any]:
    """The node or pod called ``name`` in a kubectl list."""
    found: dict[str, Any] = next(i for i in items["items"] if i["metadata"]["name"] == name)
    return found


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def fixture_state() -> KubernetesState:
    return read_state(DATA / "nodes.json", DATA / "pods.json")


def test_import_plan_validate_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "fleet"
    args = ["import", "kubernetes", "--nodes", str(DATA / "nodes.json"), "--pods", str(DATA / "pods.json")]
    code, text, _ = _run([*args, "--out", str(out)], capsys)
    assert code == 0, text
    assert "5 GPU nodes, 32 GPUs" in text and "22 running, 7 pending" in text
    cluster, workloads, plan = out / "cluster.yaml", out / "workloads.csv", out / "plan.json"
    plan_args = ["plan", "--cluster", str(cluster), "--workloads", str(workloads), "--out", str(plan)]
    code, text, err = _run([*plan_args, "--now", NOW, "--time-limit", "10"], capsys)
    assert code == 0, err
    code, text, err = _run(
        ["validate", "--cluster", str(cluster), "--workloads", str(workloads), "--plan", str(plan)], capsys
    )
    assert code == 0 and "valid" in text, text + err
    placed = {a.workload for a in load_plan(plan).assignments}
    running = {w.id for w in load_workloads(workloads) if w.running_on}
    assert running <= placed  # nothing that runs is dropped


def test_written_files_agree_with_the_state_in_memory(tmp_path: Path, fixture_state: KubernetesState) -> None:
    files = ["--nodes", str(DATA / "nodes.json"), "--pods", str(DATA / "pods.json")]
    assert main(["import", "kubernetes", *files, "--out", str(tmp_path)]) == 0
    assert load_cluster(tmp_path / "cluster.yaml") == fixture_state.cluster
    assert load_workloads(tmp_path / "workloads.csv") == fixture_state.workloads


def test_nodes_follow_gpu_operator_labels_and_allocatable(fixture_state: KubernetesState) -> None:
    nodes = fixture_state.cluster.node_by_name
    assert set(nodes) == {
        "dgx-h100-01",
        "dgx-a100-01",
        "xe8545-07",
        "l40s-ts-01",
        "l40s-02",
    }  # cpu-01 left out
    dgx = nodes["dgx-h100-01"]
    assert dgx.topology == "dgx-h100" and len(dgx.gpus) == 8 and {g.model for g in dgx.gpus} == {"H100-80GB"}
    assert any(lk.kind.startswith("NV") for lk in dgx.links)
    # allocatable 223 CPUs and 2113442996Ki less the DaemonSet pods (kube-proxy, dcgm-exporter, device plugin)
    assert dgx.cpu_milli == 223_000 - 100 - 200 - 50
    assert dgx.memory_mib == 2113442996 // 1024 - 64 - 512 - 100
    assert dgx.labels["topology.kubernetes.io/zone"] == "eu-west-dc1-hall2"
    # l40s-02 also runs a CPU-only web pod (2 CPUs, 4Gi), which gpuplan does not plan but which holds capacity
    assert nodes["l40s-02"].cpu_milli == 95_500 - 350 - 2000
    # all-balanced on an A100 80GB: 2x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb on every GPU (mixed strategy)
    a100 = nodes["dgx-a100-01"]
    for g in a100.gpus:
        assert g.model == "A100-SXM4-80GB" and g.mig is not None
        assert sorted(i.profile for i in g.mig.instances) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    # single strategy: 28 nvidia.com/gpu devices of 1g.5gb are 4 A100 40GB GPUs of 7 instances each
    single = nodes["xe8545-07"]
    assert len(single.gpus) == 4
    assert all(
        g.mig is not None and [i.profile for i in g.mig.instances] == ["1g.5gb"] * 7 for g in single.gpus
    )
    # time-slicing: 32 nvidia.com/gpu.shared at 4 replicas are 8 L40S GPUs
    assert [g.model for g in nodes["l40s-ts-01"].gpus] == ["L40S-48GB"] * 8


def test_each_node_has_its_sharing_mode(fixture_state: KubernetesState) -> None:
    entries = {e["name"]: e for e in fixture_state.node_entries}
    assert entries["l40s-ts-01"]["sharing"] == {"time-slicing": {"replicas": 4}}
    assert entries["l40s-02"]["sharing"] == entries["dgx-h100-01"]["sharing"] == "exclusive"
    assert "sharing" not in entries["dgx-a100-01"]  # every GPU in MIG mode


def test_pods_become_workloads(fixture_state: KubernetesState) -> None:
    by_id = {w.id: w for w in fixture_state.workloads}
    # Succeeded, Failed, DaemonSet and CPU-only pods are not workloads
    assert "llm-train/data-prep-28871-x7k2m" not in by_id and "research/eval-broken-0" not in by_id
    assert not any("dcgm" in i or "kube-proxy" in i or i.startswith("web/") for i in by_id)
    train = by_id["llm-train/pretrain-7b-worker-0"]
    assert train.gpus == 4 and train.cpu_milli == 96_000 and train.memory_mib == 896 * 1024
    assert train.tier == "standard" and train.team == "llm-train" and train.priority == 1000
    assert by_id["inference/llama-8b-5d8f7c9b6-7x2kq"].tier == "latency-sensitive"
    assert by_id["notebooks/jupyter-alice"].tier == "background"
    # nvidia.com/gpu on a single-strategy MIG node is one MIG device; limits stand in for requests
    dave = by_id["notebooks/jupyter-dave"]
    assert dave.mig_profile == "1g.5gb" and dave.memory_mib == 8192
    assert by_id["notebooks/vscode-erin"].gpu_milli == 250  # one of 4 time-sliced replicas
    assert by_id["notebooks/vscode-kim"].gpu_milli == 250 and not by_id["notebooks/vscode-kim"].running_on
    # node selection on nvidia.com/gpu.product becomes allowed GPU models
    assert by_id["llm-train/eval-h100-0"].gpu_models == ("H100-80GB",)
    assert by_id["llm-train/sft-13b-0"].gpu_models == ("L40S-48GB", "H100-80GB")
    assert by_id["llm-train/sft-13b-0"].queued_since is not None


def test_gangs_from_coscheduling_kueue_and_volcano(fixture_state: KubernetesState) -> None:
    gangs: dict[str, set[str]] = defaultdict(set)
    for w in fixture_state.workloads:
        if w.gang_id:
            gangs[w.gang_id].add(w.id)
    assert gangs == {
        "llm-train/pretrain-7b": {"llm-train/pretrain-7b-worker-0", "llm-train/pretrain-7b-worker-1"},
        "llm-train/sft-13b": {"llm-train/sft-13b-0", "llm-train/sft-13b-1"},
        "research/rl-sweep-8e2f1c": {"research/rl-sweep-worker-0", "research/rl-sweep-worker-1"},
    }


def test_pods_on_a_mig_node_hold_distinct_instances_at_valid_starts(fixture_state: KubernetesState) -> None:
    layouts = {
        (n.name, g.index): {(i.profile, i.start) for i in g.mig.instances}
        for n in fixture_state.cluster.nodes
        for g in n.gpus
        if g.mig is not None
    }
    held: list[tuple[str, int, str | None, int | None]] = []
    for w in fixture_state.workloads:
        for p in w.running_on:
            for g in p.gpus:
                if g.mig_profile is not None:
                    assert g.mig_profile == w.mig_profile
                    assert (g.mig_profile, g.mig_start) in layouts[(p.node, g.index)]
                    held.append((p.node, g.index, g.mig_profile, g.mig_start))
    assert len(held) == 13 and len(set(held)) == len(held)


def test_unknown_product_is_one_line_naming_node_and_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = _load("nodes.json")
    _item(nodes, "l40s-02")["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-Z100-TURBO"
    n, p = _dump(tmp_path, nodes, _load("pods.json"))
    code, _, err = _run(
        ["import", "kubernetes", "--nodes", str(n), "--pods", str(p), "--out", str(tmp_path)], capsys
    )
    assert code == 2
    assert err == (
        "gpuplan: error: node 'l40s-02': label nvidia.com/gpu.product: "
        "unknown GPU product 'NVIDIA-Z100-TURBO'\n"
    )
    assert not (tmp_path / "cluster.yaml").exists()


def _break(nodes: dict[str, Any], pods: dict[str, Any], case: str) -> None:
    """Damage the fixture one way."""
    if case == "quantity":
        _item(pods, "jupyter-bob")["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "two"
    elif case == "two-kinds":
        _item(pods, "vscode-kim")["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    elif case == "overbooked":
        _item(nodes, "l40s-02")["status"]["allocatable"]["nvidia.com/gpu"] = "1"
        _item(pods, "sft-13b-0")["spec"]["nodeName"] = "l40s-02"
    elif case == "mig-profile":
        _item(nodes, "dgx-a100-01")["status"]["allocatable"]["nvidia.com/mig-9g.99gb"] = "8"
    elif case == "mig-config":
        _item(nodes, "dgx-a100-01")["metadata"]["labels"]["nvidia.com/mig.config"] = "custom-heavy"
        _item(nodes, "dgx-a100-01")["status"]["allocatable"]["nvidia.com/mig-3g.40gb"] = "24"
    elif case == "node-name":
        _item(pods, "eval-h100-0")["spec"]["nodeName"] = "cpu-01"
    elif case == "selector":
        _item(pods, "eval-h100-0")["spec"]["nodeSelector"]["nvidia.com/gpu.product"] = "NVIDIA-X1"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "mig-config",
            "node 'dgx-a100-01': label nvidia.com/mig.config: the MIG devices offered (16x 1g.10gb",
        ),
        (
            "mig-profile",
            "node 'dgx-a100-01': status.allocatable.nvidia.com/mig-9g.99gb: A100-SXM4-80GB does not offer",
        ),
    ],
)
def test_node_errors_are_one_line_naming_object_and_field(
    case: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, pods = _load("nodes.json"), _load("pods.json")
    _break(nodes, pods, case)
    n, p = _dump(tmp_path, nodes, pods)
    code, _, err = _run(
        ["import", "kubernetes", "--nodes", str(n), "--pods", str(p), "--out", str(tmp_path)], capsys
    )
    assert code == 2
    assert err.startswith(f"gpuplan: error: {message}") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("case", "pod", "message"),
    [
        (
            "quantity",
            "notebooks/jupyter-bob",
            "pod 'notebooks/jupyter-bob': container 'main' resources.requests.cpu: 'two' is not",
        ),
        (
            "two-kinds",
            "notebooks/vscode-kim",
            "pod 'notebooks/vscode-kim': resources.requests: asks for nvidia.com/gpu and nvidia.com/gpu",
        ),
        (
            "overbooked",
            "llm-train/sft-13b-0",
            "pod 'llm-train/sft-13b-0': spec.nodeName 'l40s-02': the node cannot hold it",
        ),
        (
            "node-name",
            "llm-train/eval-h100-0",
            "pod 'llm-train/eval-h100-0': spec.nodeName: 'cpu-01' is not a GPU node of the node list",
        ),
        (
            "selector",
            "llm-train/eval-h100-0",
            "pod 'llm-train/eval-h100-0': spec.nodeSelector.nvidia.com/gpu.product: unknown GPU product",
        ),
    ],
)
def test_an_unreadable_pod_is_left_out_and_named_and_the_rest_imports(
    case: str, pod: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One bad pod never stops the import: it is left out with a warning naming it and the field, listed
    among the pods left out, and every other pod is imported as without it."""
    nodes, pods = _load("nodes.json"), _load("pods.json")
    whole = read_state(*_dump(tmp_path / "whole", nodes, pods))
    _break(nodes, pods, case)
    n, p = _dump(tmp_path, nodes, pods)
    code, out, err = _run(
        ["import", "kubernetes", "--nodes", str(n), "--pods", str(p), "--out", str(tmp_path / "out")], capsys
    )
    assert code == 0, err
    assert f"warning: {message}" in out
    assert f"unreadable (a warning names the field): 1: {pod}" in out
    state = read_state(n, p)
    assert pod not in {w.id for w in state.workloads}
    assert {w.id for w in state.workloads} == {w.id for w in whole.workloads} - {pod}


def test_one_node_object_and_a_yaml_pod_list_are_read(tmp_path: Path) -> None:
    nodes, pods = _load("nodes.json"), _load("pods.json")
    (tmp_path / "node.json").write_text(
        json.dumps(_item(nodes, "l40s-02"))
    )  # kubectl get node l40s-02 -o json
    pods["items"] = [p for p in pods["items"] if p["spec"].get("nodeName") == "l40s-02"]
    (tmp_path / "pods.yaml").write_text(yaml.safe_dump(pods))  # kubectl get pods -A -o yaml
    state = read_state(tmp_path / "node.json", tmp_path / "pods.yaml")
    assert [n.name for n in state.cluster.nodes] == ["l40s-02"]
    assert "inference/whisper-large-7f6d9c8b5-8vn2x" in {w.id for w in state.workloads}


def test_tier_map_and_team_label(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text(yaml.safe_dump({"batch-training": "background", "*": "latency-sensitive"}))
    args = ["import", "kubernetes", "--nodes", str(DATA / "nodes.json"), "--pods", str(DATA / "pods.json")]
    assert main([*args, "--out", str(tmp_path), "--tier-map", str(tiers), "--team-label", "team"]) == 0
    by_id = {w.id: w for w in load_workloads(tmp_path / "workloads.csv")}
    assert by_id["llm-train/pretrain-7b-worker-0"].tier == "background"
    assert by_id["notebooks/jupyter-alice"].tier == "background"  # default map entries stay
    assert by_id["research/finetune-lora-0"].team == "nlp"  # the label
    assert by_id["llm-train/eval-h100-0"].team == "llm-train"  # no label: the namespace
    tiers.write_text("- not a mapping\n")
    code, _, err = _run([*args, "--out", str(tmp_path), "--tier-map", str(tiers)], capsys)
    assert code == 2 and "tiers.yaml: expected a mapping of priorityClassName to tier" in err


def test_product_names_with_device_plugin_suffixes_and_memory(tmp_path: Path) -> None:
    nodes = _load("nodes.json")
    labels = _item(nodes, "l40s-02")["metadata"]["labels"]
    # H100 PCIe exists with 80 and 94 GB: the gpu.memory label decides
    labels.update({"nvidia.com/gpu.product": "NVIDIA-H100-PCIe", "nvidia.com/gpu.memory": "81559"})
    state = read_state(*_dump(tmp_path, nodes, _load("pods.json")))
    assert state.cluster.node_by_name["l40s-02"].gpus[0].model == "H100-PCIE-80GB"
    labels["nvidia.com/gpu.memory"] = "95830"
    state = read_state(*_dump(tmp_path, nodes, _load("pods.json")))
    assert state.cluster.node_by_name["l40s-02"].gpus[0].model == "H100-94GB"
    # the GH200 product name counts the Grace CPU's memory; the GPU's own memory names the model
    labels.update({"nvidia.com/gpu.product": "NVIDIA-GH200-480GB", "nvidia.com/gpu.memory": "97871"})
    state = read_state(*_dump(tmp_path, nodes, _load("pods.json")))
    assert state.cluster.node_by_name["l40s-02"].gpus[0].model == "GH200-96GB"


def test_custom_mig_configuration_spreads_the_offered_devices(tmp_path: Path) -> None:
    nodes = _load("nodes.json")
    node = _item(nodes, "dgx-a100-01")
    node["metadata"]["labels"].update({"nvidia.com/mig.config": "inference-mix", "nvidia.com/gpu.count": "8"})
    alloc = node["status"]["allocatable"]
    # two GPUs left whole, six in MIG mode with different layouts (a custom mig-parted config)
    alloc.update({"nvidia.com/gpu": "2", "nvidia.com/mig-3g.40gb": "6", "nvidia.com/mig-2g.20gb": "3",
                  "nvidia.com/mig-1g.10gb": "5"})  # fmt: skip
    pods = {"items": [p for p in _load("pods.json")["items"] if p["spec"].get("nodeName") != "dgx-a100-01"]}
    state = read_state(*_dump(tmp_path, nodes, pods))
    gpus = state.cluster.node_by_name["dgx-a100-01"].gpus
    assert len(gpus) == 8 and sum(g.mig is None for g in gpus) == 2
    offered = Counter(i.profile for g in gpus if g.mig is not None for i in g.mig.instances)
    assert offered == {"3g.40gb": 6, "2g.20gb": 3, "1g.10gb": 5}


def _gpu_of(state: KubernetesState, pod: str) -> int:
    return next(w for w in state.workloads if w.id == pod).running_on[0].gpus[0].index


def test_pod_resources_say_which_pods_share_a_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = DATA / "pod-resources-l40s-ts-01.json"
    files = ["--nodes", str(DATA / "nodes.json"), "--pods", str(DATA / "pods.json")]
    assert main(["import", "kubernetes", *files, "--pod-resources", str(dump), "--out", str(tmp_path)]) == 0
    by_id = {
        w.id: w.running_on[0].gpus[0] for w in load_workloads(tmp_path / "workloads.csv") if w.running_on
    }
    gpu = {
        user: by_id[f"notebooks/vscode-{user}"].index
        for user in ("erin", "frank", "grace", "heidi", "ivan", "judy")
    }
    # kubelet's device IDs pair erin+ivan, frank+judy and grace+heidi on three distinct GPUs
    assert gpu["erin"] == gpu["ivan"] and gpu["frank"] == gpu["judy"] and gpu["grace"] == gpu["heidi"]
    assert len({gpu["erin"], gpu["frank"], gpu["grace"]}) == 3
    # without the dump, the shares are packed first-fit: four on GPU 0
    plain = read_state(DATA / "nodes.json", DATA / "pods.json")
    assert [_gpu_of(plain, f"notebooks/vscode-{u}") for u in ("erin", "frank", "grace", "heidi")] == [
        0,
        0,
        0,
        0,
    ]
    # Go field names are read too; a pod whose device count disagrees with its request is left out, named
    ids = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(3)]
    devices = [{"resource_name": "nvidia.com/gpu", "device_ids": ids}]
    pod = {"name": "pretrain-7b-worker-1", "namespace": "llm-train", "containers": [{"devices": devices}]}
    go = {"pod_resources": [pod]}
    (tmp_path / "dgx.json").write_text(json.dumps(go))
    bad = [
        "import",
        "kubernetes",
        *files,
        "--pod-resources",
        str(tmp_path / "dgx.json"),
        "--out",
        str(tmp_path),
    ]
    code, out, _ = _run(bad, capsys)
    assert code == 0
    assert (
        "warning: pod 'llm-train/pretrain-7b-worker-1': PodResources lists 3 GPU(s) for it, "
        "but it asks for 4; its GPUs count as free in the plan; the pod is left out"
    ) in out
    assert "unreadable (a warning names the field): 1: llm-train/pretrain-7b-worker-1" in out


@pytest.mark.parametrize(
    ("text", "value"),
    [("64", 64), ("63500m", Decimal("63.5")), ("512Mi", 512 * 2**20), ("1e3", 1000), ("2Gi", 2 * 2**30),
     ("1.5k", 1500), ("0.25", Decimal("0.25"))],
)  # fmt: skip
def test_quantities(text: str, value: Decimal | int) -> None:
    assert quantity(text, "x") == value


def test_bad_quantity_names_the_field() -> None:
    with pytest.raises(InputError, match=r"^where: '12 cores' is not a Kubernetes quantity$"):
        quantity("12 cores", "where")


# --------------------------------------------------------------------------------------------
# Completing running placements: never a GPU booked twice


#: The four kinds of node item the placement test draws: exclusive H100s, time-sliced L40S (4 replicas),
#: A100s in MIG (single strategy, all-1g.10gb) and A100s in MIG (mixed strategy, all-balanced): the GPU
#: product, the labels beyond it, and the extended resources a node of ``gpus`` GPUs offers.
KINDS: dict[str, tuple[str, dict[str, str], Callable[[int], dict[str, str]]]] = {
    "whole": ("NVIDIA-H100-80GB-HBM3", {}, lambda gpus: {"nvidia.com/gpu": str(gpus)}),
    "shared": (
        "NVIDIA-L40S-SHARED",
        {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"},
        lambda gpus: {"nvidia.com/gpu.shared": str(4 * gpus)},
    ),
    "single": (
        "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        {"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.strategy": "single"},
        lambda gpus: {"nvidia.com/gpu": str(7 * gpus)},
    ),
    "mig": (
        "NVIDIA-A100-SXM4-80GB",
        {"nvidia.com/mig.config": "all-balanced", "nvidia.com/mig.strategy": "mixed"},
        lambda gpus: {
            "nvidia.com/mig-1g.10gb": str(2 * gpus),
            "nvidia.com/mig-2g.20gb": str(gpus),
            "nvidia.com/mig-3g.40gb": str(gpus),
        },
    ),
}


def _pod(name: str, node: str, resource: str, count: int, created: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "t", "creationTimestamp": f"2026-11-30T01:{created:02d}:00Z"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"limits": {resource: str(count)}}}],
        },
        "status": {"phase": "Running"},
    }


@st.composite
def _node_and_pods(draw: st.DrawFn) -> tuple[str, int, list[tuple[str, int]]]:
    """A node kind, its GPU count and pods (resource, count) that fit its devices, in a random order."""
    kind = draw(st.sampled_from(["whole", "shared", "mig", "single"]))
    gpus = draw(st.integers(1, 8))
    if kind == "whole":
        sizes = draw(st.lists(st.sampled_from([1, 2, 4, 8]), max_size=8))
        pods, used = [], 0
        for s in sizes:
            if used + s <= gpus:
                pods.append(("nvidia.com/gpu", s))
                used += s
    elif kind == "shared":
        pods = [("nvidia.com/gpu.shared", 1)] * draw(st.integers(0, 4 * gpus))
    elif kind == "single":
        pods = [("nvidia.com/gpu", 1)] * draw(st.integers(0, 7 * gpus))
    else:
        free = {"1g.10gb": 2 * gpus, "2g.20gb": gpus, "3g.40gb": gpus}
        pods = [(f"nvidia.com/mig-{p}", 1) for p, n in free.items() for _ in range(draw(st.integers(0, n)))]
    return kind, gpus, draw(st.permutations(pods))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=_node_and_pods(), created=st.randoms(use_true_random=False))
def test_running_placements_never_double_book(
    case: tuple[str, int, list[tuple[str, int]]], created: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    kind, gpus, wanted = case
    product, labels, offered = KINDS[kind]
    node = kube_node(f"{kind}-node", product, gpus, offered(gpus), labels=labels, cpu="128", memory="1Ti")
    name = node["metadata"]["name"]
    pods = [_pod(f"p{i}", name, r, c, created.randrange(60)) for i, (r, c) in enumerate(wanted)]
    folder = tmp_path_factory.mktemp("k8s")
    state = read_state(*_dump(folder, {"items": [node]}, {"items": pods}))
    assert len(state.workloads) == len(wanted) and all(len(w.running_on) == 1 for w in state.workloads)
    whole: Counter[int] = Counter()
    milli: Counter[int] = Counter()
    instances: Counter[tuple[int, str | None, int | None]] = Counter()
    for w in state.workloads:
        place = w.running_on[0]
        assert place.node == name and all(0 <= g.index < gpus for g in place.gpus)
        for g in place.gpus:
            if g.mig_profile is not None:
                instances[(g.index, g.mig_profile, g.mig_start)] += 1
                layout = state.cluster.node_by_name[name].gpu_by_index[g.index].mig
                assert layout is not None and any(
                    (i.profile, i.start) == (g.mig_profile, g.mig_start) for i in layout.instances
                )
            elif g.milli is not None:
                milli[g.index] += g.milli
            else:
                whole[g.index] += 1
        assert len(place.gpus) == (w.gpus or 1)
        assert (w.mig_profile == "1g.10gb") == (kind == "single") or kind == "mig"
    assert all(n == 1 for n in whole.values()) and all(n == 1 for n in instances.values())
    assert all(m <= 1000 for m in milli.values()) and not set(whole) & set(milli)
    # The same pods in another order give the same placements (completion is deterministic).
    again = read_state(*_dump(folder, {"items": [node]}, {"items": pods[::-1]}))
    assert {w.id: w.running_on for w in again.workloads} == {w.id: w.running_on for w in state.workloads}


# --------------------------------------------------------------------------------------------
# The nightly loop


def test_replan_from_kubernetes_state_diffs_against_what_runs(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    _dump(state, _load("nodes.json"), _load("pods.json"))
    (state / "pod-resources-l40s-ts-01.json").write_text((DATA / "pod-resources-l40s-ts-01.json").read_text())
    args = [
        "replan",
        "--db",
        db_url,
        "--kubernetes-state",
        str(state),
        "--time-limit",
        "10",
        "-q",
        "--now",
        NOW,
    ]
    code, out, err = _run(args, capsys)
    assert code == 0, err
    starts = out.split("new starts:")[1].split("predicted waits:")[0] if "new starts:" in out else ""
    assert "pretrain-7b-worker-0#0" not in starts and "notebooks/vscode-kim#0" in starts
    stored = PlanHistory(db_url).latest()
    assert stored is not None
    erin, ivan = (
        stored.inputs.workload_by_id[f"notebooks/vscode-{u}"].running_on[0] for u in ("erin", "ivan")
    )
    assert erin.node == "l40s-ts-01" and erin.gpus == ivan.gpus  # the PodResources dump in DIR is read
    # Overnight a training worker finished and a notebook started: the next replan reads that state.
    pods = _load("pods.json")
    _item(pods, "pretrain-7b-worker-1")["status"]["phase"] = "Succeeded"
    kim = _item(pods, "vscode-kim")
    kim["spec"]["nodeName"], kim["status"]["phase"] = "l40s-ts-01", "Running"
    _dump(state, _load("nodes.json"), pods)
    code, out, err = _run(args, capsys)
    assert code == 0, err
    assert "stored as plan 2 (previous: plan 1)" in out
    assert "notebooks/vscode-kim#0" not in out.split("new starts:")[-1]  # it runs: no new start
    latest = PlanHistory(db_url).latest()
    assert latest is not None and "llm-train/pretrain-7b-worker-1" not in latest.inputs.workload_by_id
    assert latest.inputs.workload_by_id["notebooks/vscode-kim"].running_on


def test_replan_honours_policy_on_stored_state(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    files = ["--nodes", str(DATA / "nodes.json"), "--pods", str(DATA / "pods.json")]
    assert main(["import", "kubernetes", *files, "--out", str(tmp_path)]) == 0
    base = ["replan", "--db", db, "--time-limit", "5", "-q", "--now", NOW]
    inputs = ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.csv")]
    assert main([*base, *inputs]) == 0
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump({"disruption": {"max_moves_per_round": 3}, "mig": {"repartition_cost": 7}})
    )
    assert main([*base, "--policy", str(policy)]) == 0  # the stored state, a new policy
    latest = PlanHistory(db).latest()
    assert latest is not None
    assert latest.inputs.policy.disruption.max_moves_per_round == 3
    assert latest.inputs.policy.mig.repartition_cost == 7


def test_replan_from_kubernetes_state_keeps_the_stored_policy(tmp_path: Path) -> None:
    db = str(tmp_path / "h.db")
    state = tmp_path / "state"
    _dump(state, _load("nodes.json"), _load("pods.json"))
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"mig": {"repartition_cost": 7}}))
    base = ["replan", "--db", db, "--time-limit", "5", "-q", "--now", NOW, "--kubernetes-state", str(state)]
    assert main([*base, "--policy", str(policy)]) == 0
    assert main(base) == 0
    latest = PlanHistory(db).latest()
    assert latest is not None and latest.inputs.policy.mig.repartition_cost == 7


def test_replan_kubernetes_state_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "h.db")
    code, _, err = _run(["replan", "--db", db, "--kubernetes-state", str(tmp_path / "missing")], capsys)
    assert code == 2 and err.startswith("gpuplan: error: ") and "nodes.json: file not found" in err
    code, _, err = _run(
        [
            "replan",
            "--db",
            db,
            "--kubernetes-state",
            str(DATA),
            "--cluster",
            "c.yaml",
            "--workloads",
            "w.csv",
        ],
        capsys,
    )
    assert code == 2 and "--kubernetes-state: give it instead of --cluster and --workloads" in err


def test_workloads_csv_rows_validate_one_by_one(fixture_state: KubernetesState) -> None:
    # Each row written is a valid workload on its own (the CSV has no column the model would reject).
    for row in fixture_state.rows:
        Workload.model_validate(copy.deepcopy(row))
