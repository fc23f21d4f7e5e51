"""B12: does ``--time-limit`` bound the whole command?

For each input (the bundled demo, and the openb fleet written by ``gpuplan import openb`` from the
default pod list: 1,213 nodes, ~8k workloads), each solver and each time limit, two runs:

- ``cli``: ``gpuplan -v plan ... --time-limit L`` as a subprocess; the wall time runs from just before
  the process is started to its exit, so the interpreter, the imports, loading the files, the summary
  and writing the plan all count. Phase times come from the ``plan phases:`` and ``output phases:``
  lines the command logs at INFO; ``startup`` is the process's age when planning began, ``exit`` what
  the phases do not account for (mostly the interpreter's exit).
- ``inproc``: ``make_plan(inp, time_limit_s=L)`` in this process on the same files (loaded once, not
  timed), with its phase line captured from the log.

The overshoot is wall time less the limit; the target is at most max(0.5 s, 10% of the limit). Each
row also has the one-minute load average when the run began (``load``): the machine may be shared.

Run ``python -m benchmarks.b12_deadline --help``.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pandas as pd

from benchmarks.common import NODE_FILE, NOW, TRACE_DIR, pod_file, write
from gpuplan.cli.common import load_input
from gpuplan.models.catalog import data_dir
from gpuplan.planner.planning import make_plan

log = logging.getLogger("benchmarks.b12")

#: The console script next to this interpreter.
GPUPLAN = str(Path(sys.executable).with_name("gpuplan"))


def target_s(limit: float) -> float:
    """The largest overshoot B12 accepts for ``limit``."""
    return max(0.5, 0.1 * limit)


def parse_phases(text: str, prefix: str) -> dict[str, float]:
    """The ``name=seconds`` pairs of the last log line starting with ``prefix`` in ``text``."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        _, found, rest = line.partition(prefix)
        if found:
            out = {k: float(v) for k, _, v in (pair.partition("=") for pair in rest.split())}
    return out


class _Phases(logging.Handler):
    """Keeps the phase line ``make_plan`` logs."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.text = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.text += record.getMessage() + "\n"


def inputs(names: Sequence[str], tmp: Path) -> dict[str, tuple[list[str], datetime]]:
    """Per input, the ``gpuplan plan`` file options and the planning time; openb is imported first."""
    out: dict[str, tuple[list[str], datetime]] = {}
    for name in names:
        if name == "demo":
            ex = data_dir() / "examples"
            files = ["--cluster", str(ex / "cluster.yaml"), "--workloads", str(ex / "workloads.yaml")]
            files += ["--policy", str(ex / "policy.yaml")]
            out[name] = files, datetime.fromisoformat((ex / "now.txt").read_text().strip())
        elif name == "openb":
            where = tmp / "openb"
            cmd = [GPUPLAN, "import", "openb", "--nodes", str(TRACE_DIR / NODE_FILE)]
            subprocess.run([*cmd, "--pods", str(pod_file("default")), "--out", str(where)], check=True)
            files = ["--cluster", str(where / "cluster.yaml"), "--workloads", str(where / "workloads.csv")]
            out[name] = files, NOW
        else:
            raise SystemExit(f"b12: unknown input '{name}' (demo, openb)")
    return out


def run_cli(files: list[str], now: datetime, solver: str, limit: float, out: Path) -> dict[str, float]:
    """One ``gpuplan plan`` subprocess: wall time and phases."""
    cmd = [GPUPLAN, "-v", "plan", *files, "--solver", solver, "--time-limit", str(limit)]
    t0 = time.perf_counter()
    done = subprocess.run(
        [*cmd, "--now", now.isoformat(), "--out", str(out)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"b12: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    output = parse_phases(done.stderr, "output phases:")
    startup = output.pop("startup", 0.0)
    phases = {**parse_phases(done.stderr, "plan phases:"), **output}
    return {"wall_s": wall, "startup": startup, **phases, "exit": wall - startup - sum(phases.values())}


def run_inproc(files: list[str], now: datetime, solver: str, limit: float) -> dict[str, float]:
    """One ``make_plan`` call in this process: wall time and phases."""
    opts = dict(zip(files[::2], files[1::2], strict=True))
    policy = opts.get("--policy")
    inp = load_input(Path(opts["--cluster"]), Path(opts["--workloads"]), Path(policy) if policy else None)
    handler = _Phases()
    planning = logging.getLogger("gpuplan.planner.planning")
    planning.addHandler(handler)
    planning.setLevel(logging.INFO)
    planning.propagate = False
    try:
        t0 = time.perf_counter()
        make_plan(inp, solver=solver, now=now, time_limit_s=limit)
        wall = time.perf_counter() - t0
    finally:
        planning.removeHandler(handler)
        planning.propagate = True
    return {"wall_s": wall, **parse_phases(handler.text, "plan phases:")}


def main(argv: Sequence[str] | None = None) -> None:
    """Measure and write ``benchmarks/results/b12.csv``."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--inputs", default="demo,openb")
    parser.add_argument("--solvers", default="cpsat,greedy-fgd")
    parser.add_argument("--limits", default="2,5,10,30", help="time limits, seconds")
    parser.add_argument("--modes", default="cli,inproc")
    parser.add_argument("--out", default="benchmarks/results/b12.csv")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (files, now) in inputs(args.inputs.split(","), Path(tmp)).items():
            for solver in args.solvers.split(","):
                for limit in (float(x) for x in args.limits.split(",")):
                    for mode in args.modes.split(","):
                        load = os.getloadavg()[0]
                        if mode == "cli":
                            row = run_cli(files, now, solver, limit, Path(tmp) / "plan.json")
                        else:
                            row = run_inproc(files, now, solver, limit)
                        over = row["wall_s"] - limit
                        rows.append(
                            {"input": name, "solver": solver, "mode": mode, "limit_s": limit, "load": load,
                             "overshoot_s": over, "within": over <= target_s(limit), **row}
                        )  # fmt: skip
                        print(
                            f"{name:6} {solver:10} {mode:6} limit {limit:5.1f} s, load {load:4.1f}: "
                            f"wall {row['wall_s']:6.2f} s (overshoot {over:+.2f} s) "
                            + " ".join(f"{k}={v:.2f}" for k, v in row.items() if k != "wall_s"),
                            flush=True,
                        )
    frame = pd.DataFrame(rows).round(3)
    write(frame, Path(args.out))
    print(f"{int(frame['within'].sum())} of {len(frame)} runs within max(0.5 s, 10%) of the limit")


if __name__ == "__main__":
    main()
