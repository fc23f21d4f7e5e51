"""``gpuplan import kubernetes`` on hand-written kubectl dumps in NVIDIA GPU Operator conventions
(``tests/data/kubernetes/<fleet>/nodes.json`` and ``pods.json``): DGX nodes with the full GPU Feature
Discovery label set, MIG ``mixed`` and ``single`` strategies, time-slicing with and without renaming, MPS,
CPU-only, control-plane, cordoned and NotReady nodes, and pods in every phase and quantity form. Each fleet
is imported, planned and validated through the CLI; the expectations are computed by hand from the dumps."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli import main
from gpuplan.models import Workload
from gpuplan.models.cluster import Node
from gpuplan.planner.io.files import load_cluster, load_plan, load_workloads
from gpuplan.planner.io.importers.kubernetes import KubernetesState, read_state
from tests._paths import TESTS_DATA

DUMPS = TESTS_DATA / "kubernetes"
FLEETS = ("dgx", "mig-single", "sharing", "odd", "empty")
NOW = "2026-11-30T03:00:00+00:00"


def _state(fleet: str) -> KubernetesState:
    return read_state(DUMPS / fleet / "nodes.json", DUMPS / fleet / "pods.json")


def _by_id(state: KubernetesState) -> dict[str, Workload]:
    return {w.id: w for w in state.workloads}


def _layouts(node: Node) -> list[list[str] | None]:
    """Per GPU index, the MIG profiles of its layout (``None`` for a GPU not in MIG mode)."""
    return [None if g.mig is None else [i.profile for i in g.mig.instances] for g in node.gpus]


def _import(fleet: str, out: Path, capsys: pytest.CaptureFixture[str]) -> str:
    files = ["--nodes", str(DUMPS / fleet / "nodes.json"), "--pods", str(DUMPS / fleet / "pods.json")]
    code = main(["import", "kubernetes", *files, "--out", str(out)])
    text, err = capsys.readouterr()
    assert code == 0, err
    return text


@pytest.mark.parametrize("fleet", FLEETS)
def test_every_dump_imports_plans_and_validates(
    fleet: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _import(fleet, tmp_path, capsys)
    cluster, workloads, plan = tmp_path / "cluster.yaml", tmp_path / "workloads.csv", tmp_path / "plan.json"
    files = ["--cluster", str(cluster), "--workloads", str(workloads)]
    code = main(["plan", *files, "--out", str(plan), "--now", NOW, "--time-limit", "5", "-q"])
    _, err = capsys.readouterr()
    assert code == 0, err
    code = main(["validate", *files, "--plan", str(plan)])
    text, err = capsys.readouterr()
    assert code == 0 and "valid" in text, text + err
    placed = {a.workload for a in load_plan(plan).assignments}
    assert {w.id for w in load_workloads(workloads) if w.running_on} <= placed  # nothing running is dropped


def test_dgx_nodes_take_models_layouts_and_topology_from_gfd_labels() -> None:
    nodes = _state("dgx").cluster.node_by_name
    assert set(nodes) == {"dgx-h100-01", "dgx-h100-02", "dgx-a100-01"}  # cpu-01 and cp-01 have no GPUs
    # a custom mig-parted configuration: 49 mig-1g.10gb and one nvidia.com/gpu on 8 H100s (gpu.count)
    dgx2 = nodes["dgx-h100-02"]
    assert [g.model for g in dgx2.gpus] == ["H100-80GB"] * 8 and dgx2.topology == "dgx-h100"
    assert _layouts(dgx2) == [["1g.10gb"] * 7] * 7 + [None]
    assert dgx2.sharing == "exclusive"  # the whole GPU 7
    # "NVIDIA DGX A100 640GB" is the reference DGX A100; all-1g.10gb on its 8 A100 80GB
    a100 = nodes["dgx-a100-01"]
    assert a100.topology == "dgx-a100" and _layouts(a100) == [["1g.10gb"] * 7] * 8
    # allocatable (222 CPUs of 224, 2113442996Ki), less the pods gpuplan does not plan: the web pod
    # (2 CPUs, 4Gi), dcgm-exporter (100m, 128Mi), the device plugin (its init container 0.2 CPU / 100M,
    # more than the 0.05 / 64Mi of its container); kube-proxy asks for nothing
    dgx1 = nodes["dgx-h100-01"]
    assert dgx1.cpu_milli == 222_000 - 2_000 - 100 - 200
    assert dgx1.memory_mib == 2113442996 // 1024 - 4096 - 128 - 96  # 100M is 95.4 MiB, rounded up


def test_dgx_pods_follow_the_kubernetes_request_rules() -> None:
    state = _state("dgx")
    by_id = _by_id(state)
    # GPUs only in limits; requests max(48 + 0.5, 64) CPUs and max(512Gi + 2000Mi, 16Gi)
    train = by_id["llm/pretrain-70b-0"]
    assert (train.gpus, train.cpu_milli, train.memory_mib) == (8, 64_000, 512 * 1024 + 2000)
    assert train.gang_id == "llm/pretrain-70b" and train.tier == "standard"  # class "training" is unknown
    # a sidecar runs beside the containers: max(4 + 1, 6 + 1) CPUs, max(32Gi + 1Gi, 8Gi + 1Gi)
    gateway = by_id["inference/llm-gw-0"]
    assert (gateway.cpu_milli, gateway.memory_mib, gateway.mig_profile) == (7_000, 33 * 1024, "1g.10gb")
    # terminating, Succeeded and Failed pods are not workloads; a bound ContainerCreating pod runs
    assert not {"inference/asr-old-0", "llm/eval-done-0", "llm/eval-oom-0"} & set(by_id)
    assert by_id["inference/rerank-55f-xk2"].running_on[0].node == "dgx-a100-01"
    dpo = by_id["llm/dpo-3b-0"]
    assert dpo.tier == "standard" and dpo.gpu_models == ("H100-80GB", "A100-SXM4-80GB") and not dpo.running_on
    assert by_id["llm/sft-8b-0"].gpu_models == ("H100-80GB",)
    assert len(state.workloads) == 14
    held = Counter(
        (p.node, g.index, g.mig_profile, g.mig_start)
        for w in state.workloads
        for p in w.running_on
        for g in p.gpus
    )
    assert max(held.values()) == 1  # no GPU or MIG instance booked twice


def test_mig_single_strategy_devices_and_pending_pods() -> None:
    state = _state("mig-single")
    nodes = state.cluster.node_by_name
    # nvidia.com/gpu (and the overridden gpu.count) count MIG devices: 28 of 1g.5gb are 4 GPUs of 7
    assert _layouts(nodes["xe8545-01"]) == [["1g.5gb"] * 7] * 4
    assert _layouts(nodes["xe8545-02"]) == [["3g.20gb"] * 2] * 4
    # mig.config.state=pending: nothing offered yet, the 4 GPUs get the layout being applied
    assert _layouts(nodes["xe8545-03"]) == [["1g.5gb"] * 7] * 4
    by_id = _by_id(state)
    assert by_id["notebooks/nb-ana"].mig_profile == "1g.5gb"
    # a pending pod asking for nvidia.com/gpu on a -MIG-<profile> product asks for that MIG device
    for pod, profile in (("notebooks/nb-fay", "1g.5gb"), ("inference/llm-7b-3", "3g.20gb")):
        w = by_id[pod]
        assert (w.mig_profile, w.gpus, w.gpu_models) == (profile, 0, ("A100-SXM4-40GB",)), pod


def test_time_slicing_and_mps_nodes_give_shares() -> None:
    state = _state("sharing")
    entries = {e["name"]: e for e in state.node_entries}
    nodes = state.cluster.node_by_name
    expected = {"l4-ts-01": (2, 4), "a10-ts-01": (4, 3), "l40s-mps-01": (4, 2), "t4-ts-01": (2, 4)}
    for name, (gpus, replicas) in expected.items():
        assert len(nodes[name].gpus) == gpus and entries[name]["sharing"] == {
            "time-slicing": {"replicas": replicas}
        }, name
    assert entries["l40s-01"]["sharing"] == "exclusive"
    by_id = _by_id(state)
    milli = {k: w.gpu_milli for k, w in by_id.items() if w.gpu_milli}
    assert milli["dev/code-ana"] == 250 and milli["dev/nb-fay"] == 333 and milli["inference/tts-0"] == 500
    assert milli["dev/ci-runner-0"] == 250  # T4 -SHARED with 4 replicas, no sharing-strategy label
    # pending: nvidia.com/gpu.shared is offered only by a10-ts-01 (3 replicas); nvidia.com/gpu on an
    # NVIDIA-L4-SHARED selection is a share of an L4 (4 replicas)
    assert milli["dev/nb-jon"] == 333
    kay = by_id["dev/code-kay"]
    assert (kay.gpu_milli, kay.gpus, kay.gpu_models) == (250, 0, ("L4-24GB",))
    assert by_id["inference/vllm-13b-1"].gpus == 2


def test_cordoned_and_not_ready_nodes_are_left_out_with_their_pods(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _import("odd", tmp_path, capsys)
    assert (
        "left out: 2 GPU nodes that take no new pods (h100-02 (cordoned), h100-03 (NotReady)) "
        "and the 2 pods bound to them"
    ) in text
    cluster = load_cluster(tmp_path / "cluster.yaml")
    assert {n.name for n in cluster.nodes} == {"h100-01", "h100-04"}  # master-0 has no GPUs
    assert len(cluster.node_by_name["h100-04"].gpus) == 3  # capacity 4, one GPU unhealthy
    by_id = {w.id: w for w in load_workloads(tmp_path / "workloads.csv")}
    assert set(by_id) == {"ml/mixed-units-0", "ml/sick-0", "ml/queued-0"}
    # cpu 1 + 500m + 0.5; memory 16Gi + 2000Mi + 1G + 1e3 bytes = 20277022184 bytes, rounded up to MiB
    units = by_id["ml/mixed-units-0"]
    assert (units.cpu_milli, units.memory_mib) == (2_000, 19_338)
    queued = by_id["ml/queued-0"]
    assert (queued.cpu_milli, queued.gpus, queued.tier) == (10_000, 4, "standard")  # "1e1" CPUs


def test_replan_on_kubernetes_state_with_cordoned_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    state.mkdir()
    for name in ("nodes.json", "pods.json"):
        (state / name).write_text((DUMPS / "odd" / name).read_text())
    db = str(tmp_path / "h.db")
    args = ["replan", "--db", db, "--kubernetes-state", str(state), "--time-limit", "5", "-q", "--now", NOW]
    code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "h100-02 (cordoned), h100-03 (NotReady)" in caplog.text  # replan prints no import summary
    assert "drain-me-0" not in out and "lost-0" not in out  # work on them is neither moved nor evicted


@pytest.mark.parametrize(
    ("product", "memory", "model"),
    [
        ("NVIDIA-A800-SXM4-80GB", "81920", "A800-80GB"),  # the catalog names no form factor
        ("NVIDIA-H100-PCIe-MIG-1g.10gb", "9984", "H100-PCIE-80GB"),  # single: gpu.memory is the MIG device's
        ("NVIDIA-H100-PCIe-MIG-1g.12gb", "11776", "H100-94GB"),
        ("NVIDIA-H100-80GB-HBM3-SHARED", "81559", "H100-80GB"),
    ],
)
def test_product_labels_resolve_to_catalog_models(
    product: str, memory: str, model: str, tmp_path: Path
) -> None:
    nodes = json.loads((DUMPS / "odd" / "nodes.json").read_text())
    node: dict[str, Any] = next(n for n in nodes["items"] if n["metadata"]["name"] == "h100-01")
    node["metadata"]["labels"].update({"nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": memory})
    if "-MIG-" in product:
        node["metadata"]["labels"].update(
            {"nvidia.com/mig.strategy": "single", "nvidia.com/mig.config": "custom"}
        )
    (tmp_path / "nodes.json").write_text(json.dumps({"kind": "NodeList", "items": [node]}))
    (tmp_path / "pods.json").write_text(json.dumps({"kind": "PodList", "items": []}))
    state = read_state(tmp_path / "nodes.json", tmp_path / "pods.json")
    assert {g.model for g in state.cluster.nodes[0].gpus} == {model}


def _broken(tmp_path: Path, fleet: str, pod: str, change: dict[str, Any]) -> tuple[Path, Path]:
    """The fleet's dump with ``change`` merged into the first container of ``pod``."""
    pods = json.loads((DUMPS / fleet / "pods.json").read_text())
    item = next(p for p in pods["items"] if p["metadata"]["name"] == pod)
    item["spec"]["containers"][0]["resources"].update(change)
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    return DUMPS / fleet / "nodes.json", tmp_path / "pods.json"


