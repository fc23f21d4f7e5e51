"""B7 scaling: B2's periodic rounds on the openb cluster replicated 1x, 2x, 4x, 8x.

Scale k copies every node k times and every arriving pod k times in place (so the arrival mix and the
rounds, 1% of GPU capacity each, stay proportional). The rounds go through the executor and
``make_plan`` exactly as in B2 (placed work stays); how the engine splits a large fleet is its own
business. Each round's time limit is the base limit times k / cores (at least the base).
Reported per scale: GPUs, allocation at 100% and 130% arrived, per-round wall time of ``make_plan``
median / p99 and the ratio to 1x, and the peak resident memory of the benchmark and its child processes.

``--at-once`` instead plans the whole pod list replicated k times at once (``--time-limit`` for the
whole call; ``--order-seed`` shuffles its rows): allocation, the plan's bound, wall time and peak memory.

``--ray local`` (or a cluster's address) runs the solves' independent pieces as Ray tasks instead of
local processes; ``--rounds N`` stops after N rounds (allocation then read after the last). The
executor's records of each map give the per-task (part or pricing problem) seconds, and the map's
overhead: its wall time less its longest task's.

Each scale's run is appended to `b7.jsonl` next to the CSV; the table shows the newest run of each scale
and back-end.

Run ``python -m benchmarks.b7_scaling --help``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from benchmarks.b2_rounds import REPORT_AT, ROUND_STEP
from benchmarks.common import (
    NOW,
    arrived_pods,
    bench_policy,
    counts,
    held_gpu_milli,
    openb_cluster,
    openb_pods,
    p99,
    plan_at_once,
    plan_rounds,
    rounds,
    rss_kib,
    total_milli,
    write,
)
from gpuplan.models import Cluster, PlanningInput, Policy, Workload
from gpuplan.planner.planning import make_plan
from gpuplan.solvers import parallel

log = logging.getLogger("benchmarks.b7")

#: Solver processes per round (``make_plan``'s default ``num_workers``): the machine's 2 cores.
CORES = 2


def replicate(cluster: Cluster, order: Sequence[Workload], k: int) -> tuple[Cluster, list[Workload]]:
    """``k`` copies of every node, and every pod of the arrival order repeated ``k`` times in place."""
    nodes = tuple(n.model_copy(update={"name": f"{n.name}#{j}"}) for j in range(k) for n in cluster.nodes)
    pods = [w.model_copy(update={"id": f"{w.id}#{j}"}) for w in order for j in range(k)]
    return Cluster(nodes=nodes), pods


@dataclass(frozen=True)
class ScaleRun:
    """One scale's rounds run."""

    scale: int
    gpus: int
    alloc: dict[int, float]
    walls: list[float]
    peak_rss_mib: float
    statuses: dict[str, int]
    wall_total_s: float
    #: Where the independent pieces ran (``processes``, or the ``--ray`` value).
    backend: str = "processes"
    #: Every map's task name, wall seconds and task seconds (the executor's records).
    maps: list[dict[str, Any]] = field(default_factory=list)


class _Maps(logging.Handler):
    """Collects the executor's record of each map (tasks, wall and task seconds)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.maps: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        found = getattr(record, "parallel", None)
        if isinstance(found, dict):
            name = record.getMessage().split(" tasks of ", 1)[-1].split(" on ", 1)[0]
            self.maps.append({"task": name, **found})


@contextmanager
def _recording() -> Iterator[_Maps]:
    """The executor's map records while the block runs."""
    handler = _Maps()
    logger = logging.getLogger(parallel.__name__)
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False  # recorded, not printed
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def run_scale(
    trace: str, seed: int, k: int, time_limit: float, *, ray: str | None = None, max_rounds: int | None = None
) -> ScaleRun:
    """The rounds run at scale ``k`` (the first ``max_rounds`` rounds only, when given)."""
    order, _ = arrived_pods(trace, seed)
    big, arriving = replicate(openb_cluster(), order, k)
    capacity = 1000 * big.gpu_count
    batches = rounds(arriving, total_milli, ROUND_STEP * capacity)[:max_rounds]
    peak = [0]

    def sample(line: str) -> None:
        peak[0] = max(peak[0], rss_kib(os.getpid()))
        log.info("%s", line)

    def policy(_running: int) -> Policy:
        return bench_policy()

    if ray is not None:
        parallel.connect(ray)  # started before the clock runs
    t0 = time.perf_counter()
    with _recording() as recorded:
        out = plan_rounds(
            big,
            batches,
            policy=policy,
            size=total_milli,
            held=held_gpu_milli,
            time_limit=time_limit * max(1.0, k / CORES),
            seed=seed,
            on_round=sample,
            ray=ray,
        )
    return ScaleRun(
        k,
        big.gpu_count,
        {p: out.at(capacity, p) for p in REPORT_AT},
        out.walls,
        round(peak[0] / 1024, 1),
        dict(out.statuses),
        round(time.perf_counter() - t0, 1),
        ray or "processes",
        recorded.maps,
    )


