"""Mutation check of the differential harness: does the fast in-suite harness fail when any one rule
changes?

Each mutation changes one rule in one place, on the solver side (the exact formulation, the placement
kernel, the solver-neutral problem), on the validator side, or in a predicate both share
(``models/rules``): a limit one higher, a check skipped, a bound ignored. For each, the repository's
code is copied to a scratch directory (nothing is installed: the copy is imported through
``PYTHONPATH``, ahead of the editable install of the working tree), the mutation's edits are applied
there, and the fast differential tests run against the copy. A mutation is ``caught`` when some test
fails that passes on the unmutated copy (the baseline run first, same tests), ``not caught`` otherwise,
``STALE (text not found)`` when an edit's old text is not in its file (the code moved: re-target it in
:data:`MUTATIONS`), ``ERROR`` when the run fails to run (a timeout, pytest's own errors).

Run ``nice -n 15 python -m benchmarks.mutations`` (``--only NAME,...`` for some, ``--list`` to check the
table against the tree without running); results go to ``benchmarks/results/mutations.csv``.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "mutations.csv"

#: The mutations: (name, file, exact old text, new text). A name on several rows is one mutation whose
#: edits are applied together (one rule read in two places). Re-target a row when its code moves.
MUTATIONS: tuple[tuple[str, str, str, str], ...] = (
    # --- solver side -----------------------------------------------------------------------------------
    (
        "solver: MIG instances may overlap",
        "solvers/formulation/constraints.py",
        "            if len(insts) > 1:\n                m.add(m.sum(insts) <= 1)",
        "            if len(insts) > 1:\n                m.add(m.sum(insts) <= 2)",
    ),
    (
        "solver: quota +1 GPU (formulation)",
        "solvers/formulation/constraints.py",
        "            v.model.add(v.model.sum(terms) <= max(0, limit - held))",
        "            v.model.add(v.model.sum(terms) <= max(0, limit + unit - held))",
    ),
    (
        "solver: quota +1 GPU (placement kernel)",
        "solvers/placement/rules.py",
        "        self.limits = tuple(limit or 0 for limit in limits)",
        "        self.limits = tuple((limit or 0) + self.unit for limit in limits)",
    ),
    (
        "solver: higher-tier preemption rule dropped",
        "solvers/formulation/constraints.py",
        "        if budget.preempt_only_for_higher_tier:\n            running = ",
        "        if False:\n            running = ",
    ),
    (
        "solver: fair-share preemption dropped",
        "solvers/formulation/constraints.py",
        "                or fair_displaces(\n",
        "                or False and fair_displaces(\n",
    ),
    (
        "solver: fairness floor one GPU looser",
        "solvers/formulation/objective.py",
        "        m.add(unit * short + m.sum(held[team]) >= floor - fixed[team])",
        "        m.add(unit * short + m.sum(held[team]) >= floor - fixed[team] - unit)",
    ),
    (
        "solver: moves budget +1",
        "solvers/formulation/constraints.py",
        "m.add(m.sum(moves) <= moves_allowed(budget))",
        "m.add(m.sum(moves) <= moves_allowed(budget) + 1)",
    ),
    (
        "solver: preemption budget +1",
        "solvers/formulation/constraints.py",
        "m.add(m.sum(preempts) <= preemptions_allowed(budget))",
        "m.add(m.sum(preempts) <= preemptions_allowed(budget) + 1)",
    ),
    (
        "solver: minimum runtime ignored",
        "solvers/problem.py",
        "disruption.may_move(policy.disruption, req.runtime_s",
        "disruption.may_move(policy.disruption, None",
    ),
    (
        "solver: minimum runtime ignored",
        "solvers/problem.py",
        "policy.tier(req.tier), req.runtime_s",
        "policy.tier(req.tier), None",
    ),
    (
        "solver: time-slicing replicas +1",
        "solvers/problem.py",
        "        return sharing_replicas(self.sharing)\n",
        "        n = sharing_replicas(self.sharing)\n        return None if n is None else n + 1\n",
    ),
    # --- validator side --------------------------------------------------------------------------------
    (
        "validator: higher-tier preemption rule dropped",
        "planner/validation/disruption.py",
        "elif not _displaced(policy, newcomers.get(s.place.node, []), standing, w):",
        "elif False:",
    ),
    (
        "validator: fair-share preemption dropped",
        "planner/validation/disruption.py",
        "    fairly = bool(standing) and any(",
        "    fairly = False and any(",
    ),
    (
        "validator: quota +1 GPU",
        "planner/validation/isolation.py",
        "        if used <= limit:\n            continue",
        "        if used <= limit + unit:\n            continue",
    ),
    (
        "validator: any MIG start accepted",
        "planner/validation/gpus.py",
        "        for b in gpu_breaches(users, state):",
        "        for b in [b for b in gpu_breaches(users, state) if b.rule != MIG_START]:",
    ),
    (
        "validator: any MIG start accepted",
        "planner/validation/mig.py",
        "    for rule, message in mig_layout_problems(spec, instances):",
        "    for rule, message in [p for p in mig_layout_problems(spec, instances) if p[0] != 'mig-start']:",
    ),
    (
        "validator: moves budget +1",
        "planner/validation/disruption.py",
        '("moves", MIGRATE, moves_allowed(budget, rounds), ',
        '("moves", MIGRATE, moves_allowed(budget, rounds) + 1, ',
    ),
    (
        "validator: moves budget +1",
        "planner/validation/disruption.py",
        "if len(moves[rnd]) > moves_allowed(budget):",
        "if len(moves[rnd]) > moves_allowed(budget) + 1:",
    ),
    (
        "validator: preemption budget +1",
        "planner/validation/disruption.py",
        "            preemptions_allowed(budget, rounds),\n",
        "            preemptions_allowed(budget, rounds) + 1,\n",
    ),
    (
        "validator: preemption budget +1",
        "planner/validation/disruption.py",
        "if len(preempts[rnd]) > preemptions_allowed(budget):",
        "if len(preempts[rnd]) > preemptions_allowed(budget) + 1:",
    ),
    (
        "validator: minimum runtime ignored",
        "planner/validation/disruption.py",
        "        if not ran_long_enough(ran, least):",
        "        if False:",
    ),
    (
        "validator: gang all-or-nothing dropped",
        "planner/validation/topology.py",
        "        if 0 < n_placed < total:",
        "        if False:",
    ),
    # --- predicates both sides share (only hand-computed optima can see these; the fair share also the ---
    # --- fair-share stratum, whose brute force restates the documented factor) ------------------------
    (
        "shared: quota limit +1 GPU",
        "models/rules/quota.py",
        "    return None if exact is None else math.floor(exact * unit)\n",
        "    return None if exact is None else math.floor(exact * unit) + unit\n",
    ),
    (
        "shared: minimum runtime ignored",
        "models/rules/runtime.py",
        "    return ran_s is None or ran_s >= min_runtime_s",
        "    return True",
    ),
    (
        "shared: fair-share preemption ignores the shares",
        "models/rules/fairness.py",
        "    if new is None or old is None or new.over_share or not old.over_share:",
        "    if new is None or old is None:",
    ),
    (
        "shared: fairness floor's lack rounded down",
        "models/rules/fairness.py",
        "    return max(0, -(-(floor - served) // unit))",
        "    return max(0, (floor - served) // unit)",
    ),
    (
        "shared: fair-share standing ignores usage",
        "models/rules/fairness.py",
        "        part = used / total_usage if total_usage > 0 else 0.0\n",
        "        part = 0.0\n",
    ),
)

#: The in-suite harness: the fast differential tests.
TESTS = ("tests/solvers/test_differential.py", "tests/solvers/test_brute_force.py")
#: What a scratch copy needs: the packages (``src/gpuplan`` links them), the tests and the project file.
COPIED = ("src", "models", "planner", "solvers", "api", "data", "tests", "pyproject.toml")
#: Longest run of the tests on one mutant.
TIMEOUT_S = 1800


@dataclass(frozen=True)
class Mutation:
    """One rule changed: its name and edits (file, old text, new text)."""

    name: str
    edits: tuple[tuple[str, str, str], ...]

    @property
    def side(self) -> str:
        """Where the rule changed: ``solver``, ``validator``, ``shared`` (models) or ``planner``."""
        files = {f for f, _, _ in self.edits}
        sides = {
            "validator"
            if f.startswith("planner/validation/")
            else "solver"
            if f.startswith("solvers/")
            else "shared"
            if f.startswith("models/")
            else "planner"
            for f in files
        }
        return "+".join(sorted(sides))


def mutations(names: Sequence[str] | None = None) -> list[Mutation]:
    """The table's mutations, in order, edits grouped by name (``names``: only those)."""
    grouped: dict[str, list[tuple[str, str, str]]] = {}
    for name, path, old, new in MUTATIONS:
        grouped.setdefault(name, []).append((path, old, new))
    out = [Mutation(name, tuple(edits)) for name, edits in grouped.items()]
    return [m for m in out if names is None or m.name in names]


