"""Rules 4 to 7, 14 and 15: the per-GPU rules of :mod:`gpuplan.models.rules.gpu` (exclusivity, milli
capacity, MIG use, sharing mode and replicas, GPU memory) in the validator's words, the GPU models a
shape allows, and each node's CPU and memory.
"""

from __future__ import annotations

from collections import Counter

from gpuplan.models.cluster import describe_sharing
from gpuplan.models.plan import GpuUse
from gpuplan.models.rules.gpu import (
    GPU_MEMORY,
    GPU_OVERCOMMIT,
    MIG_LAYOUT,
    MIG_MIXED,
    MIG_PROFILE,
    MIG_SHARED,
    MIG_START,
    SHARING_MODE,
    SHARING_REPLICAS,
    WHOLE_EXCLUSIVE,
    Breach,
    GpuState,
    GpuUser,
    gpu_breaches,
)
from gpuplan.models.workload import describe_use
from gpuplan.planner.validation.context import CheckContext, GpuKey, Placed
from gpuplan.planner.validation.report import gpu_subject

#: The per-GPU breaches reported after the use rules: sharing mode, then GPU memory.
_BREACH_FAMILY = {SHARING_MODE: "sharing", SHARING_REPLICAS: "sharing", GPU_MEMORY: "memory"}


def check_gpus(ctx: CheckContext) -> None:
    """Rules 4, 5, 14 and 15 (:mod:`gpuplan.models.rules.gpu`): per-GPU exclusivity, milli capacity,
    MIG/non-MIG mixing, MIG instance use, the sharing mode the plan leaves the node in and its
    time-sliced replicas, GPU memory. Reported family by family: use, then sharing, then memory."""
    for p in ctx.placed:
        for use, _ in p.uses:
            ctx.loads.setdefault((p.node.name, use.index), []).append((p, use))
    memory = ctx.checks("gpu-memory")
    changed = {m.node: m.sharing for m in ctx.plan.sharing}
    found: dict[str, list[tuple[GpuKey, Breach]]] = {"use": [], "sharing": [], "memory": []}
    for key, entries in ctx.loads.items():
        node = entries[0][0].node
        gpu = node.gpu_by_index[key[1]]
        layout = ctx.effective_layout(key, gpu)
        state = GpuState(
            spec=ctx.spec(gpu),
            mig=None if layout is None else frozenset((i.profile, i.start) for i in layout),
            sharing=changed.get(node.name, node.sharing),
        )
        users = [GpuUser(u, gpu_memory_ask(p)) for p, u in entries]
        for b in gpu_breaches(users, state):
            found[_BREACH_FAMILY.get(b.rule, "use")].append((key, b))
    for group in ("use", "sharing", "memory"):
        if group == "memory" and not memory:
            continue
        for key, b in found[group]:
            _report_breach(ctx, key, b, ctx.loads[key])


def gpu_memory_ask(p: Placed) -> int:
    """The GPU memory (MiB) the replica asks on each GPU it uses: its shape's, else the plan's."""
    return p.shape.gpu_memory_mib if p.shape is not None else p.assignment.gpu_memory_mib


