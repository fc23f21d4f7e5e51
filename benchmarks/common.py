"""What the benchmarks share: the openb trace read by the product's importer, the FGD paper's arrival
sequence and allocation measure, rounds through the executor, seeds, tables and process memory.

Every gpuplan plan goes through :func:`gpuplan.planner.planning.make_plan` (which validates it); the
online baselines place pods one at a time through :class:`gpuplan.solvers.placement.Placer`, as the FGD
paper's simulator does.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import TypeVar

import pandas as pd

from gpuplan.models import Cluster, PlanningInput, Policy, Workload, default_catalog
from gpuplan.models.plan import Assignment, Plan
from gpuplan.models.policy import DisruptionBudget, MigPolicy, Tier
from gpuplan.planner.executor import ARRIVAL_WINDOW, Executor, SimCluster
from gpuplan.planner.io.importers.openb import read_cluster, read_workloads
from gpuplan.planner.pipeline.actions import CREATE, DESTROY
from gpuplan.planner.pipeline.compile import compile_node, compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.occupancy import Holding, Key
from gpuplan.solvers.greedy import BestFitScorer, FgdScorer, FirstFitScorer
from gpuplan.solvers.placement import Placer, Scorer, target_mix
from gpuplan.solvers.problem import NodeSpec, Request

T = TypeVar("T")

#: Folder of the trace in the repository (with the reference results, which the package does not ship).
TRACE_DIR = Path(__file__).resolve().parent.parent / "data" / "traces" / "alibaba-gpu-v2023"

#: Node list the FGD simulator uses (GPU nodes only).
NODE_FILE = "openb_node_list_gpu_node.csv"

#: Arrived GPU request the FGD protocol inflates the trace to, as a share of GPU capacity.
TUNE_RATIO = 1.3

#: Simulated clock of the benchmarks' plans and simulated clusters.
NOW = datetime(2026, 1, 1, tzinfo=UTC)

#: Tiers of the openb import (QoS classes), all of weight 1 in :func:`bench_policy`.
TIERS = ("latency-sensitive", "standard", "background")


# ----------------------------------------------------------------------------------------------- trace


def pod_file(trace: str) -> Path:
    """The pod list of ``trace`` (default, gpushare100, multigpu50)."""
    return TRACE_DIR / f"openb_pod_list_{trace}.csv"


@cache
def openb_cluster() -> Cluster:
    """The openb GPU nodes, as the importer reads them."""
    return read_cluster(TRACE_DIR / NODE_FILE)


def nodes_shuffled(cluster: Cluster, seed: int | str) -> Cluster:
    """``cluster`` with its node rows shuffled with ``seed`` (a row-order run)."""
    nodes = list(cluster.nodes)
    random.Random(seed).shuffle(nodes)
    return cluster.model_copy(update={"nodes": tuple(nodes)})


@cache
def openb_pods(trace: str) -> tuple[Workload, ...]:
    """The pods of ``trace`` as the importer reads them, sorted by name (the simulator's start order)."""
    return tuple(sorted(read_workloads(pod_file(trace)), key=lambda w: w.id))


def compile_nodes(cluster: Cluster) -> tuple[NodeSpec, ...]:
    """The cluster's nodes compiled for a placer, in cluster order."""
    catalog = default_catalog()
    return tuple(compile_node(n, catalog) for n in cluster.nodes)


def compile_pods(pods: Sequence[Workload]) -> tuple[Request, ...]:
    """The pods compiled to requests (one replica each), in the given order."""
    inp = PlanningInput(cluster=Cluster(nodes=()), workloads=tuple(pods))
    return compile_problem(inp, default_catalog(), NOW).requests


@cache
def openb_trace(trace: str) -> tuple[tuple[NodeSpec, ...], tuple[Request, ...]]:
    """The openb GPU nodes and ``trace``'s pods (name order), compiled for the online baselines."""
    return compile_nodes(openb_cluster()), compile_pods(openb_pods(trace))


def per_gpu_milli(r: Request) -> int:
    """The pod's GPU request per GPU (the simulator's ``MilliGpu``), in milli-GPU."""
    s = r.shapes[0]
    return 1000 if s.kind == "whole" else s.milli


def total_milli(r: Request | Workload) -> int:
    """The pod's total GPU request, in milli-GPU."""
    return r.shapes[0].gpu_milli_total


def capacity_milli(nodes: Iterable[NodeSpec]) -> int:
    """GPU capacity, in milli-GPU."""
    return sum(1000 * len(n.gpus) for n in nodes)


def arrivals(pods: Sequence[Request], capacity: int, n_nodes: int, seed: int) -> tuple[list[int], list[int]]:
    """The FGD protocol's arrival order for one seed (positions in ``pods``) and the node tie-break ranks.

    Mirrors the simulator: shuffle the name-sorted list, then tune it to ``TUNE_RATIO`` times the capacity
    (resample while the next pod's per-GPU request still fits under the target, or drop random pods
    while above it), then draw the node ranks from the same generator.
    """
    rng = random.Random(seed)
    order = list(range(len(pods)))
    rng.shuffle(order)
    total = sum(total_milli(pods[i]) for i in order)
    target = TUNE_RATIO * capacity
    if total < target:
        while True:
            i = rng.randrange(len(pods))
            if total + per_gpu_milli(pods[i]) > target:
                break
            total += total_milli(pods[i])
            order.append(i)
    while total > target:
        total -= total_milli(pods[order.pop(rng.randrange(len(order)))])
    rank = list(range(n_nodes))
    rng.shuffle(rank)
    return order, rank


def unique(pods: Sequence[Workload]) -> list[Workload]:
    """The pods with ids made unique by their position (``name~i``): the inflated sequence repeats pods."""
    return [w.model_copy(update={"id": f"{w.id}~{i}"}) for i, w in enumerate(pods)]


def arrived_pods(trace: str, seed: int) -> tuple[list[Workload], list[int]]:
    """B1's arrival sequence of ``trace`` for ``seed`` as workloads with unique ids, and the node ranks."""
    nodes, requests = openb_trace(trace)
    order, rank = arrivals(requests, capacity_milli(nodes), len(nodes), seed)
    pods = openb_pods(trace)
    return unique([pods[i] for i in order]), rank


def parse_seeds(text: str) -> list[int]:
    """Seeds from ``42-51`` or ``42,45`` (or both, comma-separated)."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


# -------------------------------------------------------------------------------------- online baselines


def scorer_for(policy: str, nodes: Sequence[NodeSpec], pods: Iterable[Request]) -> Scorer:
    """The scorer of ``policy``; FGD's target mix comes from the trace's own (un-inflated) pods."""
    if policy == "greedy-fgd":
        return FgdScorer(target_mix(pods))
    if policy == "best-fit":
        return BestFitScorer.for_nodes(nodes)
    if policy == "first-fit":
        return FirstFitScorer()
    raise ValueError(f"unknown policy '{policy}' (choose best-fit, greedy-fgd or first-fit)")


@dataclass(frozen=True)
class Online:
    """One pod-at-a-time run: (arrived, allocated) GPU milli after every pod, and the pods dropped."""

    records: list[tuple[int, int]]
    failed: int

    @property
    def used(self) -> int:
        """Allocated GPU milli at the end."""
        return self.records[-1][1] if self.records else 0


def place_online(
    nodes: Sequence[NodeSpec], order: Sequence[Request], scorer: Scorer, rank: Sequence[int] | None = None
) -> Online:
    """Place ``order`` one pod at a time; a pod that fits nowhere is dropped (the FGD protocol)."""
    placer = Placer(nodes, default_catalog(), scorer, rank=rank)
    arrived = failed = 0
    records: list[tuple[int, int]] = []
    for pod in order:
        arrived += total_milli(pod)
        if placer.place(pod) is None:
            failed += 1
        records.append((arrived, placer.used_gpu_milli))
    return Online(records, failed)


def curve(records: Sequence[tuple[int, int]], capacity: int, percents: Iterable[int]) -> dict[int, float]:
    """Mean allocation (%) over the pods whose arrived request rounds to each percent (the reference's
    ``merge_alloc_discrete``)."""
    frame = pd.DataFrame(records, columns=["arrived", "used"])
    frame["arrive"] = (frame["arrived"] * 100 / capacity).round(0)
    frame["alloc"] = (frame["used"] * 100 / capacity).round(2)
    out: dict[int, float] = {}
    for k in percents:
        rows = frame[frame["arrive"] == k]
        if rows.empty:
            rows = frame[(frame["arrive"] >= k - 1) & (frame["arrive"] <= k + 1)]
        if not rows.empty:
            out[k] = round(float(rows["alloc"].mean()), 2)
    return out


# ------------------------------------------------------------------------------------- gpuplan's plans


def bench_policy(moves: int = 0, mig: MigPolicy | None = None) -> Policy:
    """Every tier weight 1 (the queue term is the GPU demand left waiting, so only packing is compared)
    and a migration budget of ``moves`` per round."""
    return Policy(
        tiers=tuple(Tier(name=n, weight=1) for n in TIERS),
        disruption=DisruptionBudget(max_moves_per_round=moves),
        mig=mig or MigPolicy(),
    )


def plan_gpu_milli(assignments: Iterable[Assignment]) -> int:
    """Allocated GPU milli of a plan without MIG (the FGD paper's allocation measure)."""
    return sum(1000 if g.milli is None else g.milli for a in assignments for g in a.gpus)


def held_gpu_milli(running: Mapping[Key, Holding]) -> int:
    """Allocated GPU milli of what runs (no MIG)."""
    return sum(1000 if g.milli is None else g.milli for h in running.values() for g in h.gpus)


def queue_bound_milli(plan: Plan) -> float | None:
    """The GPU demand (milli) that must wait in every plan, from the plan's bound on its queue term.

    Under :func:`bench_policy` without waiting times, a waiting pod costs 8 (hours) x its demand in
    hundredths of a GPU (a whole GPU 100, a share rounded up, a CPU-only pod 1), so the bound divided by
    8 and times 10 is waiting milli-GPU. Exact for whole-GPU pods; shares rounded up and CPU-only pods
    make it overstate the waiting demand by at most 9 and 10 milli-GPU per such pod. ``None`` when the
    plan has no bound.
    """
    bound = plan.solver.best_bound
    return None if bound is None else bound * 10 / 8


@dataclass
class RoundsTrace:
    """One rounds run: per round, arrived and held demand (the caller's unit), plan wall time, moves,
    MIG instances created and destroyed, pods dropped; plan statuses."""

    arrived: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    moved: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)
    destroyed: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)

    def at(self, capacity: int, percent: int) -> float:
        """Held demand (% of capacity) after the first round whose arrivals reach ``percent`` - 0.5 %
        (the last round if none does)."""
        i = next(
            (i for i, a in enumerate(self.arrived) if 100 * a / capacity >= percent - 0.5),
            len(self.arrived) - 1,
        )
        return round(100 * self.held[i] / capacity, 2)


