"""B14: the differential harness at length — every solver path against the brute-force optimum.

Tiny instances (up to 3 nodes of 1-2 GPUs and 6 replicas: whole GPUs, fractions, MIG on A30s whose layouts
may change, GPU memory, sharing modes and changes, running work, budgets, quotas, gangs, isolation,
min-runtime) are drawn by the hypothesis strategy of ``tests/_brute.py`` from ``--seed`` (``--strata``:
``generic``, that strategy, by default; or strata made for one family of rules each, drawn in turn,
``tests._brute.STRATA``, and ``known``, the classes still known); each instance's
true optimum of the documented objective is found by enumeration with the validator as the only judge, and
every path (``tests._brute.PATHS``: cpsat, the fleet engine, the large-cluster path and the POP split
forced onto small inputs, both MILPs and the three greedy back-ends) plans it through ``make_plan``.
Disagreements are counted per path and kind: ``crash`` (an exception other than an invalid plan),
``invalid`` (the validator rejects the plan), ``bound-above-optimum``, ``optimal-not-optimum``,
``objective-misreported`` (report vs. the plan's waiting list), ``harness`` (a valid plan better than the
brute force's optimum: the harness would be wrong). Each is also tagged with ``drift`` when the current
state already breaks a rule (running work over a quota, across isolation, a gang partly running) and with
what the brute-force optimal plan does (``repartition``: a MIG layout changed; ``sharing``: a mode change;
``preempt``; ``move``), a hint at the cause. Instances for which the validator accepts no plan at all
(running work that breaks a rule the budget cannot repair) are counted apart.

Run ``python -m benchmarks.b14_differential --count 5000 --seed 0`` (``--strata all`` for every stratum);
results go to ``benchmarks/results/b14.csv`` (path, kind, tags, count, instances).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import MIGRATE, PREEMPT, Plan
from gpuplan.planner.validation.validate import validate_plan
from tests._brute import (
    CATALOG,
    FEATURES,
    KINDS,
    KNOWN_STRATUM,
    PATHS,
    STRATA,
    NoValidPlan,
    TooLarge,
    current_plan,
    instances,
    judge,
    optimum,
)

log = logging.getLogger(__name__)

RESULTS = Path(__file__).parent / "results" / "b14.csv"
#: Instances between two writes of the partial results.
CHECKPOINT = 100
#: Every stratum ``--strata`` takes: the generic strategy, the rule strata and the known classes.
STRATUM_NAMES = ("generic", *STRATA, "known")


def strategy(strata: Sequence[str], features: frozenset[str]) -> st.SearchStrategy[PlanningInput]:
    """The instances of ``strata`` (``generic``: the generic strategy with ``features``), drawn in turn."""
    parts = [
        instances(features=features) if s == "generic" else KNOWN_STRATUM if s == "known" else STRATA[s]
        for s in strata
    ]
    return parts[0] if len(parts) == 1 else st.one_of(parts)


def tags(inp: PlanningInput, plan: Plan) -> str:
    """``drift`` when the current state already breaks a rule, then what the brute-force plan changes:
    MIG re-partitions, sharing modes, preemptions, moves."""
    found = ["drift"] if validate_plan(current_plan(inp), inp, CATALOG) else []
    if plan.mig_layouts:
        found.append("repartition")
    if plan.sharing:
        found.append("sharing")
    kinds = {a.kind for a in plan.actions}
    found += ["preempt"] if PREEMPT in kinds else []
    found += ["move"] if MIGRATE in kinds else []
    return "+".join(found) or "-"


class Tally:
    """Counts of instances and disagreements, written as CSV."""

    def __init__(self, paths: Sequence[str]) -> None:
        self.paths = paths
        self.instances: Counter[str] = Counter()
        self.counts: Counter[tuple[str, str, str]] = Counter()
        self.examples: dict[tuple[str, str, str], str] = {}

    def add(self, path: str, kind: str, tag: str, inp: PlanningInput | None = None, note: str = "") -> None:
        self.counts[(path, kind, tag)] += 1
        if inp is not None and (path, kind, tag) not in self.examples:
            self.examples[(path, kind, tag)] = json.dumps(
                {"note": note, "input": inp.model_dump(mode="json", exclude_defaults=True)}
            )

    def rows(self) -> list[dict[str, object]]:
        """One row per path and kind (tags ``all``), then one per tag that occurred."""
        out: list[dict[str, object]] = [
            {"path": "brute-force", "kind": k, "tags": "all", "count": self.instances[k], "instances": ""}
            for k in ("instances", "judged", "no-valid-plan", "too-large")
        ]
        for path in self.paths:
            for kind in KINDS:
                n = sum(c for (p, k, _), c in self.counts.items() if (p, k) == (path, kind))
                out.append(
                    {
                        "path": path,
                        "kind": kind,
                        "tags": "all",
                        "count": n,
                        "instances": self.instances["judged"],
                    }
                )
        for (path, kind, tag), n in sorted(self.counts.items()):
            out.append(
                {"path": path, "kind": kind, "tags": tag, "count": n, "instances": self.instances["judged"]}
            )
        return out

    def write(self, out: Path) -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=["path", "kind", "tags", "count", "instances"])
            writer.writeheader()
            writer.writerows(self.rows())


def run(
    count: int,
    seed_: int,
    paths: Sequence[str],
    features: frozenset[str],
    time_limit_s: float,
    out: Path,
    examples: Path | None,
    strata: Sequence[str] = ("generic",),
) -> Tally:
    """Draw ``count`` instances of ``strata`` from ``seed_``, judge every path on each, write the tally as
    it grows."""
    tally = Tally(paths)
    start = time.perf_counter()

    @seed(seed_)
    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy(strata, features))
    def one(inp: PlanningInput) -> None:
        tally.instances["instances"] += 1
        try:
            best = optimum(inp)
        except NoValidPlan as exc:
            tally.instances["no-valid-plan"] += 1
            tally.add("brute-force", "no-valid-plan", "-", inp, str(exc))
            return
        except TooLarge:
            tally.instances["too-large"] += 1
            return
        tally.instances["judged"] += 1
        tag = tags(inp, best.plan)
        for path in paths:
            verdict = judge(inp, best.cost, path, time_limit_s=time_limit_s)
            for kind, note in verdict.problems:
                tally.add(path, kind, tag, inp, f"optimum {best.cost}: {note}")
        if tally.instances["instances"] % CHECKPOINT == 0:
            tally.write(out)
            found = sum(tally.counts.values())
            log.warning(
                "%d instances in %.0f s, %d disagreements",
                tally.instances["instances"],
                time.perf_counter() - start,
                found,
            )

    one()
    tally.write(out)
    log.warning("%d instances in %.0f s", tally.instances["instances"], time.perf_counter() - start)
    if examples is not None:
        examples.write_text(
            "".join(
                json.dumps({"path": p, "kind": k, "tags": t, **json.loads(v)}) + "\n"
                for (p, k, t), v in sorted(tally.examples.items())
            )
        )
    return tally


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the options, run, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=5000, help="instances to draw (default 5000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the instance stream (default 0)")
    parser.add_argument("--paths", default=",".join(PATHS), help="solver paths, comma-separated")
    parser.add_argument(
        "--features", default=",".join(sorted(FEATURES)), help="instance features, comma-separated"
    )
    parser.add_argument(
        "--strata",
        default="generic",
        help=f"instance strata, comma-separated, or all (of {', '.join(STRATUM_NAMES)}; default generic)",
    )
    parser.add_argument("--time-limit", type=float, default=5.0, help="make_plan time limit per path")
    parser.add_argument("--out", type=Path, default=RESULTS, help="CSV of the counts")
    parser.add_argument("--examples", type=Path, default=None, help="JSON lines: one instance per class")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    for name in ("gpuplan",):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    paths = [p for p in args.paths.split(",") if p]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown:
        parser.error(f"--paths: unknown path(s) {', '.join(unknown)} (choose from {', '.join(PATHS)})")
    features = frozenset(f for f in args.features.split(",") if f)
    if features - FEATURES:
        parser.error(f"--features: unknown feature(s) {', '.join(sorted(features - FEATURES))}")
    strata = list(STRATUM_NAMES) if args.strata == "all" else [s for s in args.strata.split(",") if s]
    if not strata or set(strata) - set(STRATUM_NAMES):
        parser.error(f"--strata: unknown stratum in {args.strata!r} (choose from {', '.join(STRATUM_NAMES)})")
    tally = run(args.count, args.seed, paths, features, args.time_limit, args.out, args.examples, strata)
    print("| path | kind | tags | count | instances |")
    print("|---|---|---|---:|---:|")
    for row in tally.rows():
        if row["count"]:
            print(f"| {row['path']} | {row['kind']} | {row['tags']} | {row['count']} | {row['instances']} |")


if __name__ == "__main__":
    main()
