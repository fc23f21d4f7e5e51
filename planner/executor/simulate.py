"""The B5 loop: Poisson arrivals of openb pod shapes on a sample of openb nodes, planned in rounds.

Three policies see the same arrivals and run times, each driving its own simulated cluster through the
executor's rounds loop (:meth:`Executor.run`) with ``make_plan``:

* ``gpuplan`` — CP-SAT (moves within the disruption budget, predicted starts and reservations from
  :mod:`planner.pipeline.timeline`, the last plan's reservations kept);
* ``fgd`` — FGD placing the queue in tier-then-FIFO order, nothing ever moves;
* ``best-fit`` — best-fit placing the queue in FIFO order (every tier weight equal).

With ``admission`` every policy also places each job at its arrival, as a real scheduler does
(:meth:`Executor.admit`: free capacity the policy's last plan has not reserved), with its own node score
(FGD for gpuplan and fgd, best-fit for best-fit); finished jobs leave at their end. gpuplan's executor
also preempts background work for a latency-sensitive job that finds no room, on arrival or when a
round leaves it waiting (``Executor.evict``); the baselines never preempt.

Shapes and QoS come from the trace's pod list (GPU pods only; QoS ``LS``/``Guaranteed`` →
latency-sensitive, ``Burstable`` → standard, ``BE`` → background). Run times are lognormal with a median
of 30 minutes and sigma 1 (mean 49.5 minutes) unless configured; the planner is told only the mean, as
each tier's ``default_duration_s`` (what a history of past runs would give), never a job's own run time.
The arrival rate sets the offered GPU load rho = rate x mean GPUs per job x mean run time / cluster GPUs.
"""

from __future__ import annotations

import logging
import math
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuplan.models.catalog import data_dir, default_catalog
from gpuplan.models.cluster import Cluster
from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.policy import DisruptionBudget, Policy, default_tiers
from gpuplan.models.workload import Workload
from gpuplan.planner.executor import Executor, SimCluster, state_input
from gpuplan.planner.io.importers.openb import read_cluster, read_workloads
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.metrics import fragmentation
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.greedy import BestFit, Fgd, GreedySolver
from gpuplan.solvers.parallel import run_tasks

log = logging.getLogger(__name__)

TRACE_DIR = data_dir() / "traces" / "alibaba-gpu-v2023"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
POLICIES = ("gpuplan", "fgd", "best-fit")


@dataclass(frozen=True)
class SimConfig:
    """One simulation: load, size, duration model, round length and planner settings."""

    rho: float = 0.95
    nodes: int = 10
    hours: float = 5.0
    warmup_hours: float = 1.0
    round_s: float = 300.0
    median_duration_s: float = 1800.0
    sigma: float = 1.0
    seed: int = 0
    time_limit_s: float = 1.0
    moves_per_round: int = 2
    preemptions_per_round: int = 4
    trace: str = "default"
    trace_dir: Path = TRACE_DIR
    admission: bool = False
    #: gpuplan's solves stop on deterministic time: the same seed gives the same run (unless cut by the wall).
    deterministic: bool = False

    @property
    def mean_duration_s(self) -> float:
        """Mean of the lognormal run time (what the planner is told)."""
        return self.median_duration_s * math.exp(self.sigma**2 / 2)


@dataclass(frozen=True)
class Job:
    """One arriving pod: its workload (no run time given) and its true run time."""

    workload: Workload
    arrival_s: float
    duration_s: float


def sample_cluster(cfg: SimConfig) -> Cluster:
    """``cfg.nodes`` GPU nodes of the openb node list, drawn with the seed."""
    nodes = [n for n in read_cluster(cfg.trace_dir / "openb_node_list_gpu_node.csv").nodes if n.gpus]
    return Cluster(nodes=tuple(random.Random(cfg.seed).sample(nodes, min(cfg.nodes, len(nodes)))))


def pod_shapes(cfg: SimConfig, cluster: Cluster) -> list[tuple[dict[str, Any], str]]:
    """GPU pods of the trace that fit some node of ``cluster``: workload fields and tier."""
    models = {g.model for n in cluster.nodes for g in n.gpus}
    biggest = max(len(n.gpus) for n in cluster.nodes)
    out: list[tuple[dict[str, Any], str]] = []
    for w in read_workloads(cfg.trace_dir / f"openb_pod_list_{cfg.trace}.csv"):
        if not w.gpus and not w.gpu_milli:
            continue
        if w.gpus > biggest or (w.gpu_models and not set(w.gpu_models) & models):
            continue
        fields = w.model_dump(include={"gpus", "gpu_milli", "cpu_milli", "memory_mib", "topology"})
        if w.gpu_models:
            fields["gpu_models"] = sorted(set(w.gpu_models) & models)
        out.append((fields, w.tier))
    return out


