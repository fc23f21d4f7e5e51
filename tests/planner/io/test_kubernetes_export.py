"""The Kubernetes export: one file per step in the plan's action order, no object for staying work,
Evictions before the moved replica's new pod, MIG changes before the pods on that node, unique DNS names,
and every built-in object valid against the Kubernetes 1.29-1.31 OpenAPI schemas (kubernetes-validate)."""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuplan.cli import main
from gpuplan.models import Cluster, Plan, PlanningInput, Policy, Workload, data_dir, default_catalog
from gpuplan.models.base import InputError
from gpuplan.planner.io.exporters import kubernetes, migparted
from gpuplan.planner.io.files import load_plan
from gpuplan.planner.io.importers.kubernetes import load_mig_parted
from gpuplan.planner.pipeline.actions import CREATE, DESTROY, MIGRATE, PREEMPT, START, plan_actions
from gpuplan.planner.planning import make_plan
from gpuplan.planner.store.history import PlanHistory
from gpuplan.planner.validation.validate import validate_plan
from tests._paths import TESTS_DATA

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
EXAMPLES = data_dir() / "examples"
#: The GPU Operator's mig-parted ConfigMap, which the export adds its MIG configs to.
OPERATOR_MIG = TESTS_DATA / "kubernetes" / "operator" / "mig-parted-config.json"
OPTIONS = kubernetes.ExportOptions(mig_parted=load_mig_parted(OPERATOR_MIG))
IMAGE = "registry.example/run:1"
#: The Kubernetes versions the objects must validate against.
VERSIONS = ("1.29", "1.30", "1.31")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _h100(index: int, **fields: Any) -> dict[str, Any]:
    return {"index": index, "model": "H100-80GB", **fields}


CLUSTER = {
    "nodes": [
        {"name": "n0", "cpu_milli": 64000, "memory_mib": 262144, "gpus": [_h100(i) for i in range(4)]},
        {"name": "n1", "cpu_milli": 64000, "memory_mib": 262144, "gpus": [_h100(i) for i in range(4)]},
        {
            "name": "n2",
            "cpu_milli": 64000,
            "memory_mib": 262144,
            "gpus": [_h100(0, mig={"instances": [{"profile": "7g.80gb", "start": 0}]}), _h100(1)],
        },
    ]
}
_COMMON = {"cpu_milli": 1000, "memory_mib": 4096, "duration_s": 3600}
#: Running work of which one moves (mover on n0 or stay on n1: either node is then free for the gang, and
#: the two plans tie), work that is preempted (victim), and new work: a two-replica gang, a 3-GPU job, and
#: 1g.10gb services that need n2's 7g.80gb GPU re-partitioned.
WORKLOADS = [
    {"id": "mover", "gpus": 1, "preemptible": True, "running_on": "n0:0"},
    {"id": "stay", "gpus": 1, "tier": "latency-sensitive", "running_on": "n1:0"},
    {"id": "victim", "gpus": 3, "tier": "background", "preemptible": True, "running_on": "n1:1,2,3"},
    {"id": "big", "gpus": 2, "replicas": 2, "gang": "pair", "tier": "latency-sensitive"},
    {"id": "need3", "gpus": 3, "tier": "latency-sensitive"},
    {"id": "svc", "mig_profile": "1g.10gb", "replicas": 3, "tier": "latency-sensitive"},
]
POLICY = {
    "disruption": {"max_moves_per_round": 2, "max_preemptions_per_round": 1},
    "mig": {"allow_repartition": True},
}


def _scenario_input() -> PlanningInput:
    return PlanningInput(
        cluster=Cluster.model_validate(CLUSTER),
        workloads=tuple(Workload.model_validate({**_COMMON, **w}) for w in WORKLOADS),
        policy=Policy.model_validate(POLICY),
    )


@pytest.fixture(scope="module")
def scenario() -> tuple[PlanningInput, Plan]:
    """The hand-made cluster planned by CP-SAT (deterministic): one of each kind of action."""
    inp = _scenario_input()
    plan = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10, deterministic=True)
    assert not validate_plan(plan, inp)
    kinds = Counter(a.kind for a in plan.actions)
    assert kinds[MIGRATE] and kinds[PREEMPT] and kinds[DESTROY] and kinds[CREATE] and kinds[START], kinds
    return inp, plan


