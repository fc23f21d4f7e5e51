"""``gpuplan replan`` (nightly replanning with plan history) and ``gpuplan simulate`` (the B5 loop)."""

from __future__ import annotations

import argparse
import csv
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from pathlib import Path

from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog
from gpuplan.models.policy import DisruptionBudget
from gpuplan.models.problem import PlanningInput
from gpuplan.planner import summary
from gpuplan.planner.actions import plan_actions
from gpuplan.planner.deadline import Deadline, solve_share
from gpuplan.planner.executor import kubernetes, migparted
from gpuplan.planner.history import PlanHistory, plan_diff
from gpuplan.planner.io import load_cluster, load_policy, load_workloads, planning_input, write_json
from gpuplan.planner.planning import make_plan
from gpuplan.planner.simulate import SimConfig, simulate
from gpuplan.solvers.base import solver_names

log = logging.getLogger(__name__)

#: A CP-SAT search-log line: ``#<event> <seconds>s best:<incumbent> next:[<bound>,<hi>]``.
_PROGRESS = re.compile(r"^#(\w+)\s+([\d.]+)s\s+best:(\S+)\s+next:\[([^,\]]+)")


class ProgressHandler(logging.Handler):
    """Prints the solver's incumbent and bound each time CP-SAT's search log reports a new one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.last: tuple[str, str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Print one progress line for a new incumbent or bound."""
        for line in record.getMessage().splitlines():
            m = _PROGRESS.match(line.strip())
            if m is None or m.group(3) == "inf" or (m.group(3), m.group(4)) == self.last:
                continue
            self.last = (m.group(3), m.group(4))
            print(
                f"progress {float(m.group(2)):7.2f} s  incumbent {m.group(3)}  bound {m.group(4)}",
                file=sys.stderr,
            )


@contextmanager
def _stdout_silenced() -> Iterator[None]:
    """Send file descriptor 1 to /dev/null: with its search log on, CP-SAT also prints the whole log to
    stdout (``log_to_stdout``), which the progress lines on stderr replace."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _with_rounds(inp: PlanningInput, rounds: int) -> PlanningInput:
    """The input with ``rounds`` rounds' worth of moves and preemptions allowed for the solve."""
    if rounds <= 1:
        return inp
    b = inp.policy.disruption
    budget = DisruptionBudget(
        max_moves_per_round=b.max_moves_per_round * rounds,
        max_preemptions_per_round=b.max_preemptions_per_round * rounds,
        max_moves_per_team=None if b.max_moves_per_team is None else b.max_moves_per_team * rounds,
        min_runtime_s=b.min_runtime_s,
        preempt_latency_sensitive=b.preempt_latency_sensitive,
    )
    return inp.model_copy(update={"policy": inp.policy.model_copy(update={"disruption": budget})})


def _state(args: argparse.Namespace, history: PlanHistory) -> PlanningInput:
    """The current state: the files when given, else the inputs of the latest stored plan."""
    catalog = default_catalog()
    if args.cluster and args.workloads:
        return planning_input(
            load_cluster(Path(args.cluster), catalog),
            load_workloads(Path(args.workloads)),
            load_policy(Path(args.policy) if args.policy else None),
            catalog,
            source=str(args.workloads),
        )
    if args.cluster or args.workloads:
        raise InputError("--cluster and --workloads: give both, or neither to replan the stored state")
    stored = history.latest()
    if stored is None:
        raise InputError("no stored plan to replan from: give --cluster and --workloads")
    return stored.inputs


def _now(text: str | None) -> datetime:
    if text is None:
        return datetime.now(UTC)
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise InputError(f"--now: '{text}' is not an ISO-8601 time") from None


