"""Rules 1 to 3: the plan names existing workloads, replicas, nodes and GPUs, lists every replica once,
gives each assignment exactly its chosen shape, and starts each new placement by its action.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

from gpuplan.models.cluster import Gpu
from gpuplan.models.plan import START, GpuUse
from gpuplan.models.workload import Shape, describe_shape, describe_uses, shape_fits, where
from gpuplan.planner.validation.context import CheckContext, Placed
from gpuplan.planner.validation.report import MISSING_NAMED, replica_subject


def check_references(ctx: CheckContext) -> None:
    """Rule 1: assignments and waits name existing workloads, replicas, nodes, GPUs, shapes."""
    workloads = ctx.inp.workload_by_id
    nodes = ctx.inp.cluster.node_by_name
    models = {g.model for n in ctx.inp.cluster.nodes for g in n.gpus}
    ctx.unknown_models = {m for m in models if not ctx.catalog.has_model(m)}
    for a in ctx.plan.assignments:
        subject = replica_subject(a.workload, a.replica)
        w = workloads.get(a.workload)
        if w is None:
            ctx.add(
                "unknown-ref",
                subject,
                f"The plan places workload '{a.workload}', which is not in the input.",
            )
            continue
        if a.replica >= w.replicas:
            ctx.add(
                "unknown-ref",
                subject,
                f"Workload '{w.id}' has {w.replicas} replica(s), so replica {a.replica} does not exist.",
            )
            continue
        node = nodes.get(a.node)
        if node is None:
            ctx.add(
                "unknown-ref",
                subject,
                f"The replica is placed on node '{a.node}', which is not in the cluster.",
            )
            continue
        shape: Shape | None = None
        if a.alternative < len(w.shapes):
            shape = w.shapes[a.alternative]
        elif "shapes" not in ctx.skip:  # only the demand knows how many alternatives there are
            ctx.add(
                "unknown-ref",
                subject,
                f"The replica uses alternative {a.alternative} but workload '{w.id}' has only "
                f"{len(w.shapes)} shape(s).",
            )
        uses: list[tuple[GpuUse, Gpu]] = []
        for u in a.gpus:
            gpu = node.gpu_by_index.get(u.index)
            if gpu is None:
                ctx.add(
                    "unknown-ref",
                    subject,
                    f"The replica uses GPU {u.index} of node '{node.name}', which has no such GPU.",
                )
            elif gpu.model in ctx.unknown_models:
                ctx.add(
                    "unknown-ref",
                    subject,
                    f"GPU {u.index} of node '{node.name}' is a '{gpu.model}', "
                    "which the hardware catalog does not know.",
                )
            else:
                uses.append((u, gpu))
        ctx.placed.append(Placed(a, w, node, shape, tuple(uses)))
    for wait in ctx.plan.unplaced:
        subject = replica_subject(wait.workload, wait.replica)
        w = workloads.get(wait.workload)
        if w is None:
            ctx.add(
                "unknown-ref",
                subject,
                f"The plan leaves workload '{wait.workload}' waiting, but it is not in the input.",
            )
        elif wait.replica >= w.replicas:
            ctx.add(
                "unknown-ref",
                subject,
                f"Workload '{w.id}' has {w.replicas} replica(s), "
                f"so waiting replica {wait.replica} does not exist.",
            )


def check_replicas(ctx: CheckContext) -> None:
    """Rule 2: every replica is placed or waits, exactly once (in steps proportional to the
    replicas the plan lists, however many the workload claims)."""
    placed = Counter((a.workload, a.replica) for a in ctx.plan.assignments)
    waiting = Counter((u.workload, u.replica) for u in ctx.plan.unplaced)
    listed: defaultdict[str, set[int]] = defaultdict(set)
    for wid, r in itertools.chain(placed, waiting):
        listed[wid].add(r)
    for w in ctx.inp.workloads:
        seen = {r for r in listed[w.id] if r < w.replicas}
        for r in sorted(seen):
            n_placed, n_waiting = placed[(w.id, r)], waiting[(w.id, r)]
            if n_placed + n_waiting > 1:
                ctx.add(
                    "replica-duplicate",
                    replica_subject(w.id, r),
                    f"Replica {r} of workload '{w.id}' appears {n_placed} time(s) in assignments and "
                    f"{n_waiting} time(s) in unplaced; it must appear exactly once.",
                )
        missing = w.replicas - len(seen)
        named = 0
        r = 0
        while named < min(missing, MISSING_NAMED):
            if r not in seen:
                ctx.add(
                    "replica-missing",
                    replica_subject(w.id, r),
                    f"Replica {r} of workload '{w.id}' is neither placed nor listed as unplaced.",
                )
                named += 1
            r += 1
        if missing > named:
            ctx.add(
                "replica-missing",
                f"workload {w.id}",
                f"{missing - named} more of the {w.replicas} replicas of workload '{w.id}' are "
                "neither placed nor listed as unplaced.",
            )


def check_shapes(ctx: CheckContext) -> None:
    """Rule 3: GPU entries, CPU and memory of an assignment match its chosen shape."""
    for p in ctx.placed:
        if p.shape is None:
            continue
        a = p.assignment
        if not shape_fits(p.shape, a.gpus):
            ctx.add(
                "shape-mismatch",
                p.subject,
                f"Alternative {a.alternative} asks for {describe_shape(p.shape)} but the plan gives "
                f"{describe_uses(a.gpus)}.",
            )
        if a.gpu_memory_mib != p.shape.gpu_memory_mib:
            ctx.add(
                "shape-mismatch",
                p.subject,
                f"The assignment holds {a.gpu_memory_mib} MiB of GPU memory per GPU but alternative "
                f"{a.alternative} asks for {p.shape.gpu_memory_mib} MiB.",
            )
        if a.cpu_milli != p.shape.cpu_milli or a.memory_mib != p.shape.memory_mib:
            ctx.add(
                "shape-mismatch",
                p.subject,
                f"The assignment reserves {a.cpu_milli} milli-CPU and {a.memory_mib} MiB but alternative "
                f"{a.alternative} asks for {p.shape.cpu_milli} milli-CPU and {p.shape.memory_mib} MiB.",
            )


def check_starts(ctx: CheckContext) -> None:
    """Rule 3b: every replica the plan places that does not run now has its ``start`` action (to the
    place it is given, when the action names one): a placement is applied through its action, like a
    move."""
    starts = {(a.workload, a.replica): a.to for a in ctx.plan.actions if a.kind == START}
    for p in ctx.placed:
        a = p.assignment
        if a.replica < len(p.workload.running_on):
            continue
        key, here = (a.workload, a.replica), where(a.node, a.gpus)
        if key not in starts:
            ctx.add(
                "start-unscheduled",
                p.subject,
                f"The plan places {p.subject} on {where(a.node, a.gpus, 'sentence')} but has no start "
                "action for it.",
            )
        elif starts[key] not in (None, here):
            ctx.add(
                "start-unscheduled",
                p.subject,
                f"The plan places {p.subject} on {here} but its start action starts it on {starts[key]}.",
            )
