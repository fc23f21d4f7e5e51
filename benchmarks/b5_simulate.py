"""B5: gpuplan's rounds against FGD (tier-then-FIFO) and best-fit (FIFO) on simulated Poisson arrivals.

``gpuplan simulate`` runs the three policies on the same arrivals and run times at each load (every
option is passed to it unchanged; ``--out`` defaults to ``benchmarks/results/b5.csv``); this benchmark
then checks the targets at rho = 0.95: tier-weighted mean wait at most 0.6x the best baseline's,
latency-sensitive p95 wait at most 60 s, time-averaged allocation at most 0.5 point below the best
baseline's. With ``--admission greedy`` every policy also places each job at its arrival (the same
admission for all, each with its own node score).

With ``--seeds`` it runs the grid of loads x seeds one cell at a time, appending each cell's rows to the
CSV as it ends (a cut run keeps the cells done), and writes after each cell a Markdown table beside the
CSV (``.md``): per load, the median and the worst over seeds of each policy's figures, and the seeds
where gpuplan's latency-sensitive work waited longer than under FGD (p95 or mean) or its tier-weighted
mean wait was not below FGD's.

Run ``python -m benchmarks.b5_simulate --rho-list 0.85,0.95,1.05 --admission greedy`` (``gpuplan
simulate --help`` lists the options).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from gpuplan.cli import main as cli_main

DEFAULT_OUT = "benchmarks/results/b5.csv"

LS = "p95_wait_s[latency-sensitive]"
LS_MEAN = "mean_wait_s[latency-sensitive]"
TWW = "tier_weighted_mean_wait_s"
#: Target on the latency-sensitive p95 wait, seconds.
LS_TARGET_S = 60.0
#: Figures of the grid table: column, heading, worst is the largest (else the smallest).
GRID_FIGURES = (
    (TWW, "tier-weighted mean wait s", True),
    (LS_MEAN, "LS mean wait s", True),
    (LS, "LS p95 wait s", True),
    ("p95_wait_s[standard]", "std p95 s", True),
    ("p95_wait_s[background]", "bg p95 s", True),
    ("alloc_pct", "allocation %", False),
    ("preemptions", "preemptions", True),
    ("planner_s_per_round", "planner s / round", True),
)
POLICIES = ("gpuplan", "fgd", "best-fit")
RHO = "\N{GREEK SMALL LETTER RHO}"


def targets(rows: Sequence[dict[str, object]], rho: float) -> list[str]:
    """The three targets at ``rho``, each with its numbers and met/missed."""
    at = {
        str(r["policy"]): {k: v for k, v in r.items() if isinstance(v, int | float)}
        for r in rows
        if r["rho"] == rho
    }
    if "gpuplan" not in at:
        return []
    ours = at.pop("gpuplan")
    best_wait = min(float(m[TWW]) for m in at.values())
    best_alloc = max(float(m["alloc_pct"]) for m in at.values())
    wait, ls, alloc = float(ours[TWW]), float(ours[LS]), float(ours["alloc_pct"])
    ratio = wait / best_wait if best_wait else (float("inf") if wait else 1.0)
    floor = best_alloc - 0.5
    return [
        f"tier-weighted mean wait {wait:.0f} s vs best baseline {best_wait:.0f} s: {ratio:.2f}x "
        f"(target <= 0.6x) {'MET' if ratio <= 0.6 else 'MISSED'}",
        f"latency-sensitive p95 wait {ls:.0f} s (target <= {LS_TARGET_S:.0f} s) "
        f"{'MET' if ls <= LS_TARGET_S else 'MISSED'}",
        f"allocation {alloc:.2f}% vs best baseline {best_alloc:.2f}% (target >= {floor:.2f}%) "
        f"{'MET' if alloc >= floor else 'MISSED'}",
    ]


def violations(cell: pd.DataFrame) -> list[str]:
    """What gpuplan did worse than FGD in one (load, seed) cell: latency-sensitive p95 or mean wait
    longer, tier-weighted mean wait not lower (both zero passes) (empty: none)."""
    by = {str(r["policy"]): r for r in cell.to_dict("records")}
    ours, fgd = by["gpuplan"], by["fgd"]
    out = [
        f"{label} {ours[col]:g} > FGD {fgd[col]:g}"
        for col, label in ((LS, "LS p95"), (LS_MEAN, "LS mean"))
        if float(ours[col]) > float(fgd[col])
    ]
    mine, theirs = float(ours[TWW]), float(fgd[TWW])
    if mine > theirs or (mine == theirs and theirs > 0):
        out.append(f"tier-weighted {mine:g} {'>' if mine > theirs else '='} FGD {theirs:g}")
    return out


def grid_table(frame: pd.DataFrame) -> str:
    """Per load and policy, ``median (worst)`` over seeds of each figure, then the per-seed check."""
    head = [RHO, "seeds", "policy", *(label for _, label, _ in GRID_FIGURES)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    checks: list[str] = []
    for rho, at in frame.groupby("rho", sort=True):
        seeds: list[int] = sorted(set(at["seed"].astype(int).tolist()))
        for policy in POLICIES:
            rows = at[at["policy"] == policy]
            cells = []
            for col, _, high in GRID_FIGURES:
                values = [float(v) for v in rows[col].dropna()] if col in rows else []
                if not values:
                    cells.append("—")
                    continue
                worst = max(values) if high else min(values)
                cells.append(f"{statistics.median(values):,.1f} ({worst:,.1f})")
            lines.append(f"| {rho:g} | {len(seeds)} | {policy} | " + " | ".join(cells) + " |")
        bad = {seed: v for seed in seeds if (v := violations(at[at["seed"] == seed]))}
        checks.append(
            f"- {RHO} = {rho:g}, seeds {','.join(map(str, seeds))}: "
            + ("gpuplan never worse than FGD" if not bad else "; ".join(
                f"seed {s}: {', '.join(v)}" for s, v in sorted(bad.items())
            ))
        )  # fmt: skip
    return "\n".join([*lines, "", *checks]) + "\n"


def run_grid(args: list[str], rhos: list[float], seeds: list[int], out: Path) -> None:
    """Each (load, seed) cell through ``gpuplan simulate``, one after the other (seed-major); rows appended to
    ``out`` and the table rewritten at ``out`` with suffix ``.md`` after each cell."""
    frames: list[pd.DataFrame] = []
    # Seed by seed, every load for each: a run cut short still has each load on the same seeds.
    for seed in seeds:
        for rho in rhos:
            with tempfile.TemporaryDirectory() as tmp:
                cell_out = Path(tmp) / "cell.csv"
                code = cli_main(
                    ["simulate", *args, "--rho", str(rho), "--seed", str(seed), "--out", str(cell_out)]
                )
                if code:
                    raise SystemExit(code)
                cell = pd.read_csv(cell_out)
            cell.insert(1, "seed", seed)
            frames.append(cell)
            frame = pd.concat(frames, ignore_index=True)
            frame.to_csv(out, index=False)
            out.with_suffix(".md").write_text(grid_table(frame), encoding="utf-8")
            print(
                f"rho {rho} seed {seed} done: {', '.join(violations(cell)) or 'gpuplan never worse than FGD'}"
            )
    print(out.with_suffix(".md").read_text(encoding="utf-8"))


def main(argv: Sequence[str] | None = None) -> None:
    """Command line: ``gpuplan simulate`` with the given options, then the targets; with ``--seeds``,
    the grid of loads x seeds."""
    args = list(sys.argv[1:] if argv is None else argv)
    known = argparse.ArgumentParser(add_help=False)
    known.add_argument("--out")
    known.add_argument("--seeds")
    known.add_argument("--rho-list")
    known.add_argument("--rho")
    seen, rest = known.parse_known_args(args)
    out = seen.out or DEFAULT_OUT
    if seen.seeds:
        rhos = [float(x) for x in (seen.rho_list or seen.rho or "0.95").split(",")]
        run_grid(rest, rhos, [int(x) for x in seen.seeds.split(",")], Path(out))
        return
    if seen.out is None:
        args += ["--out", DEFAULT_OUT]
    code = cli_main(["simulate", *args])
    if code:
        raise SystemExit(code)
    rows = [{str(k): v for k, v in r.items()} for r in pd.read_csv(out).to_dict("records")]
    for line in targets(rows, 0.95):
        print(line)


if __name__ == "__main__":
    main()