@pytest.fixture(scope="module")
def example() -> tuple[PlanningInput, Plan]:
    """The bundled example fleet and demand, planned as ``gpuplan demo`` does."""
    from gpuplan.cli.common import load_input

    inp = load_input(EXAMPLES / "cluster.yaml", EXAMPLES / "workloads.yaml", EXAMPLES / "policy.yaml")
    now = datetime.fromisoformat((EXAMPLES / "now.txt").read_text().strip())
    return inp, make_plan(inp, solver="cpsat", now=now, time_limit_s=5, deterministic=True)


#: The JSON documents a round script posts (``post PATH <<'EOF' ... EOF``).
_POSTED = re.compile(r"^post (\S+) <<'EOF'\n(.*?)\nEOF$", re.S | re.M)


def _round_paths(directory: Path) -> list[Path]:
    """The round files, numbered without gaps: ``.yaml`` to apply, ``.sh`` to run."""
    paths = sorted((*directory.glob("round-*.yaml"), *directory.glob("round-*.sh")), key=lambda p: p.stem)
    assert [p.stem for p in paths] == [f"round-{i:02d}" for i in range(1, len(paths) + 1)]
    return paths


_KINDS = {"configmap": "ConfigMap", "node": "Node", "pod": "Pod"}


def patches(text: str) -> list[dict[str, Any]]:
    """The ``kubectl patch`` calls of a round script, each as ``{kind, metadata: {name, namespace},
    patchType, patch}`` (what gpuplan changes in place: never a whole object)."""
    out = []
    for line in text.splitlines():
        line = line.strip().removesuffix(" || failed=1").removesuffix(" && \\").strip()
        if not line.startswith("kubectl patch "):
            continue
        words = shlex.split(line)[2:]
        kind, rest = words[0], words[1:]
        namespace = None
        if rest[0] == "-n":
            namespace, rest = rest[1], rest[2:]
        name, kind_of_patch, flag, body = rest
        assert kind_of_patch.startswith("--type=") and flag == "-p"
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        out.append(
            {
                "kind": _KINDS[kind],
                "metadata": meta,
                "patchType": kind_of_patch[7:],
                "patch": json.loads(body),
            }
        )
    return out


def _objects(path: Path) -> list[dict[str, Any]]:
    """The objects of one round file: applied (YAML), or posted by the script (each to its subresource)
    and patched by it (:func:`patches`)."""
    text = path.read_text()
    if path.suffix == ".yaml":
        return [d for d in yaml.safe_load_all(text) if d is not None]
    assert text.startswith("#!/bin/sh\n")
    posted = []
    for url, body in _POSTED.findall(text):
        doc = json.loads(body)
        assert url == kubernetes.subresource_path(doc)
        posted.append(doc)
    return posted + patches(text)


def _files(directory: Path) -> list[list[dict[str, Any]]]:
    """The objects of each round file, in order (and the files are numbered without gaps)."""
    return [_objects(p) for p in _round_paths(directory)]


def _exported(inp: PlanningInput, plan: Plan, tmp_path: Path) -> list[list[dict[str, Any]]]:
    steps = kubernetes.steps(plan, inp, kubernetes.Images(default=IMAGE), namespace="ml", options=OPTIONS)
    kubernetes.write_rounds(steps, tmp_path / "k8s")
    return _files(tmp_path / "k8s")


def _first(rounds: list[list[dict[str, Any]]], match: Any) -> int:
    """The index of the first round file holding an object that ``match`` accepts."""
    return next(i for i, objs in enumerate(rounds) if any(match(d) for d in objs))


