"""``gpuplan import kubernetes`` loses nothing silently: priority classes become tiers (ranked by
priority when the tier map does not name them) and decide which pods may be preempted; nodes without a
known topology are named and can be given one (``--topology``); unknown ``nvidia.com/`` resources and MIG
profiles are warnings naming pod and resource, and every pod left out is listed with its reason.

The fleet ``tests/data/kubernetes/classes`` is hand-written in GPU Operator conventions: two 8 x H100
nodes whose ``nvidia.com/gpu.machine`` the catalog does not know (an EC2 instance type, and none), a
4 x L40S node, a CPU node; pods of four priority classes no built-in name covers (``latency-critical``
1000000, ``production`` 10000, ``batch`` 100, ``best-effort`` 0), a ``nvidia.com/gpus`` typo, an H100 MIG
profile that does not exist, CPU-only, DaemonSet and finished pods."""

from __future__ import annotations

import csv
import itertools
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.planner.io.files import load_cluster, load_plan, load_workloads
from gpuplan.planner.io.importers.kubernetes import (
    BOUND_NO_GPU,
    FINISHED,
    PENDING_NO_GPU,
    UNKNOWN_PROFILE,
    UNKNOWN_RESOURCE,
    KubernetesState,
    LeftOut,
    TierMap,
    load_tier_map,
    read_state,
)
from gpuplan.planner.io.importers.kubernetes.tiers import _ranked_tier
from gpuplan.planner.store.history import PlanHistory
from tests._paths import ROOT_DIR, TESTS_DATA

DATA = TESTS_DATA / "kubernetes"
FLEET = DATA / "classes"
TOPO_P5 = ROOT_DIR / "data" / "hardware" / "nvidia-smi" / "topo-aws-p5-48xlarge-h100-01.txt"
NOW = "2026-11-30T03:00:00+00:00"


def _state(**kwargs: Any) -> KubernetesState:
    return read_state(FLEET / "nodes.json", FLEET / "pods.json", **kwargs)


