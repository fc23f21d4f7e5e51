"""The Kubernetes round trip on a hand-written GPU Operator dump (``tests/data/kubernetes/round-trip``):
an imported pod keeps what it is (namespace, image, controller, labels, scheduler, gates), GPU indices the
importer guesses never make a move, and the export acts on the pods that exist (a pending pod placed
where it is, a bare pod re-created as itself, a controller's pod left to it), in files that run as-is.

The dump: node ``gpu-l40s-x`` (4 x L40S) runs ``search/early-index-build`` (a Job's, 1 GPU) and
``search/serve-search-0`` (a StatefulSet's, 2 GPUs); node ``gpu-h100-y`` (2 x H100) runs the bare
notebook ``research/nb-alice`` (1 GPU); ``ml/train-gated`` waits behind the scheduling gate
``gpuplan.io/placement`` and ``ml/bind-me`` waits for the scheduler ``gpuplan``. ``pods-later.json`` is
the same fleet after the index build finished.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpuplan.cli import main
from gpuplan.models import Cluster, DisruptionBudget, Plan, PlanningInput, Policy, Workload
from gpuplan.models.catalog import default_catalog
from gpuplan.models.plan import MIGRATE, Action, Assignment, GpuUse
from gpuplan.models.workload import Placement
from gpuplan.planner.executor import Executor, SimCluster
from gpuplan.planner.io.exporters import kubernetes
from gpuplan.planner.io.files import load_workloads, planning_input
from gpuplan.planner.io.importers.kubernetes import read_state, write_state
from gpuplan.planner.pipeline.actions import ordered_actions, plan_actions
from gpuplan.planner.planning import make_plan
from gpuplan.planner.presentation import summary
from gpuplan.planner.store.history import PlanHistory, plan_diff
from gpuplan.planner.validation.validate import validate_plan
from tests._paths import TESTS_DATA

DUMP = TESTS_DATA / "kubernetes" / "round-trip"
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
VERSIONS = ("1.29", "1.30", "1.31")
_POSTED = re.compile(r"^post (\S+) <<'EOF'\n(.*?)\nEOF$", re.S | re.M)


def _input(pods: str = "pods.json", policy: Policy | None = None) -> PlanningInput:
    state = read_state(DUMP / "nodes.json", DUMP / pods)
    return planning_input(state.cluster, state.workloads, policy or Policy(), source="test")


def _plan(inp: PlanningInput) -> Plan:
    plan = make_plan(inp, solver="cpsat", now=NOW, time_limit_s=10, deterministic=True)
    assert validate_plan(plan, inp) == []
    return plan


def _objects(path: Path) -> list[dict[str, Any]]:
    text = path.read_text()
    if path.suffix == ".yaml":
        return [d for d in yaml.safe_load_all(text) if d is not None]
    return [json.loads(body) for _, body in _POSTED.findall(text)]


def _validate(doc: dict[str, Any]) -> None:
    for version in VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


# --- item 4: what a pod is ------------------------------------------------------------------------------


def test_an_imported_pod_keeps_its_identity_through_the_workloads_csv(tmp_path: Path) -> None:
    state = read_state(DUMP / "nodes.json", DUMP / "pods.json")
    by_id = {w.id: w for w in state.workloads}
    serve = by_id["search/serve-search-0"]
    assert (serve.namespace, serve.pod_name, serve.image, serve.owner) == (
        "search",
        "serve-search-0",
        "registry.example/search/serve:7.2",
        "StatefulSet/serve-search",
    )
    assert dict(serve.labels) == {"app": "serve-search"} and serve.scheduler_name == "default-scheduler"
    alice = by_id["research/nb-alice"]
    assert alice.owner is None and dict(alice.labels) == {"app": "notebook", "user": "alice"}
    # A mapping (YAML, JSON) and the CSV text give the same sorted pairs; the workload stays hashable.
    for given in ({"user": "alice", "app": "notebook"}, "user=alice, app=notebook"):
        again = Workload.model_validate({"id": "research/nb-alice", "gpus": 1, "labels": given})
        assert again.labels == alice.labels and hash(again)
    gated = by_id["ml/train-gated"]
    assert gated.scheduling_gates == ("gpuplan.io/placement",) and not gated.running_on
    assert by_id["ml/bind-me"].scheduler_name == "gpuplan"
    # The API gives the node, not the GPU: running placements are marked as guessed, pending ones not.
    assert {w.id for w in state.workloads if w.gpus_guessed} == {
        "search/early-index-build",
        "search/serve-search-0",
        "research/nb-alice",
    }
    # The CSV the import writes reads back to the same workloads.
    _, workloads_csv = write_state(state, tmp_path)
    assert load_workloads(workloads_csv) == state.workloads


def test_labels_and_owner_are_checked_with_the_field_named() -> None:
    with pytest.raises(ValueError, match="label 'app' is not key=value"):
        Workload.model_validate({"id": "a", "gpus": 1, "labels": "app"})
    with pytest.raises(ValueError, match="owner 'web' is not Kind/name"):
        Workload.model_validate({"id": "a", "gpus": 1, "owner": "web"})


# --- item 5: guessed GPU indices ------------------------------------------------------------------------


def _guessed(guessed: bool) -> PlanningInput:
    cluster = Cluster.model_validate(
        {
            "nodes": [
                {
                    "name": "n",
                    "cpu_milli": 64000,
                    "memory_mib": 262144,
                    "gpus": [{"index": i, "model": "L40S-48GB"} for i in range(4)],
                }
            ]
        }
    )
    work = Workload.model_validate(
        {"id": "serve", "gpus": 2, "running_on": "n:2,3", "gpus_guessed": guessed, "cpu_milli": 1000}
    )
    return PlanningInput(cluster=cluster, workloads=(work,))


@pytest.mark.parametrize("guessed", [True, False])
def test_a_change_of_a_guessed_index_is_no_move(guessed: bool) -> None:
    """The plan puts the replica on GPUs 0,1 of the node it runs on (2,3 by the import's guess): no
    action and a valid plan when the indices were guessed; a migration (to 0,1) when they were known."""
    inp = _guessed(guessed)
    target = Assignment(
        workload="serve", replica=0, node="n", gpus=(GpuUse(index=0), GpuUse(index=1)), cpu_milli=1000
    )
    actions = ordered_actions(inp, (target,), ())
    scheduled = plan_actions(inp, (target,), (), default_catalog(), NOW)
    if guessed:
        assert actions == [] and scheduled == ()
        plan = _plan(inp).model_copy(update={"assignments": (target,), "actions": ()})
        assert not [v for v in validate_plan(plan, inp) if "disruption" in v.rule]
    else:
        assert [(a.kind, a.from_, a.to) for a in actions] == [(MIGRATE, "n:2,3", "n:0,1")]
    # Another node or another number of GPUs is a move either way.
    elsewhere = target.model_copy(update={"gpus": (GpuUse(index=0),)})
    assert [a.kind for a in ordered_actions(inp, (elsewhere,), ())] == [MIGRATE]


def test_two_imports_give_a_diff_without_moves(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Replan the dump, then the same fleet after the index build finished: the importer's guess for
    serve-search-0 shifts (its GPUs 1,2 become 0,1), which is no move; the index build is finished, not
    stopped. The same dump twice gives no change at all."""
    db = str(tmp_path / "plans.db")
    later = tmp_path / "later"
    later.mkdir()
    (later / "nodes.json").write_text((DUMP / "nodes.json").read_text())
    (later / "pods.json").write_text((DUMP / "pods-later.json").read_text())
    solve = ["--db", db, "--time-limit", "10", "-q", "--now", NOW.isoformat()]
    assert main(["replan", "--kubernetes-state", str(DUMP), *solve]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("policy: the default (no --policy and no stored plan")
    assert "at most 0 move(s) and 0 preemption(s)" in first
    assert main(["replan", "--kubernetes-state", str(later), *solve]) == 0
    assert capsys.readouterr().out.startswith("policy: plan 1's (the latest stored)")
    assert main(["replan", "--kubernetes-state", str(later), *solve]) == 0
    capsys.readouterr()
    history = PlanHistory(db)
    plans = [history.plan(n) for n in (1, 2, 3)]
    serve = [next(a for a in p.plan.assignments if a.workload == "search/serve-search-0") for p in plans[:2]]
    assert [[g.index for g in a.gpus] for a in serve] == [[1, 2], [0, 1]]  # the guess did shift
    assert main(["history", "diff", "1", "2", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "0 move(s), 0 new start(s), 0 stop(s), 1 finished," in out
    assert "finished:\n  search/early-index-build#0: was gpu-l40s-x:0" in out
    diff = plan_diff(plans[1].plan, plans[2].plan, plans[2].inputs, plans[1].inputs)
    assert not (diff.moves or diff.new_starts or diff.stops or diff.finished)


# --- items 6 and 7: the export acts on the pods that exist ---------------------------------------------


def test_import_then_export_without_a_change_writes_no_object(tmp_path: Path) -> None:
    """What runs stays and nothing waits (the pending pods left out): no round file at all."""
    full = _input()
    running = full.model_copy(update={"workloads": tuple(w for w in full.workloads if w.running_on)})
    plan = _plan(running)
    assert plan.actions == () and len(plan.assignments) == 3
    assert kubernetes.steps(plan, running, kubernetes.Images()) == []
    assert kubernetes.write_rounds([], tmp_path / "k8s") == []


def test_pending_pods_are_placed_where_they_are_without_duplicates(tmp_path: Path) -> None:
    inp = _input()
    plan = _plan(inp)
    placed = {a.workload: a.node for a in plan.assignments}
    assert {"ml/train-gated", "ml/bind-me"} <= set(placed)
    steps = kubernetes.steps(plan, inp, kubernetes.Images())  # no --image: nothing new is created
    assert [(s.kind, len(s.objects), len(s.ungates)) for s in steps] == [(kubernetes.PLACE, 1, 1)]
    paths = kubernetes.write_rounds(steps, tmp_path / "k8s")
    assert [p.name for p in paths] == ["round-01.sh"] and os.access(paths[0], os.X_OK)
    # ml/bind-me (schedulerName gpuplan, no gate): a Binding to its planned node, in its own namespace.
    (bound,) = _objects(paths[0])
    assert bound == {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "bind-me", "namespace": "ml"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": placed["ml/bind-me"]},
    }
    _validate(bound)
    # ml/train-gated: its node selection narrowed to the planned node, then its gate removed.
    (ungate,) = steps[0].ungates
    assert (ungate.namespace, ungate.name, ungate.node, ungate.gates) == (
        "ml",
        "train-gated",
        placed["ml/train-gated"],
        ("gpuplan.io/placement",),
    )
    pin, remove = ungate.commands()
    selector = json.loads(pin.split(" -p ")[1].strip("'"))
    assert selector == {"spec": {"nodeSelector": {"kubernetes.io/hostname": placed["ml/train-gated"]}}}
    _validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "train-gated"}, "spec": {
        "containers": [{"name": "main", "image": "x"}], **selector["spec"]}})  # fmt: skip
    # Only gpuplan's own gate goes (tested by name at its index first), never another controller's.
    assert json.loads(remove.split(" -p ")[1].strip("'")) == [
        {"op": "test", "path": "/spec/schedulingGates/0/name", "value": "gpuplan.io/placement"},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ]


def _moved(inp: PlanningInput) -> Plan:
    """A plan that moves the bare notebook to the L40S node and the StatefulSet's pod to the H100s."""
    plan = _plan(inp)
    moves = {
        "research/nb-alice": Placement.parse("gpu-l40s-x:3"),
        "search/serve-search-0": Placement.parse("gpu-h100-y:0,1"),
    }
    assignments = tuple(
        a.model_copy(update={"node": to.node, "gpus": tuple(GpuUse(index=g.index) for g in to.gpus)})
        if (to := moves.get(a.workload)) is not None
        else a
        for a in plan.assignments
        if a.workload in moves or a.workload == "search/early-index-build"
    )
    return plan.model_copy(
        update={"assignments": assignments, "actions": tuple(ordered_actions(inp, assignments, ()))}
    )


def test_moved_pods_bare_recreated_as_themselves_controller_owned_left_to_it(tmp_path: Path) -> None:
    running = _input()
    inp = running.model_copy(update={"workloads": tuple(w for w in running.workloads if w.running_on)})
    plan = _moved(inp)
    paths = kubernetes.write_rounds(kubernetes.steps(plan, inp, kubernetes.Images()), tmp_path / "k8s")
    assert [p.name for p in paths] == ["round-01.yaml", "round-02.sh", "round-03.yaml"]
    evictions = _objects(paths[1])
    assert [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in evictions] == [
        ("search", "serve-search-0"),
        ("research", "nb-alice"),
    ]
    script = paths[1].read_text()
    assert "# search/serve-search-0: its controller StatefulSet/serve-search re-creates it" in script
    # Only the bare notebook comes back as a Pod: its own name, namespace, image and labels.
    (alice,) = [d for d in _objects(paths[2]) if d["kind"] == "Pod"]
    assert (alice["metadata"]["namespace"], alice["metadata"]["name"]) == ("research", "nb-alice")
    assert alice["spec"]["containers"][0]["image"] == "jupyter/pytorch-notebook:2026-11"
    assert {"app": "notebook", "user": "alice"}.items() <= alice["metadata"]["labels"].items()
    assert alice["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-l40s-x"}
    for doc in (*_objects(paths[0]), *evictions, alice):
        _validate(doc)


def test_the_round_scripts_run_as_they_are(tmp_path: Path) -> None:
    """The scripts call kubectl (a stand-in here records each call and what it reads) with each
    Eviction and Binding posted to its pod's subresource and the gated pod patched, and exit 0."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    (bin_dir / "kubectl").write_text(
        f'#!/bin/sh\necho "$*" >> {log}\nif [ "$1" = create ]; then cat >> {log}; echo >> {log}; fi\n'
    )
    (bin_dir / "kubectl").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    inp = _input()
    plan = _plan(inp)
    running = inp.model_copy(update={"workloads": tuple(w for w in inp.workloads if w.running_on)})
    for steps in (kubernetes.steps(plan, inp, kubernetes.Images()),
                  kubernetes.steps(_moved(running), running, kubernetes.Images())):  # fmt: skip
        for path in kubernetes.write_rounds(steps, tmp_path / "k8s"):
            if path.suffix == ".sh":
                subprocess.run(["sh", str(path)], check=True, env=env, timeout=60)
    calls = log.read_text()
    for url in (
        "ml/pods/bind-me/binding",
        "search/pods/serve-search-0/eviction",
        "research/pods/nb-alice/eviction",
    ):
        assert f"create --raw /api/v1/namespaces/{url} -f -\n{{" in calls
    assert "patch pod -n ml train-gated --type=strategic -p" in calls
    assert "patch pod -n ml train-gated --type=json -p" in calls


def test_a_restart_in_place_is_called_a_restart() -> None:
    here = "gpu-h100-mig:0/1g.10gb@0"
    restart = Action(kind=MIGRATE, workload="nb", replica=0, from_=here, to=here, detail="drain")
    move = Action(kind=MIGRATE, workload="nb", replica=0, from_=here, to="gpu-h100-mig:1/1g.10gb@0")
    assert kubernetes.action_label(restart) == "restart"
    assert kubernetes.action_label(move) == MIGRATE
    w = Workload.model_validate({"id": "nb", "mig_profile": "1g.10gb", "running_on": here})
    assert (
        kubernetes.eviction(restart, w, "default")["metadata"]["annotations"]["gpuplan.io/action"]
        == "restart"
    )


def test_gang_pods_go_to_the_policy_s_gang_scheduler() -> None:
    cluster = Cluster.model_validate(
        {"nodes": [{"name": "n", "cpu_milli": 64000, "memory_mib": 262144,
                    "gpus": [{"index": i, "model": "H100-80GB"} for i in range(4)]}]}
    )  # fmt: skip
    work = (
        Workload.model_validate({"id": "pair", "gpus": 1, "replicas": 2, "gang": "true"}),
        Workload.model_validate({"id": "solo", "gpus": 1}),
    )
    policy = Policy.model_validate({"kubernetes": {"gang_scheduler_name": "scheduler-plugins-scheduler"}})
    inp = PlanningInput(cluster=cluster, workloads=work, policy=policy)
    plan = _plan(inp)
    pods = [d for s in kubernetes.steps(plan, inp, kubernetes.Images(default="i:1")) for d in s.objects
            if d["kind"] == "Pod"]  # fmt: skip
    schedulers = {
        (d["metadata"]["labels"]["gpuplan.io/workload"], d["spec"].get("schedulerName")) for d in pods
    }
    assert schedulers == {("pair", "scheduler-plugins-scheduler"), ("solo", None)}
    for d in pods:
        _validate(d)


@pytest.mark.parametrize("guessed", [True, False])
def test_the_executor_counts_no_move_for_a_guessed_index(guessed: bool) -> None:
    """A plan that keeps ``serve`` on its node at GPUs 0,1 (it runs on 2,3): the executor applies no
    migration when the demand says its indices are a guess, one when they are known."""
    inp = _guessed(guessed)
    sim = SimCluster(inp.cluster, default_catalog(), NOW)
    sim.place(
        Assignment(
            workload="serve", replica=0, node="n", gpus=(GpuUse(index=2), GpuUse(index=3)), cpu_milli=1000
        )
    )
    target = Assignment(
        workload="serve", replica=0, node="n", gpus=(GpuUse(index=0), GpuUse(index=1)), cpu_milli=1000
    )
    planned = _plan(inp).model_copy(update={"assignments": (target,), "actions": ()})
    policy = Policy(disruption=DisruptionBudget(max_moves_per_round=1))
    report = Executor(sim, lambda _inp, _now: planned, policy).round(inp.workloads)
    assert not report.failed and report.moves == (0 if guessed else 1)


def test_the_summary_counts_a_restart_in_place_as_a_restart() -> None:
    inp = _guessed(False)
    here = "n:2,3"
    actions = (
        Action(kind=MIGRATE, workload="serve", replica=0, from_=here, to=here, detail="drain"),
        Action(kind=MIGRATE, workload="other", replica=0, from_=here, to="n:0,1"),
    )
    plan = _plan(inp).model_copy(update={"actions": actions})
    assert "actions: 1 migrate, 1 restart" in summary.render(plan, inp)
