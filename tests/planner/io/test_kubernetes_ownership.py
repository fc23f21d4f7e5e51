"""Issue 40 on real-format dumps (``tests/data/kubernetes/platform``: GPU Operator and GFD labels, taints,
Kueue-gated pods, six PriorityClasses, a PodDisruptionBudget, an H100 whose custom MIG config puts GPUs 4-7
in MIG mode, one whose MIG layout can only be guessed, HAMi and KAI pods): gpuplan changes only what it
owns (its own scheduling gate, Bindings of its own scheduler's pods, MIG configs of the nodes whose layout
the plan changes, from device truth, added to the GPU Operator's ConfigMap), tiers stay stable, one bad
pod never stops the import, PodDisruptionBudgets hold, and the diffs count what changes.
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli import main
from gpuplan.models import Cluster, Plan, PlanningInput, Policy
from gpuplan.models.plan import MigLayout, MigMode
from gpuplan.planner.io.exporters import kubernetes, migparted
from gpuplan.planner.io.files import planning_input
from gpuplan.planner.io.importers.kubernetes import (
    KubernetesState,
    load_mig_parted,
    load_pdbs,
    load_priority_classes,
    read_state,
)
from gpuplan.planner.io.importers.kubernetes.pods import _Pod
from gpuplan.planner.io.importers.kubernetes.tiers import PriorityClass, TierMap, assign_tiers
from gpuplan.planner.pipeline.actions import ordered_actions
from gpuplan.planner.pipeline.layouts import cluster_after
from gpuplan.planner.planning import make_plan
from gpuplan.planner.store.history import PlanHistory, plan_diff
from gpuplan.planner.validation.validate import validate_plan
from tests._paths import TESTS_DATA

DUMP = TESTS_DATA / "kubernetes" / "platform"
NOW = datetime(2026, 11, 30, 3, tzinfo=UTC)
KUEUE = "kueue.x-k8s.io/admission"
OURS = "gpuplan.io/placement"
MOVES = {"disruption": {"max_moves_per_round": 4, "max_preemptions_per_round": 2}}


def _state(**extra: Any) -> KubernetesState:
    return read_state(
        DUMP / "nodes.json",
        DUMP / "pods.json",
        priority_classes=load_priority_classes(DUMP / "priority-classes.json"),
        pdbs=load_pdbs(DUMP / "pdbs.json"),
        mig_parted=load_mig_parted(DUMP / "mig-parted-config.json"),
        **extra,
    )


def _input(state: KubernetesState, policy: dict[str, Any] | None = None) -> PlanningInput:
    return planning_input(state.cluster, state.workloads, Policy.model_validate(policy or {}), source="test")


def _options() -> kubernetes.ExportOptions:
    return kubernetes.ExportOptions(mig_parted=load_mig_parted(DUMP / "mig-parted-config.json"))


def _script(steps: Sequence[kubernetes.Step]) -> str:
    return "".join(s.render(i) for i, s in enumerate(steps, start=1))


def _with(plan: Plan, inp: PlanningInput, **update: Any) -> Plan:
    """``plan`` with ``update`` and the actions that follow from it."""
    changed = plan.model_copy(update=update)
    actions = ordered_actions(
        inp, changed.assignments, changed.mig_layouts, changed.sharing, changed.mig_modes
    )
    return changed.model_copy(update={"actions": tuple(actions)})


# --- 1. other controllers' gates, and Bindings -------------------------------------------------------------


def test_only_gpuplans_gate_is_removed_and_only_its_scheduler_s_pods_are_bound() -> None:
    state = _state()
    by_id = {w.id: w for w in state.workloads}
    # Kueue-gated work is demand all the same.
    assert by_id["ml/train-kueue-0"].scheduling_gates == (KUEUE,)
    inp = _input(state)
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    assert {"ml/train-kueue-0", "ml/train-both-0", "ml/train-ours-0", "ml/bind-me"} <= {
        a.workload for a in plan.assignments
    }
    steps = kubernetes.steps(plan, inp, kubernetes.Images(), options=_options())
    (place,) = [s for s in steps if s.kind == kubernetes.PLACE]
    # Bindings: ml/bind-me (schedulerName gpuplan, no gate) and ml/train-ours-0 after its gate goes.
    assert [d["metadata"]["name"] for d in place.objects] == ["bind-me"]
    ungates = {u.name: u for u in place.ungates}
    assert set(ungates) == {"train-both-0", "train-ours-0"}
    assert ungates["train-ours-0"].bind and not ungates["train-both-0"].bind
    # The Kueue+gpuplan pod loses gpuplan's gate only (index 1, tested by name first).
    pin, ungate = ungates["train-both-0"].patches()
    assert ungate.body == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": OURS},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
    ]
    assert pin.body == {"spec": {"nodeSelector": {"kubernetes.io/hostname": ungates["train-both-0"].node}}}
    text = _script(steps)
    # The Kueue-only pod, HAMi's, KAI's and Volcano's are named in comments only, never acted on.
    for name in ("train-kueue-0", "vgpu-0", "frac-0", "volcano-job-0"):
        assert not [line for line in text.splitlines() if name in line and not line.startswith("#")], name
    assert f"# ml/train-kueue-0: gated by {KUEUE}, not gpuplan's gate {OURS}" in text
    assert "gpuplan never removes another controller's gate" in text
    assert f"# ml/train-both-0: gpuplan's gate removed, but it still waits for {KUEUE}" in text


def _apply_json_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> bool:
    """Apply ``test`` and ``remove`` operations as the API server does; ``False`` when a test fails."""
    doc = copy.deepcopy(doc)
    for op in ops:
        *parents, last = op["path"].strip("/").split("/")
        here: Any = doc
        for part in parents:
            here = here[int(part)] if isinstance(here, list) else here[part]
        key: Any = int(last) if isinstance(here, list) else last
        if op["op"] == "test" and here[key] != op["value"]:
            return False
        if op["op"] == "remove":
            del here[key]
    return True


_GATES = st.lists(st.sampled_from([KUEUE, OURS, "example.com/quota"]), unique=True, max_size=3)
_PODS = st.lists(
    st.tuples(_GATES, st.sampled_from(["gpuplan", "default-scheduler", "volcano"]), st.integers(1, 2)),
    min_size=1,
    max_size=6,
)


def _dump_of(pods: list[tuple[list[str], str, int]], gate: str, folder: Path) -> tuple[Path, Path]:
    """A kubectl dump: two 8 x H100 GPU Operator nodes (tainted nvidia.com/gpu) and pending pods with the
    given gates (``OURS`` stands for ``gate``), schedulers and GPU counts."""
    base = json.loads((DUMP / "nodes.json").read_text())
    h100c = next(n for n in base["items"] if n["metadata"]["name"] == "h100-c")
    nodes = []
    for i in range(2):
        node = copy.deepcopy(h100c)
        node["metadata"]["name"] = node["metadata"]["labels"]["kubernetes.io/hostname"] = f"n{i}"
        nodes.append(node)
    items = []
    for i, (gates, scheduler, gpus) in enumerate(pods):
        spec: dict[str, Any] = {
            "schedulerName": scheduler,
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "main", "image": "registry.example/job:1",
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                          "requests": {"cpu": "1", "memory": "1Gi"}}}],
        }  # fmt: skip
        if gates:
            spec["schedulingGates"] = [{"name": gate if g == OURS else g} for g in gates]
        meta = {"name": f"p{i}", "namespace": "ml", "labels": {"app": f"p{i}"}}
        items.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": spec,
                "status": {"phase": "Pending"},
            }
        )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nodes.json").write_text(json.dumps({"kind": "List", "items": nodes}))
    (folder / "pods.json").write_text(json.dumps({"kind": "List", "items": items}))
    return folder / "nodes.json", folder / "pods.json"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pods=_PODS, gate=st.sampled_from([OURS, "example.com/gpuplan"]))
def test_no_other_controller_s_gate_is_touched_and_only_own_scheduler_pods_are_bound(
    pods: list[tuple[list[str], str, int]], gate: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Generated dumps of pending pods with any gates and schedulers, imported, planned and exported: a
    Binding only for a pod of gpuplan's scheduler with no gate left, a gate removal only of gpuplan's gate
    (the policy's ``kubernetes.scheduling_gate``) that leaves every other gate on the pod, and nothing at
    all for a pod behind other controllers' gates only."""
    nodes_json, pods_json = _dump_of(pods, gate, tmp_path_factory.mktemp("dump"))
    state = read_state(nodes_json, pods_json)
    policy = {"kubernetes": {"scheduling_gate": gate}}
    inp = _input(state, policy)
    gates_of = {w.pod_name: list(w.scheduling_gates) for w in inp.workloads}
    scheduler = {w.pod_name: w.scheduler_name for w in inp.workloads}
    assert len(gates_of) == len(pods)
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    steps = kubernetes.steps(plan, inp, kubernetes.Images())
    for step in steps:
        assert not step.patches  # no ConfigMap, no node
        for d in step.objects:
            name = d["metadata"]["name"]
            assert d["kind"] == "Binding" and scheduler[name] == "gpuplan" and not gates_of[name]
        for u in step.ungates:
            assert gate in gates_of[u.name] and u.gate == gate
            assert u.bind == (scheduler[u.name] == "gpuplan" and gates_of[u.name] == [gate])
            pod = {"spec": {"schedulingGates": [{"name": g} for g in gates_of[u.name]]}}
            _, ungate = u.patches()
            assert _apply_json_patch(pod, ungate.body)
            after = copy.deepcopy(pod)
            del after["spec"]["schedulingGates"][u.index]
            assert [g["name"] for g in after["spec"]["schedulingGates"]] == [
                g for g in gates_of[u.name] if g != gate
            ]
    acted = {u.name for s in steps for u in s.ungates} | {
        d["metadata"]["name"] for s in steps for d in s.objects
    }
    for name, gates in gates_of.items():
        if gates and gate not in gates:
            assert name not in acted


