"""``gpuplan replan`` (nightly replanning with plan history) and ``gpuplan simulate`` (the B5 loop)."""

from __future__ import annotations

import argparse
import csv
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from gpuplan.cli import common
from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog
from gpuplan.planner.io.files import load_policy, planning_input, write_json
from gpuplan.planner.pipeline.deadline import solve_share
from gpuplan.planner.presentation import summary

if TYPE_CHECKING:
    from gpuplan.models.inputs import PlanningInput
    from gpuplan.planner.store.history import PlanHistory

log = logging.getLogger(__name__)


def _with_rounds(inp: PlanningInput, rounds: int) -> PlanningInput:
    """The input with ``rounds`` rounds' worth of moves and preemptions allowed for the solve."""
    if rounds <= 1:
        return inp
    b = inp.policy.disruption
    # A copy: every other field of the budget (preemption rules, minimum runtime, ...) stays as given.
    budget = b.model_copy(
        update={
            "max_moves_per_round": b.max_moves_per_round * rounds,
            "max_preemptions_per_round": b.max_preemptions_per_round * rounds,
            "max_moves_per_team": None if b.max_moves_per_team is None else b.max_moves_per_team * rounds,
        }
    )
    return inp.model_copy(update={"policy": inp.policy.model_copy(update={"disruption": budget})})


def _state(args: argparse.Namespace, history: PlanHistory) -> tuple[PlanningInput, str]:
    """The current state: a Kubernetes fleet's nodes and pods, or the files, else the inputs of the latest
    stored plan; ``--policy`` replaces the stored policy (the Kubernetes state keeps the stored one
    without it). With it, where the policy in force comes from."""
    policy = load_policy(Path(args.policy)) if args.policy else None
    given = f"policy: {args.policy}"
    if args.kubernetes_state:
        from gpuplan.planner.io.importers.kubernetes import read_state_dir

        if args.cluster or args.workloads:
            raise InputError("--kubernetes-state: give it instead of --cluster and --workloads")
        folder = Path(args.kubernetes_state)
        stored = history.latest()
        if policy is None:
            if stored is not None:
                policy, given = stored.inputs.policy, f"policy: plan {stored.id}'s (the latest stored)"
            else:
                policy = load_policy(None)
                given = "policy: the default (no --policy and no stored plan; give --policy to change it)"
        # A priority class whose pods had another tier in the latest stored plan is a warning.
        before = (
            None
            if stored is None
            else ({w.id: w.tier for w in stored.inputs.workloads}, f"plan {stored.id} (the latest stored)")
        )
        state = read_state_dir(folder, tiers=policy.tiers, previous_tiers=before)
        return planning_input(state.cluster, state.workloads, policy, source=str(folder)), given
    if args.cluster and args.workloads:
        inp = common.input_from_args(args)
        return inp, given if args.policy else "policy: the default (no --policy)"
    if args.cluster or args.workloads:
        raise InputError("--cluster and --workloads: give both, or neither to replan the stored state")
    stored = history.latest()
    if stored is None:
        raise InputError("no stored plan to replan from: give --cluster and --workloads")
    if policy is None:
        return stored.inputs, f"policy: plan {stored.id}'s (the latest stored)"
    inp = planning_input(stored.inputs.cluster, stored.inputs.workloads, policy, source=str(args.policy))
    return inp, given


def policy_line(source: str, inp: PlanningInput) -> str:
    """The policy in force, first in replan's output: where it comes from and its disruption budget (a
    default policy moves and preempts nothing)."""
    b = inp.policy.disruption
    team = "" if b.max_moves_per_team is None else f", {b.max_moves_per_team} per team"
    return (
        f"{source}; per round at most {b.max_moves_per_round} move(s){team} and "
        f"{b.max_preemptions_per_round} preemption(s)"
    )