def scratch_copy(root: Path, into: Path) -> Path:
    """A copy of the repository's code under ``into`` (links kept: ``src/gpuplan`` links the packages)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".mypy_cache", ".ruff_cache", ".pytest_cache")
    for name in COPIED:
        src = root / name
        if src.is_dir():
            shutil.copytree(src, into / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(src, into / name)
    return into


def stale(root: Path, m: Mutation) -> str | None:
    """Why ``m`` cannot be applied to the tree at ``root`` (None: every old text is there once)."""
    for path, old, _ in m.edits:
        f = root / path
        text = f.read_text() if f.is_file() else ""
        n = text.count(old)
        if n == 0:
            return f"STALE (text not found): {path}"
        if n > 1:
            return f"STALE (text found {n} times): {path}"
    return None


def apply(root: Path, m: Mutation) -> None:
    """Apply ``m``'s edits to the copy at ``root``."""
    for path, old, new in m.edits:
        f = root / path
        f.write_text(f.read_text().replace(old, new, 1))


def run_tests(root: Path, tests: Sequence[str], timeout_s: float) -> tuple[set[str] | None, float, str]:
    """Run ``tests`` (fast subset) against the copy at ``root``: the ids of the tests that failed (None if
    pytest could not run them), the seconds taken and pytest's last summary line."""
    report = root / "junit.xml"
    env = dict(os.environ, PYTHONPATH=f"{root / 'src'}{os.pathsep}{root}", PYTHONDONTWRITEBYTECODE="1")
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *tests,
        "-m",
        "not slow",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
    ]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - start, f"timeout after {timeout_s:.0f} s"
    took = time.perf_counter() - start
    lines = [
        ln.strip("= ")
        for ln in done.stdout.splitlines()
        if " in " in ln and ("passed" in ln or "failed" in ln)
    ]
    summary = lines[-1] if lines else done.stderr.strip()[-300:]
    if not report.is_file():
        return None, took, summary
    failed: set[str] = set()
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            failed.add(f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}")
    return failed, took, summary