def cmd_replan(args: argparse.Namespace) -> int:
    """Replan the current state with a long time limit, store the plan and print what changed."""
    if args.rounds < 1:
        raise InputError("--rounds: must be at least 1")
    deadline = Deadline(args.started + args.time_limit)
    history = PlanHistory(args.db)
    inp = _state(args, history)
    previous = history.latest()
    now = _now(args.now)
    progress = ProgressHandler()
    cpsat_log = logging.getLogger("gpuplan.solvers.cpsat.solver")
    level, propagate = cpsat_log.level, cpsat_log.propagate
    if not args.quiet:
        cpsat_log.addHandler(progress)
        cpsat_log.setLevel(logging.DEBUG)
        cpsat_log.propagate = False  # only the progress lines, not the whole search log
    solve_s = solve_share(args.time_limit, deadline)
    solve_started = time.perf_counter()
    try:
        with _stdout_silenced() if not args.quiet else nullcontext():
            plan = make_plan(
                _with_rounds(inp, args.rounds),
                solver=args.solver,
                now=now,
                time_limit_s=solve_s,
                seed=args.seed,
                num_workers=args.workers,
                deterministic=True,
                previous=previous.plan if previous is not None else None,
            )
    finally:
        cpsat_log.removeHandler(progress)
        cpsat_log.setLevel(level)
        cpsat_log.propagate = propagate
    if deadline.expired():
        log.warning(
            "the solve took %.1f s, past its %.1f s share: the command ends after --time-limit %g s",
            time.perf_counter() - solve_started, solve_s, args.time_limit,
        )  # fmt: skip
    catalog = default_catalog()
    plan = plan.model_copy(
        update={
            "actions": plan_actions(inp, plan.assignments, plan.mig_layouts, catalog, now),
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
    print(plan_diff(previous.plan if previous is not None else None, plan, inp).render())
    if args.out:
        write_json(Path(args.out), plan)
        print(f"plan written to {args.out}")
    if args.k8s_out:
        Path(args.k8s_out).write_text(
            kubernetes.render(plan, inp, namespace=args.namespace, image=args.image)
        )
        print(f"Kubernetes objects written to {args.k8s_out}")
    if args.mig_parted_out:
        Path(args.mig_parted_out).write_text(migparted.render(inp.cluster, plan.mig_layouts))
        print(f"mig-parted config written to {args.mig_parted_out}")
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    """Simulate gpuplan, FGD and best-fit on the same Poisson arrivals; print (and write) the metrics."""
    if not 0 < args.rho <= 2 or args.nodes < 1 or args.hours <= args.warmup_hours or args.round_s <= 0:
        raise InputError(
            "simulate: need 0 < --rho <= 2, --nodes >= 1, --hours > --warmup-hours, --round-s > 0"
        )
    trace_dir = Path(args.trace_dir)
    if not (trace_dir / f"openb_pod_list_{args.trace}.csv").is_file():
        raise InputError(f"--trace-dir: {trace_dir} has no openb_pod_list_{args.trace}.csv")
    rows: list[dict[str, object]] = []
    for rho in args.rho_list or [args.rho]:
        cfg = SimConfig(
            rho=rho,
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
        )
        result = simulate(cfg, progress=None if args.quiet else lambda m: print(m, file=sys.stderr))
        rows.extend({"rho": rho, "policy": name, **metrics} for name, metrics in result.items())
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


def add_rounds_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``replan`` and ``simulate``."""
    p = sub.add_parser("replan", help="nightly replanning: long solve, plan history, diff from the last plan")
    p.add_argument("--cluster", help="cluster file (default: the state of the latest stored plan)")
    p.add_argument("--workloads", help="workloads file, with running_on for what runs now")
    p.add_argument("--policy")
    p.add_argument("--db", help="plan history: a SQLite file or a PostgreSQL URL (default gpuplan.db)")
    p.add_argument("--solver", default="cpsat", choices=solver_names())
    p.add_argument(
        "--time-limit", type=float, default=300.0, help="seconds for the whole command (default 300)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--now", help="planning time, ISO-8601 (default: the current time)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="rounds the plan may take: moves allowed = budget per round x rounds",
    )
    p.add_argument("--out", help="write the plan JSON here")
    p.add_argument("--k8s-out", help="write Kubernetes pods and node labels (YAML) here")
    p.add_argument("--image", default="", help="container image of the exported pods")
    p.add_argument("--namespace", default="default")
    p.add_argument("--mig-parted-out", help="write the NVIDIA MIG manager config (YAML) here")
    p.add_argument("-q", "--quiet", action="store_true", help="no solver progress lines")
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
    p.add_argument("--time-limit", type=float, default=2.0, help="CP-SAT seconds per round (default 2)")
    p.add_argument("--moves", type=int, default=d.moves_per_round, help="gpuplan's moves per round")
    p.add_argument("--trace", default=d.trace, help="openb pod list (default, gpushare100, multigpu50)")
    p.add_argument("--trace-dir", default=str(d.trace_dir))
    p.add_argument("--out", help="write the metrics as CSV here")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=cmd_simulate)
