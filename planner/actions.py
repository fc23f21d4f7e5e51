"""The steps from the current state to a plan: MIG instance changes, starts, migrations, preemptions."""

from __future__ import annotations

from models.cluster import Cluster
from models.plan import Action, Assignment, GpuUse, MigLayout
from models.problem import PlanningInput


def _where(node: str, gpus: tuple[GpuUse, ...]) -> str:
    parts = []
    for g in gpus:
        if g.mig_profile is not None:
            parts.append(f"{g.index}/{g.mig_profile}@{g.mig_start}")
        elif g.milli is not None:
            parts.append(f"{g.index}={g.milli}")
        else:
            parts.append(str(g.index))
    return f"{node}:{','.join(parts)}" if parts else node


def mig_actions(cluster: Cluster, layouts: tuple[MigLayout, ...]) -> list[Action]:
    """Destroy then create MIG instances so that each GPU reaches its target layout."""
    destroy: list[Action] = []
    create: list[Action] = []
    for lay in layouts:
        gpu = cluster.node_by_name[lay.node].gpu_by_index[lay.gpu]
        current = {(i.profile, i.start) for i in (gpu.mig.instances if gpu.mig else ())}
        target = {(i.profile, i.start) for i in lay.instances}
        for prof, start in sorted(current - target, key=lambda x: x[1]):
            destroy.append(Action(kind="destroy-mig", node=lay.node, gpu=lay.gpu, detail=f"{prof}@{start}"))
        for prof, start in sorted(target - current, key=lambda x: x[1]):
            create.append(Action(kind="create-mig", node=lay.node, gpu=lay.gpu, detail=f"{prof}@{start}"))
    return destroy + create


def plan_actions(
    inp: PlanningInput, assignments: tuple[Assignment, ...], layouts: tuple[MigLayout, ...]
) -> tuple[Action, ...]:
    """Preemptions and migrations off, then MIG changes, then starts (nothing over-committed between)."""
    target = {(a.workload, a.replica): a for a in assignments}
    stops: list[Action] = []
    starts: list[Action] = []
    for w in inp.workloads:
        for r, place in enumerate(w.running_on):
            now = _where(place.node, tuple(GpuUse(**g.model_dump()) for g in place.gpus))
            a = target.get((w.id, r))
            if a is None:
                stops.append(Action(kind="preempt", workload=w.id, replica=r, from_=now))
            elif _where(a.node, a.gpus) != now:
                stops.append(
                    Action(kind="migrate", workload=w.id, replica=r, from_=now, to=_where(a.node, a.gpus))
                )
    running = {(w.id, r) for w in inp.workloads for r in range(len(w.running_on))}
    for a in assignments:
        if (a.workload, a.replica) not in running:
            starts.append(
                Action(kind="start", workload=a.workload, replica=a.replica, to=_where(a.node, a.gpus))
            )
    return tuple(stops + mig_actions(inp.cluster, layouts) + starts)