# --- 2. MIG on nodes the plan does not change ------------------------------------------------------------


def test_mig_layouts_follow_device_truth_and_guesses_are_marked() -> None:
    state = _state()
    nodes = state.cluster.node_by_name
    # h100-a's custom config (in the GPU Operator's ConfigMap) has GPUs 4-7 in MIG mode, two 3g.40gb each.
    assert [g.index for g in nodes["h100-a"].gpus if g.mig is not None] == [4, 5, 6, 7]
    assert nodes["h100-a"].labels.get(kubernetes.MIG_LAYOUT_LABEL) is None
    # h100-b names a config nobody gave gpuplan: its layout is a guess, said in a label and a warning.
    assert nodes["h100-b"].labels[kubernetes.MIG_LAYOUT_LABEL] == "guessed"
    assert any(w.startswith("node 'h100-b': its MIG layout is a guess") for w in state.warnings)
    # Without the ConfigMap, h100-a's layout is a guess too (spread over the first GPUs).
    plain = read_state(DUMP / "nodes.json", DUMP / "pods.json")
    assert plain.cluster.node_by_name["h100-a"].labels[kubernetes.MIG_LAYOUT_LABEL] == "guessed"


def _mig_off(state: KubernetesState, node: str, gpu: int) -> tuple[PlanningInput, Plan]:
    inp = _input(state, {"mig": {"allow_repartition": True}})
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    plan = plan.model_copy(update={"mig_layouts": (), "mig_modes": ()})
    return inp, _with(plan, inp, mig_modes=(MigMode(node=node, gpu=gpu, enabled=False),))