def _import(out: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    files = ["--nodes", str(FLEET / "nodes.json"), "--pods", str(FLEET / "pods.json")]
    code = main(["import", "kubernetes", *files, "--out", str(out), *extra])
    text, err = capsys.readouterr()
    return code, text, err


# --------------------------------------------------------------------------------------------
# Tiers and preemptibility


def test_unknown_classes_are_ranked_by_priority_onto_the_tiers(capsys: pytest.CaptureFixture[str]) -> None:
    state = _state()
    tiers = {w.id: w.tier for w in state.workloads}
    # four distinct priorities onto three tiers: the highest on the first, the lowest on the last, the
    # two between at round(1 * 2 / 3) = 1 and round(2 * 2 / 3) = 1
    assert tiers == {
        "serving/chat-7b-0": "standard",  # production
        "research/sweep-be-0": "background",  # best-effort
        "serving/ranker-0": "latency-sensitive",  # latency-critical
        "etl/embed-batch-0": "standard",  # batch
        "serving/fraud-0": "latency-sensitive",
        "research/ft-pair-0": "standard",
        "research/eval-np-0": "standard",  # batch with preemptionPolicy: Never is still batch
        "notebooks/nb-mig-0": "background",
        "research/rdma-typo-0": "standard",
    }
    assert [(c.klass, c.tier, c.pods) for c in state.tiers] == [
        ("latency-critical", "latency-sensitive", 2),
        ("production", "standard", 1),
        ("batch", "standard", 4),
        ("best-effort", "background", 2),
    ]
    text = state.describe()
    assert (
        "tiers by priority class: latency-critical -> latency-sensitive (spec.priority 1000000, ranked; "
        "2 pods); production -> standard (spec.priority 10000, ranked; 1 pod); " in text
    )


def test_lowest_tier_is_preemptible_and_the_summary_says_why() -> None:
    state = _state()
    assert {w.id for w in state.workloads if w.preemptible} == {"research/sweep-be-0", "notebooks/nb-mig-0"}
    assert "preemptible: 2 of 9 pods (2 in background, the policy's least important tier)" in state.describe()


def test_tier_map_sets_preemptible_per_class(tmp_path: Path) -> None:
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text(
        yaml.safe_dump(
            {"production": {"preemptible": True}, "best-effort": {"tier": "background", "preemptible": False}}
        )
    )
    state = _state(tier_map=load_tier_map(tiers))
    flagged = {w.id for w in state.workloads if w.preemptible}
    assert flagged == {"serving/chat-7b-0"}  # production, still ranked standard
    assert {w.id: w.tier for w in state.workloads}["serving/chat-7b-0"] == "standard"
    assert (
        "preemptible: 1 of 9 pods (0 in background, the policy's least important tier; " in state.describe()
    )
    assert "tier map: best-effort no, production yes" in state.describe()


@pytest.mark.parametrize(
    "content",
    ["batch: {tier: standard, evict: true}\n", "batch: {preemptible: 'yes'}\n", "batch: {}\n", "batch: ''\n"],
)
def test_bad_tier_map_entries_are_one_line(
    content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiers = tmp_path / "tiers.yaml"
    tiers.write_text(content)
    code, _, err = _import(tmp_path, capsys, "--tier-map", str(tiers))
    assert code == 2 and err.count("\n") == 1
    assert "tiers.yaml: 'batch': expected a tier name or {tier: NAME, preemptible: true|false}" in err


def test_classes_are_mapped_onto_the_policys_own_tiers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "policy.yaml"
    tiers = [("gold", 20), ("silver", 8), ("bronze", 2), ("scrap", 1)]
    policy.write_text(yaml.safe_dump({"tiers": [{"name": n, "weight": w} for n, w in tiers]}))
    code, text, err = _import(tmp_path, capsys, "--policy", str(policy))
    assert code == 0, err
    rows = {w.id: w for w in load_workloads(tmp_path / "workloads.csv")}
    # four classes, four tiers: one each, in priority order
    assert rows["serving/ranker-0"].tier == "gold" and rows["serving/chat-7b-0"].tier == "silver"
    assert rows["etl/embed-batch-0"].tier == "bronze" and rows["research/sweep-be-0"].tier == "scrap"
    assert {i for i, w in rows.items() if w.preemptible} == {"research/sweep-be-0", "notebooks/nb-mig-0"}
    assert "1 in scrap" not in text and "2 in scrap, the policy's least important tier" in text


def test_a_latency_critical_pod_preempts_a_best_effort_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both H100 nodes are full for 4 GPUs (gpu-h100-a: production 4 + best-effort 4; gpu-h100-b: 6 of 8):
    the pending latency-critical server gets the best-effort sweep's GPUs when the policy allows
    preemptions, as Kubernetes' own scheduler would preempt the lowest-priority pod."""
    assert _import(tmp_path, capsys)[0] == 0
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"disruption": {"max_preemptions_per_round": 2}}))
    files = ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.csv")]
    plan = tmp_path / "plan.json"
    args = [
        "plan",
        *files,
        "--policy",
        str(policy),
        "--out",
        str(plan),
        "--now",
        NOW,
        "--time-limit",
        "10",
        "-q",
    ]
    assert main(args) == 0, capsys.readouterr().err
    result = load_plan(plan)
    placed = {a.workload: a.node for a in result.assignments}
    assert placed["serving/fraud-0"] == "gpu-h100-a"
    assert [a.workload for a in result.actions if a.kind == "preempt"] == ["research/sweep-be-0"]
    assert placed["serving/chat-7b-0"] == "gpu-h100-a" and placed["serving/ranker-0"] == "gpu-h100-b"
    assert main(["validate", *files, "--policy", str(policy), "--plan", str(plan)]) == 0