def gpu_demand(fields: dict[str, Any]) -> float:
    """GPUs a shape takes (a fraction counts its share)."""
    return float(fields.get("gpus", 0)) + float(fields.get("gpu_milli", 0)) / MILLI_PER_GPU


def arrivals(cfg: SimConfig, cluster: Cluster) -> list[Job]:
    """Poisson arrivals at offered load ``cfg.rho`` with lognormal run times."""
    shapes = pod_shapes(cfg, cluster)
    rng = random.Random(cfg.seed + 1)
    mean_gpus = statistics.fmean(gpu_demand(f) for f, _ in shapes)
    rate = cfg.rho * cluster.gpu_count / (mean_gpus * cfg.mean_duration_s)
    jobs: list[Job] = []
    t = rng.expovariate(rate)
    while t < cfg.hours * 3600:
        fields, tier = rng.choice(shapes)
        duration = rng.lognormvariate(math.log(cfg.median_duration_s), cfg.sigma)
        w = Workload.model_validate(
            {
                "id": f"job-{len(jobs):05d}",
                "tier": tier,
                "team": "openb",
                "preemptible": tier == "background",
                "queued_since": EPOCH + timedelta(seconds=t),
                **fields,
            }
        )
        jobs.append(Job(w, t, duration))
        t += rng.expovariate(rate)
    return jobs


def sim_policy(cfg: SimConfig, equal_tiers: bool = False) -> Policy:
    """Default tier weights (or all equal, for FIFO), the mean run time as every tier's default, and
    the configured moves and preemptions per round."""
    tiers = tuple(
        t.model_copy(
            update={"default_duration_s": cfg.mean_duration_s, **({"weight": 1} if equal_tiers else {})}
        )
        for t in default_tiers()
    )
    budget = DisruptionBudget(
        max_moves_per_round=cfg.moves_per_round,
        max_preemptions_per_round=cfg.preemptions_per_round,
        min_runtime_s=600,
    )
    return Policy(tiers=tiers, disruption=budget)


@dataclass
class Track:
    """What one policy did: starts, predictions, and per-round samples."""

    name: str
    sim: SimCluster
    started: dict[str, float] = field(default_factory=dict)
    waited: dict[str, float] = field(default_factory=dict)
    queued_at: dict[str, float] = field(default_factory=dict)
    preemptions: int = 0
    predicted: dict[str, float] = field(default_factory=dict)
    walls: list[float] = field(default_factory=list)
    moves: list[int] = field(default_factory=list)
    alloc: list[float] = field(default_factory=list)
    frag: list[float] = field(default_factory=list)


def _account(
    track: Track,
    demand: list[Workload],
    t: float,
    admitted: dict[str, float],
    evicted: Sequence[tuple[str, float]] = (),
) -> None:
    """Time each job of ``demand`` (arrived, not finished) spends waiting, including time back in the
    queue after a preemption, and its first start; a job ``admitted`` started at its arrival (the time
    given), without waiting, and may have finished since; a job ``evicted`` went back to the queue at
    the time given (between rounds)."""
    for wid, at in admitted.items():
        track.started.setdefault(wid, at)
    for wid, at in evicted:
        if wid in track.started and wid not in track.queued_at:
            track.preemptions += 1
            track.queued_at[wid] = at
    running = {key[0] for key in track.sim.occ.holders}
    for w in demand:
        if w.id in running:
            since = track.queued_at.pop(w.id, None)
            if since is None and w.id not in track.started:  # arrived since the last round
                since = (w.queued_since - EPOCH).total_seconds() if w.queued_since else t
            if since is not None:
                track.waited[w.id] = track.waited.get(w.id, 0.0) + t - since
            track.started.setdefault(w.id, t)
        elif w.id not in track.queued_at:
            if w.id in track.started:
                track.preemptions += 1  # it ran and stopped before its end: back in the queue now
                track.queued_at[w.id] = t
            else:
                track.queued_at[w.id] = (w.queued_since - EPOCH).total_seconds() if w.queued_since else t