def _check_order_and_objects(inp: PlanningInput, plan: Plan, rounds: list[list[dict[str, Any]]]) -> None:
    """What every export must hold, whatever the plan."""
    objs = [d for r in rounds for d in r]
    pods = [d for d in objs if d["kind"] == "Pod"]
    evictions = [d for d in objs if d["kind"] == "Eviction"]
    # A pod per started or moved replica, none for work that stays; an Eviction per stop.
    moved = {(a.workload, a.replica) for a in plan.actions if a.kind == MIGRATE}
    started = {(a.workload, a.replica) for a in plan.actions if a.kind in (MIGRATE, START)}
    labelled = {
        (d["metadata"]["labels"]["gpuplan.io/workload"], int(d["metadata"]["labels"]["gpuplan.io/replica"]))
        for d in pods
    }
    assert len(pods) == len(labelled) == len(started)
    assert labelled == {(kubernetes.dns_name(w or ""), r) for w, r in started}
    staying = {
        (w.id, r)
        for w in inp.workloads
        for r in range(len(w.running_on))
        if (w.id, r) not in {(a.workload, a.replica) for a in plan.actions}
    }
    assert not {(kubernetes.dns_name(w), r) for w, r in staying} & labelled
    assert len(evictions) == sum(a.kind in (MIGRATE, PREEMPT) for a in plan.actions)
    # A moved replica's Eviction comes in an earlier file than its new pod.
    for w, r in moved:
        old = kubernetes.running_pod(inp.workload_by_id[w or ""], r or 0, "default")[1]
        evicted = _first(rounds, lambda d, old=old: d["kind"] == "Eviction" and d["metadata"]["name"] == old)
        placed = _first(
            rounds,
            lambda d, w=w, r=r: (
                d["kind"] == "Pod"
                and d["metadata"]["labels"]["gpuplan.io/workload"] == kubernetes.dns_name(w or "")
                and d["metadata"]["labels"]["gpuplan.io/replica"] == str(r)
            ),
        )
        assert evicted < placed
    # The MIG label of a re-partitioned node, and its ConfigMap, come before any pod on that node.
    for node in {a.node for a in plan.actions if a.kind in (DESTROY, CREATE)}:
        label = _first(rounds, lambda d, n=node: d["kind"] == "Node" and d["metadata"]["name"] == n)
        assert any(d["kind"] == "ConfigMap" for d in rounds[label])
        on_node = [
            i
            for i, r in enumerate(rounds)
            for d in r
            if d["kind"] == "Pod" and d["spec"]["nodeSelector"] == {kubernetes.HOSTNAME: node}
        ]
        assert on_node and label < min(on_node)
    # PriorityClasses once, alone in the first file, one per tier of the pods.
    classes = [i for i, r in enumerate(rounds) for d in r if d["kind"] == "PriorityClass"]
    assert set(classes) <= {0} and {d["kind"] for d in rounds[0]} <= {"PriorityClass"}
    assert {d["spec"]["priorityClassName"] for d in pods} == {
        d["metadata"]["name"] for d in rounds[0] if d["kind"] == "PriorityClass"
    }
    # Names unique per kind and namespace (the ConfigMap and Node label patches are updated in place, step
    # by step), and pod names DNS labels (at most 63 characters).
    keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in objs]
    created = [k for k in keys if k[0] not in ("ConfigMap", "Node")]
    assert len(created) == len(set(created))
    assert all(_DNS_LABEL.match(d["metadata"]["name"]) for d in pods)
    for d in pods:
        spec = d["spec"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
        assert spec["containers"][0]["image"] in (IMAGE, "registry.example/svc:2")


def _check_schemas(rounds: list[list[dict[str, Any]]]) -> int:
    """Every built-in object validates (strict: no unknown fields) for each version; PodGroups by hand."""
    checked = 0
    pod_groups = [d for r in rounds for d in r if d["kind"] == "PodGroup"]
    for d in (d for r in rounds for d in r if d["kind"] != "PodGroup" and "patch" not in d):
        for version in VERSIONS:
            kubernetes_validate.validate(d, version, strict=True)
            checked += 1
    pods = [d for r in rounds for d in r if d["kind"] == "Pod"]
    for g in pod_groups:
        assert g["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
        assert set(g) == {"apiVersion", "kind", "metadata", "spec"}
        assert set(g["spec"]) <= {"minMember", "minResources", "scheduleTimeoutSeconds"}
        assert _DNS_LABEL.match(g["metadata"]["name"]) and g["metadata"]["namespace"] == "ml"
        members = [
            p
            for p in pods
            if p["metadata"]["labels"].get(kubernetes.POD_GROUP_LABEL) == g["metadata"]["name"]
        ]
        assert isinstance(g["spec"]["minMember"], int) and g["spec"]["minMember"] == len(members) >= 1
        assert all(p["metadata"]["namespace"] == g["metadata"]["namespace"] for p in members)
    return checked


def test_the_hand_made_cluster_exports_in_the_plan_s_order(
    scenario: tuple[PlanningInput, Plan], tmp_path: Path
) -> None:
    inp, plan = scenario
    rounds = _exported(inp, plan, tmp_path)
    _check_order_and_objects(inp, plan, rounds)
    objs = [d for r in rounds for d in r]
    names = {d["metadata"]["name"] for d in objs if d["kind"] == "Eviction"}
    moved = {a.workload for a in plan.actions if a.kind == MIGRATE}
    assert len(moved) == 1 and moved <= {"mover", "stay"}
    (kept,) = {"mover", "stay"} - moved
    assert "victim" in names and moved <= names and kept not in names
    assert not any(d["metadata"].get("labels", {}).get("gpuplan.io/workload") == kept for d in objs)
    # The gang: a PodGroup of two, before its pods, and both pods carry its label.
    group = next(d for d in objs if d["kind"] == "PodGroup")
    assert group["metadata"]["name"] == "pair" and group["spec"]["minMember"] == 2
    big = [d for d in objs if d["kind"] == "Pod" and d["metadata"]["labels"]["gpuplan.io/workload"] == "big"]
    assert [d["metadata"]["labels"][kubernetes.POD_GROUP_LABEL] for d in big] == ["pair", "pair"]
    assert _first(rounds, lambda d: d["kind"] == "PodGroup") <= _first(
        rounds, lambda d: d["kind"] == "Pod" and d["metadata"]["labels"]["gpuplan.io/workload"] == "big"
    )
    # The MIG manager's config names n2's new layout, three 1g.10gb, and the label selects it. It is
    # added to the GPU Operator's own ConfigMap by a patch that first tests the text read: the operator's
    # configs all stay, and no other node is relabelled.
    operator = OPTIONS.mig_parted
    assert operator is not None
    (cm,) = [d for d in objs if d["kind"] == "ConfigMap"]
    assert (cm["metadata"]["name"], cm["metadata"]["namespace"]) == (
        "default-mig-parted-config",
        "gpu-operator",
    )
    test, put = cm["patch"]
    assert test == {"op": "test", "path": "/data/config.yaml", "value": operator.text}
    assert put["op"] == "replace" and put["path"] == "/data/config.yaml"
    config = yaml.safe_load(put["value"])
    assert not migparted.check_config(config)
    operator_configs = operator.document["mig-configs"]
    assert {k: config["mig-configs"][k] for k in operator_configs} == operator_configs
    (node,) = [d for d in objs if d["kind"] == "Node"]
    assert node["metadata"]["name"] == "n2" and node["patchType"] == "merge"
    label = node["patch"]["metadata"]["labels"][kubernetes.MIG_CONFIG_LABEL]
    entries = config["mig-configs"][label]
    assert {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 3}} in entries
    noted = json.loads(node["patch"]["metadata"]["annotations"][kubernetes.MIG_CONFIG_ANNOTATION])
    assert noted == {"name": label, "entries": entries}
    # The pods' tier maps to the documented PriorityClass (1000 per unit of tier weight): the new work
    # and "stay" are latency-sensitive, "mover" standard (weight 3).
    classes = {d["metadata"]["name"]: d["value"] for d in rounds[0] if d["kind"] == "PriorityClass"}
    assert classes == {
        "gpuplan-latency-sensitive": 10000,
        **({"gpuplan-standard": 3000} if kept == "stay" else {}),
    }
    assert _check_schemas(rounds) > 0


@pytest.mark.slow
def test_the_bundled_example_exports_valid_objects(
    example: tuple[PlanningInput, Plan], tmp_path: Path
) -> None:
    inp, plan = example
    rounds = _exported(inp, plan, tmp_path)
    _check_order_and_objects(inp, plan, rounds)
    assert sum(d["kind"] == "Pod" for r in rounds for d in r) > 100
    assert _check_schemas(rounds) == len(VERSIONS) * sum(d["kind"] != "PodGroup" for r in rounds for d in r)


def test_the_schemas_catch_a_broken_object() -> None:
    """The schema check is not vacuous: a field of the wrong type and an unknown field are refused."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}}
    kubernetes_validate.validate(pod, "1.31", strict=True)
    for broken in (
        {**pod, "spec": {"containers": [], "nodeSelector": ["n0"]}},
        {**pod, "spec": {"containers": [], "priorityClass": "x"}},
        {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}, "spec": {}},
    ):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, "1.31", strict=True)


def test_each_pod_carries_the_planned_device_plugin_resources(
    scenario: tuple[PlanningInput, Plan], tmp_path: Path
) -> None:
    inp, plan = scenario
    target = {(a.workload, a.replica): a for a in plan.assignments}
    for d in (d for r in _exported(inp, plan, tmp_path) for d in r if d["kind"] == "Pod"):
        labels = d["metadata"]["labels"]
        a = target[(labels["gpuplan.io/workload"], int(labels["gpuplan.io/replica"]))]
        assert d["spec"]["nodeSelector"] == {kubernetes.HOSTNAME: a.node}
        assert d["metadata"]["namespace"] == "ml"
        limits = d["spec"]["containers"][0]["resources"]["limits"]
        gpu = {k: v for k, v in limits.items() if k.startswith("nvidia.com/")}
        expected = {"svc": {"nvidia.com/mig-1g.10gb": "1"}, "need3": {"nvidia.com/gpu": "3"}}
        assert gpu == expected.get(a.workload, {"nvidia.com/gpu": str(len(a.gpus))})
        assert limits["cpu"] == "1000m" and limits["memory"] == "4096Mi"


def test_plan_rounds_become_files_in_order(tmp_path: Path) -> None:
    """Two moves under a budget of one move per round (rescheduled as ``replan --rounds`` does): the
    second move and the start it makes room for come in files after the first round's."""
    cluster = Cluster.model_validate({"nodes": [{**CLUSTER["nodes"][0], "name": f"n{k}"} for k in range(3)]})
    work = [
        {"id": "a", "gpus": 1, "running_on": "n0:0"},
        {"id": "b", "gpus": 1, "running_on": "n0:1"},
        {"id": "c", "gpus": 3, "running_on": "n1:0,1,2"},
        {"id": "d", "gpus": 3, "running_on": "n2:0,1,2"},
        {"id": "big", "gpus": 4, "tier": "latency-sensitive"},
    ]
    budget = {"disruption": {"max_moves_per_round": 2}}
    inp = PlanningInput(
        cluster=cluster,
        workloads=tuple(Workload.model_validate({**_COMMON, **w}) for w in work),
        policy=Policy.model_validate(budget),
    )
    plan = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10, deterministic=True)
    one = inp.model_copy(update={"policy": Policy.model_validate({"disruption": {"max_moves_per_round": 1}})})
    plan = plan.model_copy(
        update={"actions": plan_actions(one, plan.assignments, plan.mig_layouts, default_catalog(), NOW)}
    )
    assert sorted(a.round for a in plan.actions if a.kind == MIGRATE) == [1, 2]
    rounds = _exported(inp, plan, tmp_path)
    _check_order_and_objects(inp, plan, rounds)
    heads = [
        next(line for line in p.read_text().splitlines() if line.startswith("# round-"))
        for p in _round_paths(tmp_path / "k8s")
    ]
    assert [h.split(": ", 1)[1].split(".")[0] for h in heads] == [
        "plan round 1, setup",
        "plan round 1, evict",
        "plan round 1, start",
        "plan round 2, evict",
        "plan round 2, start",
    ]
    last = [d["metadata"]["labels"]["gpuplan.io/workload"] for d in rounds[4] if d["kind"] == "Pod"]
    assert last[-1] == "big"
    assert _check_schemas(rounds) > 0


