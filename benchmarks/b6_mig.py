"""B6: MIG placement on the Alibaba openb trace, gpuplan's CP-SAT rounds against MIG-aware FGD and first-fit.

Every GPU of the openb GPU nodes becomes an 80 GB MIG-capable GPU (nodes alternate A100-SXM4-80GB and
H100-80GB), MIG mode on. Each sharing pod of the ``gpushare100`` list asks for the smallest MIG profile
whose *compute* share (compute slices / 7) covers its ``gpu_milli``; CPU-only pods stay CPU-only; CPU
and memory requests are kept. The arrival order of a seed is B1's (shuffled, inflated), cut where the
MIG demand passes the last reported percentage of capacity. CP-SAT plans rounds of 1% of the GPU
capacity (in compute slices) with the placed work fixed; FGD (target mix of the MIG requests) and
first-fit place the same sequence one pod at a time and drop what does not fit.

Settings: ``keep`` (standard layouts, new instances only in free slices), ``repartition`` (same start,
CP-SAT may also destroy idle instances; the greedy solvers never destroy) and ``empty`` (MIG on, no
instances; everything is created on demand).

Run ``python -m benchmarks.b6_mig --help``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

import pandas as pd

from benchmarks._openb import TRACE_DIR, load_nodes, load_pods
from benchmarks.b1_online import _seeds, arrivals
from gpuplan.models import Cluster, Node, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.hardware import GpuModelSpec, HardwareCatalog
from gpuplan.models.policy import DisruptionBudget, MigPolicy, Tier
from gpuplan.planner.compile import compile_node, compile_problem
from gpuplan.solvers.cpsat import CpSat
from gpuplan.solvers.greedy import FgdScorer, FirstFitScorer
from gpuplan.solvers.placement import Placer, Scorer, target_mix
from gpuplan.solvers.problem import NodeSpec, PlacementProblem, Request, Running

log = logging.getLogger("benchmarks.b6")

#: The two MIG-capable 80 GB models, alternating over the (sub-sampled) node list.
GPU_MODELS = ("A100-SXM4-80GB", "H100-80GB")

#: A MIG layout: (profile, start memory slice) per instance.
Layout = tuple[tuple[str, int], ...]

#: Standard per-node layouts in the style of NVIDIA mig-parted's ``config-default.yaml`` (one config per
#: node, every GPU of the node alike); the ``mixed`` start cycles the nodes through them in this order.
STANDARD_LAYOUTS: dict[str, Layout] = {
    "all-balanced": (("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)),
    "all-3g.40gb": (("3g.40gb", 0), ("3g.40gb", 4)),
    "all-4g.40gb": (("4g.40gb", 0),),
    "all-7g.80gb": (("7g.80gb", 0),),
}

#: Settings: (start layouts, CP-SAT may destroy idle instances).
SETTINGS: dict[str, tuple[str, bool]] = {
    "keep": ("mixed", False),
    "repartition": ("mixed", True),
    "empty": ("empty", False),
}

#: Profiles a sharing pod may be mapped to (media-extension and 1g.20gb variants are left out: the
#: smallest covering profile by compute is always one of these).
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")

#: Arrived percentages (of GPU capacity, in compute slices) at which results are reported.
REPORT_AT = (100, 130)

#: Round size, as a share of the GPU capacity in compute slices.
ROUND_STEP = 0.01

#: Trace whose pods are used.
TRACE = "gpushare100"

#: How a CP-SAT plan's MIG layouts are applied between rounds: ``plan`` verbatim (every instance the
#: plan lists is created, every existing one it omits destroyed); ``used`` only what placed pods need
#: (instances serving a pod are created, existing instances overlapping them destroyed, nothing else).
APPLY_MODES = ("plan", "used")


# --------------------------------------------------------------------------------------------- cluster


def node_layout(start: str, position: int) -> Layout | None:
    """Initial layout of every GPU of the node at ``position`` (None: no instance at all)."""
    if start == "empty":
        return ()
    if start == "mixed":
        names = list(STANDARD_LAYOUTS)
        return STANDARD_LAYOUTS[names[position % len(names)]]
    raise ValueError(f"unknown start '{start}' (choose mixed or empty)")


def subsample(nodes: Sequence[NodeSpec], count: int | None) -> list[NodeSpec]:
    """``count`` nodes evenly spread over the file order (all of them when ``count`` is None)."""
    if count is None or count >= len(nodes):
        return list(nodes)
    return [nodes[(i * len(nodes)) // count] for i in range(count)]


def mig_node(base: NodeSpec, model: str, layouts: Sequence[Layout], catalog: HardwareCatalog) -> NodeSpec:
    """``base`` with its GPUs replaced by MIG-enabled ``model`` GPUs holding ``layouts``, validated by
    :class:`models.Node` (every layout against the catalog) and compiled."""
    node = Node.model_validate(
        {
            "name": base.name,
            "cpu_milli": base.cpu_milli,
            "memory_mib": base.memory_mib,
            "gpus": [
                {
                    "index": g.index,
                    "model": model,
                    "mig": {"instances": [{"profile": p, "start": s} for p, s in layout]},
                }
                for g, layout in zip(base.gpus, layouts, strict=True)
            ],
        },
        context={"catalog": catalog},
    )
    return compile_node(node, catalog)


def build_cluster(count: int | None, start: str, catalog: HardwareCatalog) -> tuple[NodeSpec, ...]:
    """The (sub-sampled) openb GPU nodes as MIG nodes with the ``start`` layouts."""
    nodes = subsample(_base_nodes(), count)
    cluster = Cluster(
        nodes=tuple(
            Node.model_validate(
                {
                    "name": n.name,
                    "cpu_milli": n.cpu_milli,
                    "memory_mib": n.memory_mib,
                    "gpus": [
                        {
                            "index": g.index,
                            "model": GPU_MODELS[i % len(GPU_MODELS)],
                            "mig": {
                                "instances": [
                                    {"profile": p, "start": s} for p, s in node_layout(start, i) or ()
                                ]
                            },
                        }
                        for g in n.gpus
                    ],
                },
                context={"catalog": catalog},
            )
            for i, n in enumerate(nodes)
        )
    )
    return tuple(compile_node(n, catalog) for n in cluster.nodes)


@cache
def _base_nodes() -> tuple[NodeSpec, ...]:
    return load_nodes()


def capacity_slices(nodes: Sequence[NodeSpec], catalog: HardwareCatalog) -> int:
    """GPU capacity in compute slices."""
    return sum(catalog.model(g.model).compute_slices for n in nodes for g in n.gpus)


# ------------------------------------------------------------------------------------------------ pods


def profile_for(milli: int, spec: GpuModelSpec) -> str:
    """The smallest profile of :data:`PROFILES` whose compute share covers ``milli`` milli-GPU."""
    for name in PROFILES:
        if 1000 * spec.profile(name).compute_slices >= milli * spec.compute_slices:
            return name
    raise ValueError(f"no MIG profile covers {milli} milli-GPU")


@cache
def mig_pods(trace: str = TRACE) -> tuple[tuple[Request, ...], dict[str, Request]]:
    """The trace's pods as compiled by B1 (for the arrival order) and their MIG twins by pod name.

    A sharing pod becomes a request for :func:`profile_for`; whole-GPU pods ask for ``7g.80gb`` per GPU
    (only single-GPU ones occur in ``gpushare100``); CPU-only pods stay CPU-only.
    """
    catalog = default_catalog()
    specs = {
        catalog.model(m).profile_map.keys() == catalog.model(GPU_MODELS[0]).profile_map.keys()
        for m in GPU_MODELS
    }
    if specs != {True}:
        raise ValueError("the GPU models must offer the same MIG profiles")
    spec = catalog.model(GPU_MODELS[0])
    frame = pd.read_csv(TRACE_DIR / f"openb_pod_list_{trace}.csv", keep_default_na=False)
    workloads = []
    for row in frame.to_dict("records"):
        num, milli = int(row["num_gpu"]), int(row["gpu_milli"])
        fields: dict[str, object] = {
            "id": str(row["name"]),
            "cpu_milli": int(row["cpu_milli"]),
            "memory_mib": int(row["memory_mib"]),
        }
        if num == 1:
            fields["mig_profile"] = profile_for(min(milli, 1000), spec)
        elif num > 1:
            raise ValueError(f"pod {row['name']} asks for {num} GPUs; B6 maps single-GPU pods only")
        workloads.append(Workload.model_validate(fields))
    inp = PlanningInput(cluster=Cluster(nodes=()), workloads=tuple(workloads))
    twins = compile_problem(inp, catalog, datetime.now(UTC)).requests
    return load_pods(trace), {r.workload: r for r in twins}


def slices(r: Request, catalog: HardwareCatalog) -> int:
    """Compute slices a request asks for (0 for CPU-only pods)."""
    s = r.shapes[0]
    if s.kind != "mig" or s.mig_profile is None:
        return 0
    return catalog.model(GPU_MODELS[0]).profile(s.mig_profile).compute_slices


def mig_arrivals(
    seed: int, nodes: Sequence[NodeSpec], catalog: HardwareCatalog, until: float
) -> list[Request]:
    """B1's arrival order for ``seed`` (inflated on the trace's milli-GPU as in B1), as MIG requests
    with unique ids (``name~i``), cut after the pod whose MIG demand reaches ``until`` of capacity."""
    pods, twins = mig_pods()
    capacity_milli = 1000 * sum(len(n.gpus) for n in nodes)
    order, _ = arrivals(pods, capacity_milli, len(nodes), seed)
    limit = until * capacity_slices(nodes, catalog)
    out: list[Request] = []
    arrived = 0
    for i, pod in enumerate(order):
        req = replace(twins[pod.workload], workload=f"{pod.workload}~{i}")
        out.append(req)
        arrived += slices(req, catalog)
        if arrived >= limit:
            break
    return out


def rounds(order: Sequence[Request], capacity: int, catalog: HardwareCatalog) -> list[list[Request]]:
    """Split the arrival sequence into rounds of :data:`ROUND_STEP` of capacity (compute slices)."""
    out: list[list[Request]] = [[]]
    arrived = 0
    boundary = ROUND_STEP * capacity
    for pod in order:
        out[-1].append(pod)
        arrived += slices(pod, catalog)
        if arrived >= boundary:
            out.append([])
            while boundary <= arrived:
                boundary += ROUND_STEP * capacity
    return [r for r in out if r]


# ------------------------------------------------------------------------------------------ CP-SAT rounds


def bench_policy(repartition: bool) -> Policy:
    """Equal tier weights (packing only), nothing may move, new MIG instances allowed; idle instances
    may be destroyed when ``repartition``."""
    tiers = tuple(Tier(name=n, weight=1) for n in ("latency-sensitive", "standard", "background"))
    return Policy(
        tiers=tiers,
        disruption=DisruptionBudget(max_moves_per_round=0),
        mig=MigPolicy(allow_create=True, allow_repartition=repartition),
    )


@dataclass
class Curve:
    """Per round: arrived and placed compute slices, held memory slices; and instance counts."""

    arrived: list[int] = field(default_factory=list)
    placed: list[int] = field(default_factory=list)
    memory: list[int] = field(default_factory=list)
    created: int = 0
    destroyed: int = 0
    idle_created: int = 0


@dataclass(frozen=True)
class B6Run:
    """One (setting, seed): CP-SAT rounds and both greedy baselines on the same cluster and arrivals."""

    setting: str
    seed: int
    gpus: int
    capacity: int
    cpsat: Curve
    fgd: Curve
    first_fit: Curve
    round_wall_s: list[float]
    statuses: dict[str, int]
    pods: int
    until: int
    apply: str

    @property
    def report_at(self) -> tuple[int, ...]:
        """The reported percentages the run reached."""
        return tuple(k for k in REPORT_AT if k <= self.until)


def _layouts(nodes: Sequence[NodeSpec]) -> dict[tuple[str, int], Layout]:
    return {(n.name, g.index): tuple(sorted(g.mig or (), key=lambda x: x[1])) for n in nodes for g in n.gpus}


def _apply_layouts(
    nodes: Sequence[NodeSpec], new: Mapping[tuple[str, int], Layout], catalog: HardwareCatalog
) -> tuple[NodeSpec, ...]:
    """The nodes with the GPUs of ``new`` re-laid out (changed nodes go through :class:`models.Node`)."""
    out = []
    for n in nodes:
        lays = [new.get((n.name, g.index), g.mig or ()) for g in n.gpus]
        if all(tuple(lay) == tuple(g.mig or ()) for lay, g in zip(lays, n.gpus, strict=True)):
            out.append(n)
        else:
            out.append(mig_node(n, n.gpus[0].model, lays, catalog))
    return tuple(out)


def _overlaps(a: tuple[str, int], b: tuple[str, int], spec: GpuModelSpec) -> bool:
    """Whether two instances share a memory slice."""
    ea = a[1] + spec.profile(a[0]).size_at(a[1])
    eb = b[1] + spec.profile(b[0]).size_at(b[1])
    return a[1] < eb and b[1] < ea


def used_layout(before: Layout, plan: Layout, used: set[tuple[str, int]], spec: GpuModelSpec) -> Layout:
    """The layout an executor reaches doing only what placed pods need: the plan's instances that serve
    a pod, plus the previous instances that do not overlap them."""
    serving = [i for i in plan if i in used]
    kept = [i for i in before if i not in serving and not any(_overlaps(i, j, spec) for j in serving)]
    return tuple(sorted(serving + kept, key=lambda x: x[1]))


def _occupied_only(nodes: Sequence[NodeSpec], running: Sequence[Request]) -> tuple[NodeSpec, ...]:
    """The nodes with every idle MIG instance removed (what re-partitioning could free)."""
    used: dict[tuple[str, int], set[tuple[str, int]]] = {}
    for r in running:
        assert r.running is not None
        for u in r.running.gpus:
            if u.mig_profile is not None and u.mig_start is not None:
                used.setdefault((r.running.node, u.index), set()).add((u.mig_profile, u.mig_start))
    out = []
    for n in nodes:
        gpus = tuple(
            replace(g, mig=tuple(i for i in g.mig or () if i in used.get((n.name, g.index), set())))
            for g in n.gpus
        )
        out.append(replace(n, gpus=gpus))
    return tuple(out)


def _check(nodes: Sequence[NodeSpec], running: Iterable[Request]) -> None:
    """Every running pod's MIG instance is in the applied layout of its GPU, at most one pod each."""
    layouts = _layouts(nodes)
    seen: set[tuple[str, int, str, int]] = set()
    for r in running:
        assert r.running is not None
        for u in r.running.gpus:
            if u.mig_profile is None or u.mig_start is None:
                continue
            key = (r.running.node, u.index, u.mig_profile, u.mig_start)
            if (u.mig_profile, u.mig_start) not in layouts[(r.running.node, u.index)] or key in seen:
                raise RuntimeError(f"{r.workload} runs on MIG instance {key} missing from the layout")
            seen.add(key)


