"""Rules 5 and 12: MIG layouts valid for their GPU model, MIG mode and its changes, the MIG changes the
policy allows, and the actions that apply them.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuplan.models.cluster import MigInstance, mig_layout_problems
from gpuplan.models.hardware import GpuModelSpec
from gpuplan.models.plan import CREATE, DESTROY, SET_MIG_MODE
from gpuplan.models.workload import describe_uses
from gpuplan.planner.validation.context import CheckContext, GpuKey
from gpuplan.planner.validation.report import gpu_subject, replica_subject


def check_mig_mode_changes(ctx: CheckContext) -> None:
    """Rule 5c: a plan changes the MIG mode of existing MIG-capable GPUs only, once each, only when the
    policy allows re-partitioning (``mig.allow_repartition``), and only of a GPU the plan drains: every
    replica running on it is moved or preempted (those count in the disruption budget as moves and
    preemptions). Turning MIG on needs ``mig.allow_create`` for the instances it then creates (rule
    12)."""
    nodes = ctx.inp.cluster.node_by_name
    changed: dict[GpuKey, bool] = {}
    for m in ctx.plan.mig_modes:
        key = (m.node, m.gpu)
        subject = gpu_subject(*key)
        node = nodes.get(m.node)
        gpu = None if node is None else node.gpu_by_index.get(m.gpu)
        if gpu is None or gpu.model in ctx.unknown_models:
            ctx.add(
                "unknown-ref",
                subject,
                f"The plan changes the MIG mode of GPU {m.gpu} of node '{m.node}', which does not exist.",
            )
            continue
        if key in ctx.modes:
            ctx.add("mig-mode-change", subject, "The plan changes the MIG mode of this GPU more than once.")
            continue
        ctx.modes[key] = m.enabled
        if m.enabled == (gpu.mig is not None):
            continue
        what = f"The plan turns MIG mode {'on' if m.enabled else 'off'} on GPU {m.gpu} of node '{m.node}'"
        if not ctx.spec(gpu).mig_capable:
            ctx.add("gpu-model", subject, f"{what}, a {gpu.model}, which does not support MIG.")
            continue
        changed[key] = m.enabled
        if not ctx.inp.policy.mig.allow_repartition:
            ctx.add(
                "mig-mode-change",
                subject,
                f"{what}, but the policy does not allow re-partitioning (mig.allow_repartition is false).",
            )
    if not changed:
        return
    target = {(a.workload, a.replica): a for a in ctx.plan.assignments}
    for w in ctx.inp.workloads:
        for r, place in enumerate(w.running_on):
            held = [g for g in place.gpus if (place.node, g.index) in changed]
            a = target.get((w.id, r))
            if held and a is not None and w.stays(r, a.node, a.gpus):
                ctx.add(
                    "mig-mode-change",
                    gpu_subject(place.node, held[0].index),
                    f"The plan changes the MIG mode of GPU {held[0].index} of node '{place.node}', but "
                    f"{replica_subject(w.id, r)} keeps running on {describe_uses(held)} there: the GPU "
                    "must be drained first.",
                )


def check_layouts(ctx: CheckContext) -> None:
    """Rule 5: the plan's MIG layouts name existing MIG-capable GPUs and are valid for their model."""
    nodes = ctx.inp.cluster.node_by_name
    for lay in ctx.plan.mig_layouts:
        key = (lay.node, lay.gpu)
        subject = gpu_subject(*key)
        node = nodes.get(lay.node)
        gpu = None if node is None else node.gpu_by_index.get(lay.gpu)
        if gpu is None or gpu.model in ctx.unknown_models:
            ctx.add(
                "unknown-ref",
                subject,
                f"The plan sets a MIG layout for GPU {lay.gpu} of node '{lay.node}', which does not exist.",
            )
            continue
        if key in ctx.layouts:
            ctx.add(
                "mig-layout-duplicate",
                subject,
                "The plan sets the MIG layout of this GPU more than once.",
            )
            continue
        spec = ctx.spec(gpu)
        if not spec.mig_capable:
            ctx.add(
                "gpu-model",
                subject,
                f"The plan sets a MIG layout on a {spec.name}, which does not support MIG.",
            )
            continue
        ctx.layouts[key] = lay.instances
        _check_layout(ctx, subject, spec, lay.instances)


def _check_layout(
    ctx: CheckContext, subject: str, spec: GpuModelSpec, instances: tuple[MigInstance, ...]
) -> None:
    """Valid starts, inside the GPU, no shared memory slice, compute and instance limits."""
    for rule, message in mig_layout_problems(spec, instances):
        ctx.add(rule, subject, f"The MIG layout is invalid: {message}")