def rounds(order: Sequence[T], size: Callable[[T], int], step: float) -> list[list[T]]:
    """Split an arrival sequence into rounds of ``step`` units of ``size`` each (the last may be short)."""
    out: list[list[T]] = [[]]
    arrived = 0
    boundary = step
    for pod in order:
        out[-1].append(pod)
        arrived += size(pod)
        if arrived >= boundary:
            out.append([])
            while boundary <= arrived:
                boundary += step
    return [r for r in out if r]


def plan_rounds(
    cluster: Cluster,
    batches: Sequence[Sequence[Workload]],
    *,
    policy: Callable[[int], Policy],
    size: Callable[[Workload], int],
    held: Callable[[Mapping[Key, Holding]], int],
    time_limit: float,
    seed: int,
    on_round: Callable[[str], None] | None = None,
    ray: str | None = None,
    arrival_window: int = ARRIVAL_WINDOW,
) -> RoundsTrace:
    """gpuplan's rounds over ``batches`` through the executor on a simulated cluster.

    Each round the executor plans the round's arrivals with everything still waiting (``make_plan``,
    ``time_limit`` seconds for the whole call) under ``policy(running replicas)`` and applies the plan's
    first round; a waiting pod that fits nowhere afterwards is dropped (the FGD protocol). ``size`` and
    ``held`` measure arrivals and what runs; ``on_round`` gets a progress line; ``ray`` runs the solves'
    independent pieces on that Ray cluster. Each round's input carries the latest ``arrival_window``
    arrived replicas as its expected arrival mix (0: none, the demand's own mix).
    """
    catalog = default_catalog()
    sim = SimCluster(cluster, catalog, NOW)

    def planner(inp: PlanningInput, now: datetime) -> Plan:
        return make_plan(inp, now=now, time_limit_s=time_limit, seed=seed, ray=ray)

    executor = Executor(sim, planner, policy(0), catalog, arrival_window=arrival_window)

    def before(_k: int) -> None:
        executor.policy = policy(len(sim.occ.holders))

    out = RoundsTrace()
    arrived = 0
    for batch, report in zip(batches, executor.run(batches, before=before, drop_unfit=True), strict=True):
        arrived += sum(size(w) for w in batch)
        out.arrived.append(arrived)
        out.held.append(held(sim.occ.holders))
        out.walls.append(report.plan_wall_s)
        out.moved.append(report.moves)
        out.created.append(report.count(CREATE))
        out.destroyed.append(report.count(DESTROY))
        out.dropped.append(len(report.dropped))
        out.statuses[report.plan.status.value] += 1
        if on_round is not None:
            on_round(
                f"round {report.number}: arrived {arrived} held {out.held[-1]}, waiting "
                f"{len(report.plan.unplaced)}, dropped {len(report.dropped)}, {report.plan_wall_s:.1f} s "
                f"{report.plan.status.value}, {report.moves} moves"
            )
    return out