def _sample(track: Track, inp: PlanningInput, now: datetime) -> None:
    """Allocation and FGD fragmentation of the current state."""
    occ = track.sim.occ
    capacity = MILLI_PER_GPU * inp.cluster.gpu_count
    used = sum((g.milli or MILLI_PER_GPU) for h in occ.holders.values() for g in h.gpus)
    track.alloc.append(100 * used / capacity)
    problem = compile_problem(inp, default_catalog(), now)
    track.frag.append(
        100 * fragmentation(problem, tuple(occ.assignments().values()), ())["fragmentation_rate"]
    )


#: Solver and policy of each simulated policy (``fifo``: every tier weight equal).
SOLVERS = {"gpuplan": ("cpsat", "tiers"), "fgd": ("greedy-fgd", "tiers"), "best-fit": ("best-fit", "fifo")}
#: The node score each policy admits arriving jobs with (``SimConfig.admission``).
ADMISSION: dict[str, Callable[[], GreedySolver]] = {"gpuplan": Fgd, "fgd": Fgd, "best-fit": BestFit}
#: Policies whose executor preempts background work for latency-sensitive jobs between rounds (with
#: admission): gpuplan's; the baselines never preempt.
EVICTS = frozenset({"gpuplan"})


def simulate(cfg: SimConfig, progress: Callable[[str], None] | None = None) -> dict[str, dict[str, float]]:
    """Run the three policies on the same arrivals; return each policy's metrics.

    Each policy drives its own simulated cluster through :meth:`Executor.run`: before each round the
    clock moves on and finished jobs leave the demand, then the round's arrivals join it and
    ``make_plan`` (with the policy's solver) plans it. Only gpuplan keeps its last plan's reservations.
    """
    cluster = sample_cluster(cfg)
    jobs = arrivals(cfg, cluster)
    catalog = default_catalog()
    durations = {(j.workload.id, 0): j.duration_s for j in jobs}
    policies = {"tiers": sim_policy(cfg), "fifo": sim_policy(cfg, equal_tiers=True)}
    count = int(cfg.hours * 3600 // cfg.round_s)
    batches = [
        [j.workload for j in jobs if (k - 1) * cfg.round_s < j.arrival_s <= k * cfg.round_s]
        for k in range(1, count + 1)
    ]
    tracks = {}
    for name, (solver, policy) in SOLVERS.items():
        track = Track(name, SimCluster(cluster, catalog, EPOCH, duration_of=durations.get))
        admission = ADMISSION[name]() if cfg.admission else None
        _run(cfg, track, solver, policies[policy], batches, progress, admission, name in EVICTS)
        tracks[name] = track
    end = count * cfg.round_s
    return {name: _metrics(cfg, jobs, tr, policies["tiers"], end) for name, tr in tracks.items()}


def _simulate_task(progress: Callable[[str], None] | None, cfg: SimConfig) -> dict[str, dict[str, float]]:
    return simulate(cfg, progress)


def simulate_all(
    cfgs: list[SimConfig], progress: Callable[[str], None] | None = None, *, ray: str | None = None
) -> list[dict[str, dict[str, float]]]:
    """:func:`simulate` for each configuration (loads, seeds), in order: independent tasks
    (:mod:`gpuplan.solvers.parallel`), one after the other here (each round's solve uses the machine's
    processes itself) or as Ray tasks on the cluster at ``ray`` (without progress lines: those are this
    terminal's). A run's metrics depend only on its configuration, wherever it ran."""
    return run_tasks(_simulate_task, progress if ray is None else None, cfgs, processes=1, ray=ray)


def _run(
    cfg: SimConfig,
    track: Track,
    solver: str,
    policy: Policy,
    batches: list[list[Workload]],
    progress: Callable[[str], None] | None,
    admission: GreedySolver | None = None,
    evict: bool = False,
) -> None:
    """One policy's rounds through the executor (admitting arrivals with ``admission``, preempting for
    latency-sensitive work between rounds with ``evict``), recorded in ``track``."""
    last: list[Plan] = []

    def plan_round(inp: PlanningInput, now: datetime) -> Plan:
        plan = make_plan(
            inp, solver=solver, now=now, time_limit_s=cfg.time_limit_s, seed=cfg.seed,
            deterministic=cfg.deterministic, previous=last[-1] if last and solver == "cpsat" else None,
        )  # fmt: skip
        last.append(plan)
        return plan

    sim = track.sim
    executor = Executor(sim, plan_round, policy, default_catalog(), admission=admission, evict=evict)

    def until(t: datetime) -> None:
        finished = sim.advance((t - sim.now).total_seconds())
        executor.withdraw(key[0] for key in finished)

    def before(k: int) -> None:
        until(EPOCH + timedelta(seconds=k * cfg.round_s))

    def arriving(w: Workload) -> None:
        assert w.queued_since is not None
        until(w.queued_since)

    runs = executor.run(batches, before=before, arriving=arriving)
    for k, report in enumerate(runs, start=1):
        demand = list(executor.demand.values())
        track.walls.append(report.plan_wall_s)
        track.moves.append(report.moves)
        for u in report.plan.unplaced:
            if u.predicted_start and u.workload not in track.predicted:
                start = datetime.fromisoformat(u.predicted_start)
                track.predicted[u.workload] = (start - EPOCH).total_seconds()
        arrived = {w.id: w.queued_since for w in batches[k - 1] if w.queued_since is not None}
        admitted = {wid: (arrived[wid] - EPOCH).total_seconds() for wid, _ in report.admitted}
        evicted = [(key[0], (at - EPOCH).total_seconds()) for key, at in report.evicted]
        _account(track, demand, k * cfg.round_s, admitted, evicted)
        _sample(track, state_input(sim.observe(), demand, policy).inp, sim.now)
        if progress is not None and k % 12 == 0:
            waiting = sum(1 for w in demand if w.id not in track.started)
            progress(f"rho {cfg.rho} {track.name}: {k}/{len(batches)} rounds, {waiting} waiting")


def _p95(values: list[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]


def _metrics(cfg: SimConfig, jobs: list[Job], track: Track, policy: Policy, end: float) -> dict[str, float]:
    """Tier-weighted mean wait, p95 and mean wait per tier, allocation, fragmentation, moves, planner
    time, and the median absolute error of predicted starts (jobs arriving after the warm-up; a job
    still waiting at the end counts with the wait so far)."""
    measured = [j for j in jobs if cfg.warmup_hours * 3600 <= j.arrival_s < end]
    weight = {t.name: t.weight for t in policy.tiers}
    waits: dict[str, list[float]] = {t.name: [] for t in policy.tiers}
    num = den = 0.0
    for j in measured:
        since = track.queued_at.get(j.workload.id)
        wait = track.waited.get(j.workload.id, 0.0) + (end - since if since is not None else 0.0)
        waits[j.workload.tier].append(wait)
        num += weight[j.workload.tier] * wait
        den += weight[j.workload.tier]
    pairs = [
        (track.predicted[j.workload.id], track.started[j.workload.id])
        for j in measured
        if j.workload.id in track.predicted and j.workload.id in track.started
    ]
    errors = [abs(p - a) for p, a in pairs]
    # Starts happen only at rounds: the prediction rounded up to the next round is what can come true.
    aligned = [abs(math.ceil(p / cfg.round_s - 1e-9) * cfg.round_s - a) for p, a in pairs]
    skip = int(cfg.warmup_hours * 3600 // cfg.round_s)
    out: dict[str, float] = {
        "jobs": len(measured),
        "started": sum(1 for j in measured if j.workload.id in track.started),
        "tier_weighted_mean_wait_s": round(num / den, 1) if den else 0.0,
        "alloc_pct": round(statistics.fmean(track.alloc[skip:]), 2),
        "frag_pct": round(statistics.fmean(track.frag[skip:]), 2),
        "moves_per_round": round(statistics.fmean(track.moves[skip:]), 3),
        "planner_s_per_round": round(statistics.fmean(track.walls[skip:]), 3),
        "planner_s_max": round(max(track.walls[skip:]), 3),
    }
    for tier, values in waits.items():
        out[f"p95_wait_s[{tier}]"] = round(_p95(values), 1)
    for tier, values in waits.items():
        out[f"mean_wait_s[{tier}]"] = round(statistics.fmean(values), 1) if values else 0.0
    if track.name == "gpuplan":
        out["predicted"] = len(errors)
        out["prediction_mae_median_s"] = round(statistics.median(errors), 1) if errors else math.nan
        out["prediction_mae_median_round_aligned_s"] = (
            round(statistics.median(aligned), 1) if aligned else math.nan
        )
        out["preemptions"] = track.preemptions
    return out