def test_a_mig_change_writes_one_node_config_merged_into_the_operator_s_and_round_trips(
    tmp_path: Path,
) -> None:
    """The plan turns MIG off on idle GPU 7 of h100-a: the export adds one config for h100-a to the GPU
    Operator's ConfigMap (every other config kept; a JSON patch that tests the text it read), relabels
    h100-a only, and the applied result re-imports with MIG on GPUs 4-6, without the ConfigMap too."""
    state = _state()
    inp, plan = _mig_off(state, "h100-a", 7)
    assert validate_plan(plan, inp) == []
    steps = kubernetes.steps(plan, inp, kubernetes.Images(default="x:1"), options=_options())
    (mig,) = [s for s in steps if s.kind == kubernetes.MIG]
    config_map, node = mig.patches
    assert (config_map.kind, config_map.name, config_map.namespace) == (
        "configmap", "default-mig-parted-config", "gpu-operator",
    )  # fmt: skip
    operator = _options().mig_parted
    assert operator is not None
    test, put = config_map.body
    assert test == {"op": "test", "path": "/data/config.yaml", "value": operator.text}
    doc = yaml.safe_load(put["value"])
    assert not migparted.check_config(doc)
    assert {k: doc["mig-configs"][k] for k in operator.configs} == operator.document["mig-configs"]
    assert (node.kind, node.name) == ("node", "h100-a")
    name = node.body["metadata"]["labels"][kubernetes.MIG_CONFIG_LABEL]
    entries = doc["mig-configs"][name]
    assert sorted(map(json.dumps, entries)) == sorted(
        map(json.dumps, [
            {"devices": [0, 1, 2, 3, 7], "mig-enabled": False},
            {"devices": [4, 5, 6], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        ])
    )  # fmt: skip
    # Apply it to the dump: the node's label and annotation, and what the device plugin then offers.
    nodes = json.loads((DUMP / "nodes.json").read_text())
    item = next(n for n in nodes["items"] if n["metadata"]["name"] == "h100-a")
    item["metadata"]["labels"].update(node.body["metadata"]["labels"])
    item["metadata"].setdefault("annotations", {}).update(node.body["metadata"]["annotations"])
    item["status"]["allocatable"].update({"nvidia.com/gpu": "5", "nvidia.com/mig-3g.40gb": "6"})
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    applied = dict(json.loads((DUMP / "mig-parted-config.json").read_text()))
    applied["data"] = {"config.yaml": put["value"]}
    (tmp_path / "cm.json").write_text(json.dumps(applied))
    for mig_parted in (None, load_mig_parted(tmp_path / "cm.json")):
        again = read_state(tmp_path / "nodes.json", DUMP / "pods.json", mig_parted=mig_parted)
        h100a = again.cluster.node_by_name["h100-a"]
        assert [g.index for g in h100a.gpus if g.mig is not None] == [4, 5, 6]
        assert kubernetes.MIG_LAYOUT_LABEL not in h100a.labels
        # Applying the same export again is a config gpuplan already wrote: nothing changes.
        assert {n.name for n in again.cluster.nodes if n.labels.get(kubernetes.MIG_LAYOUT_LABEL)} == {
            "h100-b"
        }


def test_a_node_whose_layout_is_a_guess_is_never_reconfigured(caplog: pytest.LogCaptureFixture) -> None:
    state = _state()
    inp, plan = _mig_off(state, "h100-b", 0)
    steps = kubernetes.steps(plan, inp, kubernetes.Images(default="x:1"), options=_options())
    assert not [s for s in steps if s.kind == kubernetes.MIG]
    assert "MIG changes on h100-b not written: the import only guessed their MIG layout" in caplog.text
    # Without the GPU Operator's ConfigMap no MIG change is written either (it is never replaced).
    inp, plan = _mig_off(state, "h100-a", 7)
    steps = kubernetes.steps(plan, inp, kubernetes.Images(default="x:1"))
    assert not [s for s in steps if s.kind == kubernetes.MIG]
    assert "give the GPU Operator's mig-parted ConfigMap" in caplog.text


_LAYOUT = [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]


@settings(max_examples=25, deadline=None)
@given(
    mig=st.lists(st.lists(st.booleans(), min_size=4, max_size=4), min_size=1, max_size=4),
    flips=st.sets(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=5),
)
def test_mig_configs_change_only_on_nodes_whose_layout_the_plan_changes(
    mig: list[list[bool]], flips: set[tuple[int, int]]
) -> None:
    """Random idle MIG fleets and random MIG mode changes: a node gets a config (and a label) exactly
    when the plan changes one of its GPUs, and the config keeps every other GPU as it is."""
    nodes = [
        {"name": f"n{i}", "cpu_milli": 64000, "memory_mib": 262144,
         "gpus": [{"index": g, "model": "H100-80GB", **({"mig": {"instances": _LAYOUT}} if on else {})}
                  for g, on in enumerate(gpus)]}
        for i, gpus in enumerate(mig)
    ]  # fmt: skip
    inp = PlanningInput(
        cluster=Cluster.model_validate({"nodes": nodes}),
        workloads=(),
        policy=Policy.model_validate({"mig": {"allow_repartition": True}}),
    )
    modes = tuple(
        MigMode(node=f"n{n}", gpu=g, enabled=not mig[n][g]) for n, g in sorted(flips) if n < len(mig)
    )
    base = make_plan(inp, solver="greedy-fgd", now=NOW).model_copy(update={"mig_layouts": ()})
    plan = _with(base, inp, mig_modes=modes)
    steps = kubernetes.steps(plan, inp, kubernetes.Images(), options=_options())
    patched = [p for s in steps for p in s.patches]
    assert {p.name for p in patched if p.kind == "node"} == {m.node for m in modes}
    if not modes:
        assert not patched
        return
    doc = yaml.safe_load(patched[0].body[1]["value"])
    for p in (p for p in patched if p.kind == "node"):
        # A node keeps every label and annotation but the two gpuplan owns.
        assert set(p.body["metadata"]["labels"]) == {kubernetes.MIG_CONFIG_LABEL}
        assert set(p.body["metadata"]["annotations"]) == {kubernetes.MIG_CONFIG_ANNOTATION}
        entries = doc["mig-configs"][p.body["metadata"]["labels"][kubernetes.MIG_CONFIG_LABEL]]
        n = int(p.name[1:])
        flipped = {m.gpu for m in modes if m.node == p.name}
        for g in range(4):
            on = mig[n][g] != (g in flipped)
            (entry,) = [e for e in entries if g in e["devices"]]
            assert entry["mig-enabled"] == on
            if on and g not in flipped:
                assert entry["mig-devices"] == {"3g.40gb": 2}


def test_device_plugin_configs_keep_the_node_s_mig_strategy() -> None:
    sharing = kubernetes.device_plugin_config("exclusive", "single")
    assert sharing == {"version": "v1", "flags": {"migStrategy": "single"}}
    assert kubernetes.device_plugin_config("exclusive") == {"version": "v1"}


# --- 3. stable tiers -------------------------------------------------------------------------------------


def _pods(classes: Sequence[tuple[str, int]]) -> list[_Pod]:
    return [
        _Pod(f"ns/p{i}", None, {}, "whole", "", klass=c, spec_priority=v) for i, (c, v) in enumerate(classes)
    ]


@settings(max_examples=60, deadline=None)
@given(
    values=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d", "e", "f"]), st.integers(0, 1_000_000), min_size=1, max_size=6
    ),
    keep=st.sets(st.sampled_from(["a", "b", "c", "d", "e", "f"])),
)
def test_the_tier_of_a_class_does_not_depend_on_which_classes_have_pods(
    values: dict[str, int], keep: set[str]
) -> None:
    """With the cluster's PriorityClasses, a class keeps its tier when other classes lose all their pods."""
    classes = [PriorityClass(c, v) for c, v in values.items()]
    everyone = _pods(list(values.items()))
    some = _pods([(c, v) for c, v in values.items() if c in keep])
    full = {c.klass: c.tier for c in assign_tiers(everyone, TierMap({}), Policy().tiers, classes)}
    part = {c.klass: c.tier for c in assign_tiers(some, TierMap({}), Policy().tiers, classes)}
    assert full == part