def summarise(runs: Sequence[ScaleRun]) -> pd.DataFrame:
    """One row per scale and back-end, with ratios to the same back-end's 1x run when it is present."""
    rows = []
    for r in runs:
        base = next((b for b in runs if b.scale == 1 and b.backend == r.backend), None)
        med = statistics.median(r.walls)
        row: dict[str, object] = {"scale": r.scale, "backend": r.backend, "gpus": r.gpus}
        for p in REPORT_AT:
            row[f"alloc_{p}"] = r.alloc[p]
            if base is not None:
                row[f"alloc_{p}_vs_1x"] = round(r.alloc[p] - base.alloc[p], 2)
        row["round_wall_median_s"] = round(med, 2)
        row["round_wall_p99_s"] = round(p99(r.walls), 2)
        if base is not None:
            row["median_vs_1x"] = round(med / statistics.median(base.walls), 2)
        row["peak_rss_mib"] = r.peak_rss_mib
        row["rounds"] = len(r.walls)
        row.update(_map_figures(r))
        row["statuses"] = counts(r.statuses)
        row["run_wall_s"] = r.wall_total_s
        rows.append(row)
    return pd.DataFrame(rows)


def makespan(task_s: Sequence[float], slots: int) -> float:
    """How long tasks of these lengths take on ``slots`` workers, longest first to the least loaded (what
    the map would take with no overhead)."""
    loads = [0.0] * max(1, slots)
    for s in sorted(task_s, reverse=True):
        loads[loads.index(min(loads))] += s
    return max(loads)


def _map_figures(r: ScaleRun) -> dict[str, object]:
    """Per task kind: maps, tasks per map, slots, median and max task seconds, and the median overhead of
    a map: its wall time less the makespan of its tasks on its slots (dispatch, pickling, results)."""
    out: dict[str, object] = {}
    for task in sorted({m["task"] for m in r.maps}):
        maps = [m for m in r.maps if m["task"] == task]
        tasks = [s for m in maps for s in m["task_s"]]
        overheads = [m["wall_s"] - makespan(m["task_s"], m["slots"]) for m in maps]
        out[f"{task}_maps"] = len(maps)
        out[f"{task}_tasks_per_map"] = round(len(tasks) / len(maps), 1)
        out[f"{task}_slots"] = maps[-1]["slots"]
        out[f"{task}_task_median_s"] = round(statistics.median(tasks), 3)
        out[f"{task}_task_max_s"] = round(max(tasks), 3)
        out[f"{task}_overhead_median_s"] = round(statistics.median(overheads), 3)
    return out


def pricing_run(trace: str, seed: int, pods: int, time_limit: float, ray: str | None) -> dict[str, object]:
    """The first ``pods`` arriving pods planned at once on the 1x cluster (more than the fleet engine's
    threshold of waiting replicas: column generation), with its pricing maps' figures."""
    order, _ = arrived_pods(trace, seed)
    inp = PlanningInput(cluster=openb_cluster(), workloads=tuple(order[:pods]), policy=bench_policy())
    if ray is not None:
        parallel.connect(ray)
    t0 = time.perf_counter()
    with _recording() as recorded:
        plan = make_plan(inp, now=NOW, time_limit_s=time_limit, seed=seed, ray=ray)
    run = ScaleRun(1, inp.cluster.gpu_count, {}, [], 0.0, {}, 0.0, ray or "processes", recorded.maps)
    return {
        "backend": run.backend,
        "pods": pods,
        "wall_s": round(time.perf_counter() - t0, 1),
        "rounds": plan.solver.terms.get("fleet_rounds"),
        "node_classes": plan.solver.model_size.get("node_classes"),
        **_map_figures(run),
    }