def _report_breach(ctx: CheckContext, key: GpuKey, b: Breach, entries: list[tuple[Placed, GpuUse]]) -> None:
    """One per-GPU breach as a violation, in the validator's words."""
    node, index = key
    subject = gpu_subject(node, index)
    spec = ctx.spec(entries[0][0].node.gpu_by_index[index])
    who = [entries[i] for i in b.users]
    p, u = who[0]
    label = f"{u.mig_profile}@{u.mig_start}"
    if b.rule == WHOLE_EXCLUSIVE:
        first = next(q for q, v in who if v.mig_profile is None and v.milli is None)
        users = ", ".join(sorted({q.subject for q, _ in entries}))
        text = f"The GPU is given whole to {first.subject} but has {len(entries)} uses ({users})."
    elif b.rule == GPU_OVERCOMMIT:
        text = f"Fractional uses add up to {b.amount} milli-GPU, more than {b.limit}."
    elif b.rule == MIG_MIXED:
        text = (
            "The GPU mixes MIG instances with whole or fractional use."
            if any(v.mig_profile is not None for _, v in entries)
            else "The GPU is in MIG mode but is given whole or as a fraction."
        )
    elif b.rule == MIG_PROFILE:
        subject, text = (
            p.subject,
            (
                f"The replica uses MIG profile '{u.mig_profile}' on {gpu_subject(node, index)}, a "
                f"{spec.name}, which does not offer it."
            ),
        )
    elif b.rule == MIG_START:
        starts = sorted(spec.profile_map[u.mig_profile or ""].starts)
        subject, text = (
            p.subject,
            (
                f"The replica uses MIG {label} on {gpu_subject(node, index)}, but '{u.mig_profile}' "
                f"cannot start at memory slice {u.mig_start} on {spec.name} (valid starts: {starts})."
            ),
        )
    elif b.rule == MIG_LAYOUT:
        where = (
            "which has MIG disabled in both the plan and the cluster."
            if ctx.effective_layout(key, entries[0][0].node.gpu_by_index[index]) is None
            else "which is not an instance of that GPU's layout."
        )
        subject, text = p.subject, f"The replica uses MIG {label} on {gpu_subject(node, index)}, {where}"
    elif b.rule == MIG_SHARED:
        users = ", ".join(sorted(q.subject for q, _ in who))
        text = f"MIG instance {u.mig_profile}@{u.mig_start or 0} serves {len(who)} replicas ({users})."
    elif b.rule == SHARING_MODE:
        mode = {m.node: m.sharing for m in ctx.plan.sharing}.get(node, p.node.sharing)
        assert mode is not None
        text = (
            f"{p.subject} uses {describe_use(u)} of node '{node}', whose sharing mode is "
            f"{describe_sharing(mode)}."
        )
    elif b.rule == SHARING_REPLICAS:
        text = (
            f"GPU {index} of node '{node}' holds {b.amount} fractions; time-slicing offers it as "
            f"{b.limit} replicas."
        )
    elif u.milli is not None and u.mig_profile is None:
        users = ", ".join(f"{q.subject} {gpu_memory_ask(q)} MiB" for q, _ in who)
        text = (
            f"Fractions on node '{node}' GPU {index} ({spec.name}) hold {b.amount} MiB of GPU memory, "
            f"more than its {b.limit} MiB ({users})."
        )
    else:
        text = (
            f"Workload '{p.workload.id}' replica {p.assignment.replica} asks for {b.amount} MiB of "
            f"GPU memory but {describe_use(u)} of node '{node}' ({spec.name}) has {b.limit} MiB."
        )
    ctx.add(b.rule, subject, text)


def check_gpu_models(ctx: CheckContext) -> None:
    """Rule 7: every GPU used is of a model the chosen shape allows (a running replica that stays where
    it runs keeps its GPUs: kept, :meth:`CheckContext.only_kept`)."""
    for p in ctx.placed:
        if p.shape is None or not p.shape.gpu_models or not p.uses:
            continue
        allowed = {ctx.canonical(m) for m in p.shape.gpu_models}
        wrong = sorted(
            {(u.index, ctx.canonical(g.model)) for u, g in p.uses if ctx.canonical(g.model) not in allowed}
        )
        if wrong:
            used = ", ".join(f"GPU {i} ({m})" for i, m in wrong)
            ctx.add(
                "gpu-model",
                p.subject,
                f"The replica uses {used} on node '{p.node.name}' "
                f"but allows only {', '.join(sorted(allowed))}.",
                kept=ctx.only_kept([p]),
            )


def check_node_capacity(ctx: CheckContext) -> None:
    """Rule 6: CPU and memory reserved on a node stay within its capacity."""
    cpu: Counter[str] = Counter()
    memory: Counter[str] = Counter()
    for p in ctx.placed:
        cpu[p.node.name] += p.assignment.cpu_milli
        memory[p.node.name] += p.assignment.memory_mib
    for node in ctx.inp.cluster.nodes:
        if cpu[node.name] > node.cpu_milli:
            ctx.add(
                "cpu",
                f"node {node.name}",
                f"Assignments reserve {cpu[node.name]} milli-CPU on a node with {node.cpu_milli}.",
            )
        if memory[node.name] > node.memory_mib:
            ctx.add(
                "memory",
                f"node {node.name}",
                f"Assignments reserve {memory[node.name]} MiB on a node with {node.memory_mib} MiB.",
            )
