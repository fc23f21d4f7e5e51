"""The no-purchase step's input: whether the policy forbids a change of the fleet (a MIG re-partition,
a sharing mode) that may serve demand, and the input that re-plans with the fleet plan held and those
changes allowed.
"""

from __future__ import annotations

from collections import defaultdict

from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.policy import DisruptionBudget
from gpuplan.models.workload import GpuRef, Placement
from gpuplan.planner.capacity.demand import Key
from gpuplan.planner.pipeline.layouts import cluster_after


def held_input(
    inp: PlanningInput, plan: Plan, catalog: HardwareCatalog
) -> tuple[PlanningInput, dict[Key, Key]]:
    """``inp`` with the plan's placements running and held (no moves), its MIG layouts in place and
    re-partitions allowed; replicas are renumbered placed-first, with the map back to the original keys.
    """
    placed: dict[str, dict[int, Placement]] = defaultdict(dict)
    for a in plan.assignments:
        refs = tuple(GpuRef(**g.model_dump()) for g in a.gpus)
        placed[a.workload][a.replica] = Placement(node=a.node, gpus=refs, alternative=a.alternative)
    workloads = []
    back: dict[Key, Key] = {}
    for w in inp.workloads:
        mine = placed.get(w.id, {})
        order = sorted(mine) + [r for r in range(w.replicas) if r not in mine]
        back.update({(w.id, i): (w.id, r) for i, r in enumerate(order)})
        workloads.append(w.model_copy(update={"running_on": tuple(mine[r] for r in sorted(mine))}))
    policy = inp.policy.model_copy(
        update={
            "mig": inp.policy.mig.model_copy(update={"allow_create": True, "allow_repartition": True}),
            "sharing": inp.policy.sharing.model_copy(update={"allow_change": True}),
            "disruption": DisruptionBudget(),
        }
    )
    # A new input, not a model_copy: that would carry over the cached ``workload_by_id`` of ``inp``.
    held = PlanningInput.model_validate(
        {
            "cluster": cluster_after(inp.cluster, plan),
            "workloads": tuple(workloads),
            "policy": policy,
        },
        context={"catalog": catalog},
    )
    return held, back


def _has_mig_gpus(inp: PlanningInput) -> bool:
    return any(g.mig is not None for n in inp.cluster.nodes for g in n.gpus)


def repartitions_to_try(inp: PlanningInput) -> bool:
    """Whether the policy forbids a change of the fleet that may serve demand without a purchase: a MIG
    re-partition (the fleet has MIG GPUs) or a node's sharing mode (the fleet has nodes with a mode)."""
    mig = not inp.policy.mig.allow_repartition and _has_mig_gpus(inp)
    sharing = not inp.policy.sharing.allow_change and any(n.sharing is not None for n in inp.cluster.nodes)
    return mig or sharing