def test_a_plan_without_actions_still_stops_before_it_starts(
    scenario: tuple[PlanningInput, Plan], tmp_path: Path
) -> None:
    """An older plan file without actions: they are derived, in one round, in the same phase order."""
    inp, plan = scenario
    bare = plan.model_copy(update={"actions": ()})
    rounds = _exported(inp, bare, tmp_path)
    kinds = [{d["kind"] for d in r} - {"PriorityClass"} for r in rounds]
    assert kinds == [set(), {"Eviction"}, {"ConfigMap", "Node"}, {"PodGroup", "Pod"}]


def test_a_missing_image_names_the_workload(scenario: tuple[PlanningInput, Plan]) -> None:
    inp, plan = scenario
    images = kubernetes.Images(per_workload={"big": IMAGE, "need3": IMAGE, "stay": IMAGE, "mover": IMAGE})
    with pytest.raises(InputError, match="no container image for workload 'svc'"):
        kubernetes.steps(plan, inp, images)
    steps = kubernetes.steps(plan, inp, kubernetes.Images(default="base:1", per_workload={"svc": "svc:2"}))
    pods = [d for s in steps for d in s.objects if d["kind"] == "Pod"]
    by_workload = {
        d["metadata"]["labels"]["gpuplan.io/workload"]: d["spec"]["containers"][0]["image"] for d in pods
    }
    assert by_workload["svc"] == "svc:2" and by_workload["need3"] == "base:1"