def test_the_tiers_of_the_platform_follow_the_priority_classes(tmp_path: Path) -> None:
    state = _state()
    tiers = {c.klass: c.tier for c in state.tiers}
    assert tiers["latency-critical"] == "latency-sensitive"
    assert tiers["production"] == tiers["batch"] == "standard" and tiers["best-effort"] == "background"
    # The globalDefault class is the tier of a pod without a class; gpuplan's own classes map back.
    assert next(c for c in state.tiers if c.klass == "batch").why.endswith("globalDefault")
    # The only best-effort pod finishes: nothing else changes.
    pods = json.loads((DUMP / "pods.json").read_text())
    pods["items"] = [p for p in pods["items"] if p["metadata"]["name"] != "sweep-0"]
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    later = read_state(
        DUMP / "nodes.json", tmp_path / "pods.json",
        priority_classes=load_priority_classes(DUMP / "priority-classes.json"),
    )  # fmt: skip
    assert {c.klass: c.tier for c in later.tiers} == tiers
    preemptible = {w.id for w in state.workloads if w.preemptible}
    assert {w.id for w in later.workloads if w.preemptible} == preemptible - {"batch/sweep-0"}


def test_a_mapping_that_changes_between_imports_is_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --priority-classes the ranking takes the classes of today's pods: when best-effort's pods
    finish, batch falls to the lowest tier; the second import into the same directory says so."""
    source = TESTS_DATA / "kubernetes" / "classes"
    pods = json.loads((source / "pods.json").read_text())
    pods["items"] = [p for p in pods["items"] if p["spec"].get("priorityClassName") != "best-effort"]
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    out = tmp_path / "out"
    base = ["import", "kubernetes", "--nodes", str(source / "nodes.json"), "--out", str(out)]
    assert main([*base, "--pods", str(source / "pods.json")]) == 0
    first = capsys.readouterr().out
    assert "ranked over the classes of today's pods: give --priority-classes" in first
    assert yaml.safe_load((out / "tier-mapping.yaml").read_text())["batch"] == "standard"
    assert main([*base, "--pods", str(tmp_path / "pods.json")]) == 0
    second = capsys.readouterr().out
    assert (
        "warning: priority class 'batch' now maps to tier 'background', to 'standard' in the previous"
        in second
    )


def test_replan_warns_when_a_class_maps_to_another_tier_than_in_the_stored_plan(tmp_path: Path) -> None:
    state = _state()
    before = {w.id: ("background" if w.id == "ml/bind-me" else w.tier) for w in state.workloads}
    again = _state(previous_tiers=(before, "plan 7 (the latest stored)"))
    assert (
        "priority class 'production' now maps to tier 'standard', to 'background' in plan 7"
        not in " ".join(again.warnings)
    )  # ml/bind-me's class also has serve/llm-*, which kept their tier: the class had two tiers
    before = {w.id: ("background" if w.id.startswith("research/nb-mig") else w.tier) for w in state.workloads}
    again = _state(previous_tiers=(before, "plan 7 (the latest stored)"))
    changed = (
        "priority class 'latency-critical' now maps to tier 'latency-sensitive', to 'background' in plan 7"
    )
    assert any(w.startswith(changed) for w in again.warnings)


# --- 4. no crash, no abort -------------------------------------------------------------------------------


def test_a_misspelt_mig_profile_is_named_and_the_rest_imports() -> None:
    state = _state()
    by_id = {w.id: w for w in state.workloads}
    # Beside a valid profile the typo is dropped (a warning names it); two real kinds leave the pod out.
    assert by_id["research/nb-typo"].shapes[0].mig_profile == "3g.40gb"
    assert any("nvidia.com/mig-3g.40gbb: no node offers it" in w for w in state.warnings)
    assert "research/nb-two" not in by_id
    assert [(x.pod, x.reason) for x in state.left_out] == [
        ("research/nb-two", "unreadable (a warning names the field)")
    ]
    assert len(state.workloads) == 12


def test_quiet_import_prints_errors_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = ["--nodes", str(DUMP / "nodes.json"), "--pods", str(DUMP / "pods.json")]
    assert main(["-q", "import", "kubernetes", *files, "--out", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("", "")
    assert (tmp_path / "workloads.csv").is_file()
    nodes = json.loads((DUMP / "nodes.json").read_text())
    nodes["items"][0]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-X1"
    (tmp_path / "bad.json").write_text(json.dumps(nodes))
    bad = [
        "-q",
        "import",
        "kubernetes",
        "--nodes",
        str(tmp_path / "bad.json"),
        *files[2:],
        "--out",
        str(tmp_path),
    ]
    assert main(bad) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("gpuplan: error: node 'h100-a': label nvidia.com/gpu.product")
    assert err.count("\n") == 1


def test_replan_reads_what_gpuplan_s_own_export_wrote(tmp_path: Path) -> None:
    """A bare pod the export re-creates elsewhere (its PriorityClass gpuplan-<tier>, gpuplan's labels and
    annotations) imports back to its tier; the state directory's extra dumps are read by replan."""
    state = _state()
    inp = _input(state, MOVES)
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    gone = tuple(
        a.model_copy(update={"node": "h100-c", "gpus": (a.gpus[0].model_copy(update={"index": 7}),)})
        if a.workload == "batch/sweep-0"
        else a
        for a in plan.assignments
    )
    plan = _with(plan, inp, assignments=gone)
    assert validate_plan(plan, inp) == []
    steps = kubernetes.steps(plan, inp, kubernetes.Images(), options=_options())
    (created,) = [d for s in steps for d in s.objects if d["kind"] == "Pod"]
    assert created["spec"]["priorityClassName"] == "gpuplan-background"
    created = copy.deepcopy(created)
    created["spec"]["nodeName"] = "h100-c"
    created["spec"]["priority"] = 1000
    created["status"] = {"phase": "Running"}
    pods = json.loads((DUMP / "pods.json").read_text())
    pods["items"] = [p for p in pods["items"] if p["metadata"]["name"] != "sweep-0"] + [created]
    folder = tmp_path / "state"
    folder.mkdir()
    for name in ("nodes.json", "priority-classes.json", "pdbs.json", "mig-parted-config.json"):
        (folder / name).write_text((DUMP / name).read_text())
    (folder / "pods.json").write_text(json.dumps(pods))
    db = str(tmp_path / "plans.db")
    args = ["replan", "--kubernetes-state", str(folder), "--db", db, "--solver", "greedy-fgd", "-q"]
    assert main([*args, "--now", NOW.isoformat()]) == 0
    stored = PlanHistory(db).latest()
    assert stored is not None
    by_id = {w.id: w for w in stored.inputs.workloads}
    assert (
        by_id["batch/sweep-0"].tier == "background" and by_id["batch/sweep-0"].running_on[0].node == "h100-c"
    )
    assert {w.id for w in stored.inputs.workloads if not w.disruptible} == {"serve/llm-0", "serve/llm-1"}
    assert [g.index for g in stored.inputs.cluster.node_by_name["h100-a"].gpus if g.mig] == [4, 5, 6, 7]