def at_once_run(
    trace: str, seed: int, k: int, time_limit: float, order_seed: int | None
) -> dict[str, object]:
    """The whole pod list of ``trace`` replicated ``k`` times planned at once on the cluster replicated
    ``k`` times (rows shuffled with ``order_seed`` when given): allocation, the plan's bound in
    allocation terms, wall time and peak resident memory (sampled every 0.5 s, with children)."""
    big, pods = replicate(openb_cluster(), list(openb_pods(trace)), k)
    if order_seed is not None:
        random.Random(order_seed).shuffle(pods)
    peak = [0]
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.5):
            peak[0] = max(peak[0], rss_kib(os.getpid()))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        row, plan = plan_at_once(big, pods, time_limit, seed)
    finally:
        done.set()
        watcher.join()
    return {
        "scale": k,
        "gpus": big.gpu_count,
        "pods": len(pods),
        "order": "file" if order_seed is None else f"shuffled-{order_seed}",
        **row,
        "parts": plan.solver.terms.get("parts", 1),
        "peak_rss_mib": round(peak[0] / 1024),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace", default="default")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--scales", default="1,2,4,8")
    parser.add_argument("--time-limit", type=float, default=3.0, help="make_plan seconds per round at 1x")
    parser.add_argument("--ray", help="run the independent pieces on Ray: 'local' or a cluster's address")
    parser.add_argument("--rounds", type=int, help="stop after this many rounds (default: all)")
    parser.add_argument(
        "--pricing",
        type=int,
        metavar="PODS",
        help="instead: plan PODS pods at once at 1x, report pricing",
    )
    parser.add_argument(
        "--at-once",
        action="store_true",
        help="instead: the whole list replicated k times planned at once (--time-limit for the whole call)",
    )
    parser.add_argument("--order-seed", type=int, help="with --at-once: shuffle the rows with this seed")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b7.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    if args.pricing:
        print(pd.DataFrame([pricing_run(args.trace, args.seed, args.pricing, args.time_limit, args.ray)]).T)
        return
    if args.at_once:
        rows = [
            at_once_run(args.trace, args.seed, int(k), args.time_limit, args.order_seed)
            for k in args.scales.split(",")
        ]
        frame = pd.DataFrame(rows)
        if args.out.exists():
            frame = pd.concat([pd.read_csv(args.out), frame], ignore_index=True)
        write(frame, args.out)
        print(frame.to_string(index=False), flush=True)
        return
    runs_file = args.out.with_suffix(".jsonl")
    runs_file.parent.mkdir(parents=True, exist_ok=True)
    for k in (int(s) for s in args.scales.split(",")):
        run = run_scale(args.trace, args.seed, k, args.time_limit, ray=args.ray, max_rounds=args.rounds)
        with runs_file.open("a") as f:
            f.write(json.dumps({**asdict(run), "trace": args.trace, "seed": args.seed}) + "\n")
        table = summarise(_latest(runs_file, args.trace, args.seed))
        write(table, args.out)
        print(table.to_string(index=False), flush=True)


def _latest(path: Path, trace: str, seed: int) -> list[ScaleRun]:
    """The newest recorded run of each scale and back-end for this trace and seed, by scale (runs of the
    harness before ``make_plan``, which recorded the solver's ``parts``, are not comparable and are
    skipped)."""
    latest: dict[tuple[int, str], ScaleRun] = {}
    for line in path.read_text().splitlines():
        row = json.loads(line)
        if row.pop("trace") != trace or row.pop("seed") != seed or "parts" in row:
            continue
        row["alloc"] = {int(p): a for p, a in row["alloc"].items()}
        run = ScaleRun(**row)
        latest[(run.scale, run.backend)] = run
    return [latest[k] for k in sorted(latest)]


if __name__ == "__main__":
    main()