def _held(running: Sequence[Request], catalog: HardwareCatalog) -> tuple[int, int]:
    """(compute slices, memory slices) held by the running requests."""
    comp = mem = 0
    spec = catalog.model(GPU_MODELS[0])
    for r in running:
        assert r.running is not None
        for u in r.running.gpus:
            if u.mig_profile is not None and u.mig_start is not None:
                prof = spec.profile(u.mig_profile)
                comp += prof.compute_slices
                mem += prof.size_at(u.mig_start)
    return comp, mem


def cpsat_rounds(
    nodes: tuple[NodeSpec, ...],
    batches: Sequence[Sequence[Request]],
    catalog: HardwareCatalog,
    *,
    repartition: bool,
    time_limit: float,
    seed: int,
    apply: str = "plan",
) -> tuple[Curve, list[float], dict[str, int]]:
    """Plan each round with CP-SAT (placed work fixed), apply its MIG layouts (see :data:`APPLY_MODES`),
    and keep waiting what still fits somewhere (after dropping idle instances, when re-partitioning is
    allowed)."""
    spec = catalog.model(GPU_MODELS[0])
    policy = bench_policy(repartition)
    running: dict[tuple[str, int], Request] = {}
    waiting: list[Request] = []
    out = Curve()
    walls: list[float] = []
    statuses: dict[str, int] = {}
    arrived = 0
    for i, batch in enumerate(batches):
        arrived += sum(slices(p, catalog) for p in batch)
        queue = waiting + list(batch)
        requests = (*running.values(), *queue)
        problem = PlacementProblem(
            nodes=nodes,
            requests=requests,
            catalog=catalog,
            policy=policy,
            time_limit_s=time_limit,
            seed=seed,
        )
        t0 = time.perf_counter()
        result = CpSat().solve(problem)
        walls.append(time.perf_counter() - t0)
        statuses[result.status.value] = statuses.get(result.status.value, 0) + 1
        by_key = {r.key: r for r in requests}
        running = {}
        for a in result.assignments:
            req = by_key[(a.workload, a.replica)]
            running[req.key] = replace(
                req, running=Running(node=a.node, gpus=a.gpus, alternative=a.alternative)
            )
        before = _layouts(nodes)
        after = {
            (lay.node, lay.gpu): tuple((x.profile, x.start) for x in lay.instances)
            for lay in result.mig_layouts
        }
        in_use = {
            (r.running.node, u.index, u.mig_profile, u.mig_start)
            for r in running.values()
            if r.running is not None
            for u in r.running.gpus
        }
        if apply == "used":
            used: dict[tuple[str, int], set[tuple[str, int]]] = {}
            for node, gpu, prof, st in in_use:
                if prof is not None and st is not None:
                    used.setdefault((node, gpu), set()).add((prof, st))
            after = {k: used_layout(before[k], v, used.get(k, set()), spec) for k, v in after.items()}
        changed = {k: v for k, v in after.items() if tuple(sorted(v, key=lambda x: x[1])) != before[k]}
        for (node, gpu), lay in changed.items():
            old, new = set(before[(node, gpu)]), set(lay)
            out.created += len(new - old)
            out.destroyed += len(old - new)
            out.idle_created += sum((node, gpu, p, s) not in in_use for p, s in new - old)
        nodes = _apply_layouts(nodes, changed, catalog)
        _check(nodes, running.values())
        view = _occupied_only(nodes, list(running.values())) if repartition else nodes
        tracker = Placer(view, catalog, FirstFitScorer(), allow_create=True)
        for req in running.values():
            tracker.keep(req)
        if any(st.cpu < 0 or st.mem < 0 for st in tracker.cluster.states):
            raise RuntimeError(f"round {i + 1}: the plan over-commits a node's CPU or memory")
        waiting = [q for q in queue if q.key not in running and tracker.ranked(q, 1)]
        comp, mem = _held(list(running.values()), catalog)
        out.arrived.append(arrived)
        out.placed.append(comp)
        out.memory.append(mem)
        log.info(
            "seed %d round %d: arrived %d placed %d slices, waiting %d, +%d/-%d instances (%.1f s, %s)",
            seed, i + 1, arrived, comp, len(waiting), out.created, out.destroyed, walls[-1],
            result.status.value,
        )  # fmt: skip
    return out, walls, statuses