# --- 5. PodDisruptionBudgets -----------------------------------------------------------------------------


def _with_big_job(tmp_path: Path) -> Path:
    """The platform's pods and a pending 4-GPU L40S job of the top class: it fits only on l40s-a, where
    the two served pods and a best-effort sweep run."""
    pods = json.loads((DUMP / "pods.json").read_text())
    big = copy.deepcopy(next(p for p in pods["items"] if p["metadata"]["name"] == "bind-me"))
    big["metadata"]["name"] = "big"
    big["spec"].update(
        schedulerName="default-scheduler", nodeSelector={"nvidia.com/gpu.product": "NVIDIA-L40S"},
        priorityClassName="latency-critical", priority=1000000,
    )  # fmt: skip
    big["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "4"}
    pods["items"].append(big)
    (tmp_path / "pods.json").write_text(json.dumps(pods))
    return tmp_path / "pods.json"


@pytest.mark.slow
def test_a_budget_that_allows_no_eviction_keeps_its_pods_where_they_run(tmp_path: Path) -> None:
    """Without the budget the exact plan moves both served pods off l40s-a for the big job; with it no
    solver moves them (the job waits), and a plan that moves one is invalid (rule not-disruptible)."""
    pods = _with_big_job(tmp_path)
    served = ("serve/llm-0", "serve/llm-1")
    free = read_state(DUMP / "nodes.json", pods)
    plan = make_plan(_input(free, MOVES), solver="cpsat", now=NOW, time_limit_s=10, deterministic=True)
    assert {a.workload for a in plan.actions if a.kind == "migrate"} >= set(served)
    kept = read_state(DUMP / "nodes.json", pods, pdbs=load_pdbs(DUMP / "pdbs.json"))
    assert {w.id for w in kept.workloads if not w.disruptible} == set(served)
    inp = _input(kept, MOVES)
    for solver in ("greedy-fgd", "best-fit", "first-fit", "milp", "cpsat"):
        plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=10, deterministic=True)
        assert validate_plan(plan, inp) == [], solver
        placed = {a.workload: a.node for a in plan.assignments}
        assert [placed[w] for w in served] == ["l40s-a", "l40s-a"], solver
        assert not {a.workload for a in plan.actions if a.kind in ("migrate", "preempt")} & set(served)
    # A plan that moves one anyway breaks rule not-disruptible.
    plan = make_plan(inp, solver="greedy-fgd", now=NOW)
    moved = tuple(
        a.model_copy(update={"node": "h100-c", "gpus": (a.gpus[0].model_copy(update={"index": 7}),)})
        if a.workload == "serve/llm-0"
        else a
        for a in plan.assignments
    )
    bad = _with(plan, inp, assignments=moved)
    assert [v.rule for v in validate_plan(bad, inp)] == ["not-disruptible"]


