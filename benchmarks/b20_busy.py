"""B20: the same plan on a busy machine — ``gpuplan plan --time-limit L`` while other processes run.

**What.** The command a user runs, ``gpuplan plan --cluster C --workloads W [--policy P] --time-limit L
--now NOW --seed S --out plan.json`` (the console script next to this interpreter, default solver), timed
from just before the process starts to its exit, while N CPU-bound processes (``python3 -c 'while True:
pass'``) run beside it. Does the plan stay as good, and does the command still end on time, when the
machine's two cores are shared?

**How.** For each input x row order x time limit x busy level x mode x seed, one run: the harness starts
N busy processes (``subprocess.Popen``; 0.3 s to get them spinning), runs the command, and kills and
reaps the busy processes in a ``finally`` (also on Ctrl-C or SIGTERM). Per row: the plan's ``status``,
``objective``, ``best_bound`` and ``gap`` (the plan JSON's ``solver`` object), the replicas ``placed``,
``wall_s`` (``perf_counter`` around the subprocess), ``cpu_s`` (the child's user + system time, from
``os.wait4``: its threads and the processes it reaped included), the one-minute load average at the
start and at the end of the run (``load_start``, ``load_end``; a lagging average, so the start still
shows the previous run's load), ``over_s`` = wall - limit, and ``vs_best`` = the objective over the best
objective of that input in any row of the run (any order, limit, busy level, mode or seed) and in the
``--best-known`` file (1.000 is the best). Without ``--best-known`` the ratio is to this run's best only.
Every process (harness, command, busy processes) runs at the harness's niceness, so ``nice -n 15 python
-m benchmarks.b20_busy`` keeps the same contest between them.

Inputs (``--inputs``, comma-separated):

- ``demo``: the bundled ``data/examples/{cluster,workloads,policy}.yaml``, planned at ``now.txt``;
- ``demo-like-seedN``: B15's ``demo_like(demo, N)`` (the demo's waiting work drawn again), at the
  demo's time;
- ``b8-seedN``: B15's B8 body of seed N, at the demo's time;
- ``openb``: the openb node list and default pod list written by ``gpuplan import openb`` (1,213 nodes,
  ~8k workloads), at ``benchmarks.common.NOW``;
- ``variant-K`` or ``variant-SPEC``: the K-th (from 1) of B13's default variants
  (``benchmarks.b13_variants.VARIANTS``) or any spec of :mod:`benchmarks.variants`, seed
  ``--variant-seed``, written as an openb pod list and imported like ``openb``.

The in-memory inputs (demo-like, b8, and any input in an order other than ``file``) are written as JSON
(``model_dump(mode="json")`` of the cluster, the workloads and the policy), which ``gpuplan plan``
reads. ``--orders`` takes B15's row orders (``file``, ``shuffled-N``, ``gpu-ascending``,
``gpu-descending``, ``cpu-only-first``); each order is its own set of rows.

``--reference-limit 120`` first plans each input once (file order, ``--solver cpsat --time-limit 120
-q``, no busy process) and merges the objectives into the ``--best-known`` file (default
``benchmarks/results/b20_best.csv``, a CSV ``input,objective``; the lower value is kept).

``--curve`` instead runs each input on a quiet machine at several limits (``--curve-limits``, default
1,1.5,2,3,5,10) and reports the objective against the child's CPU seconds (``gain/cpu s``: the objective
gained per extra CPU second over the previous limit).

**Targets** (checked in the table's ``verdict`` column):

- demo at ``--time-limit 10`` with 4 busy processes: within 2% of the best known (``vs_best`` <= 1.02),
  never FALLBACK, the whole command within 10.5 s; the same with 0 and 2 busy processes;
- the same on B15's demo-like draws (median and worst ``vs_best``);
- openb at ``--time-limit 2`` and ``5`` with 4 busy processes: the whole command within the limit + 10%.

The allowed overshoot is min(0.5 s, 10% of the limit), which is 0.5 s at 10 s, 0.2 s at 2 s and 0.5 s
at 5 s; the quality and FALLBACK targets apply to ``demo`` and ``demo-like-*`` only.

**REST mode** (``--rest N``). The same inputs asked of one ``gpuplan serve`` by N clients at once: four
concurrent demo-sized requests share the two cores with one another (and with ``--busy`` processes, 0 by
default in this mode) instead of with busy loops. The harness starts one server on loopback (a free port,
a fresh SQLite database in a temporary folder, one planner key given in ``GPUPLAN_API_KEYS``, no rate
limit; its solver processes the server's default, one per core, or ``--rest-processes``, and their CP-SAT
threads the server's default, 1 (``gpuplan plan`` uses 2), or ``--rest-threads``), waits for ``/readyz``,
and kills it in a ``finally`` (also on Ctrl-C or SIGTERM; its solver processes never outlive it). Each
round (``--rounds``, default 3) submits N requests at once (asyncio and httpx, ``POST /v1/plans?wait=W``,
then polls a 202 until the job ends; a 429 because the queue cannot meet W is submitted again without
``wait``). Each request is one input's cluster, workloads and policy (as ``gpuplan request`` writes them)
with ``options`` ``time_limit_s`` = the ``--limits`` value, ``now`` = the input's planning time and a
seed of its own (the first of ``--seeds`` + round x N + request index); all N requests of a round ask for
the same input, one round set per input, or with ``--rest-cycle`` request i of every round asks for input
i modulo the inputs. ``--modes deterministic`` sets ``options.deterministic``. Per request: ``input``,
``round``, ``request``, ``seed``, the plan's ``status`` (``ERROR`` with ``error`` when there is none),
``objective``, ``best_bound``, ``gap``, ``placed``, ``wall_s`` from the submission to the plan in hand,
``over_s`` = wall - limit, the server's view (``solve_s``: the solver report's ``wall_s``; ``queue_s``
and ``run_s``: the job's queued and running seconds from its timestamps, at least 0), the one-minute load
average at the submission and at the answer (``load_start``, ``load_end``), the server's ``processes``,
and ``vs_best`` as above. The table gives per input x limit x busy level x mode: median and worst
``vs_best``, the share of FALLBACK, the worst ``over_s`` and ``queue_s`` and the median ``solve_s``; its
verdict checks the quality and FALLBACK targets (and failed requests) only, since a request that queues
behind the server's solver processes (N above their count) is late by design: the walls are reported, not
judged. Target: four concurrent demo-sized REST requests on one server (2 cores), each within 2% of the
best known (``vs_best`` <= 1.02) and never FALLBACK. ``--max-runs`` counts rounds. Command: ``nice -n 15
python -m benchmarks.b20_busy --rest 4 --best-known benchmarks/results/b20_best.csv`` (demo and three
demo-like draws, limit 10, 3 rounds each: 12 rounds of two waves of 10 s with the 2 default solver
processes, about 5 minutes); ``--rest-processes 4`` runs the four at once. Results in
``benchmarks/results/b20_rest.csv`` (or ``--out``).

**Command.** ``nice -n 15 python -m benchmarks.b20_busy --reference-limit 120`` (the defaults: demo and
three demo-like draws, busy 0,2,4, limit 10, seeds 0,1,2: 36 runs, about 7 minutes, plus 8 for the
reference), then ``nice -n 15 python -m benchmarks.b20_busy --best-known benchmarks/results/b20_best.csv``
for later runs; ``--inputs openb --limits 2,5 --busy 0,4`` for the openb target; ``--curve`` for the
curve. Results in ``benchmarks/results/b20.csv`` (``b20_curve.csv`` with ``--curve``, or ``--out``).
The harness prints an estimate of the run's length first. Run ``python -m benchmarks.b20_busy --help``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pandas as pd

from benchmarks.b10_orders import orders as b10_orders
from benchmarks.b13_variants import VARIANTS
from benchmarks.b15_medium import demo_now, in_order
from benchmarks.b15_medium import inputs as b15_inputs
from benchmarks.common import NODE_FILE, NOW, TRACE_DIR, markdown, parse_seeds, pod_file, write
from benchmarks.variants import parse as parse_variant
from benchmarks.variants import variant, write_rows
from gpuplan.cli.common import load_input
from gpuplan.models.catalog import data_dir
from gpuplan.models.inputs import PlanningInput

#: The console script next to this interpreter.
GPUPLAN = str(Path(sys.executable).with_name("gpuplan"))

#: What each busy process runs.
BUSY_CODE = "while True: pass"

#: Seconds the busy processes get to start spinning before the command starts.
WARMUP_S = 0.3

#: Seconds a run takes beyond its limit, for the estimate (start-up, exit, the busy processes' start).
OVERHEAD_S = 1.5

#: The longest a run of the defaults may take, seconds (the estimate warns beyond it).
BUDGET_S = 20 * 60

#: Where ``--reference-limit`` writes the best objectives when ``--best-known`` is not given.
BEST_FILE = Path("benchmarks/results/b20_best.csv")

#: The ``gpuplan plan`` options of each mode.
MODES: dict[str, tuple[str, ...]] = {"default": (), "deterministic": ("--deterministic",)}

#: Largest ``vs_best`` the targets accept (within 2% of the best known).
QUALITY = 1.02

#: The summary table: (header, column, format).
SUMMARY_TABLE = (
    ("input", "input", ""),
    ("limit s", "limit_s", "g"),
    ("busy", "busy", "d"),
    ("mode", "mode", ""),
    ("runs", "runs", "d"),
    ("vs best median", "vs_best_median", ".3f"),
    ("vs best worst", "vs_best_worst", ".3f"),
    ("FALLBACK %", "fallback_pct", ".0f"),
    ("worst over s", "over_worst", "+.2f"),
    ("cpu s median", "cpu_median", ".1f"),
    ("verdict", "verdict", ""),
)

#: The curve table: (header, column, format).
CURVE_TABLE = (
    ("input", "input", ""),
    ("mode", "mode", ""),
    ("limit s", "limit_s", "g"),
    ("runs", "runs", "d"),
    ("objective median", "objective_median", ",.0f"),
    ("vs best median", "vs_best_median", ".3f"),
    ("cpu s median", "cpu_median", ".2f"),
    ("wall s median", "wall_median", ".2f"),
    ("gain/cpu s", "gain_per_cpu_s", ""),
)


# ------------------------------------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class Source:
    """One input in one row order, as ``gpuplan plan`` file options, and its planning time."""

    name: str
    order: str
    files: tuple[str, ...]
    now: datetime


def _demo_files() -> tuple[str, ...]:
    ex = data_dir() / "examples"
    return ("--cluster", str(ex / "cluster.yaml"), "--workloads", str(ex / "workloads.yaml"),
            "--policy", str(ex / "policy.yaml"))  # fmt: skip


def variant_spec(name: str) -> str:
    """The :mod:`benchmarks.variants` spec of ``variant-K`` (K-th of B13's list, from 1) or
    ``variant-SPEC``."""
    tail = name.removeprefix("variant-")
    if tail.isdigit():
        specs = VARIANTS.split(",")
        if not 1 <= int(tail) <= len(specs):
            raise SystemExit(f"b20: {name}: B13 has variants 1 to {len(specs)} ({VARIANTS})")
        return specs[int(tail) - 1]
    try:
        parse_variant(tail)
    except ValueError as exc:
        raise SystemExit(f"b20: {name}: {exc}") from None
    return tail


def check_order(order: str) -> None:
    """Refuse an order B15's ``in_order`` does not know."""
    if order != "file" and not re.fullmatch(r"shuffled-\d+", order) and order not in b10_orders([]):
        known = ", ".join(["file", "shuffled-N", *(o for o in b10_orders([]) if o != "file")])
        raise SystemExit(f"b20: unknown order '{order}' ({known})")


def _import_openb(pods: Path, where: Path) -> tuple[str, ...]:
    """``gpuplan import openb`` of ``pods`` into ``where``: the plan's file options."""
    nodes = str(TRACE_DIR / NODE_FILE)
    subprocess.run(
        [GPUPLAN, "-q", "import", "openb", "--nodes", nodes, "--pods", str(pods), "--out", str(where)],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return "--cluster", str(where / "cluster.yaml"), "--workloads", str(where / "workloads.csv")


def file_input(name: str, tmp: Path, variant_seed: int) -> tuple[tuple[str, ...], datetime] | None:
    """The file options and planning time of an input that exists as files (``demo``, ``openb``,
    ``variant-*``; the latter two imported into ``tmp``), else None."""
    if name == "demo":
        return _demo_files(), demo_now()
    if name == "openb":
        return _import_openb(pod_file("default"), tmp / "openb"), NOW
    if name.startswith("variant-"):
        pods = tmp / f"{name}.csv"
        write_rows(variant(variant_spec(name), variant_seed), pods)
        return _import_openb(pods, tmp / name), NOW
    return None


def memory_input(name: str) -> PlanningInput:
    """A B15 input that exists in memory only (``demo-like-seedN``, ``b8-seedN``)."""
    like = re.fullmatch(r"demo-like-seed(\d+)", name)
    body = re.fullmatch(r"b8-seed(\d+)", name)
    if like is None and body is None:
        raise SystemExit(
            f"b20: unknown input '{name}' (demo, demo-like-seedN, b8-seedN, openb, variant-K, variant-SPEC)"
        )
    seeds = [int(body.group(1))] if body else []
    return b15_inputs(seeds, [int(like.group(1))] if like else [])[name]


def write_input(inp: PlanningInput, where: Path) -> tuple[str, ...]:
    """``inp`` written as JSON files ``gpuplan plan`` reads: its file options."""
    where.mkdir(parents=True, exist_ok=True)
    parts: dict[str, Any] = {
        "cluster": inp.cluster.model_dump(mode="json"),
        "workloads": [w.model_dump(mode="json") for w in inp.workloads],
        "policy": inp.policy.model_dump(mode="json"),
    }
    out: list[str] = []
    for part, value in parts.items():
        path = where / f"{part}.json"
        path.write_text(json.dumps(value))
        out += [f"--{part}", str(path)]
    return tuple(out)


def _load(files: Sequence[str]) -> PlanningInput:
    opts = dict(zip(files[::2], files[1::2], strict=True))
    policy = opts.get("--policy")
    return load_input(Path(opts["--cluster"]), Path(opts["--workloads"]), Path(policy) if policy else None)


def sources(names: Sequence[str], row_orders: Sequence[str], tmp: Path, variant_seed: int) -> list[Source]:
    """Every input in every row order, written under ``tmp`` where it exists in memory only."""
    for order in row_orders:
        check_order(order)
    out: list[Source] = []
    for name in names:
        found = file_input(name, tmp, variant_seed)
        inp = None if found is not None else memory_input(name)
        now = found[1] if found is not None else demo_now()
        for order in row_orders:
            if order == "file" and found is not None:
                out.append(Source(name, order, found[0], now))
                continue
            if inp is None:
                inp = _load(found[0]) if found is not None else memory_input(name)
            files = write_input(in_order(inp, order), tmp / re.sub(r"[^\w.+-]", "_", f"{name}@{order}"))
            out.append(Source(name, order, files, now))
    return out


# ----------------------------------------------------------------------------------------------- running


def stop(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Kill ``procs`` and reap them."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
    for p in procs:
        p.wait()


@contextlib.contextmanager
def busy(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` CPU-bound processes for the time of the block, killed and reaped when it ends in any way."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", BUSY_CODE],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield procs
    finally:
        stop(procs)


@dataclass(frozen=True)
class Measured:
    """One command run beside busy processes."""

    returncode: int
    wall_s: float
    cpu_s: float
    load_start: float
    load_end: float
    stderr: str
    #: The busy processes (reaped when the run returns).
    helpers: tuple[subprocess.Popen[bytes], ...]


def measure(cmd: Sequence[str], n_busy: int, warmup_s: float = WARMUP_S) -> Measured:
    """Run ``cmd`` (output discarded, error output kept) while ``n_busy`` busy processes run; the command is
    killed too if the harness is interrupted."""
    with busy(n_busy) as helpers, tempfile.TemporaryFile() as err:
        if helpers and warmup_s:
            time.sleep(warmup_s)
        load_start = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        load_end = os.getloadavg()[0]
        err.seek(0)
        text = err.read().decode(errors="replace")
    return Measured(
        returncode=proc.returncode,
        wall_s=wall,
        cpu_s=usage.ru_utime + usage.ru_stime,
        load_start=load_start,
        load_end=load_end,
        stderr=text,
        helpers=tuple(helpers),
    )


def plan_command(
    src: Source, limit: float, seed: int, mode: str, out: Path, extra: Sequence[str] = ()
) -> list[str]:
    """The ``gpuplan plan`` command line of one run."""
    return [
        GPUPLAN, "plan", *src.files, *extra, *MODES[mode], "--time-limit", f"{limit:g}",
        "--now", src.now.isoformat(), "--seed", str(seed), "--out", str(out),
    ]  # fmt: skip


def run_once(
    src: Source, n_busy: int, mode: str, limit: float, seed: int, tmp: Path, extra: Sequence[str] = ()
) -> dict[str, Any]:
    """One row: ``gpuplan plan`` on ``src`` beside ``n_busy`` busy processes."""
    out = tmp / "plan.json"
    out.unlink(missing_ok=True)
    m = measure(plan_command(src, limit, seed, mode, out, extra), n_busy)
    row: dict[str, Any] = {"input": src.name, "order": src.order, "busy": n_busy, "mode": mode,
                           "limit_s": limit, "seed": seed}  # fmt: skip
    plan: dict[str, Any] = {}
    if m.returncode == 0 and out.exists():
        plan = json.loads(out.read_text())
    else:
        print(f"b20: exit {m.returncode}: {' '.join(m.stderr.strip().splitlines()[-5:])}", flush=True)
    solver: dict[str, Any] = plan.get("solver", {})
    row.update(
        status=plan.get("status", "ERROR"), objective=solver.get("objective"),
        best_bound=solver.get("best_bound"), gap=solver.get("gap"),
        placed=len(plan["assignments"]) if plan else None, wall_s=round(m.wall_s, 3),
        cpu_s=round(m.cpu_s, 3), load_start=round(m.load_start, 2), load_end=round(m.load_end, 2),
        over_s=round(m.wall_s - limit, 3),
    )  # fmt: skip
    return row


def describe(row: Mapping[str, Any]) -> str:
    """The progress line of one row."""
    obj, gap = row["objective"], row["gap"]
    return (
        f"{row['input']:18} {row['order']:10} busy {row['busy']} {row['mode']:13} limit {row['limit_s']:4g} "
        f"seed {row['seed']}: {row['status']:8} objective {'-' if obj is None else f'{obj:,.0f}':>9} "
        f"gap {'-' if gap is None else f'{gap:.1%}':>6} placed {row['placed']}, wall {row['wall_s']:.2f} s "
        f"(over {row['over_s']:+.2f}), cpu {row['cpu_s']:.2f} s, load {row['load_start']:.1f} -> "
        f"{row['load_end']:.1f}"
    )


# ------------------------------------------------------------------------------------------- best values


def read_best(path: Path | None) -> dict[str, float]:
    """The ``input,objective`` best values of ``path`` (empty when None or absent)."""
    if path is None or not path.exists():
        return {}
    frame = pd.read_csv(path)
    return {str(k): float(v) for k, v in zip(frame["input"], frame["objective"], strict=True)}


def merge_best(*values: Mapping[str, float]) -> dict[str, float]:
    """The lowest objective of each input over ``values``."""
    out: dict[str, float] = {}
    for found in values:
        for name, obj in found.items():
            out[name] = min(out.get(name, math.inf), obj)
    return out


def write_best(path: Path, values: Mapping[str, float]) -> None:
    """Write the best values as ``input,objective``."""
    write(pd.DataFrame({"input": list(values), "objective": list(values.values())}), path)


def with_vs_best(rows: Sequence[dict[str, Any]], known: Mapping[str, float]) -> list[dict[str, Any]]:
    """``rows`` with ``vs_best``: the objective over the lowest of its input in any row and in ``known``
    (1.0 when both are 0; None for a run without an objective)."""
    found = {str(r["input"]): float(r["objective"]) for r in rows if r.get("objective") is not None}
    best = merge_best(known, found)
    for r in rows:
        if r.get("objective") is None:
            r["vs_best"] = None
            continue
        obj, top = float(r["objective"]), best[str(r["input"])]
        r["vs_best"] = round(obj / top, 4) if top else (1.0 if obj == 0 else math.inf)
    return list(rows)


def reference(srcs: Sequence[Source], limit: float, tmp: Path, seed: int) -> dict[str, float]:
    """The objective of each input (the first source of each name, in file order in :func:`main`) planned
    quietly by CP-SAT at ``limit``, no busy process."""
    out: dict[str, float] = {}
    for src in srcs:
        if src.name in out:
            continue
        row = run_once(src, 0, "default", limit, seed, tmp, ("--solver", "cpsat", "-q"))
        print("reference " + describe(row), flush=True)
        if row["objective"] is not None:
            out[src.name] = float(row["objective"])
    return out


# --------------------------------------------------------------------------------------------- summaries


def allowed_over_s(limit: float) -> float:
    """The overshoot the targets accept at ``limit``: min(0.5 s, 10%)."""
    return min(0.5, 0.1 * limit)


def quality_target(name: str) -> bool:
    """Whether the quality and FALLBACK targets cover input ``name``."""
    return name == "demo" or name.startswith("demo-like-")


def verdict(name: str, limit: float, worst_vs: float, fallback: float, worst_over: float, errors: int) -> str:
    """``ok``, or what misses the targets, for one group of runs."""
    problems = []
    if errors:
        problems.append(f"{errors} failed")
    if quality_target(name):
        if not worst_vs <= QUALITY:  # NaN (no objective) misses too
            problems.append(f"vs best {worst_vs:.3f} > {QUALITY}")
        if fallback:
            problems.append(f"FALLBACK {fallback:.0%}")
    if worst_over > allowed_over_s(limit):
        problems.append(f"over {worst_over:+.2f} s > {allowed_over_s(limit):.2f} s")
    return "; ".join(problems) or "ok"


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per input x limit x busy level x mode (in run order): runs, median and worst ``vs_best``, the
    share of FALLBACK runs (%), the worst overshoot, the median CPU seconds and the verdict."""
    rows = []
    for (name, limit, n_busy, mode), g in frame.groupby(["input", "limit_s", "busy", "mode"], sort=False):
        vs = pd.to_numeric(g["vs_best"], errors="coerce")
        fallback = float((g["status"] == "FALLBACK").mean())
        worst_vs, worst_over = float(vs.max()), float(g["over_s"].max())
        errors = int((g["status"] == "ERROR").sum())
        limit_s = float(str(limit))
        rows.append(
            {"input": name, "limit_s": limit_s, "busy": int(str(n_busy)), "mode": mode, "runs": len(g),
             "vs_best_median": float(vs.median()), "vs_best_worst": worst_vs,
             "fallback_pct": 100 * fallback, "over_worst": worst_over,
             "cpu_median": float(g["cpu_s"].median()),
             "verdict": verdict(str(name), limit_s, worst_vs, fallback, worst_over, errors)}
        )  # fmt: skip
    return pd.DataFrame(rows)


def curve_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per input x mode x limit (limits ascending): medians of objective, ``vs_best``, CPU and wall
    seconds, and the objective gained per extra CPU second over the previous limit (text; ``-`` at the
    first limit or when the CPU seconds did not grow)."""
    rows = []
    for (name, mode), g in frame.groupby(["input", "mode"], sort=False):
        prev: tuple[float, float] | None = None
        for limit, h in g.groupby("limit_s", sort=True):
            obj = float(pd.to_numeric(h["objective"], errors="coerce").median())
            cpu = float(h["cpu_s"].median())
            gain = f"{(prev[0] - obj) / (cpu - prev[1]):,.0f}" if prev is not None and cpu > prev[1] else "-"
            rows.append(
                {"input": name, "mode": mode, "limit_s": float(str(limit)), "runs": len(h),
                 "objective_median": obj,
                 "vs_best_median": float(pd.to_numeric(h["vs_best"], errors="coerce").median()),
                 "cpu_median": cpu, "wall_median": float(h["wall_s"].median()), "gain_per_cpu_s": gain}
            )  # fmt: skip
            prev = (obj, cpu)
    return pd.DataFrame(rows)


def estimate_s(runs: Sequence[float], reference_runs: int = 0, reference_limit: float = 0.0) -> float:
    """Seconds a run of the harness takes: each run's limit plus ``OVERHEAD_S``, and the reference runs."""
    return sum(limit + OVERHEAD_S for limit in runs) + reference_runs * (reference_limit + OVERHEAD_S)


# --------------------------------------------------------------------------------------------- REST mode


#: The planner key of the REST mode's server (given in its environment, never stored).
REST_KEY = "b20-benchmark-planner-key-0123456789"

#: Seconds a REST round takes beyond its limit per wave of solves, for the estimate.
REST_OVERHEAD_S = 2.0

#: Seconds the REST mode's server takes to start, for the estimate.
REST_START_S = 10.0

#: Seconds between polls of a job that outlived ``?wait=``.
POLL_S = 0.1

#: Job states that have not ended.
OPEN_STATES = ("queued", "running")

#: The REST mode's summary table: (header, column, format).
REST_TABLE = (
    ("input", "input", ""),
    ("limit s", "limit_s", "g"),
    ("busy", "busy", "d"),
    ("mode", "mode", ""),
    ("at once", "requests", "d"),
    ("runs", "runs", "d"),
    ("vs best median", "vs_best_median", ".3f"),
    ("vs best worst", "vs_best_worst", ".3f"),
    ("FALLBACK %", "fallback_pct", ".0f"),
    ("worst over s", "over_worst", "+.2f"),
    ("worst queue s", "queue_worst", ".2f"),
    ("solve s median", "solve_median", ".2f"),
    ("verdict", "verdict", ""),
)


@dataclass(frozen=True)
class RestInput:
    """One input in one row order, as a REST request asks for it."""

    name: str
    order: str
    inp: PlanningInput
    now: datetime


@dataclass(frozen=True)
class RestRequest:
    """One request of a round: its input, its place and its body."""

    src: RestInput
    round: int
    index: int
    seed: int
    limit_s: float
    busy: int
    mode: str
    requests: int
    payload: bytes


def rest_body(
    inp: PlanningInput, now: datetime, limit: float, seed: int, mode: str = "default"
) -> dict[str, Any]:
    """The ``POST /v1/plans`` body of ``inp`` (its parts as ``gpuplan request`` writes them) planned at
    ``now`` with time limit ``limit`` and ``seed`` (``deterministic`` in that mode)."""
    options: dict[str, Any] = {"time_limit_s": limit, "now": now.isoformat(), "seed": seed}
    if mode == "deterministic":
        options["deterministic"] = True
    return {
        "cluster": inp.cluster.model_dump(mode="json", by_alias=True, exclude_none=True),
        "workloads": [w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in inp.workloads],
        "policy": inp.policy.model_dump(mode="json", by_alias=True, exclude_none=True),
        "options": options,
    }


def rest_inputs(srcs: Sequence[Source]) -> dict[tuple[str, str], RestInput]:
    """The planning input of each source, read back from its files (what ``gpuplan plan`` reads)."""
    return {(s.name, s.order): RestInput(s.name, s.order, _load(s.files), s.now) for s in srcs}


def rest_rounds(
    inputs: Sequence[RestInput],
    n: int,
    rounds: int,
    limits: Sequence[float],
    levels: Sequence[int],
    modes: Sequence[str],
    first_seed: int,
    *,
    cycle: bool,
) -> list[list[RestRequest]]:
    """The rounds, each a list of ``n`` requests submitted at once: per input (or, with ``cycle``, the
    inputs taken in turn by the requests of each round) x limit x busy level x mode x round. Request i
    of round r has seed ``first_seed + r * n + i``."""
    sets = [list(inputs)] if cycle else [[x] for x in inputs]
    out: list[list[RestRequest]] = []
    for members in sets:
        for limit in limits:
            for n_busy in levels:
                for mode in modes:
                    for r in range(rounds):
                        batch = []
                        for i in range(n):
                            src, seed = members[i % len(members)], first_seed + r * n + i
                            payload = json.dumps(rest_body(src.inp, src.now, limit, seed, mode)).encode()
                            batch.append(RestRequest(src, r, i, seed, limit, n_busy, mode, n, payload))
                        out.append(batch)
    return out


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def _tail(path: Path, lines: int = 10) -> str:
    with contextlib.suppress(OSError):
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    return ""


def server_env(processes: int | None, threads: int | None) -> dict[str, str]:
    """The environment of the REST mode's server: this one, the planner key, no rate limit, room for
    every request, and the solver processes and threads when given."""
    env = {
        **os.environ,
        "GPUPLAN_API_KEYS": json.dumps({REST_KEY: "planner"}),
        "GPUPLAN_LIMIT_RATE_PER_MINUTE": "0",
        "GPUPLAN_LIMIT_MAX_ACTIVE_JOBS": "1000",
    }
    if processes is not None:
        env["GPUPLAN_SOLVER_PROCESSES"] = str(processes)
    if threads is not None:
        env["GPUPLAN_SOLVER_THREADS"] = str(threads)
    return env


def solver_processes(processes: int | None) -> int:
    """How many solver processes the server runs: ``processes``, else its default (the environment's
    ``GPUPLAN_SOLVER_PROCESSES``, else one per core)."""
    if processes is not None:
        return processes
    return int(os.environ.get("GPUPLAN_SOLVER_PROCESSES") or max(1, os.cpu_count() or 1))


@contextlib.contextmanager
def rest_server(
    tmp: Path, processes: int | None = None, threads: int | None = None, ready_s: float = 120.0
) -> Iterator[str]:
    """``gpuplan serve`` on a free loopback port with a fresh SQLite database in ``tmp``, for the time of
    the block once ``/readyz`` answers 200 (its solver processes are up): its URL. The server is stopped
    (SIGTERM, SIGKILL after 30 s) when the block ends in any way."""
    port, log_path = free_port(), tmp / "serve.log"
    cmd = [GPUPLAN, "serve", "--host", "127.0.0.1", "--port", str(port), "--database", str(tmp / "b20.db")]
    url = f"http://127.0.0.1:{port}"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            cmd, env=server_env(processes, threads), stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + ready_s
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"b20: gpuplan serve exited with {proc.returncode}: {_tail(log_path)}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit(f"b20: gpuplan serve not ready after {ready_s:g} s: {_tail(log_path)}")
            time.sleep(0.2)
        yield url
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _seconds(start: str | None, end: str | None) -> float | None:
    """Seconds between two of a job's timestamps, at least 0 (a claim stamps ``started_at`` just before it
    waits for the database's lock, so a job claimed as it arrives can read a few ms before its
    ``created_at``); None when one is missing."""
    if not start or not end:
        return None
    return max(0.0, round((datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds(), 3))


def rest_row(
    req: RestRequest, answer: Mapping[str, Any], wall: float, loads: tuple[float, float]
) -> dict[str, Any]:
    """The row of one request from its answer (``{"job": ..., "plan": ...}``, or ``{"error": ...}``
    when there is no job), the wall seconds from submission to plan and the load averages."""
    plan: dict[str, Any] = answer.get("plan") or {}
    job: dict[str, Any] = answer.get("job") or {}
    solver: dict[str, Any] = plan.get("solver", {})
    error = answer.get("error") or job.get("error") or (None if plan else f"job {job.get('status')}")
    return {
        "input": req.src.name, "order": req.src.order, "round": req.round, "request": req.index,
        "seed": req.seed, "limit_s": req.limit_s, "busy": req.busy, "mode": req.mode,
        "requests": req.requests, "status": plan.get("status", "ERROR"), "objective": solver.get("objective"),
        "best_bound": solver.get("best_bound"), "gap": solver.get("gap"),
        "placed": len(plan["assignments"]) if plan else None, "wall_s": round(wall, 3),
        "over_s": round(wall - req.limit_s, 3), "solve_s": solver.get("wall_s"),
        "queue_s": _seconds(job.get("created_at"), job.get("started_at")),
        "run_s": _seconds(job.get("started_at"), job.get("finished_at")),
        "load_start": round(loads[0], 2), "load_end": round(loads[1], 2), "error": error,
    }  # fmt: skip


async def _ended(http: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    """Poll a job until it ends: ``{"job": ..., "plan": ...}`` (the plan when it is done)."""
    while True:
        job: dict[str, Any] = (await http.get(f"/v1/plans/{job_id}")).raise_for_status().json()
        if job["status"] not in OPEN_STATES:
            break
        await asyncio.sleep(POLL_S)
    if job["status"] != "done":
        return {"job": job}
    found: dict[str, Any] = (await http.get(f"/v1/plans/{job_id}/result")).raise_for_status().json()
    return found


async def submit(http: httpx.AsyncClient, req: RestRequest, wait: float) -> dict[str, Any]:
    """One request, with ``?wait=`` and then polls, on an open client: its row."""
    load_start = os.getloadavg()[0]
    t0 = time.perf_counter()
    try:
        r = await http.post("/v1/plans", params={"wait": wait}, content=req.payload)
        if r.status_code == 429 and "without wait" in r.text:
            r = await http.post("/v1/plans", content=req.payload)  # the queue cannot meet the wait
        if r.status_code == 200:
            answer: dict[str, Any] = r.json()
        elif r.status_code == 202:
            answer = await _ended(http, str(r.json()["id"]))
        else:
            answer = {"error": f"HTTP {r.status_code}: {r.text[:300]}"}
    except httpx.HTTPError as exc:
        answer = {"error": f"{type(exc).__name__}: {exc}"}
    wall = time.perf_counter() - t0
    return rest_row(req, answer, wall, (load_start, os.getloadavg()[0]))


async def rest_round(url: str, batch: Sequence[RestRequest], wait: float) -> list[dict[str, Any]]:
    """The requests of one round submitted at once; their rows in request order."""
    headers = {"Authorization": f"Bearer {REST_KEY}", "Content-Type": "application/json"}
    limits = httpx.Limits(max_connections=len(batch) + 2)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=wait + 60, limits=limits) as http:
        return list(await asyncio.gather(*(submit(http, req, wait) for req in batch)))


def describe_rest(row: Mapping[str, Any]) -> str:
    """The progress line of one REST request."""
    obj, gap, solve = row["objective"], row["gap"], row["solve_s"]
    queue = row["queue_s"]
    text = (
        f"{row['input']:18} {row['order']:10} busy {row['busy']} {row['mode']:13} limit {row['limit_s']:4g} "
        f"round {row['round']} request {row['request']}/{row['requests']} seed {row['seed']}: "
        f"{row['status']:8} objective {'-' if obj is None else f'{obj:,.0f}':>9} "
        f"gap {'-' if gap is None else f'{gap:.1%}':>6} placed {row['placed']}, wall {row['wall_s']:.2f} s "
        f"(over {row['over_s']:+.2f}; queued {'-' if queue is None else f'{queue:.2f}'} s, "
        f"solve {'-' if solve is None else f'{solve:.2f}'} s), load {row['load_start']:.1f} -> "
        f"{row['load_end']:.1f}"
    )
    return text if row["status"] != "ERROR" else f"{text}: {row['error']}"


def rest_verdict(name: str, worst_vs: float, fallback: float, errors: int) -> str:
    """``ok``, or what misses the REST targets (quality and FALLBACK, on the demo and its draws; no
    failed request) for one group of requests."""
    problems = []
    if errors:
        problems.append(f"{errors} failed")
    if quality_target(name):
        if not worst_vs <= QUALITY:  # NaN (no objective) misses too
            problems.append(f"vs best {worst_vs:.3f} > {QUALITY}")
        if fallback:
            problems.append(f"FALLBACK {fallback:.0%}")
    return "; ".join(problems) or "ok"


def rest_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per input x limit x busy level x mode x requests at once (in run order): requests, median and
    worst ``vs_best``, the share of FALLBACK (%), the worst overshoot and queueing, the median solve
    seconds the server reports, and the verdict."""
    rows = []
    keys = ["input", "limit_s", "busy", "mode", "requests"]
    for (name, limit, n_busy, mode, n), g in frame.groupby(keys, sort=False):
        vs = pd.to_numeric(g["vs_best"], errors="coerce")
        fallback = float((g["status"] == "FALLBACK").mean())
        worst_vs = float(vs.max())
        errors = int((g["status"] == "ERROR").sum())
        rows.append(
            {"input": name, "limit_s": float(str(limit)), "busy": int(str(n_busy)), "mode": mode,
             "requests": int(str(n)), "runs": len(g), "vs_best_median": float(vs.median()),
             "vs_best_worst": worst_vs, "fallback_pct": 100 * fallback,
             "over_worst": float(g["over_s"].max()),
             "queue_worst": float(pd.to_numeric(g["queue_s"], errors="coerce").max()),
             "solve_median": float(pd.to_numeric(g["solve_s"], errors="coerce").median()),
             "verdict": rest_verdict(str(name), worst_vs, fallback, errors)}
        )  # fmt: skip
    return pd.DataFrame(rows)


def rest_estimate_s(batches: Sequence[Sequence[RestRequest]], processes: int) -> float:
    """Seconds the REST mode takes: the server's start, then per round its waves of solves (requests
    over solver processes, rounded up), each its limit plus ``REST_OVERHEAD_S``."""
    waves = (math.ceil(len(b) / max(1, processes)) * (b[0].limit_s + REST_OVERHEAD_S) for b in batches if b)
    return REST_START_S + sum(waves)


def run_rest(
    batches: Sequence[Sequence[RestRequest]],
    tmp: Path,
    processes: int | None,
    threads: int | None,
    wait: float | None,
) -> list[dict[str, Any]]:
    """Every round on one server (started here, stopped when this returns or fails), beside its busy
    processes; the rows. ``wait`` None: limit x requests + 30 s, at most 300."""
    rows: list[dict[str, Any]] = []
    with rest_server(tmp, processes, threads) as url:
        print(f"b20: gpuplan serve ready at {url}", flush=True)
        for batch in batches:
            first = batch[0]
            w = wait if wait is not None else min(300.0, first.limit_s * len(batch) + 30)
            with busy(first.busy) as helpers:
                if helpers:
                    time.sleep(WARMUP_S)
                found = asyncio.run(rest_round(url, batch, w))
            for row in found:
                print(describe_rest(row), flush=True)
            rows += found
    return rows


# -------------------------------------------------------------------------------------------------- main


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _terminate(signum: int, _frame: FrameType | None) -> None:
    """SIGTERM ends the harness through its ``finally`` blocks (the busy processes are killed)."""
    raise SystemExit(128 + signum)


def parser() -> argparse.ArgumentParser:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--inputs", default="demo,demo-like-seed1,demo-like-seed2,demo-like-seed3")
    p.add_argument("--orders", default="file", help="row orders (B15's): file, shuffled-N, gpu-descending...")
    p.add_argument("--busy", help="numbers of busy processes (comma-separated; default 0,2,4, with --rest 0)")
    p.add_argument("--modes", default="default", help="default, deterministic (adds --deterministic)")
    p.add_argument(
        "--limit", "--limits", dest="limits", default="10", help="time limits, s (comma-separated)"
    )
    p.add_argument(
        "--seeds", default="0,1,2", help="the solver's seeds (42-44 or 42,45; with --rest the first only)"
    )
    p.add_argument(
        "--max-runs", type=int, default=0, metavar="N", help="only the first N runs (rounds with --rest)"
    )
    p.add_argument("--best-known", type=Path, help="CSV input,objective of the best values known")
    p.add_argument(
        "--reference-limit", type=float, help="first plan each input quietly with CP-SAT this long"
    )
    p.add_argument("--variant-seed", type=int, default=42, help="seed of the variant-* pod lists")
    p.add_argument("--curve", action="store_true", help="objective against CPU seconds on a quiet machine")
    p.add_argument("--curve-limits", default="1,1.5,2,3,5,10", help="time limits of --curve, seconds")
    rest = p.add_argument_group("REST mode")
    rest.add_argument(
        "--rest", type=int, default=0, metavar="N", help="N concurrent requests to one gpuplan serve a round"
    )
    rest.add_argument(
        "--rounds", type=int, default=3, help="rounds of each input, limit, busy level and mode"
    )
    rest.add_argument(
        "--rest-cycle", action="store_true", help="each round's requests take the inputs in turn"
    )
    rest.add_argument(
        "--rest-processes", type=int, metavar="K", help="the server's solver processes (default one per core)"
    )
    rest.add_argument(
        "--rest-threads", type=int, metavar="T", help="CP-SAT threads of each solve (the server's default 1)"
    )
    rest.add_argument(
        "--rest-wait", type=float, metavar="W", help="?wait= seconds (default limit x N + 30, at most 300)"
    )
    p.add_argument(
        "--out", type=Path,
        help="results CSV (default benchmarks/results/b20.csv, b20_curve.csv, b20_rest.csv)",
    )  # fmt: skip
    return p


def known_best(
    args: argparse.Namespace,
    names: Sequence[str],
    srcs: Mapping[tuple[str, str], Source],
    tmp: Path,
    seed: int,
) -> dict[str, float]:
    """The best values of ``--best-known``; with ``--reference-limit`` first the reference plans, merged
    into the best-known file."""
    known = read_best(args.best_known)
    if args.reference_limit:
        best_path = args.best_known or BEST_FILE
        firsts = [srcs[n, "file"] for n in names]
        found = reference(firsts, args.reference_limit, tmp, seed)
        known = merge_best(read_best(best_path), known, found)
        write_best(best_path, known)
        print(f"b20: best values written to {best_path}", flush=True)
    return known


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, write the CSV and print the table."""
    args = parser().parse_args(argv)
    if args.rest and args.curve:
        raise SystemExit("b20: --rest and --curve do not go together")
    if args.rest < 0 or args.rounds < 1:
        raise SystemExit("b20: --rest and --rounds take a positive number")
    if args.curve:
        levels, limits = [0], _floats(args.curve_limits)
    else:
        busy_text = args.busy if args.busy is not None else ("0" if args.rest else "0,2,4")
        levels, limits = [int(x) for x in busy_text.split(",") if x], _floats(args.limits)
    modes = [m for m in args.modes.split(",") if m]
    if unknown := [m for m in modes if m not in MODES]:
        raise SystemExit(f"b20: unknown mode '{unknown[0]}' ({', '.join(MODES)})")
    names = [n for n in args.inputs.split(",") if n]
    row_orders = [o for o in args.orders.split(",") if o]
    seeds = parse_seeds(args.seeds)
    signal.signal(signal.SIGTERM, _terminate)
    if args.rest:
        return rest_main(args, names, row_orders, limits, levels, modes, seeds[0])
    plan = [
        (o, lim, b, m, s) for o in row_orders for lim in limits for b in levels for m in modes for s in seeds
    ]
    runs = [(n, *r) for n in names for r in plan]
    if args.max_runs:
        runs = runs[: args.max_runs]
    n_ref = len(names) if args.reference_limit else 0
    total = estimate_s([r[2] for r in runs], n_ref, args.reference_limit or 0.0)
    imports = any(n == "openb" or n.startswith("variant-") for n in names)
    print(
        f"b20: {len(runs)} runs ({len(names)} inputs x {len(row_orders)} orders x {len(limits)} limits x "
        f"{len(levels)} busy levels x {len(modes)} modes x {len(seeds)} seeds"
        f"{', cut by --max-runs' if args.max_runs else ''}){f', {n_ref} reference runs' if n_ref else ''}: "
        f"about {total / 60:.1f} min (each run its limit + {OVERHEAD_S} s"
        f"{'; the openb imports not counted' if imports else ''})",
        flush=True,
    )
    if total > BUDGET_S:
        print(f"b20: warning: longer than {BUDGET_S // 60} minutes", flush=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="b20-") as tmp_dir:
        tmp = Path(tmp_dir)
        # The reference plans each input in file order, so that order is written too.
        wanted = ["file", *row_orders] if args.reference_limit and "file" not in row_orders else row_orders
        srcs = {(s.name, s.order): s for s in sources(names, wanted, tmp, args.variant_seed)}
        known = known_best(args, names, srcs, tmp, seeds[0])
        for name, order, limit, n_busy, mode, seed in runs:
            rows.append(run_once(srcs[name, order], n_busy, mode, limit, seed, tmp))
            print(describe(rows[-1]), flush=True)
    frame = pd.DataFrame(with_vs_best(rows, known))
    out = args.out or Path(f"benchmarks/results/b20{'_curve' if args.curve else ''}.csv")
    write(frame, out)
    print(f"b20: {len(frame)} rows written to {out}" + ("" if known else " (vs best: this run's best only)"))
    if args.curve:
        print(markdown(curve_summary(frame), CURVE_TABLE))
    else:
        print(markdown(summary(frame), SUMMARY_TABLE))
    return 0


def rest_main(
    args: argparse.Namespace,
    names: Sequence[str],
    row_orders: Sequence[str],
    limits: Sequence[float],
    levels: Sequence[int],
    modes: Sequence[str],
    first_seed: int,
) -> int:
    """The REST mode: the rounds on one server, the CSV and the table."""
    processes = solver_processes(args.rest_processes)
    with tempfile.TemporaryDirectory(prefix="b20-rest-") as tmp_dir:
        tmp = Path(tmp_dir)
        wanted = ["file", *row_orders] if args.reference_limit and "file" not in row_orders else row_orders
        srcs = {(s.name, s.order): s for s in sources(names, wanted, tmp, args.variant_seed)}
        inputs = rest_inputs([srcs[n, o] for n in names for o in row_orders])
        batches = rest_rounds(
            list(inputs.values()), args.rest, args.rounds, limits, levels, modes, first_seed,
            cycle=args.rest_cycle,
        )  # fmt: skip
        if args.max_runs:
            batches = batches[: args.max_runs]
        total = rest_estimate_s(batches, processes) + (
            len(names) * (args.reference_limit + OVERHEAD_S) if args.reference_limit else 0.0
        )
        print(
            f"b20: REST mode, {len(batches)} rounds of {args.rest} requests at once "
            f"({'the inputs in turn' if args.rest_cycle else f'{len(inputs)} inputs'} x {len(limits)} "
            f"limits x {len(levels)} busy levels x {len(modes)} modes x {args.rounds} rounds"
            f"{', cut by --max-runs' if args.max_runs else ''}) on one gpuplan serve with {processes} "
            f"solver processes: about {total / 60:.1f} min",
            flush=True,
        )
        if total > BUDGET_S:
            print(f"b20: warning: longer than {BUDGET_S // 60} minutes", flush=True)
        known = known_best(args, names, srcs, tmp, first_seed)
        rows = run_rest(batches, tmp, args.rest_processes, args.rest_threads, args.rest_wait)
    for row in rows:
        row["processes"] = processes
    frame = pd.DataFrame(with_vs_best(rows, known))
    out = args.out or Path("benchmarks/results/b20_rest.csv")
    write(frame, out)
    print(f"b20: {len(frame)} rows written to {out}" + ("" if known else " (vs best: this run's best only)"))
    print(markdown(rest_summary(frame), REST_TABLE))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
