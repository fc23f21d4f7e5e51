"""Small builders for clusters, workloads and plans used by the tests."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import strategies as st

from gpuplan.models import (
    Action,
    Assignment,
    Cluster,
    GpuUse,
    MigInstance,
    MigLayout,
    Node,
    Plan,
    PlanningInput,
    PlanStatus,
    Policy,
    SolverReport,
    Unplaced,
    Workload,
)
from gpuplan.models.cluster import sharing_text
from gpuplan.models.plan import SET_SHARING, START
from gpuplan.models.workload import where
from gpuplan.planner.store.records import JobRecord, JobStatus, now


def node(name: str, **fields: Any) -> Node:
    """A validated node of :func:`node_data`'s ``fields`` with generous CPU and memory unless given
    (``topology=…`` expands a reference server)."""
    return Node.model_validate(node_data(name, **{"cpu_milli": 256_000, "memory_mib": 2_097_152, **fields}))


def node_data(
    name: str,
    model: str | None = None,
    count: int = 0,
    *,
    mig: Mapping[int, Sequence[tuple[str, int]]] | None = None,
    cpu_milli: int = 64_000,
    memory_mib: int = 262_144,
    **fields: Any,
) -> dict[str, Any]:
    """A node as plain data, as a cluster file lists it: ``count`` GPUs of ``model`` (none without a
    model), GPU ``i`` in MIG mode with the ``(profile, start)`` instances ``mig[i]`` when ``i`` is a key
    of ``mig``; 64 cores and 256 GiB unless given; ``fields`` (``gpus``, ``pool``, ``sharing``,
    ``labels``, ``topology``, ...) as they are."""
    data: dict[str, Any] = {"name": name, "cpu_milli": cpu_milli, "memory_mib": memory_mib}
    if model is not None:
        data["gpus"] = [
            {"index": i, "model": model}
            | (
                {"mig": {"instances": [{"profile": p, "start": s} for p, s in mig[i]]}}
                if mig and i in mig
                else {}
            )
            for i in range(count)
        ]
    return data | fields


def kube_node(
    name: str,
    product: str,
    gpus: int,
    allocatable: Mapping[str, str],
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    cpu: str = "64",
    memory: str = "512Gi",
) -> dict[str, Any]:
    """A Kubernetes Node item as ``kubectl get nodes -o json`` lists it: the GPU Operator's labels of
    ``gpus`` GPUs of ``product`` with no sharing strategy (``labels`` add or override), ``annotations``
    when given, and ``cpu``, ``memory`` and the extended resources ``allocatable``."""
    meta: dict[str, Any] = {
        "name": name,
        "labels": {
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.sharing-strategy": "none",
            **(labels or {}),
        },
    }
    if annotations is not None:
        meta["annotations"] = dict(annotations)
    return {"metadata": meta, "status": {"allocatable": {"cpu": cpu, "memory": memory, **allocatable}}}


def two_pools() -> dict[str, Any]:
    """A cluster as plain data: pool ``l40s`` (nodes ``l1`` and ``l2``, two L40S each) and pool ``h100``
    (node ``h1``, one H100 in MIG mode with no instance yet)."""
    l40s = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
    node = {"cpu_milli": 64000, "memory_mib": 262144}
    return {
        "nodes": [
            {"name": "l1", "pool": "l40s", **node, "gpus": l40s},
            {"name": "l2", "pool": "l40s", **node, "gpus": l40s},
            {"name": "h1", "pool": "h100", **node, "gpus": [{"index": 0, "model": "H100-80GB", "mig": {}}]},
        ]
    }


def gpus(model: str, numas: list[int]) -> list[dict[str, Any]]:
    """Explicit GPU entries of one model, GPU ``i`` on NUMA node ``numas[i]``."""
    return [{"index": i, "model": model, "numa": n} for i, n in enumerate(numas)]


def mig_gpu(index: int, *pairs: tuple[str, int]) -> dict[str, Any]:
    """A GPU override entry that enables MIG with the given instances."""
    return {"index": index, "mig": {"instances": [{"profile": p, "start": s} for p, s in pairs]}}


def whole(*indices: int) -> tuple[GpuUse, ...]:
    """Whole-GPU entries."""
    return tuple(GpuUse(index=i) for i in indices)


def frac(index: int, milli: int) -> tuple[GpuUse, ...]:
    """One fractional entry."""
    return (GpuUse(index=index, milli=milli),)


def mig(index: int, profile: str, start: int) -> tuple[GpuUse, ...]:
    """One MIG-instance entry."""
    return (GpuUse(index=index, mig_profile=profile, mig_start=start),)


def instances(*pairs: tuple[str, int]) -> tuple[MigInstance, ...]:
    """MIG instances from ``(profile, start)`` pairs."""
    return tuple(MigInstance(profile=p, start=s) for p, s in pairs)


def layout(node_name: str, gpu: int, *pairs: tuple[str, int]) -> MigLayout:
    """A plan MIG layout entry."""
    return MigLayout(node=node_name, gpu=gpu, instances=instances(*pairs))


def assign(
    workload: str,
    replica: int,
    node_name: str,
    uses: tuple[GpuUse, ...] = (),
    *,
    cpu: int = 0,
    mem: int = 0,
    alt: int = 0,
    gpu_mem: int = 0,
) -> Assignment:
    """One assignment (``gpu_mem``: GPU memory in MiB held on each GPU used)."""
    return Assignment(
        workload=workload,
        replica=replica,
        node=node_name,
        gpus=uses,
        cpu_milli=cpu,
        memory_mib=mem,
        gpu_memory_mib=gpu_mem,
        alternative=alt,
    )


def wait(workload: str, replica: int) -> Unplaced:
    """An unplaced replica."""
    return Unplaced(workload=workload, replica=replica, code="NO_CAPACITY", reason="No room left.")


def start_actions(
    workloads: Sequence[Workload], assignments: Sequence[Assignment], rnd: int = 1
) -> list[Action]:
    """The ``start`` action of each assigned replica that does not run now (the validator's rule 3b)."""
    running = {(w.id, r) for w in workloads for r in range(len(w.running_on))}
    return [
        Action(round=rnd, kind=START, workload=a.workload, replica=a.replica, to=where(a.node, a.gpus))
        for a in assignments
        if (a.workload, a.replica) not in running
    ]


def with_actions(p: Plan, inp: PlanningInput) -> Plan:
    """``p`` with the ``start`` action of each replica it places that does not run now and the
    ``set-sharing`` action of each sharing-mode change it makes added (the validator's rules 3b, 14c)."""
    nodes = inp.cluster.node_by_name
    sharing = [
        Action(kind=SET_SHARING, node=c.node, to=sharing_text(c.sharing))
        for c in p.sharing
        if c.node in nodes and nodes[c.node].sharing != c.sharing
    ]
    starts = start_actions(inp.workloads, p.assignments)
    return p.model_copy(update={"actions": (*p.actions, *sharing, *starts)})


def plan(
    assignments: list[Assignment] | tuple[Assignment, ...],
    unplaced: list[Unplaced] | tuple[Unplaced, ...] = (),
    layouts: list[MigLayout] | tuple[MigLayout, ...] = (),
    **fields: Any,
) -> Plan:
    """A feasible plan from its parts (``fields``: more of the plan's, e.g. ``actions``)."""
    return Plan(
        status=PlanStatus.FEASIBLE,
        solver=SolverReport(name="test"),
        assignments=tuple(assignments),
        unplaced=tuple(unplaced),
        mig_layouts=tuple(layouts),
        **fields,
    )


def planning_input(
    nodes: list[Node] | tuple[Node, ...],
    workloads: list[Workload] | tuple[Workload, ...],
    policy: Policy | None = None,
) -> PlanningInput:
    """A validated planning input."""
    return PlanningInput(
        cluster=Cluster(nodes=tuple(nodes)),
        workloads=tuple(workloads),
        policy=policy or Policy(),
    )


# ---------------------------------------------------------------------------------------------
# Drifted current states: running work that already breaks a quota, an isolation rule or its topology
# need (fleets drift: quotas shrink, rules and topologies are declared after work started).

#: NVLink cliques of the node kinds :func:`drifted_inputs` draws (L40S servers declare no links).
DRIFT_CLIQUES = {"l40s": [], "nvl": [{0, 1}, {2, 3}]}
#: The GPU models of the drifted nodes (``l40s`` and ``nvl``), as workloads may restrict to them.
DRIFT_MODELS = ["L40S-48GB", "H100-94GB"]


@st.composite
def drifted_inputs(draw: st.DrawFn) -> dict[str, Any]:
    """A planning input (as plain data) of 1-3 nodes whose running replicas are placed on free GPUs
    regardless of quotas, isolation rules, topology needs and GPU models (never over capacity), plus
    some waiting work, and a policy with such rules and a disruption budget. Each node carries its kind in the
    label ``kind`` (a key of :data:`DRIFT_CLIQUES`)."""
    teams, tiers = ["a", "b", "c"], ["latency-sensitive", "standard", "background"]
    nodes: list[dict[str, Any]] = []
    free: dict[tuple[str, int], int] = {}  # milli-GPU left per GPU (whole use takes 1000)
    whole_ok: dict[tuple[str, int], bool] = {}
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(sorted(DRIFT_CLIQUES)))
        n: dict[str, Any] = {
            "name": f"n{i}",
            "cpu_milli": 256_000,
            "memory_mib": 2_097_152,
            "pool": draw(st.sampled_from(["p1", "p2"])),
            "labels": {"kind": kind},
        }
        if kind == "nvl":
            n["topology"] = "pcie-4x-h100-nvl-bridged"
            count = 4
        else:
            count = draw(st.integers(2, 4))
            n["gpus"] = [{"index": g, "model": "L40S-48GB", "numa": g // 2} for g in range(count)]
        for g in range(count):
            free[(n["name"], g)] = 1000
            whole_ok[(n["name"], g)] = True
        nodes.append(n)
    workloads: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 5))):
        w: dict[str, Any] = {
            "id": f"r{i}",
            "team": draw(st.sampled_from(teams)),
            "tier": draw(st.sampled_from(tiers)),
            "preemptible": draw(st.booleans()),
            "queued_since": "2026-11-29T06:00:00Z",
        }
        if draw(st.booleans()):
            size = draw(st.integers(1, 2))
            w.update(gpus=size, topology=draw(st.sampled_from(["any", "nvlink", "nvlink", "numa"])))
            spots = [
                (name, group)
                for name in (n["name"] for n in nodes)
                for group in itertools.combinations(sorted(g for (m, g) in free if m == name), size)
                if all(free[(name, g)] == 1000 and whole_ok[(name, g)] for g in group)
            ]
            if spots:
                name, group = draw(st.sampled_from(spots))
                for g in group:
                    free[(name, g)] = 0
                w["running_on"] = f"{name}:{','.join(map(str, group))}"
        else:
            milli = draw(st.sampled_from([250, 500]))
            w["gpu_milli"] = milli
            spots2 = sorted(k for k, left in free.items() if left >= milli)
            if spots2:
                name, g = draw(st.sampled_from(spots2))
                free[(name, g)] -= milli
                whole_ok[(name, g)] = False
                w["running_on"] = f"{name}:{g}={milli}"
        if "running_on" in w:
            if draw(st.integers(0, 2)) == 0:  # a GPU model it may now not run on
                w["gpu_models"] = [draw(st.sampled_from(DRIFT_MODELS))]
            workloads.append(w)
    for i in range(draw(st.integers(0, 3))):
        w = {
            "id": f"w{i}",
            "team": draw(st.sampled_from(teams)),
            "tier": draw(st.sampled_from(tiers)),
            "queued_since": f"2026-11-29T{draw(st.integers(0, 11)):02d}:00:00Z",
        }
        if draw(st.booleans()):
            w.update(gpus=draw(st.integers(1, 2)), topology=draw(st.sampled_from(["any", "nvlink"])))
        else:
            w["gpu_milli"] = draw(st.sampled_from([250, 500]))
        if draw(st.integers(0, 2)) == 0:
            w["gpu_models"] = [draw(st.sampled_from(DRIFT_MODELS))]
        workloads.append(w)
    rules: list[dict[str, Any]] = []
    if draw(st.booleans()):
        rules.append({"kind": "no-shared-gpu-across-teams"})
    if draw(st.booleans()):
        rules.append({"kind": "tiers-no-share", "tiers": ["latency-sensitive", "background"]})
    if draw(st.booleans()) and any(n["pool"] == "p1" for n in nodes):
        rules.append({"kind": "team-exclusive", "team": "a", "pool": "p1"})
    quotas = [
        {"team": "b", "gpus": draw(st.sampled_from([0, 0.5, 1])), "borrow": draw(st.booleans())},
        {"team": "c", "gpus": draw(st.sampled_from([0.25, 1])), "gpu_model": "H100-94GB"},
    ]
    policy = {
        "teams": teams,
        "isolation": rules,
        "quotas": draw(st.sampled_from([quotas, quotas[:1], []])),
        "disruption": {
            "max_moves_per_round": draw(st.integers(0, 2)),
            "max_preemptions_per_round": draw(st.integers(0, 2)),
        },
    }
    return {"cluster": {"nodes": nodes}, "workloads": workloads, "policy": policy}


def queued_job(job_id: str, team: str | None = "ml", solver: str = "cpsat", **fields: Any) -> JobRecord:
    """A queued plan job as the API stores it (2 nodes, 3 workloads, 1 s, first attempt); ``fields``
    replace any of those."""
    job = JobRecord(
        id=job_id,
        status=JobStatus.QUEUED,
        kind="plan",
        team=team,
        solver=solver,
        time_limit_s=1.0,
        nodes=2,
        workloads=3,
        submitted_by="abc",
        created_at=now(),
        started_at=None,
        finished_at=None,
        attempts=1,
        plan_status=None,
        outcome=None,
        error=None,
    )
    return job.model_copy(update=fields)