# --- the command line -----------------------------------------------------------------------------------


def _input_files(tmp_path: Path) -> list[str]:
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    work = [{**_COMMON, **w} for w in WORKLOADS]
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump({"workloads": work}))
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump(POLICY))
    return [
        *("--cluster", str(tmp_path / "cluster.yaml")),
        *("--workloads", str(tmp_path / "workloads.yaml")),
        *("--policy", str(tmp_path / "policy.yaml")),
    ]


def test_export_kubernetes_writes_the_round_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = _input_files(tmp_path)
    plan_path = tmp_path / "plan.json"
    solve = ["--solver", "cpsat", "--time-limit", "10", "--deterministic", "--now", NOW.isoformat()]
    assert main(["plan", *files, *solve, "--out", str(plan_path)]) == 0
    (tmp_path / "images.yaml").write_text(yaml.safe_dump({"svc": "registry.example/svc:2"}))
    out = tmp_path / "k8s"
    (out).mkdir()
    (out / "round-09.yaml").write_text("stale: true\n")  # an earlier export's file goes
    args = ["export", "--plan", str(plan_path), *files, "--kubernetes", str(out), "--namespace", "ml",
            "--mig-parted-config", str(OPERATOR_MIG)]  # fmt: skip
    assert main([*args, "--image", IMAGE, "--images", str(tmp_path / "images.yaml")]) == 0
    printed = capsys.readouterr().out
    rounds = _files(out)
    assert f"{len(rounds)} round files written to {out}" in printed
    inp = _scenario_input()
    _check_order_and_objects(inp, load_plan(plan_path), rounds)
    images = {
        d["metadata"]["labels"]["gpuplan.io/workload"]: d["spec"]["containers"][0]["image"]
        for r in rounds
        for d in r
        if d["kind"] == "Pod"
    }
    assert images["svc"] == "registry.example/svc:2" and images["need3"] == IMAGE
    assert (out / "round-01.yaml").read_text().startswith("# round-01.yaml: plan round 1, setup.")


