"""B4: what to buy for the pods that fail at 130% arrivals on openb default, against the naive count.

Per seed the arrival sequence is B1's (the default pod list shuffled and inflated to 130% of GPU
capacity). FGD places it one pod at a time (B1's protocol); gpuplan (``make_plan``, default solver,
every tier weight 1) plans all arrived pods at once within ``--time-limit``. The GPU pods each leaves
unplaced are the gap demand. The capacity-gap purchase MILP (:mod:`planner.capacity.purchase`) chooses the
cheapest mix of the node shapes of ``openb_node_list_all_node.csv`` (EXAMPLE prices below), and the
purchase is checked by placing the failed pods on the purchased nodes alone with FGD; what is left
over is bought by a second MILP (at most ``--repair-rounds`` times). The naive answer is
``ceil(failed GPU demand / 8)`` nodes of the fleet's most common GPU node shape (G2, 8 GPUs).

Run ``python -m benchmarks.b4_capacity --help``.
"""

from __future__ import annotations

import argparse
import logging
import math
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from benchmarks.common import (
    NOW,
    TRACE_DIR,
    arrived_pods,
    bench_policy,
    compile_pods,
    openb_cluster,
    openb_trace,
    parse_seeds,
    scorer_for,
    timed,
    total_milli,
    write,
)
from gpuplan.models import PlanningInput, default_catalog
from gpuplan.models.capacity import NodeType, NodeTypeCatalog
from gpuplan.planner.capacity.node_types import node_for, type_specs
from gpuplan.planner.capacity.purchase import TypeSpec, shape_fits, solve_purchase
from gpuplan.planner.io.importers.openb import read_cluster
from gpuplan.planner.pipeline.compile import compile_node
from gpuplan.planner.planning import make_plan
from gpuplan.solvers.placement import Placer
from gpuplan.solvers.problem import Request

log = logging.getLogger("benchmarks.b4")

#: EXAMPLE price per GPU by openb model code (round illustrative figures, not quotes).
EXAMPLE_GPU_PRICE = {
    "A10": 3500, "G2": 10000, "G3": 12000, "P100": 2500, "T4": 2000, "V100M16": 6000, "V100M32": 8000,
}  # fmt: skip
#: EXAMPLE price of a server without GPUs: a base plus CPU cores and memory.
EXAMPLE_BASE, EXAMPLE_PER_CORE, EXAMPLE_PER_GIB = 6000, 40, 4

#: The node shape of the naive answer (the most common GPU node of the fleet).
NAIVE_SHAPE = "G2x8-c96-m384"

ALL_NODES = TRACE_DIR / "openb_node_list_all_node.csv"


def node_types(path: Path = ALL_NODES) -> NodeTypeCatalog:
    """One node type per distinct GPU node shape of the openb node list, with EXAMPLE prices."""
    shapes = Counter(
        (n.pool or "", n.gpus[0].model, len(n.gpus), n.cpu_milli, n.memory_mib)
        for n in read_cluster(path).nodes
        if n.gpus
    )
    types = []
    for code, model, gpus, cpu, mem in sorted(shapes):
        cost = (
            EXAMPLE_BASE + cpu // 1000 * EXAMPLE_PER_CORE + mem // 1024 * EXAMPLE_PER_GIB
            + gpus * EXAMPLE_GPU_PRICE[code]
        )  # fmt: skip
        types.append(
            NodeType(
                name=f"{code}x{gpus}-c{cpu // 1000}-m{mem // 1024}",
                gpu_model=model,
                gpus=gpus,
                cpu_milli=cpu,
                memory_mib=mem,
                unit_cost=float(cost),
            )
        )
    return NodeTypeCatalog(currency="USD", note="EXAMPLE prices", node_types=tuple(types))


def _verify(
    pods: list[Request], counts: dict[str, int], catalog: NodeTypeCatalog, serial: list[int]
) -> tuple[list[Request], float]:
    """Place ``pods`` with FGD on fresh nodes of the bought types; the pods left over, and the time."""
    hw = default_catalog()
    nodes = []
    for name, count in sorted(counts.items()):
        t = catalog.node_type(name)
        for _ in range(count):
            serial[0] += 1
            nodes.append(compile_node(node_for(t, f"new-{serial[0]:05d}", 0, {}, hw), hw))
    t0 = time.perf_counter()
    placer = Placer(tuple(nodes), hw, scorer_for("greedy-fgd", nodes, pods))
    # Largest GPU requests first, as a buyer would fill new servers.
    left = [p for p in sorted(pods, key=lambda p: -total_milli(p)) if placer.place(p) is None]
    return left, time.perf_counter() - t0