def cmd_replan(args: argparse.Namespace) -> int:
    """Replan the current state with a long time limit, store the plan and print what changed."""
    from gpuplan.planner.io.exporters import kubernetes, migparted
    from gpuplan.planner.pipeline.actions import plan_actions
    from gpuplan.planner.planning import make_plan
    from gpuplan.planner.store.history import PlanHistory, plan_diff

    if args.rounds < 1:
        raise InputError("--rounds: must be at least 1")
    deadline = common.command_deadline(args)
    history = PlanHistory(args.db)
    inp, source = _state(args, history)
    print(policy_line(source, inp))
    images = common.images_from_args(args)
    if args.k8s_out:  # before anything is planned or stored
        images.require(w for w in inp.workloads if kubernetes.creates_pod(w))
    previous = history.latest()
    now = common.parse_now(args.now) or datetime.now(UTC)
    catalog = default_catalog()
    # Fair share weighs what each team used: the stored plans' placements until the latest of them.
    inp = history.with_usage(inp, now, catalog)
    ray = common.ray_from_args(args)  # before the solve's share of the time limit is taken
    solve_s = solve_share(args.time_limit, deadline)
    solve_started = time.perf_counter()
    plan = make_plan(
        _with_rounds(inp, args.rounds),
        solver=args.solver,
        now=now,
        time_limit_s=solve_s,
        seed=args.seed,
        num_workers=args.workers,
        deterministic=True,
        previous=previous.plan if previous is not None else None,
        ray=ray,
    )
    if deadline.expired():
        log.warning(
            "the solve took %.1f s, past its %.1f s share: the command ends after --time-limit %g s",
            time.perf_counter() - solve_started, solve_s, args.time_limit,
        )  # fmt: skip
    plan = plan.model_copy(
        update={
            "actions": plan_actions(
                inp,
                plan.assignments,
                plan.mig_layouts,
                catalog,
                now,
                sharing=plan.sharing,
                mig_modes=plan.mig_modes,
            ),
            "provenance": {
                **plan.provenance,
                "replan_rounds": args.rounds,
                "replan_time_limit_s": args.time_limit,
            },
        }
    )
    plan_id = history.save(plan, inp)
    print(summary.render(plan, inp))
    print(
        f"stored as plan {plan_id} ({'first plan' if previous is None else f'previous: plan {previous.id}'})"
    )
    # From Kubernetes, the diff is against what runs now, not against the previous plan.
    before = None if previous is None or args.kubernetes_state else previous.plan
    print(plan_diff(before, plan, inp, None if previous is None else previous.inputs).render())
    if args.out:
        write_json(Path(args.out), plan)
        print(f"plan written to {args.out}")
    if args.k8s_out:
        options = common.export_options_from_args(args, args.kubernetes_state)
        steps = kubernetes.steps(plan, inp, images, args.namespace, options)
        paths = kubernetes.write_rounds(steps, Path(args.k8s_out))
        print(f"Kubernetes objects written to {args.k8s_out} ({len(paths)} round files)")
    if args.mig_parted_out:
        Path(args.mig_parted_out).write_text(migparted.render(inp.cluster, plan.mig_layouts, plan.mig_modes))
        print(f"mig-parted config written to {args.mig_parted_out}")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate gpuplan, FGD and best-fit on the same Poisson arrivals; print (and write) the metrics."""
    from gpuplan.planner.executor.simulate import SimConfig, simulate_all

    if not 0 < args.rho <= 2 or args.nodes < 1 or args.hours <= args.warmup_hours or args.round_s <= 0:
        raise InputError(
            "simulate: need 0 < --rho <= 2, --nodes >= 1, --hours > --warmup-hours, --round-s > 0"
        )
    seeds = args.seeds or [args.seed]
    trace_dir = Path(args.trace_dir)
    if not (trace_dir / f"openb_pod_list_{args.trace}.csv").is_file():
        raise InputError(f"--trace-dir: {trace_dir} has no openb_pod_list_{args.trace}.csv")
    # One configuration; only the offered load varies between the runs.
    base = SimConfig(
        nodes=args.nodes,
        hours=args.hours,
        warmup_hours=args.warmup_hours,
        round_s=args.round_s,
        median_duration_s=args.median_duration_s,
        sigma=args.sigma,
        seed=args.seed,
        time_limit_s=args.time_limit,
        moves_per_round=args.moves,
        trace=args.trace,
        trace_dir=trace_dir,
        admission=args.admission == "greedy",
        deterministic=args.deterministic,
    )
    cfgs = [replace(base, rho=rho, seed=seed) for rho in args.rho_list or [args.rho] for seed in seeds]
    progress = args.progress.note if args.progress else None
    results = simulate_all(cfgs, progress, ray=common.ray_from_args(args))
    rows: list[dict[str, object]] = []
    for cfg, result in zip(cfgs, results, strict=True):
        rows.extend(
            {"rho": cfg.rho, **({"seed": cfg.seed} if args.seeds else {}), "policy": name, **metrics}
            for name, metrics in result.items()
        )
    columns = list(dict.fromkeys(k for r in rows for k in r))
    print("  ".join(columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")) for c in columns))
    if args.out:
        with Path(args.out).open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
        print(f"results written to {args.out}")
    return 0


def _int_list(text: str) -> list[int]:
    """``0,1,2`` as a list of integers (argparse reports a bad one as a usage error, exit 2)."""
    return [int(x) for x in text.split(",")]


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``replan`` and ``simulate``."""
    from gpuplan.planner.executor.simulate import SimConfig

    p = sub.add_parser("replan", help="nightly replanning: long solve, plan history, diff from the last plan")
    p.add_argument("--cluster", help="cluster file (default: the state of the latest stored plan)")
    p.add_argument("--workloads", help="workloads file, with running_on for what runs now")
    p.add_argument(
        "--kubernetes-state",
        metavar="DIR",
        help="replan what runs now on a Kubernetes fleet: DIR holds nodes.json and pods.json (kubectl JSON)",
    )
    p.add_argument(
        "--policy", help="policy file (without --cluster: default the latest stored plan's policy)"
    )
    p.add_argument("--db", help="plan history: a SQLite file or a PostgreSQL URL (default gpuplan.db)")
    common.add_solve_options(p, 300.0, "seconds for the whole command", deterministic=False)
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds the plan may take: moves allowed = budget per round x rounds",
    )
    p.add_argument("--out", help="write the plan JSON here")
    p.add_argument("--k8s-out", help="write the Kubernetes objects, one file per round, to this directory")
    common.add_kubernetes_options(p)
    p.add_argument("--mig-parted-out", help="write the NVIDIA MIG manager config (YAML) here")
    p.set_defaults(func=cmd_replan)

    d = SimConfig()
    p = sub.add_parser("simulate", help="simulate rounds of gpuplan, FGD and best-fit on Poisson arrivals")
    p.add_argument("--rho", type=float, default=d.rho, help=f"offered GPU load (default {d.rho})")
    p.add_argument(
        "--rho-list",
        type=lambda v: [float(x) for x in v.split(",")],
        help="several loads, e.g. 0.85,0.95,1.05",
    )
    p.add_argument("--nodes", type=int, default=d.nodes, help=f"openb GPU nodes sampled (default {d.nodes})")
    p.add_argument("--hours", type=float, default=d.hours, help=f"simulated hours (default {d.hours:g})")
    p.add_argument(
        "--warmup-hours", type=float, default=d.warmup_hours, help="arrivals not measured at first"
    )
    p.add_argument(
        "--round-s", type=float, default=d.round_s, help=f"seconds per round (default {d.round_s:g})"
    )
    p.add_argument("--median-duration-s", type=float, default=d.median_duration_s, help="lognormal median")
    p.add_argument("--sigma", type=float, default=d.sigma, help="lognormal sigma")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument(
        "--seeds",
        type=_int_list,
        help="several seeds, e.g. 0,1: one run per load and seed (a seed column in the output)",
    )
    p.add_argument("--time-limit", type=float, default=2.0, help="CP-SAT seconds per round (default 2)")
    p.add_argument("--moves", type=int, default=d.moves_per_round, help="gpuplan's moves per round")
    p.add_argument("--trace", default=d.trace, help="openb pod list (default, gpushare100, multigpu50)")
    p.add_argument("--trace-dir", default=str(d.trace_dir))
    p.add_argument(
        "--admission",
        choices=("none", "greedy"),
        default="none",
        help="greedy: every policy places each job at its arrival into capacity its plan has not reserved; "
        "none: arrivals wait for the next round (default)",
    )
    p.add_argument(
        "--deterministic",
        action="store_true",
        help="same seed, same run: gpuplan's solves stop on deterministic time (slower)",
    )
    p.add_argument("--out", help="write the metrics as CSV here")
    common.add_ray_option(p)
    p.set_defaults(func=cmd_simulate)