def test_export_kubernetes_bad_input_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = _input_files(tmp_path)
    plan_path = tmp_path / "plan.json"
    assert (
        main(["plan", *files, "--solver", "greedy-fgd", "--now", NOW.isoformat(), "--out", str(plan_path)])
        == 0
    )
    capsys.readouterr()
    out = tmp_path / "k8s"
    base = ["export", "--plan", str(plan_path), "--kubernetes", str(out)]
    (tmp_path / "images.yaml").write_text(json.dumps({"svc": ["not", "an", "image"]}))
    cases = [
        ([*base, *files], "gpuplan: error: --image: no container image for workload "),
        (
            [*base, *files[:2], "--image", IMAGE],
            "gpuplan: error: --kubernetes: give --cluster and --workloads",
        ),
        ([*base, *files, "--images", str(tmp_path / "images.yaml")], "workload 'svc': not an image name"),
        ([*base, *files, "--images", str(tmp_path / "none.yaml")], "none.yaml: file not found"),
    ]
    for args, message in cases:
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert not out.exists()
    # A plan that does not fit the inputs given is refused, naming the violation.
    other = yaml.safe_load((tmp_path / "cluster.yaml").read_text())
    other["nodes"] = other["nodes"][:2]
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(other))
    small = ["--cluster", str(tmp_path / "small.yaml"), *files[2:]]
    assert main([*base, *small, "--image", IMAGE]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a valid plan of these inputs" in err[0] and not out.exists()


def test_replan_without_an_image_stops_before_planning_or_storing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "plans.db")
    files = _input_files(tmp_path)
    out = tmp_path / "k8s"
    args = [
        "replan",
        "--db",
        db,
        *files,
        "--time-limit",
        "5",
        "-q",
        "--now",
        NOW.isoformat(),
        "--k8s-out",
        str(out),
        "--mig-parted-config",
        str(OPERATOR_MIG),
    ]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "gpuplan: error: --image: no container image for workload 'mover' (give --image or --images)"
    ]
    assert PlanHistory(db).latest() is None and not out.exists()
    assert main([*args, "--image", IMAGE]) == 0
    assert "round files)" in capsys.readouterr().out
    stored = PlanHistory(db).latest()
    assert stored is not None
    _check_order_and_objects(stored.inputs, stored.plan, _files(out))