def check_mig_mode(ctx: CheckContext) -> None:
    """Rule 5b: no MIG layout on a GPU whose MIG mode is off after the plan (off in the cluster and
    not turned on by the plan's ``mig_modes``, or turned off by them)."""
    nodes = ctx.inp.cluster.node_by_name
    for node, index in ctx.layouts:
        gpu = nodes[node].gpu_by_index[index]
        if ctx.mig_on((node, index), gpu):
            continue
        why = (
            "which the plan turns MIG mode off on"
            if (node, index) in ctx.modes
            else "whose MIG mode is off in the cluster and which the plan does not turn on"
        )
        ctx.add(
            "mig-mode",
            gpu_subject(node, index),
            f"The plan sets a MIG layout on GPU {index} of node '{node}', {why}.",
        )


def check_mig_policy(ctx: CheckContext) -> None:
    """Rule 12: MIG changes the policy allows: an instance the cluster lacks only with
    ``mig.allow_create``, an existing instance removed only with ``mig.allow_repartition``."""
    mig = ctx.inp.policy.mig
    if mig.allow_create and mig.allow_repartition:
        return
    nodes = ctx.inp.cluster.node_by_name
    for (node, index), layout in ctx.layouts.items():
        gpu = nodes[node].gpu_by_index[index]
        current = {(i.profile, i.start) for i in (gpu.mig.instances if gpu.mig else ())}
        target = {(i.profile, i.start) for i in layout}
        created, destroyed = target - current, current - target
        where = f"GPU {index} of node '{node}'"
        if created and not mig.allow_create:
            ctx.add(
                "mig-create-forbidden",
                gpu_subject(node, index),
                f"The plan creates MIG instance(s) {_instances(created)} on {where}, but the policy "
                "does not allow creating instances (mig.allow_create is false).",
            )
        if destroyed and not mig.allow_repartition:
            instead = f" to make {_instances(created)}" if created else ""
            ctx.add(
                "mig-repartition-forbidden",
                gpu_subject(node, index),
                f"The plan destroys MIG instance(s) {_instances(destroyed)} of {where}{instead}, but "
                "the policy does not allow re-partitioning (mig.allow_repartition is false).",
            )


def check_mig_actions(ctx: CheckContext) -> None:
    """Rule 12b: every MIG instance the plan's layouts create or destroy has its ``create-mig`` or
    ``destroy-mig`` action (a layout change is applied through its actions, like a move)."""
    nodes = ctx.inp.cluster.node_by_name
    done = {(a.kind, a.node, a.gpu, a.detail) for a in ctx.plan.actions if a.kind in (CREATE, DESTROY)}
    for (node, index), layout in ctx.layouts.items():
        gpu = nodes[node].gpu_by_index[index]
        current = {(i.profile, i.start) for i in (gpu.mig.instances if gpu.mig else ())}
        target = {(i.profile, i.start) for i in layout}
        missing = [
            f"{kind} {prof}@{start}"
            for kind, pairs in ((DESTROY, current - target), (CREATE, target - current))
            for prof, start in sorted(pairs, key=lambda x: (x[1], x[0]))
            if (kind, node, index, f"{prof}@{start}") not in done
        ]
        if missing:
            ctx.add(
                "mig-unscheduled",
                gpu_subject(node, index),
                f"The plan changes the MIG layout of GPU {index} of node '{node}' but has no action "
                f"for {', '.join(missing)}.",
            )


def check_mig_mode_actions(ctx: CheckContext) -> None:
    """Rule 12c: every MIG mode change has its ``set-mig-mode`` action."""
    nodes = ctx.inp.cluster.node_by_name
    done = {(a.node, a.gpu, a.to) for a in ctx.plan.actions if a.kind == SET_MIG_MODE}
    for (node, index), enabled in ctx.modes.items():
        if enabled == (nodes[node].gpu_by_index[index].mig is not None):
            continue
        if (node, index, "on" if enabled else "off") not in done:
            ctx.add(
                "mig-unscheduled",
                gpu_subject(node, index),
                f"The plan turns MIG mode {'on' if enabled else 'off'} on GPU {index} of node '{node}' "
                "but has no set-mig-mode action for it.",
            )


def _instances(pairs: Iterable[tuple[str, int]]) -> str:
    """``1g.10gb@0, 1g.10gb@2``, by start."""
    return ", ".join(f"{p}@{s}" for p, s in sorted(pairs, key=lambda x: (x[1], x[0])))