# ------------------------------------------------------------------------------------------- baselines


def greedy_curve(
    nodes: tuple[NodeSpec, ...],
    batches: Sequence[Sequence[Request]],
    catalog: HardwareCatalog,
    scorer: Scorer,
    rank: Sequence[int],
) -> Curve:
    """Place the sequence one pod at a time (a pod that fits nowhere is dropped); record at the end of
    every round. New instances only in free slices; nothing is ever destroyed."""
    placer = Placer(nodes, catalog, scorer, allow_create=True, rank=rank)
    out = Curve()
    spec = catalog.model(GPU_MODELS[0])
    arrived = comp = 0
    for batch in batches:
        for pod in batch:
            arrived += slices(pod, catalog)
            a = placer.place(pod)
            if a is not None:
                comp += sum(spec.profile(u.mig_profile).compute_slices for u in a.gpus if u.mig_profile)
        out.arrived.append(arrived)
        out.placed.append(comp)
        out.memory.append(placer.used_gpu_milli * spec.memory_slices // 1000)
    before = _layouts(nodes)
    for lay in placer.mig_layouts():
        new = {(x.profile, x.start) for x in lay.instances}
        out.created += len(new - set(before[(lay.node, lay.gpu)]))
    return out


def run(
    setting: str, seed: int, count: int | None, time_limit: float, until: int, apply: str = "plan"
) -> B6Run:
    """One setting and seed: FGD and first-fit, then CP-SAT rounds, on the same cluster and arrivals
    (simulated up to ``until`` % of capacity arrived, plus one round)."""
    start, repartition = SETTINGS[setting]
    catalog = default_catalog()
    nodes = build_cluster(count, start, catalog)
    capacity = capacity_slices(nodes, catalog)
    order = mig_arrivals(seed, nodes, catalog, until / 100 + ROUND_STEP)
    batches = rounds(order, capacity, catalog)
    pods, _ = mig_pods()
    _, rank = arrivals(pods, 1000 * sum(len(n.gpus) for n in nodes), len(nodes), seed)
    mix = target_mix(mig_pods()[1].values())
    fgd = greedy_curve(nodes, batches, catalog, FgdScorer(mix), rank)
    first = greedy_curve(nodes, batches, catalog, FirstFitScorer(), rank)
    ours, walls, statuses = cpsat_rounds(
        nodes, batches, catalog, repartition=repartition, time_limit=time_limit, seed=seed, apply=apply
    )
    gpus = sum(len(n.gpus) for n in nodes)
    return B6Run(setting, seed, gpus, capacity, ours, fgd, first, walls, statuses, len(order), until, apply)


# ------------------------------------------------------------------------------------------- reporting


def at(c: Curve, capacity: int, percent: int) -> tuple[float, float]:
    """(placed demand, memory-slice allocation) in % of capacity after the first round whose arrivals
    reach ``percent`` - 0.5 % (the last round if none does)."""
    i = next((i for i, a in enumerate(c.arrived) if 100 * a / capacity >= percent - 0.5), len(c.arrived) - 1)
    return 100 * c.placed[i] / capacity, 100 * c.memory[i] * 7 / (8 * capacity)


def per_run(runs: Sequence[B6Run]) -> pd.DataFrame:
    """One row per (setting, seed)."""
    rows = []
    for r in runs:
        row: dict[str, object] = {
            "setting": r.setting,
            "apply": r.apply,
            "seed": r.seed,
            "gpus": r.gpus,
            "pods": r.pods,
        }
        for k in r.report_at:
            for name, c in (("cpsat", r.cpsat), ("fgd", r.fgd), ("first_fit", r.first_fit)):
                placed, mem = at(c, r.capacity, k)
                row[f"{name}_{k}"] = round(placed, 2)
                row[f"{name}_mem_{k}"] = round(mem, 2)
        row["cpsat_created"] = r.cpsat.created
        row["cpsat_destroyed"] = r.cpsat.destroyed
        row["cpsat_idle_created"] = r.cpsat.idle_created
        row["fgd_created"] = r.fgd.created
        row["first_fit_created"] = r.first_fit.created
        row["rounds"] = len(r.round_wall_s)
        row["round_wall_median_s"] = round(statistics.median(r.round_wall_s), 2)
        row["round_wall_max_s"] = round(max(r.round_wall_s), 2)
        row["statuses"] = " ".join(f"{s}:{n}" for s, n in sorted(r.statuses.items()))
        rows.append(row)
    return pd.DataFrame(rows)


def summarise(runs: Sequence[B6Run]) -> pd.DataFrame:
    """Per setting: means over seeds, differences and ratios, round statistics and instance counts."""
    frame = per_run(runs)
    rows = []
    for setting in dict.fromkeys(r.setting for r in runs):
        rs = [r for r in runs if r.setting == setting]
        f = frame[frame["setting"] == setting]
        start, repartition = SETTINGS[setting]
        row: dict[str, object] = {
            "setting": setting,
            "start": start,
            "cpsat_repartition": repartition,
            "apply": rs[0].apply,
            "seeds": len(rs),
            "gpus": rs[0].gpus,
        }
        for k in rs[0].report_at:
            ours = float(f[f"cpsat_{k}"].mean())
            fgd = float(f[f"fgd_{k}"].mean())
            ff = float(f[f"first_fit_{k}"].mean())
            row[f"cpsat_{k}"] = round(ours, 2)
            row[f"fgd_{k}"] = round(fgd, 2)
            row[f"first_fit_{k}"] = round(ff, 2)
            row[f"diff_vs_fgd_{k}"] = round(ours - fgd, 2)
            row[f"diff_vs_ff_{k}"] = round(ours - ff, 2)
            row[f"ratio_vs_fgd_{k}"] = round(ours / fgd, 3) if fgd else None
            row[f"ratio_vs_ff_{k}"] = round(ours / ff, 3) if ff else None
            row[f"cpsat_mem_{k}"] = round(float(f[f"cpsat_mem_{k}"].mean()), 2)
            row[f"fgd_mem_{k}"] = round(float(f[f"fgd_mem_{k}"].mean()), 2)
            row[f"first_fit_mem_{k}"] = round(float(f[f"first_fit_mem_{k}"].mean()), 2)
        walls = sorted(w for r in rs for w in r.round_wall_s)
        row["round_wall_median_s"] = round(statistics.median(walls), 2)
        row["round_wall_p99_s"] = round(walls[min(len(walls) - 1, int(0.99 * len(walls)))], 2)
        statuses: dict[str, int] = {}
        for r in rs:
            for s, n in r.statuses.items():
                statuses[s] = statuses.get(s, 0) + n
        row["round_statuses"] = " ".join(f"{s}:{n}" for s, n in sorted(statuses.items()))
        for name in (
            "cpsat_created",
            "cpsat_destroyed",
            "cpsat_idle_created",
            "fgd_created",
            "first_fit_created",
        ):
            row[f"{name}_per_run"] = round(float(f[name].mean()), 1)
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(summary: pd.DataFrame) -> str:
    """README tables: placed GPU demand (% of capacity in compute slices, mean over seeds) at each
    reported arrival percentage, then CP-SAT's round statistics and MIG instance counts."""
    points = [k for k in REPORT_AT if f"cpsat_{k}" in summary.columns]
    records = summary.to_dict("records")
    lines = [
        "| setting | arrived | CP-SAT | FGD | first-fit | CP-SAT - FGD | CP-SAT - FF | CP-SAT / FGD |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        for k in points:
            lines.append(
                f"| {r['setting']} | {k}% | {r[f'cpsat_{k}']:.2f} | {r[f'fgd_{k}']:.2f} | "
                f"{r[f'first_fit_{k}']:.2f} | {r[f'diff_vs_fgd_{k}']:+.2f} | {r[f'diff_vs_ff_{k}']:+.2f} | "
                f"{r[f'ratio_vs_fgd_{k}']:.3f} |"
            )
    lines += [
        "",
        "| setting | CP-SAT median / p99 round s | round statuses | CP-SAT created / destroyed "
        "(created idle) per run | FGD / first-fit created per run |",
        "|---|---:|---|---:|---:|",
    ]
    for r in records:
        lines.append(
            f"| {r['setting']} | {r['round_wall_median_s']:.2f} / {r['round_wall_p99_s']:.2f} | "
            f"{r['round_statuses']} | {r['cpsat_created_per_run']:.0f} / "
            f"{r['cpsat_destroyed_per_run']:.0f} ({r['cpsat_idle_created_per_run']:.0f}) | "
            f"{r['fgd_created_per_run']:.0f} / {r['first_fit_created_per_run']:.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--settings", default=",".join(SETTINGS), help="keep,repartition,empty")
    parser.add_argument("--seeds", default="42-44", help="e.g. 42-44 or 42,45")
    parser.add_argument(
        "--nodes", type=int, default=100, help="evenly sub-sample this many nodes (0: all 1,213)"
    )
    parser.add_argument("--time-limit", type=float, default=2.0, help="CP-SAT seconds per round")
    parser.add_argument("--until", type=int, default=max(REPORT_AT), help="last arrived %% simulated")
    parser.add_argument(
        "--apply", choices=APPLY_MODES, default="plan", help="how CP-SAT's MIG layouts are applied"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b6.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    for name in ("solvers", "models", "planner"):
        logging.getLogger(name).setLevel(logging.ERROR)
    runs: list[B6Run] = []
    for setting in [s for s in args.settings.split(",") if s]:
        for seed in _seeds(args.seeds):
            t0 = time.perf_counter()
            r = run(setting, seed, args.nodes or None, args.time_limit, args.until, args.apply)
            runs.append(r)
            k = min(100, args.until)
            p = {
                name: at(c, r.capacity, k)[0]
                for name, c in (("cpsat", r.cpsat), ("fgd", r.fgd), ("ff", r.first_fit))
            }
            print(
                f"{setting:12s} seed {seed}: placed at {k}% arrived: CP-SAT {p['cpsat']:.2f} "
                f"FGD {p['fgd']:.2f} first-fit {p['ff']:.2f}; {len(r.round_wall_s)} rounds, "
                f"{time.perf_counter() - t0:.0f} s",
                flush=True,
            )
    summary = summarise(runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    summary.to_csv(args.out, index=False)
    per_run(runs).to_csv(args.out.with_name(f"{args.out.stem}_runs.csv"), index=False)
    print(summary.to_string(index=False))
    print(markdown(summary))


if __name__ == "__main__":
    main()