@pytest.mark.parametrize(
    ("fleet", "pod", "change", "message"),
    [
        ("sharing", "code-ana", {"limits": {"nvidia.com/gpu": "2"}},
         "pod 'dev/code-ana': resources.requests.nvidia.com/gpu: 2 time-sliced shares; gpuplan places one"),
        ("dgx", "llm-gw-0", {"requests": {"cpu": "4 cores"}},
         "pod 'inference/llm-gw-0': container 'server' resources.requests.cpu: '4 cores' is not a"),
        ("mig-single", "nb-ana", {"limits": {"nvidia.com/gpu": "0.5"}},
         "pod 'notebooks/nb-ana': resources.requests.nvidia.com/gpu: '0.5' is not a whole number of devices"),
    ],
)  # fmt: skip
def test_bad_pods_are_left_out_naming_pod_and_field(
    fleet: str,
    pod: str,
    change: dict[str, Any],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bad pod is one warning naming it and the field, and left out; the rest of the fleet imports."""
    nodes, pods = _broken(tmp_path, fleet, pod, change)
    code = main(["import", "kubernetes", "--nodes", str(nodes), "--pods", str(pods), "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"warning: {message}" in out
    key = message.split("'")[1]
    assert f"unreadable (a warning names the field): 1: {key}" in out
    kept = {w.id for w in read_state(nodes, pods).workloads}
    assert {w.id for w in _state(fleet).workloads} - kept == {key}


def test_media_extension_mig_devices_round_trip_to_kubernetes_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Kubernetes names have no "+": the device plugin offers 1g.10gb+me as nvidia.com/mig-1g.10gb.me
    nodes = json.loads((DUMPS / "dgx" / "nodes.json").read_text())
    dgx2 = next(n for n in nodes["items"] if n["metadata"]["name"] == "dgx-h100-02")
    dgx2["status"]["allocatable"].update({"nvidia.com/mig-1g.10gb": "42", "nvidia.com/mig-1g.10gb.me": "7"})
    pods = json.loads((DUMPS / "dgx" / "pods.json").read_text())
    video = json.loads(json.dumps(next(p for p in pods["items"] if p["metadata"]["name"] == "asr-8d7-4")))
    video["metadata"]["name"] = "video-0"
    video["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/mig-1g.10gb.me": "1"}
    pods["items"].append(video)
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    state = read_state(tmp_path / "nodes.json", tmp_path / "pods.json")
    assert _by_id(state)["inference/video-0"].mig_profile == "1g.10gb+me"
    layouts = _layouts(state.cluster.node_by_name["dgx-h100-02"])
    assert [sorted(g or ()) for g in layouts[:7]] == [["1g.10gb"] * 6 + ["1g.10gb+me"]] * 7
    out = tmp_path / "fleet"
    files = ["--nodes", str(tmp_path / "nodes.json"), "--pods", str(tmp_path / "pods.json")]
    assert main(["import", "kubernetes", *files, "--out", str(out)]) == 0
    # Without its namespace the pending pod is work from elsewhere, which the export writes as a new pod
    # (an imported pending pod is placed where it is, by a patch or a Binding).
    with (out / "workloads.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for row in rows:
        row["namespace"] = "" if row["id"] == "inference/video-0" else row["namespace"]
    with (out / "workloads.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    inputs = ["--cluster", str(out / "cluster.yaml"), "--workloads", str(out / "workloads.csv")]
    plan = out / "plan.json"
    assert main(["plan", *inputs, "--out", str(plan), "--now", NOW, "--time-limit", "5", "-q"]) == 0
    assert "inference/video-0" in {a.workload for a in load_plan(plan).assignments}
    image = ["--image", "registry.example/app:1"]
    assert main(["export", "--plan", str(plan), *inputs, "--kubernetes", str(out / "k8s"), *image]) == 0
    capsys.readouterr()
    exported = "".join(f.read_text() for f in sorted((out / "k8s").glob("round-*.yaml")))
    assert "nvidia.com/mig-1g.10gb.me: '1'" in exported and "+me:" not in exported


def _only(fleet: str, nodes: set[str], tmp_path: Path, extra: dict[str, Any]) -> KubernetesState:
    """The fleet's dump cut down to ``nodes`` (and the pods bound to them), plus the pending pod ``extra``."""
    node_list = json.loads((DUMPS / fleet / "nodes.json").read_text())
    node_list["items"] = [n for n in node_list["items"] if n["metadata"]["name"] in nodes]
    pods = json.loads((DUMPS / fleet / "pods.json").read_text())
    pods["items"] = [p for p in pods["items"] if p["spec"].get("nodeName") in nodes] + [extra]
    (tmp_path / "nodes.json").write_text(json.dumps(node_list))
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    return read_state(tmp_path / "nodes.json", tmp_path / "pods.json")


def _pending(name: str, gpus: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "dev"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]},
        "status": {"phase": "Pending"},
    }