def imported_from(root: Path) -> str:
    """Where the copy's interpreter finds the validator (it must be the copy, not the working tree)."""
    env = dict(os.environ, PYTHONPATH=f"{root / 'src'}{os.pathsep}{root}")
    code = "import gpuplan.planner.validation.validate as v; print(v.__file__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True)
    return done.stdout.strip()


def short(test: str) -> str:
    """``test_name[param]`` without the module: the table's column."""
    return test.split("::", 1)[-1]


def commit(root: Path) -> str:
    """``git rev-parse --short HEAD``, and whether the tree has uncommitted changes."""
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain"], capture_output=True, text=True
    ).stdout.strip()
    return f"{head} with uncommitted changes" if dirty else head


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages (``/proc/loadavg``)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


FIELDS = ("mutation", "side", "status", "caught_by", "failed_tests", "seconds", "loadavg", "commit")


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the options, run the baseline and every mutation, write the CSV, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", default="", help="mutation names, comma-separated (default: all)")
    parser.add_argument("--list", action="store_true", help="check the table against the tree, run nothing")
    parser.add_argument("--out", type=Path, default=RESULTS, help="CSV of the results")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per test run")
    parser.add_argument("--tests", default=",".join(TESTS), help="test files, comma-separated")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or None
    chosen = mutations(names)
    if names and len(chosen) != len(names):
        parser.error(f"--only: unknown mutation(s) {sorted(set(names) - {m.name for m in chosen})}")
    if args.list:
        for m in chosen:
            print(f"{m.side:9s} {m.name}: {stale(ROOT, m) or 'applies'}")
        return
    tests = [t for t in args.tests.split(",") if t]
    made = commit(ROOT)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(prefix="gpuplan-mutants-") as tmp:
        pristine = scratch_copy(ROOT, Path(tmp) / "baseline")
        where = imported_from(pristine)
        if not where.startswith(str(pristine)):
            sys.exit(f"the scratch copy imports gpuplan from {where!r}, not from the copy")
        base, took, summary = run_tests(pristine, tests, args.timeout)
        if base is None:
            sys.exit(f"the baseline run failed: {summary}")
        print(f"baseline: {summary} ({took:.0f} s, load {loadavg()}); failing already: {sorted(base) or '-'}")
        rows.append(
            {
                "mutation": "(none: baseline)",
                "side": "-",
                "status": "baseline",
                "caught_by": "",
                "failed_tests": ";".join(sorted(short(t) for t in base)),
                "seconds": round(took),
                "loadavg": loadavg(),
                "commit": made,
            }
        )
        for i, m in enumerate(chosen):
            row: dict[str, object] = {"mutation": m.name, "side": m.side, "commit": made, "caught_by": ""}
            why = stale(pristine, m)
            if why is not None:
                row.update(status=why, failed_tests="", seconds=0, loadavg=loadavg())
            else:
                copy = Path(tmp) / f"m{i}"
                shutil.copytree(pristine, copy, symlinks=True)
                apply(copy, m)
                failed, took, summary = run_tests(copy, tests, args.timeout)
                if failed is None:
                    row.update(status=f"ERROR ({summary})", failed_tests="")
                else:
                    new = sorted(failed - base)
                    row.update(
                        status="caught" if new else "not caught",
                        caught_by=";".join(short(t) for t in new),
                        failed_tests=len(new),
                    )
                row.update(seconds=round(took), loadavg=loadavg())
                shutil.rmtree(copy, ignore_errors=True)
            rows.append(row)
            print(f"{row['status']:>12s}  {m.side:9s} {m.name}  ({row['seconds']} s)", flush=True)
            write(args.out, rows)
    write(args.out, rows)
    print("| mutation | side | status | caught by (first 3 tests) |")
    print("|---|---|---|---|")
    for row in rows[1:]:
        first = str(row["caught_by"]).split(";")[:3]
        more = len(str(row["caught_by"]).split(";")) - 3
        shown = ", ".join(f"`{t}`" for t in first if t) + (f" and {more} more" if more > 0 else "")
        print(f"| {row['mutation']} | {row['side']} | {row['status']} | {shown} |")


def write(out: Path, rows: list[dict[str, object]]) -> None:
    """Write the rows so far as CSV."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