@given(
    levels=st.lists(st.integers(-1000, 1000), min_size=1, max_size=8, unique=True),
    n_tiers=st.integers(1, 5),
)
def test_ranking_keeps_priority_order_and_uses_both_ends(levels: list[int], n_tiers: int) -> None:
    ordered = sorted(levels, reverse=True)
    ks = [_ranked_tier(v, ordered, (), n_tiers) for v in ordered]
    assert ks == sorted(ks)  # a higher priority never gets a less important tier
    assert all(0 <= k < n_tiers for k in ks)
    if len(ordered) > 1:
        assert ks[0] == 0 and ks[-1] == n_tiers - 1
    else:
        assert ks == [(n_tiers - 1) // 2]


@given(
    levels=st.lists(st.integers(-1000, 1000), min_size=1, max_size=6, unique=True),
    anchors=st.lists(st.tuples(st.integers(-1000, 1000), st.integers(0, 2)), max_size=4),
)
def test_ranking_never_crosses_a_named_class(levels: list[int], anchors: list[tuple[int, int]]) -> None:
    # named classes in a consistent order: a higher priority never in a less important tier
    ordered_anchors = sorted(anchors, key=lambda a: -a[0])
    consistent = all(a[1] <= b[1] for a, b in itertools.pairwise(ordered_anchors))
    ordered = sorted(levels, reverse=True)
    for v in ordered:
        k = _ranked_tier(v, ordered, anchors, 3)
        same = [t for p, t in anchors if p == v]
        if same:
            assert k == min(same)
        elif consistent:
            assert all(k >= t for p, t in anchors if p > v)
            assert all(k <= t for p, t in anchors if p < v)


def test_named_classes_bound_the_ranking(tmp_path: Path) -> None:
    """With the built-in names present, ranked classes stay in order with them. Six distinct priorities
    (500000, 150000, 100000, 1000, 10, 5) spread over three tiers: index round(i * 2 / 5), so 0, 0, 1, 1, 2,
    2; ``prod-plus`` (150000) outranks the named ``high-priority`` (100000, latency-sensitive) and so
    cannot be below it; ``bulk`` (1000) shares ``standard``'s priority and so its tier; ``nightly`` (5)
    is below ``low-priority`` (10): background."""
    pods = json.loads((FLEET / "pods.json").read_text())
    renames = {
        "latency-critical": ("urgent", 500000),
        "production": ("prod-plus", 150000),
        "batch": ("bulk", 1000),
        "best-effort": ("nightly", 5),
    }
    template = next(i for i in pods["items"] if i["metadata"]["name"] == "eval-np-0")  # pending, 1 GPU
    for item in pods["items"]:
        spec = item["spec"]
        if spec.get("priorityClassName") in renames:
            spec["priorityClassName"], spec["priority"] = renames[spec["priorityClassName"]]
    for klass, value in (("high-priority", 100000), ("standard", 1000), ("low-priority", 10)):
        extra = json.loads(json.dumps(template))
        extra["metadata"]["name"] = f"{klass}-0"
        extra["spec"].update(priorityClassName=klass, priority=value)
        pods["items"].append(extra)
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    state = read_state(FLEET / "nodes.json", tmp_path / "pods.json")
    assert [(c.klass, c.tier, c.why) for c in state.tiers] == [
        ("urgent", "latency-sensitive", "spec.priority 500000, ranked"),
        ("prod-plus", "latency-sensitive", "spec.priority 150000, ranked"),
        ("high-priority", "latency-sensitive", "tier map"),
        ("bulk", "standard", "spec.priority 1000, ranked"),
        ("standard", "standard", "tier map"),
        ("low-priority", "background", "tier map"),
        ("nightly", "background", "spec.priority 5, ranked"),
    ]


def test_a_star_entry_maps_every_other_class_without_ranking(tmp_path: Path) -> None:
    state = _state(tier_map=TierMap({"*": "background", "latency-critical": "latency-sensitive"}))
    assert {c.klass: c.tier for c in state.tiers} == {
        "latency-critical": "latency-sensitive",
        "production": "background",
        "batch": "background",
        "best-effort": "background",
    }


# --------------------------------------------------------------------------------------------
# Topology


def _only_pair(tmp_path: Path, source: Path) -> Path:
    """The imported workloads with the pair fine-tune asking for NVLink, and no other pending pod."""
    with source.open() as fh:
        rows = list(csv.DictReader(fh))
    out = tmp_path / "pair.csv"
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            if row["id"] == "research/ft-pair-0":
                writer.writerow({**row, "topology": "nvlink"})
            elif row["running_on"]:
                writer.writerow(row)
    return out


def _plan_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[dict[str, str], dict[str, str]]:
    workloads = _only_pair(tmp_path, tmp_path / "workloads.csv")
    plan = tmp_path / "plan.json"
    files = ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(workloads)]
    args = ["plan", *files, "--out", str(plan), "--now", NOW, "--time-limit", "10", "-q"]
    assert main(args) == 0, capsys.readouterr().err
    result = load_plan(plan)
    assert main(["validate", *files, "--plan", str(plan)]) == 0
    capsys.readouterr()
    return {a.workload: a.node for a in result.assignments}, {u.workload: u.code for u in result.unplaced}


