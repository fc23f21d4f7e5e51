"""B2 ablation: greedy-only rounds, which target mix and which queue orders a round's FGD plan needs.

B2's arrivals (B1's sequence for the seed, 130% of the openb fleet's GPU capacity) in rounds of 1% of
capacity, placed round by round on one placer by FGD, with no solver and no time limit (so the result
does not depend on the machine's load). Each round places its arrivals in arrival order, or in the best
of ``--orders`` queue orders (``solvers.greedy.orders.best_order``, as the engine's hint: least queue
penalty waiting, then least fragmentation added), scored by FGD for a target mix estimated from:

- ``demand``: what runs plus the round's queue (the engine's mix without an arrival window);
- ``window:N``: the latest N arrived replicas, this round's included (the executor's arrival window);
- ``trace``: the trace's own pods (what online FGD uses).

A pod that fits nowhere after its round is dropped (the FGD protocol; a greedy round only leaves waiting
what fits nowhere). Allocation is read after the first round whose arrivals reach 100% and 130%, as
B2 does, next to online FGD (B1) on the same seed. Ties between equal scores go by the benchmark's
random node ranks (as online FGD's, ``--ties rank``), by node order (``--ties order``; the engine's
before it spread its ties) or by the placer's own rank, a hash of each node's name (as the engine's,
``--ties spread``).

Run ``python -m benchmarks.b2_ablation --help``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from benchmarks.b1_online import run
from benchmarks.common import (
    RoundsTrace,
    arrivals,
    bench_policy,
    capacity_milli,
    openb_trace,
    parse_seeds,
    rounds,
    total_milli,
    write,
)
from gpuplan.models import default_catalog
from gpuplan.solvers.greedy import FgdScorer
from gpuplan.solvers.greedy.orders import best_order
from gpuplan.solvers.placement import Placer, Target, shape_mix, target_mix
from gpuplan.solvers.problem import PlacementProblem, Request, ShapeSpec

log = logging.getLogger("benchmarks.b2_ablation")

#: Round size, as a share of the GPU capacity (B2's).
ROUND_STEP = 0.01
#: Arrived percentages at which allocation is reported (B2's).
REPORT_AT = (100, 130)


def greedy_rounds(trace: str, seed: int, mix: str, orders: int, ties: str) -> dict[int, float]:
    """Allocation (%) at each of :data:`REPORT_AT` for one seed, target-mix rule and number of orders."""
    nodes, pods = openb_trace(trace)
    capacity = capacity_milli(nodes)
    order, rank = arrivals(pods, capacity, len(nodes), seed)
    catalog = default_catalog()
    policy = bench_policy()
    scorer = FgdScorer(target_mix(pods))
    ranks = {"rank": rank, "order": list(range(len(nodes))), "spread": None}
    placer = Placer(nodes, catalog, scorer, rank=ranks[ties])
    window: deque[tuple[ShapeSpec, ...]] | None = None
    if mix.startswith("window:"):
        window = deque(maxlen=int(mix.partition(":")[2]))
    running: list[Request] = []
    out = RoundsTrace()
    arrived = 0
    for batch in rounds([pods[i] for i in order], total_milli, ROUND_STEP * capacity):
        arrived += sum(total_milli(r) for r in batch)
        targets: Sequence[Target] | None = None
        if mix == "demand":
            targets = target_mix([*running, *batch])
        elif window is not None:
            window.extend(r.shapes for r in batch)
            targets = shape_mix(window)
        if targets is not None:
            scorer = FgdScorer(targets)
            placer.use_scorer(scorer)
        queue: Sequence[Request] = batch
        if orders > 1:
            problem = PlacementProblem(nodes, tuple(batch), catalog, policy)
            queue = best_order(
                problem,
                placer,
                batch,
                lambda order: [r for r in order if placer.place(r) is None],
                scorer.fragmentation,
                tries=orders,
                until=None,
                now=time.perf_counter,
                seed=seed,
            )
        running.extend(r for r in queue if placer.place(r) is not None)
        out.arrived.append(arrived)
        out.held.append(placer.used_gpu_milli)
    return {k: out.at(capacity, k) for k in REPORT_AT}


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: one row per (mix, orders), one column per seed at 130%, gains over online FGD."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trace", default="default")
    parser.add_argument("--seeds", default="42-44")
    parser.add_argument("--mixes", default="demand,window:250,window:1000,window:4000,trace")
    parser.add_argument("--orders", default="1,8", help="numbers of queue orders tried per round")
    parser.add_argument("--ties", choices=("rank", "order", "spread"), default="rank")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b2_ablation.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    log.setLevel(logging.INFO if args.verbose else logging.WARNING)
    seeds = parse_seeds(args.seeds)
    fgd = {s: run(args.trace, "greedy-fgd", s).curve for s in seeds}
    rows = []
    for orders in (int(o) for o in args.orders.split(",")):
        for mix in args.mixes.split(","):
            row: dict[str, object] = {"trace": args.trace, "ties": args.ties, "mix": mix, "orders": orders}
            gains = []
            for s in seeds:
                alloc = greedy_rounds(args.trace, s, mix, orders, args.ties)
                gains.append(round(alloc[130] - fgd[s][130], 2))
                row[f"alloc_100_{s}"] = alloc[100]
                row[f"alloc_130_{s}"] = alloc[130]
                row[f"gain_130_{s}"] = gains[-1]
                log.info("%s orders %d seed %d: %s (FGD %s)", mix, orders, s, alloc, fgd[s][130])
            row["gain_130_median"] = round(statistics.median(gains), 2)
            rows.append(row)
    table = pd.DataFrame(rows)
    for s in seeds:
        table[f"fgd_130_{s}"] = fgd[s][130]
    write(table, args.out)
    print(table.to_string(index=False))


if __name__ == "__main__":
    main()
