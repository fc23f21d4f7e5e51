"""B2 / B2-m: periodic rounds on the Alibaba openb trace, gpuplan's CP-SAT against FGD and best-fit.

The arrival sequence of each seed is B1's (shuffled, inflated to 130% of GPU capacity). Arrivals are
released in rounds of 1% of GPU capacity; each round CP-SAT plans the round's arrivals together with
everything still waiting, placed work stays (B2) or up to ``--moves`` of the running pods may migrate
(B2-m). FGD and best-fit place the same sequence one pod at a time (B1's protocol), in the same
process, so all figures come from one run. The policy gives every tier weight 1, so the queue term is
the GPU demand left waiting and the comparison is about packing only.

Run ``python -m benchmarks.b2_rounds --help``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from benchmarks.b1_online import _seeds, _trace, arrivals, run, total_milli
from gpuplan.models import Policy, default_catalog
from gpuplan.models.policy import DisruptionBudget, Tier
from gpuplan.solvers.cpsat import CpSat
from gpuplan.solvers.cpsat.movers import fragmented_running
from gpuplan.solvers.placement import FirstFitScorer, Placer
from gpuplan.solvers.problem import NodeSpec, PlacementProblem, Request, Running

log = logging.getLogger("benchmarks.b2")

#: Arrived percentages at which allocation is reported.
REPORT_AT = (100, 130)


@dataclass(frozen=True)
class RoundsRun:
    """One gpuplan rounds run and the baselines on the same arrivals."""

    trace: str
    seed: int
    moves: float
    alloc: dict[int, float]
    fgd: dict[int, float]
    best_fit: dict[int, float]
    round_wall_s: list[float]
    moves_per_round: list[int]
    statuses: dict[str, int]


def bench_policy(moves: int) -> Policy:
    """Equal tier weights (packing only) and a migration budget of ``moves`` per round."""
    tiers = tuple(Tier(name=n, weight=1) for n in ("latency-sensitive", "standard", "background"))
    return Policy(tiers=tiers, disruption=DisruptionBudget(max_moves_per_round=moves))


def rounds(order: Sequence[Request], capacity: int, step: float = 0.01) -> list[list[Request]]:
    """Split the arrival sequence into rounds of ``step`` of the GPU capacity."""
    out: list[list[Request]] = [[]]
    arrived = 0
    boundary = step * capacity
    for pod in order:
        out[-1].append(pod)
        arrived += total_milli(pod)
        if arrived >= boundary:
            out.append([])
            boundary += step * capacity
    return [r for r in out if r]


@dataclass
class RoundsTrace:
    """What one rounds run recorded: (arrived %, allocated %) after each round, wall time, moves, statuses."""

    curve: list[tuple[float, float]] = field(default_factory=list)
    walls: list[float] = field(default_factory=list)
    moved: list[int] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)


def plan_rounds(
    nodes: tuple[NodeSpec, ...],
    order: Sequence[Request],
    seed: int,
    time_limit: float,
    moves: float,
    on_round: Callable[[], None] | None = None,
) -> RoundsTrace:
    """gpuplan's CP-SAT rounds over one arrival sequence (``on_round`` runs after each round)."""
    catalog = default_catalog()
    capacity = sum(1000 * len(n.gpus) for n in nodes)
    running: dict[tuple[str, int], Request] = {}
    waiting: list[Request] = []
    arrived = 0
    out = RoundsTrace()
    tracker = Placer(nodes, catalog, FirstFitScorer())
    for batch in rounds(order, capacity):
        arrived += sum(total_milli(p) for p in batch)
        queue = waiting + batch
        budget = int(moves * len(running))
        requests = (*running.values(), *queue)
        problem = PlacementProblem(
            nodes=nodes,
            requests=requests,
            catalog=catalog,
            policy=bench_policy(budget),
            time_limit_s=time_limit,
            seed=seed,
        )
        movable = fragmented_running(problem, budget * 4) if budget else set()
        t0 = time.perf_counter()
        result = CpSat(movable_running=movable).solve(problem)
        out.walls.append(time.perf_counter() - t0)
        out.statuses[result.status.value] = out.statuses.get(result.status.value, 0) + 1
        by_key = {r.key: r for r in requests}
        out.moved.append(0)
        new_running: dict[tuple[str, int], Request] = {}
        for a in result.assignments:
            req = by_key[(a.workload, a.replica)]
            where = Running(node=a.node, gpus=a.gpus, alternative=a.alternative)
            if req.running is not None and req.running != where:
                out.moved[-1] += 1
            new_running[req.key] = replace(req, running=where)
        if any(new_running.get(k) != r for k, r in running.items()):
            tracker = Placer(nodes, catalog, FirstFitScorer())  # something moved or stopped: rebuild
            running = {}
        for key, req in new_running.items():
            if key not in running:
                tracker.keep(req)
        running = new_running
        waiting = [q for q in queue if q.key not in running and tracker.ranked(q, 1)]
        out.curve.append((100 * arrived / capacity, 100 * tracker.used_gpu_milli / capacity))
        log.info(
            "round %d: arrived %.1f%% allocated %.2f%% waiting %d (%.1f s, %s, %d moves)",
            len(out.walls), *out.curve[-1], len(waiting), out.walls[-1], result.status.value, out.moved[-1],
        )  # fmt: skip
        if on_round is not None:
            on_round()
    return out


