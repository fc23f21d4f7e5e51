"""B22: the throughput-vs-fairness frontier and the price of each rule, on the bundled example and on an
openb list with teams, with the wall time of each.

Inputs (``--inputs``):

- ``demo``: the bundled example (``data/examples``), planned at 2026-11-29T12:00Z (6 teams, its policy).
- ``openb``: a sample of the openb trace (Alibaba GPU v2023, ``data/traces``): the first ``--nodes`` GPU
  nodes of the node list (by row) and pods of the default pod list drawn with ``--seed`` until their
  GPUs add up to ``--load`` times the nodes' (each pod once, in the trace's name order), as ``gpuplan
  import openb`` reads them. The trace names no users, so each pod gets a team by a seeded rule (stated):
  ``team-k`` with ``k`` drawn with weights 8, 4, 2, 1, 1 (``random.Random(seed)``, in name order), so a
  few teams ask for most of the fleet. Its policy: the default tiers, a disruption budget of 4 moves and
  2 preemptions.

For each input: ``frontier`` (the sweep of :func:`gpuplan.planner.policy.frontier.frontier`, ``--points``
points, ``--probes`` probes) within ``--frontier-limit`` seconds, and ``policy-cost`` within
``--cost-limit`` seconds (deterministic plans, as the command makes them). Every plan is validated (made
by ``make_plan``). Output: ``benchmarks/results/b22_frontier.csv`` (one row per point),
``b22_costs.csv`` (one row per rule) and the tables for benchmarks/README.md.

Run ``python -m benchmarks.b22_policy --help``.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from benchmarks.common import markdown, openb_cluster, openb_pods, timed, write
from gpuplan.models import Cluster, PlanningInput, Policy, default_catalog
from gpuplan.models.catalog import data_dir
from gpuplan.models.policy import DisruptionBudget
from gpuplan.models.review import FrontierPoint
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.io.files import load_input
from gpuplan.planner.policy.budget import seconds_each
from gpuplan.planner.policy.cost import Prices, Run, policy_cost
from gpuplan.planner.policy.frontier import frontier, solves_needed
from gpuplan.planner.policy.relax import input_relaxations

log = logging.getLogger("benchmarks.b22")

RESULTS = Path(__file__).resolve().parent / "results"
DEMO_NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
OPENB_NOW = datetime(2026, 1, 1, tzinfo=UTC)
#: Team weights of the seeded rule: team-0 draws 8 in 16 pods, team-4 1 in 16.
TEAM_WEIGHTS = (8, 4, 2, 1, 1)

FRONTIER_COLUMNS = (
    ("input", "input", ""), ("floor", "floor", ""), ("reached", "reached", ""), ("fairness", "fairness", ""),
    ("Jain", "jain", ""), ("objective", "objective", ""), ("bound", "bound", ""), ("gap", "gap", ""),
    ("price", "price", ""), ("GPUs", "gpus", ""), ("step", "step", ""),
)  # fmt: skip
COST_COLUMNS = (
    ("input", "input", ""), ("rule relaxed", "relaxed", ""), ("cost", "cost", ",.0f"),
    ("significant", "significant", ""), ("GPUs", "gpus", "+.2f"), ("placed", "placed", "+d"),
    ("money/h", "money", ""),
)  # fmt: skip


def demo() -> tuple[PlanningInput, datetime]:
    """The bundled example and its planning time."""
    ex = data_dir() / "examples"
    return load_input(ex / "cluster.yaml", ex / "workloads.yaml", ex / "policy.yaml"), DEMO_NOW


def openb(nodes: int, load: float, seed: int) -> tuple[PlanningInput, datetime]:
    """The openb sample the module describes."""
    fleet = openb_cluster().nodes[:nodes]
    capacity = sum(len(n.gpus) for n in fleet)
    models = {g.model for n in fleet for g in n.gpus}
    rng = random.Random(seed)
    pods = [w for w in openb_pods("default") if not w.gpu_models or set(w.gpu_models) & models]
    rng.shuffle(pods)
    chosen, asked = [], 0.0
    for w in pods:
        if asked >= load * capacity:
            break
        chosen.append(w)
        asked += w.gpus + w.gpu_milli / 1000
    chosen.sort(key=lambda w: w.id)
    teams = random.Random(seed)
    names = [f"team-{k}" for k in range(len(TEAM_WEIGHTS))]
    workloads = tuple(
        w.model_copy(update={"team": teams.choices(names, weights=TEAM_WEIGHTS)[0]}) for w in chosen
    )
    policy = Policy(disruption=DisruptionBudget(max_moves_per_round=4, max_preemptions_per_round=2))
    return PlanningInput(cluster=Cluster(nodes=fleet), workloads=workloads, policy=policy), OPENB_NOW


def _point(p: FrontierPoint) -> dict[str, object]:
    """A frontier point's row (a floor not reached shows its bound only)."""
    s, shown = p.solve, p.reached
    floor = "none" if p.level == 0 else f"{p.level:.3f}" + ("" if p.asked else "*")
    missed = "no, proved" if p.unreachable_proved else "no plan found"
    return {
        "floor": floor,
        "reached": "yes" if shown else missed,
        "fairness": f"{p.fairness:.3f}" if shown and p.fairness is not None else "",
        "jain": f"{p.jain:.3f}" if shown and p.jain is not None else "",
        "objective": f"{s.objective or 0:,.0f}" if shown else "",
        "bound": "" if s.best_bound is None else f"{s.best_bound:,.0f}",
        "gap": f"{s.gap:.1%}" if shown and s.gap is not None else "",
        "price": f"{p.price_queue_share:+.2%}" if shown and p.price_queue_share is not None else "",
        "gpus": f"{p.price_gpus_allocated:+.2f}" if shown else "",
        "step": "" if p.proved is None else ("proved" if p.proved else "within gaps"),
    }