def test_evictions_name_the_pods_of_imported_workloads() -> None:
    """A workload imported from Kubernetes is the pod ``<namespace>/<pod>``: its Eviction names that pod in
    that namespace; other workloads' pods are named in the export's namespace."""
    catalog = default_catalog()
    imported = Workload.model_validate(
        {"id": "search/embed-7f9c-x2", "team": "search", "gpus": 1}, context={"catalog": catalog}
    )
    assert kubernetes.running_pod(imported, 0, "default") == ("search", "embed-7f9c-x2")
    two = Workload.model_validate(
        {"id": "train", "team": "ml", "gpus": 1, "replicas": 2}, context={"catalog": catalog}
    )
    assert kubernetes.running_pod(two, 1, "ml") == ("ml", "train-1")


def test_a_sharing_change_exports_the_device_plugin_config_and_label_first(tmp_path: Path) -> None:
    """A plan that switches the only free (exclusive) node to time-slicing for waiting notebooks: the
    round's first step adds the config of the new mode to the device plugin's ConfigMap (a merge patch of
    that key: its other keys stay) and labels the switched node only, then the notebooks' pods come."""
    gpus = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
    base = {"cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus, "sharing": "exclusive"}
    inp = PlanningInput(
        cluster=Cluster.model_validate({"nodes": [{"name": "busy", **base}, {"name": "ex", **base}]}),
        workloads=(
            Workload.model_validate({"id": "job", "gpus": 2, "running_on": "busy:0,1"}),
            Workload.model_validate({"id": "nb", "gpu_milli": 250, "replicas": 5}),
        ),
    )
    plan = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=5, deterministic=True)
    assert validate_plan(plan, inp) == []
    rounds = _exported(inp, plan, tmp_path)
    _check_order_and_objects(inp, plan, rounds)
    assert _check_schemas(rounds) > 0
    assert [[d["kind"] for d in r] for r in rounds] == [
        ["PriorityClass"],
        ["ConfigMap", "Node"],
        ["Pod"] * 5,
    ]
    config_map, label = rounds[1]
    assert config_map["metadata"] == {"name": kubernetes.DEVICE_PLUGIN_CONFIGMAP, "namespace": "gpu-operator"}
    assert config_map["patchType"] == "merge" and set(config_map["patch"]) == {"data"}
    configs = {k: yaml.safe_load(v) for k, v in config_map["patch"]["data"].items()}
    # No nvidia.com/mig.strategy label on the node: the operator's own strategy stays (no flag written).
    assert configs == {
        "time-slicing-4": {
            "version": "v1",
            "sharing": {
                "timeSlicing": {
                    "renameByDefault": True,
                    "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
                }
            },
        },
    }
    assert label["metadata"] == {"name": "ex"} and label["patch"] == {
        "metadata": {"labels": {"nvidia.com/device-plugin.config": "time-slicing-4"}}
    }
    script = (tmp_path / "k8s" / "round-02.sh").read_text()
    assert "kubectl create configmap -n gpu-operator gpuplan-device-plugin-config" in script
    pods = rounds[2]
    assert {p["spec"]["nodeSelector"][kubernetes.HOSTNAME] for p in pods} == {"ex"}
    assert all(
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu.shared"] == "1" for p in pods
    )
    # A node whose label says its MIG strategy keeps it in the config written for it.
    labelled = inp.cluster.model_copy(
        update={
            "nodes": tuple(
                n.model_copy(update={"labels": {"nvidia.com/mig.strategy": "mixed"}})
                for n in inp.cluster.nodes
            )
        }
    )
    steps = kubernetes.steps(
        plan, inp.model_copy(update={"cluster": labelled}), kubernetes.Images(default=IMAGE), "ml"
    )
    (sharing,) = [s for s in steps if s.kind == kubernetes.SHARING]
    data = sharing.patches[0].body["data"]
    assert list(data) == ["time-slicing-4-mig-mixed"]
    assert yaml.safe_load(data["time-slicing-4-mig-mixed"])["flags"] == {"migStrategy": "mixed"}
