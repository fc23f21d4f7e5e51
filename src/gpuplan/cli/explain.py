"""``gpuplan explain``: why a workload waits (or runs on a worse alternative) and what would place it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpuplan.cli import common
from gpuplan.models.base import InputError, did_you_mean
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Explanation
from gpuplan.planner.io.files import load_plan
from gpuplan.planner.presentation.progress import phase


def _input_path(given: str | None, provenance: dict[str, object], name: str) -> Path | None:
    """The path given on the command line, else the one the plan's provenance names."""
    if given:
        return Path(given)
    inputs = provenance.get("inputs")
    found = inputs.get(name) if isinstance(inputs, dict) else None
    return Path(str(found)) if found else None


def render(explanations: list[Explanation], workload: str) -> str:
    """Readable text: code, sentence, each alternative's reason and the verified counterfactuals."""
    if not explanations:
        return f"{workload}: every replica is placed on its first choice; nothing to explain"
    lines: list[str] = []
    for e in explanations:
        state = "waiting" if e.alternative is None else f"placed on alternative {e.alternative}"
        lines.append(f"{e.workload} replica {e.replica}: {state} — {e.code}")
        lines.append(f"  {e.reason}")
        if len(e.details) > 1:
            lines.append("  alternatives:")
            lines.extend(f"    {d.alternative}: {d.code} — {d.reason}" for d in e.details)
        if e.resources:
            lines.append(f"  resources: {', '.join(e.resources)}")
        if not e.counterfactuals:
            lines.append("  no verified change places it now")
            continue
        lines.append("  what would place it now (each verified by a re-solve with the change applied):")
        for i, c in enumerate(e.counterfactuals, 1):
            where = ""
            if c.placement is not None:
                gpus = ",".join(str(g.index) for g in c.placement.gpus)
                where = f" -> {c.placement.node}" + (f" GPU {gpus}" if gpus else "")
            lines.append(
                f"    {i}. {c.summary}  [disruption {c.disruption}, cost {c.cost:g}, {c.verified_by}]{where}"
            )
    return "\n".join(lines)


def members(inp: PlanningInput, name: str) -> list[str]:
    """The workloads ``name`` names: a workload id, else the members of the gang of that name (in input
    order); an unknown name is an input error naming the closest workloads and gangs."""
    if name in inp.workload_by_id:
        return [name]
    gang = [w.id for w in inp.workloads if w.gang_id == name]
    if gang:
        return gang
    known = [*inp.workload_by_id, *{w.gang_id for w in inp.workloads if w.gang_id}]
    raise InputError(f"explain: no workload or gang named '{name}'{did_you_mean(name, known)}")


def cmd_explain(args: argparse.Namespace) -> int:
    """Explain a workload, or each member of a gang, of a plan against the inputs it was made from."""
    from gpuplan.planner.explain.reasons import explain_all

    plan = load_plan(Path(args.plan))
    cluster = _input_path(args.cluster, plan.provenance, "cluster")
    workloads = _input_path(args.workloads, plan.provenance, "workloads")
    policy = _input_path(args.policy, plan.provenance, "policy")
    if cluster is None or workloads is None:
        raise InputError("explain: give --cluster and --workloads (the inputs the plan was made from)")
    catalog = default_catalog()
    inp = common.load_input(cluster, workloads, policy, catalog)
    common.check_made_from(plan, inp, args.plan)
    ids = members(inp, args.workload)
    with phase("re-solves"):
        found = explain_all(
            inp,
            plan,
            catalog=catalog,
            counterfactuals=args.counterfactuals,
            solver=args.solver,
            time_limit_s=args.time_limit,
            only=set(ids),
        )
    if args.json:
        print(json.dumps([e.model_dump(mode="json", by_alias=True) for e in found], indent=2))
        return 0
    if ids != [args.workload]:
        print(f"gang {args.workload}: {len(ids)} workloads ({', '.join(ids)})")
    print("\n".join(render([e for e in found if e.workload == wid], wid) for wid in ids))
    return 0


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``explain``."""
    p = sub.add_parser(
        "explain", help="why a workload (or a gang) waits and what smallest change would place it"
    )
    p.add_argument("workload", help="workload id, or a gang's name (each of its workloads is explained)")
    p.add_argument("--plan", required=True, help="plan JSON")
    p.add_argument("--cluster", help="the cluster the plan was made for")
    p.add_argument("--workloads", help="the demand the plan was made for")
    p.add_argument("--policy")
    p.add_argument("--counterfactuals", type=int, default=3, help="verified changes to show (default 3)")
    common.add_solver_option(p, "re-solve back-end")
    p.add_argument("--time-limit", type=float, default=2.0, help="seconds per verifying re-solve (default 2)")
    p.add_argument("--json", action="store_true", help="print the explanations as JSON")
    p.set_defaults(func=cmd_explain)