def run_rounds(trace: str, seed: int, time_limit: float, moves: float) -> RoundsRun:
    """gpuplan's rounds on one seed's arrivals, plus FGD and best-fit on the same arrivals."""
    nodes, pods = _trace(trace)
    capacity = sum(1000 * len(n.gpus) for n in nodes)
    order, _ = arrivals(pods, capacity, len(nodes), seed)
    order = [replace(p, workload=f"{p.workload}~{i}") for i, p in enumerate(order)]
    log.info("%s seed %d", trace, seed)
    ours = plan_rounds(nodes, order, seed, time_limit, moves)
    fgd = run(trace, "greedy-fgd", seed).curve
    best = run(trace, "best-fit", seed).curve
    return RoundsRun(
        trace,
        seed,
        moves,
        {k: _at(ours.curve, k) for k in REPORT_AT},
        {k: fgd[k] for k in REPORT_AT},
        {k: best[k] for k in REPORT_AT},
        ours.walls,
        ours.moved,
        ours.statuses,
    )


def _at(curve: Sequence[tuple[float, float]], percent: int) -> float:
    """Allocation after the first round whose arrivals reach ``percent`` (the last round if none)."""
    for arrived, alloc in curve:
        if arrived >= percent - 0.5:
            return round(alloc, 2)
    return round(curve[-1][1], 2)


def summarise(runs: Sequence[RoundsRun]) -> pd.DataFrame:
    """Per trace: means over seeds of gpuplan, FGD and best-fit, and round statistics."""
    rows = []
    for trace in dict.fromkeys(r.trace for r in runs):
        rs = [r for r in runs if r.trace == trace]
        walls = sorted(w for r in rs for w in r.round_wall_s)
        row: dict[str, object] = {"trace": trace, "seeds": len(rs), "moves": rs[0].moves}
        for k in REPORT_AT:
            ours = statistics.mean(r.alloc[k] for r in rs)
            fgd = statistics.mean(r.fgd[k] for r in rs)
            row[f"gpuplan_{k}"] = round(ours, 2)
            row[f"fgd_{k}"] = round(fgd, 2)
            row[f"best_fit_{k}"] = round(statistics.mean(r.best_fit[k] for r in rs), 2)
            row[f"gain_vs_fgd_{k}"] = round(ours - fgd, 2)
        row["round_wall_median_s"] = round(statistics.median(walls), 2)
        row["round_wall_p99_s"] = round(walls[min(len(walls) - 1, int(0.99 * len(walls)))], 2)
        row["moves_per_round_mean"] = round(statistics.mean(m for r in rs for m in r.moves_per_round), 2)
        statuses: dict[str, int] = {}
        for r in rs:
            for s, n in r.statuses.items():
                statuses[s] = statuses.get(s, 0) + n
        row["round_statuses"] = " ".join(f"{s}:{n}" for s, n in sorted(statuses.items()))
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--traces", default="default,gpushare100,multigpu50")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--time-limit", type=float, default=3.0, help="CP-SAT seconds per round")
    parser.add_argument("--moves", type=float, default=0.0, help="share of running pods movable per round")
    parser.add_argument("--out", default="benchmarks/results/b2.csv")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    runs = [
        run_rounds(trace, seed, args.time_limit, args.moves)
        for trace in args.traces.split(",")
        for seed in _seeds(args.seeds)
    ]
    table = summarise(runs)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