def test_a_budget_that_allows_one_eviction_leaves_one_pod_free(tmp_path: Path) -> None:
    budgets = json.loads((DUMP / "pdbs.json").read_text())
    budgets["items"][0]["spec"] = {"maxUnavailable": "50%", "selector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["llm"]}]}}  # fmt: skip
    del budgets["items"][0]["status"]
    (tmp_path / "pdbs.json").write_text(json.dumps(budgets))
    state = read_state(DUMP / "nodes.json", DUMP / "pods.json", pdbs=load_pdbs(tmp_path / "pdbs.json"))
    kept = [w.id for w in state.workloads if not w.disruptible]
    assert len(kept) == 1 and kept[0] in ("serve/llm-0", "serve/llm-1")
    assert any("allows 1 disruption(s) of its 2 running GPU pod(s)" in w for w in state.warnings)


# --- 6. diffs --------------------------------------------------------------------------------------------


def test_planned_but_never_started_work_is_no_move() -> None:
    """KAI's and Volcano's pods wait for their own schedulers: an earlier plan placed them, they never
    started, and the next plan places them elsewhere: new starts, not moves."""
    state = _state()
    inp = _input(state)
    first = make_plan(inp, solver="greedy-fgd", now=NOW)
    waiting = ("kai/frac-0", "ml/volcano-job-0")
    where = {a.workload: a for a in first.assignments}
    assert set(waiting) <= set(where)

    def elsewhere(node: str) -> str:
        return next(n.name for n in inp.cluster.nodes if n.name not in (node, "l40s-a"))

    moved = tuple(
        a.model_copy(update={"node": elsewhere(a.node)}) if a.workload in waiting else a
        for a in first.assignments
    )
    second = first.model_copy(update={"assignments": moved})
    diff = plan_diff(first, second, inp, inp)
    assert diff.moves == ()
    assert sorted(line.split(":")[0] for line in diff.new_starts) == ["kai/frac-0#0", "ml/volcano-job-0#0"]
    assert all("never started" in line for line in diff.new_starts)
    # A running pod placed elsewhere is a move.
    running = tuple(
        a.model_copy(update={"node": "h100-c"}) if a.workload == "batch/sweep-0" else a
        for a in first.assignments
    )
    assert [
        m.split(":")[0]
        for m in plan_diff(first, first.model_copy(update={"assignments": running}), inp, inp).moves
    ] == ["batch/sweep-0#0"]


def test_mig_and_sharing_counts_agree_with_the_plan_s_actions() -> None:
    """From what runs (replan --kubernetes-state) the diff counts the GPUs the plan's MIG actions change;
    after that round, a plan that changes nothing more shows no MIG layout change, whatever layouts the
    earlier plan listed."""
    state = _state()
    inp, plan = _mig_off(state, "h100-a", 7)
    gpus = {(a.node, a.gpu) for a in plan.actions if a.kind in ("set-mig-mode", "destroy-mig", "create-mig")}
    diff = plan_diff(None, plan, inp)
    assert len(diff.layouts) == len(gpus) == 1 and diff.sharing == ()
    assert diff.layouts[0] == "h100-a:7: 3g.40gb@0 3g.40gb@4 -> MIG off"
    assert "1 MIG layout(s) changed, 0 sharing mode(s) changed" in diff.render()
    # The round applied: the next inputs hold h100-a's new layout; a plan listing every MIG GPU's
    # (unchanged) layout and one listing none both change nothing.
    after = inp.model_copy(update={"cluster": cluster_after(inp.cluster, plan)})
    listed = make_plan(after, solver="greedy-fgd", now=NOW)
    every = tuple(
        MigLayout(node=n.name, gpu=g.index, instances=g.mig.instances)
        for n in after.cluster.nodes
        for g in n.gpus
        if g.mig is not None
    )
    for later in (
        listed.model_copy(update={"mig_layouts": every}),
        listed.model_copy(update={"mig_layouts": ()}),
    ):
        assert plan_diff(plan, later, after, inp).layouts == ()


def _kubectl_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if re.match(r"\s*(kubectl|post|printf)", line)]


def test_every_script_line_is_a_complete_shell_command() -> None:
    state = _state()
    inp, plan = _mig_off(state, "h100-a", 7)
    text = _script(kubernetes.steps(plan, inp, kubernetes.Images(default="x:1"), options=_options()))
    for line in _kubectl_lines(text):
        shlex.split(line.removesuffix("\\"))