def test_a_pending_gpu_means_what_every_node_offers_under_that_name(tmp_path: Path) -> None:
    # only time-sliced nodes offer nvidia.com/gpu: one of it is a replica, the largest share (MPS, 2 replicas)
    sharing = _only("sharing", {"l4-ts-01", "l40s-mps-01", "t4-ts-01"}, tmp_path, _pending("p", "1"))
    assert _by_id(sharing)["dev/p"].gpu_milli == 500
    # only single-strategy nodes of one profile: one of it is a 1g.5gb MIG device
    single = _only("mig-single", {"xe8545-01"}, tmp_path, _pending("p", "1"))
    assert _by_id(single)["dev/p"].mig_profile == "1g.5gb"
    # nodes that disagree (whole GPUs and shares), or more than one device: whole GPUs
    mixed = _only("sharing", {"l4-ts-01", "l40s-01"}, tmp_path, _pending("p", "1"))
    assert _by_id(mixed)["dev/p"].gpus == 1
    two = _only("sharing", {"l4-ts-01"}, tmp_path, _pending("p", "2"))
    assert _by_id(two)["dev/p"].gpus == 2


def test_a_pod_list_given_as_nodes_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = ["--nodes", str(DUMPS / "dgx" / "pods.json"), "--pods", str(DUMPS / "dgx" / "nodes.json")]
    assert main(["import", "kubernetes", *files, "--out", str(tmp_path)]) == 2
    _, err = capsys.readouterr()
    wrong = DUMPS / "dgx" / "pods.json"
    assert err == f"gpuplan: error: {wrong}: items[0]: a Pod, expected a Node (`kubectl get nodes`)\n"