def purchase(
    pods: list[Request],
    catalog: NodeTypeCatalog,
    specs: list[TypeSpec],
    args: argparse.Namespace,
    prefix: str,
) -> dict[str, object]:
    """The purchase MILP for ``pods`` over ``specs``, checked by FGD placement and repaired."""
    counts: dict[str, int] = {}
    bound, milp_wall, verify_wall, serial = 0.0, 0.0, 0.0, [0]
    todo = [p for p in pods if any(shape_fits(s, t) is None for s in p.shapes for t in specs)]
    unservable, status, rounds = len(pods) - len(todo), "", 0
    for attempt in range(args.repair_rounds + 1):
        rounds = attempt + 1
        sol = solve_purchase(todo, specs, policy=bench_policy(0), time_limit_s=args.milp_time_limit)
        milp_wall += sol.wall_s
        status = status or sol.status
        bound = bound or sol.lower_bound
        for name, n in sol.counts.items():
            counts[name] = counts.get(name, 0) + n
        todo, wall = _verify(todo, sol.counts, catalog, serial)
        verify_wall += wall
        log.info("round %d: bought %s, %d pods left", attempt, sol.counts, len(todo))
        if not todo:
            break
    cost = sum(catalog.node_type(k).unit_cost * n for k, n in counts.items())
    out: dict[str, object] = {
        "nodes": sum(counts.values()),
        "gpus": sum(catalog.node_type(k).gpus * n for k, n in counts.items()),
        "cost": cost,
        "lower_bound": round(bound, 2),
        "gap_pct": round(100 * (cost - bound) / cost, 2) if cost else 0.0,
        "milp_status": status,
        "milp_wall_s": round(milp_wall, 2),
        "verify_wall_s": round(verify_wall, 2),
        "milp_rounds": rounds,
        "left_unplaced": len(todo),
        "unservable": unservable,
        "mix": " ".join(f"{n}x{k}" for k, n in sorted(counts.items())),
    }
    return {f"{prefix}_{k}": v for k, v in out.items()}


def gap_for(
    failed: list[Request], catalog: NodeTypeCatalog, specs: list[TypeSpec], args: argparse.Namespace
) -> dict[str, object]:
    """The naive count, the capacity-gap purchase over all shapes, and over the naive shape only."""
    gpu_pods = [p for p in failed if total_milli(p) > 0]
    demand = sum(total_milli(p) for p in gpu_pods)
    naive = catalog.node_type(NAIVE_SHAPE)
    naive_nodes = math.ceil(demand / 1000 / naive.gpus)
    row: dict[str, object] = {
        "failed_pods": len(failed),
        "failed_gpu_pods": len(gpu_pods),
        "failed_gpus": round(demand / 1000, 2),
        "naive_nodes": naive_nodes,
        "naive_gpus": naive_nodes * naive.gpus,
        "naive_cost": naive_nodes * naive.unit_cost,
    }
    row.update(purchase(gpu_pods, catalog, specs, args, "gap"))
    only = catalog.model_copy(update={"node_types": (naive,)})
    row.update(purchase(gpu_pods, only, [s for s in specs if s.name == NAIVE_SHAPE], args, "same_shape"))
    return row


def run_seed(seed: int, args: argparse.Namespace) -> list[dict[str, object]]:
    """FGD and gpuplan on one seed's 130% arrivals, and the capacity gap of what each leaves unplaced."""
    nodes, pods = openb_trace("default")
    catalog = node_types()
    specs = type_specs(catalog, default_catalog())
    workloads, rank = arrived_pods("default", seed)
    order = compile_pods(workloads)
    placer = Placer(nodes, default_catalog(), scorer_for("greedy-fgd", nodes, pods), rank=rank)
    failed = {"greedy-fgd": [p for p in order if placer.place(p) is None]}
    inp = PlanningInput(cluster=openb_cluster(), workloads=tuple(workloads), policy=bench_policy())
    plan, wall = timed(lambda: make_plan(inp, now=NOW, time_limit_s=args.time_limit, seed=seed))
    log.info("gpuplan offline: %s in %.1f s", plan.status.value, wall)
    waiting = {(u.workload, u.replica) for u in plan.unplaced}
    failed["gpuplan"] = [p for p in order if p.key in waiting]
    rows = []
    for planner_name, lost in failed.items():
        row: dict[str, object] = {"seed": seed, "planner": planner_name, "arrived_pods": len(order)}
        if planner_name == "gpuplan":
            row.update({"planner_status": plan.status.value, "planner_wall_s": round(wall, 1)})
        row.update(gap_for(lost, catalog, specs, args))
        log.info("%s", row)
        rows.append(row)
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", default="42")
    parser.add_argument("--time-limit", type=float, default=120.0, help="make_plan seconds")
    parser.add_argument("--milp-time-limit", type=float, default=60.0)
    parser.add_argument("--repair-rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/b4.csv"))
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    rows = [row for s in parse_seeds(args.seeds) for row in run_seed(s, args)]
    frame = pd.DataFrame(rows)
    write(frame, args.out)
    print(frame.to_string(index=False))


if __name__ == "__main__":
    main()