# ------------------------------------------------------------------------------------------- reporting


def counts(values: Mapping[str, int]) -> str:
    """``A:3 B:1`` for a tally, by name."""
    return " ".join(f"{k}:{n}" for k, n in sorted(values.items()))


def p99(values: Iterable[float]) -> float:
    """The 99th percentile (nearest rank)."""
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def markdown(frame: pd.DataFrame, columns: Sequence[tuple[str, str, str]]) -> str:
    """A README table: one ``(header, column, format)`` per column (format ``""`` prints as is; numbers
    are right-aligned)."""
    heads = [h for h, _, _ in columns]
    align = ["---:" if f else "---" for _, _, f in columns]
    lines = [f"| {' | '.join(heads)} |", f"|{'|'.join(align)}|"]
    for row in frame.to_dict("records"):
        cells = [format(row[c], f) if f else str(row[c]) for _, c, f in columns]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def write(frame: pd.DataFrame, path: Path) -> None:
    """Write a results CSV (creating its folder)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` and its descendants, KiB (Linux ``/proc``)."""
    total = 0
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1])
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        total += sum(rss_kib(int(c)) for c in children)
    return total


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and its wall time in seconds."""
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def plan_at_once(
    cluster: Cluster, pods: Sequence[Workload], time_limit: float, seed: int
) -> tuple[dict[str, object], Plan]:
    """``make_plan`` on every pod at once (:func:`bench_policy`, default solver): the plan's report as a
    row (allocation and bound in % of GPU capacity) and the plan."""
    inp = PlanningInput(cluster=cluster, workloads=tuple(pods), policy=bench_policy())
    plan, wall = timed(lambda: make_plan(inp, now=NOW, time_limit_s=time_limit, seed=seed))
    capacity = 1000 * cluster.gpu_count
    arrived = sum(total_milli(w) for w in pods)
    waiting = queue_bound_milli(plan)
    row: dict[str, object] = {
        "gpuplan_pct": round(100 * plan_gpu_milli(plan.assignments) / capacity, 2),
        "bound_pct": None if waiting is None else round(100 * min(arrived - waiting, capacity) / capacity, 2),
        "status": plan.status.value,
        "objective": plan.solver.objective,
        "best_bound": plan.solver.best_bound,
        "bound_source": plan.solver.bound_source,
        "gap": plan.solver.gap,
        "wall_s": round(wall, 1),
    }
    return row, plan


def order_spread(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    """Per value of column ``by``: gpuplan's and FGD's allocation range and spread over its rows (one
    row per input order)."""
    rows = []
    for key, group in frame.groupby(by, sort=False):
        row: dict[str, object] = {by: key, "orders": len(group)}
        for who in ("gpuplan", "fgd"):
            lo, hi = float(group[f"{who}_pct"].min()), float(group[f"{who}_pct"].max())
            row[f"{who}_range"] = f"{lo:.2f} / {hi:.2f}"
            row[f"{who}_spread"] = round(hi - lo, 2)
        rows.append(row)
    return pd.DataFrame(rows)


def spread_table(by: str) -> tuple[tuple[str, str, str], ...]:
    """The README table of :func:`order_spread` grouped by ``by``: (header, column, format)."""
    return (
        (by, by, ""),
        ("gpuplan min / max", "gpuplan_range", ""),
        ("gpuplan spread", "gpuplan_spread", ".2f"),
        ("FGD min / max", "fgd_range", ""),
        ("FGD spread", "fgd_spread", ".2f"),
    )