def test_nodes_without_a_known_machine_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        code, text, _ = _import(tmp_path, capsys)
    assert code == 0
    warning = next(r.getMessage() for r in caplog.records if "no topology" in r.getMessage())
    assert "gpu-h100-a, gpu-h100-b, gpu-l40s-c" in warning and "--topology NODE=FILE|REFERENCE" in warning
    # the catalog's 8 x H100-80GB reference fits the two H100 nodes; none has 4 L40S
    assert warning.endswith("(dgx-h100 fits gpu-h100-a, gpu-h100-b)")
    assert "attaches one; dgx-h100 fits gpu-h100-a, gpu-h100-b)" in text
    assert (
        "no topology: 3 nodes (gpu-h100-a, gpu-h100-b, gpu-l40s-c) without a nvidia.com/gpu.machine" in text
    )
    # and without a topology, an NVLink pair cannot be placed on the 8 x H100 node
    placed, waiting = _plan_pair(tmp_path, capsys)
    assert "research/ft-pair-0" not in placed and waiting["research/ft-pair-0"] == "NO_NVLINK_CLIQUE"


@pytest.mark.parametrize("spec", ["dgx-h100", str(TOPO_P5)])
def test_topology_option_lets_an_nvlink_pair_be_placed(
    spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, text, err = _import(tmp_path, capsys, "--topology", f"gpu-h100-*={spec}")
    assert code == 0, err
    assert "no topology: 1 node (gpu-l40s-c) without" in text
    nodes = load_cluster(tmp_path / "cluster.yaml").node_by_name
    for name in ("gpu-h100-a", "gpu-h100-b"):
        node = nodes[name]
        assert sum(1 for lk in node.links if lk.kind.startswith("NV")) == 28  # every pair of 8 GPUs
        assert sorted({g.numa for g in node.gpus}) == [0, 1]
    placed, _ = _plan_pair(tmp_path, capsys)
    assert placed["research/ft-pair-0"] == "gpu-h100-b"  # its 2 free GPUs


def test_topology_from_a_file_keeps_numa_nodes(tmp_path: Path) -> None:
    state = _state(topologies={"gpu-h100-b": str(TOPO_P5)})
    node = state.cluster.node_by_name["gpu-h100-b"]
    # p5.48xlarge: GPUs 0-3 on NUMA node 0, 4-7 on NUMA node 1, NV18 between every pair
    assert [g.numa for g in node.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {lk.kind for lk in node.links} == {"NV18"} and len(node.links) == 28
    assert state.no_topology == ("gpu-h100-a", "gpu-l40s-c")


def test_a_node_matched_by_two_topology_options_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _import(
        tmp_path, capsys, "--topology", "gpu-h100-*=dgx-h100", "--topology", f"*-b={TOPO_P5}"
    )
    assert code == 2 and err.count("\n") == 1
    assert f"--topology *-b={TOPO_P5}: node 'gpu-h100-b' also matches --topology gpu-h100-*" in err


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "gpu-h100-z=dgx-h100",
            "--topology gpu-h100-z=dgx-h100: no GPU node of the node list is called that",
        ),
        (
            "gpu-l40s-c=dgx-h100",
            "--topology gpu-l40s-c=dgx-h100: dgx-h100 has 8 H100-80GB GPUs, the node 4 L40S-48GB",
        ),
        (
            "gpu-h100-a=dgx-z1",
            "--topology gpu-h100-a=dgx-z1: not a file, and unknown reference topology 'dgx-z1'",
        ),
        ("gpu-h100-a", "--topology gpu-h100-a: expected NODE=FILE or NODE=REFERENCE"),
        (f"gpu-l40s-c={TOPO_P5}", f"--topology gpu-l40s-c={TOPO_P5}: the file shows 8 GPUs, the node has 4"),
    ],
)
def test_bad_topology_options_are_one_line(
    option: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _import(tmp_path, capsys, "--topology", option)
    assert code == 2 and err.startswith(f"gpuplan: error: {message}") and err.count("\n") == 1, err


# --------------------------------------------------------------------------------------------
# Unknown resources and pods left out


def test_unknown_resources_and_mig_profiles_are_warnings_naming_pod_and_resource(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        code, text, _ = _import(tmp_path, capsys)
    assert code == 0
    warnings = [r.getMessage() for r in caplog.records if "pod '" in r.getMessage()]
    assert warnings == [
        "pod 'research/typo-gpus-0': resources.requests.nvidia.com/gpus: no node offers it "
        "(did you mean nvidia.com/gpu?)",
        "pod 'notebooks/nb-mig-0': resources.requests.nvidia.com/mig-2g.10gb: no GPU model it "
        "may go to (H100-80GB, L40S-48GB) has MIG profile '2g.10gb'",
        "pod 'research/rdma-typo-0': resources.requests.nvidia.com/rdma_shared_devices_a: no node "
        "offers it (did you mean nvidia.com/rdma_shared_device_a?); gpuplan plans its GPU request, but "
        "Kubernetes will not bind it",
    ]
    assert all(f"warning: {w}" in text for w in warnings)


def test_resources_some_node_offers_are_not_warned_about(tmp_path: Path) -> None:
    """The L40S node offers ``nvidia.com/rdma_shared_device_a`` (NVIDIA Network Operator): a pod asking for
    it next to its GPU is imported without a word."""
    pods = json.loads((FLEET / "pods.json").read_text())
    for item in pods["items"]:
        if item["metadata"]["name"] == "rdma-typo-0":
            limits = item["spec"]["containers"][0]["resources"]["limits"]
            limits["nvidia.com/rdma_shared_device_a"] = limits.pop("nvidia.com/rdma_shared_devices_a")
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    state = read_state(FLEET / "nodes.json", tmp_path / "pods.json")
    assert not any("rdma" in w for w in state.warnings)
    assert "research/rdma-typo-0" in {w.id for w in state.workloads}


def test_every_pod_left_out_is_listed_with_its_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = _state()
    # 14 pods in the dump: 9 workloads and 5 left out
    assert len(state.workloads) + len(state.left_out) == 14
    assert sorted(state.left_out, key=lambda o: o.pod) == [
        LeftOut("gpu-operator/nvidia-dcgm-exporter-a", BOUND_NO_GPU, "gpu-h100-a"),
        LeftOut("research/sweep-old-0", FINISHED, "Succeeded"),
        LeftOut("research/typo-gpus-0", UNKNOWN_RESOURCE, "nvidia.com/gpus"),
        LeftOut("web/docs-build-0", PENDING_NO_GPU, ""),
        LeftOut("web/frontend-0", BOUND_NO_GPU, "cpu-01"),
    ]
    code, text, _ = _import(tmp_path, capsys)
    assert code == 0
    assert "pods left out: 5\n" in text
    assert "  asks for a GPU resource no node offers: 1: research/typo-gpus-0 (nvidia.com/gpus)\n" in text
    assert "  pending, asks for no GPU: 1: web/docs-build-0\n" in text
    assert "  finished (Succeeded or Failed): 1: research/sweep-old-0\n" in text
    assert (
        "  runs without a GPU (its CPU and memory are taken off its node): 2: web/frontend-0, "
        "gpu-operator/nvidia-dcgm-exporter-a\n" in text
    )


def test_the_unknown_mig_profile_is_kept_and_never_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pod asking for a MIG profile no model of the fleet has stays a workload (the warning says why),
    so the plan names it as never fitting rather than losing it."""
    assert _import(tmp_path, capsys)[0] == 0
    files = ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.csv")]
    plan = tmp_path / "plan.json"
    assert main(["plan", *files, "--out", str(plan), "--now", NOW, "--time-limit", "5", "-q"]) == 0
    capsys.readouterr()
    waiting = {u.workload: u.code for u in load_plan(plan).unplaced}
    assert waiting["notebooks/nb-mig-0"] == "NEVER_FITS"


def test_a_mig_profile_no_model_has_leaves_the_pod_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``9g.99gb`` is no GPU model's profile: no workloads file could carry it, so the pod is left out,
    named with the resource, and the import's files plan."""
    text = (FLEET / "pods.json").read_text().replace("nvidia.com/mig-2g.10gb", "nvidia.com/mig-9g.99gb")
    (tmp_path / "pods.json").write_text(text)
    state = read_state(FLEET / "nodes.json", tmp_path / "pods.json")
    assert "notebooks/nb-mig-0" not in {w.id for w in state.workloads}
    assert LeftOut("notebooks/nb-mig-0", UNKNOWN_PROFILE, "nvidia.com/mig-9g.99gb") in state.left_out
    assert state.warnings[1] == (
        "pod 'notebooks/nb-mig-0': resources.requests.nvidia.com/mig-9g.99gb: "
        "no GPU model has MIG profile '9g.99gb'"
    )
    files = [
        "--nodes",
        str(FLEET / "nodes.json"),
        "--pods",
        str(tmp_path / "pods.json"),
        "--out",
        str(tmp_path),
    ]
    assert main(["import", "kubernetes", *files]) == 0
    out = capsys.readouterr().out
    assert (
        "  asks for a MIG profile no GPU model of the catalog has: 1: "
        "notebooks/nb-mig-0 (nvidia.com/mig-9g.99gb)" in out
    )
    plan = tmp_path / "plan.json"
    workloads = ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.csv")]
    assert main(["plan", *workloads, "--out", str(plan), "--now", NOW, "--time-limit", "5", "-q"]) == 0


def test_replan_maps_classes_onto_the_policy_in_force_and_reads_topology_yaml(tmp_path: Path) -> None:
    """The nightly loop reads ``DIR/topology.yaml`` (as ``--topology``; a relative file is taken from
    DIR) and ranks the classes onto the tiers of the policy it plans with."""
    state = tmp_path / "state"
    state.mkdir()
    for name in ("nodes.json", "pods.json"):
        (state / name).write_text((FLEET / name).read_text())
    (state / "p5.txt").write_text(TOPO_P5.read_text())
    (state / "topology.yaml").write_text(yaml.safe_dump({"gpu-h100-a": "p5.txt", "gpu-h100-b": "dgx-h100"}))
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump({"tiers": [{"name": "hot", "weight": 9}, {"name": "cold", "weight": 1}]})
    )
    db = str(tmp_path / "h.db")
    args = ["replan", "--db", db, "--kubernetes-state", str(state), "--policy", str(policy)]
    assert main([*args, "--time-limit", "5", "-q", "--now", NOW]) == 0
    latest = PlanHistory(db).latest()
    assert latest is not None
    # four priorities onto two tiers: round(i / 3) for i = 0..3 is 0, 0, 1, 1
    tiers = {w.id: w.tier for w in latest.inputs.workloads}
    assert tiers["serving/ranker-0"] == tiers["serving/chat-7b-0"] == "hot"
    assert tiers["etl/embed-batch-0"] == tiers["research/sweep-be-0"] == "cold"
    nodes = latest.inputs.cluster.node_by_name
    assert [g.numa for g in nodes["gpu-h100-a"].gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert nodes["gpu-h100-b"].topology == "dgx-h100"


def test_a_topology_file_keeps_a_mig_nodes_layouts(tmp_path: Path) -> None:
    """``xe8545-07`` (4 x A100 40GB, MIG ``single`` strategy, 7 x 1g.5gb each) has a machine label the
    catalog does not know; a 4-GPU ``topo -m`` dump (NV4 between every pair, all on NUMA node 0) gives it
    6 NVLink pairs, and every GPU keeps its MIG layout and the pods on it."""
    topo = TOPO_P5.parent / "topo-hgx-a100-64gb-x4-4nic-01.txt"
    plain = read_state(DATA / "nodes.json", DATA / "pods.json")
    state = read_state(DATA / "nodes.json", DATA / "pods.json", topologies={"xe8545-07": str(topo)})
    node = state.cluster.node_by_name["xe8545-07"]
    assert {(lk.a, lk.b, lk.kind) for lk in node.links} == {
        (a, b, "NV4") for a in range(4) for b in range(a + 1, 4)
    }
    assert [g.mig for g in node.gpus] == [g.mig for g in plain.cluster.node_by_name["xe8545-07"].gpus]
    assert all(g.mig is not None and len(g.mig.instances) == 7 for g in node.gpus)
    assert {w.id: w.running_on for w in state.workloads} == {w.id: w.running_on for w in plain.workloads}
    assert "xe8545-07" in plain.no_topology and "xe8545-07" not in state.no_topology
