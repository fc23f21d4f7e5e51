"""Small builders for clusters, workloads and plans used by the tests."""

from __future__ import annotations

from typing import Any

from gpuplan.models import (
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


def node(name: str, **fields: Any) -> Node:
    """A node with generous CPU and memory unless given (``topology=…`` expands a reference server)."""
    data: dict[str, Any] = {"name": name, "cpu_milli": 256_000, "memory_mib": 2_097_152, **fields}
    return Node.model_validate(data)


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


def plan(
    assignments: list[Assignment] | tuple[Assignment, ...],
    unplaced: list[Unplaced] | tuple[Unplaced, ...] = (),
    layouts: list[MigLayout] | tuple[MigLayout, ...] = (),
) -> Plan:
    """A feasible plan from its parts."""
    return Plan(
        status=PlanStatus.FEASIBLE,
        solver=SolverReport(name="test"),
        assignments=tuple(assignments),
        unplaced=tuple(unplaced),
        mig_layouts=tuple(layouts),
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