def _run(now: datetime, seconds: float, *, deterministic: bool) -> Run:
    return Run("cpsat", 0, 2, deterministic, now, default_catalog(), seconds)


def bench(
    name: str, inp: PlanningInput, now: datetime, args: argparse.Namespace
) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """The frontier's points and the rules' costs of one input, each with the command's wall time."""
    catalog = default_catalog()
    prices = Prices.of(load_node_types(None, catalog), catalog)
    load = os.getloadavg()[0]
    runs = solves_needed(args.points, args.probes, None, current_floor=inp.policy.fair_floor is not None)
    each = seconds_each(args.frontier_limit, runs, deterministic=False)
    result, wall = timed(
        lambda: frontier(
            inp, _run(now, each, deterministic=False), prices, points=args.points, probes=args.probes
        )
    )
    points: list[dict[str, object]] = []
    for p in result.points:
        points.append({"input": name, **_point(p), "seconds_each": round(each, 2), "wall_s": round(wall, 1),
                       "load": round(load, 2)})  # fmt: skip
    log.info("%s: frontier of %d points in %.1f s (load %.2f)", name, len(points), wall, load)
    rules, _ = input_relaxations(inp.policy, inp.workloads)
    costs: list[dict[str, object]] = []
    if rules:
        load = os.getloadavg()[0]
        each = seconds_each(args.cost_limit, 1 + len(rules), deterministic=True)
        priced, wall = timed(lambda: policy_cost(inp, rules, _run(now, each, deterministic=True), prices))
        for c in priced:
            costs.append(
                {
                    "input": name, "relaxed": c.relaxed, "cost": c.cost,
                    "significant": "yes" if c.significant else "no", "gpus": c.gpus_allocated_change,
                    "placed": c.replicas_placed_change,
                    "money": "-" if c.money_per_hour is None else f"{c.money_per_hour:+,.2f}",
                    "seconds_each": round(each, 2), "wall_s": round(wall, 1), "load": round(load, 2),
                }
            )  # fmt: skip
        log.info("%s: %d rules priced in %.1f s (load %.2f)", name, len(priced), wall, load)
    return points, costs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--inputs", default="demo,openb")
    p.add_argument(
        "--frontier-limit", type=float, default=100.0, help="seconds for each frontier (default 100)"
    )
    p.add_argument(
        "--cost-limit", type=float, default=120.0, help="seconds for each policy-cost (default 120)"
    )
    p.add_argument("--points", type=int, default=6)
    p.add_argument("--probes", type=int, default=3)
    p.add_argument("--nodes", type=int, default=40, help="openb: the first N GPU nodes (default 40)")
    p.add_argument("--load", type=float, default=1.3, help="openb: GPUs asked per GPU (default 1.3)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    frontier_rows: list[dict[str, object]] = []
    cost_rows: list[dict[str, object]] = []
    for name in args.inputs.split(","):
        inp, now = demo() if name == "demo" else openb(args.nodes, args.load, args.seed)
        points, costs = bench(name, inp, now, args)
        frontier_rows += points
        cost_rows += costs
    f, c = pd.DataFrame(frontier_rows), pd.DataFrame(cost_rows)
    write(f, RESULTS / "b22_frontier.csv")
    write(c, RESULTS / "b22_costs.csv")
    print(markdown(f, FRONTIER_COLUMNS))
    print()
    if not c.empty:
        print(markdown(c, COST_COLUMNS))
    for name in args.inputs.split(","):
        first = next(r for r in frontier_rows if r["input"] == name)
        line = (
            f"{name}: frontier {first['wall_s']} s ({first['seconds_each']} s per plan, load {first['load']})"
        )
        priced = [r for r in cost_rows if r["input"] == name]
        if priced:
            c0 = priced[0]
            line += f"; policy-cost {c0['wall_s']} s ({c0['seconds_each']} s per plan, load {c0['load']})"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
