"""B20's pure helpers: the summary and curve tables, ``vs_best``, the inputs' names, and that the busy
processes never outlive a run; the REST mode's request bodies and table, and one short run of it against
a real server (``slow``). No wall-clock assertions."""

from __future__ import annotations

import contextlib
import json
import math
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from benchmarks import b20_busy
from benchmarks.b15_medium import demo_now, in_order
from benchmarks.b20_busy import (
    CURVE_TABLE,
    REST_TABLE,
    SUMMARY_TABLE,
    RestInput,
    check_order,
    curve_summary,
    file_input,
    measure,
    memory_input,
    merge_best,
    read_best,
    rest_body,
    rest_rounds,
    rest_row,
    rest_summary,
    summary,
    variant_spec,
    with_vs_best,
    write_best,
    write_input,
)
from benchmarks.common import markdown
from gpuplan.api.schemas import PlanRequest
from gpuplan.cli.common import load_input
from gpuplan.models.inputs import PlanningInput


def _row(
    name: str, limit: float, n_busy: int, status: str, vs: float | None, over: float, cpu: float
) -> dict[str, Any]:
    return {"input": name, "order": "file", "limit_s": limit, "busy": n_busy, "mode": "default",
            "status": status, "vs_best": vs, "over_s": over, "cpu_s": cpu}  # fmt: skip


def test_summary_table_per_input_limit_busy_and_mode() -> None:
    """Medians and worst cases per group in run order; the targets (2% of the best, no FALLBACK, the
    overshoot within min(0.5 s, 10%)) are checked on the demo, only the overshoot on openb."""
    frame = pd.DataFrame(
        [
            _row("demo", 10, 0, "FEASIBLE", 1.0, -0.2, 19.0),
            _row("demo", 10, 0, "FEASIBLE", 1.01, 0.1, 20.0),
            _row("demo", 10, 0, "FALLBACK", 1.03, 0.3, 21.0),
            _row("demo", 10, 4, "OPTIMAL", 1.0, 0.4, 9.0),
            _row("demo", 10, 4, "OPTIMAL", 1.02, 0.6, 10.0),
            _row("openb", 2, 4, "FALLBACK", 1.5, 0.1, 3.0),
            _row("openb", 2, 4, "ERROR", None, 0.15, 0.5),
        ]
    )
    assert markdown(summary(frame), SUMMARY_TABLE).splitlines() == [
        "| input | limit s | busy | mode | runs | vs best median | vs best worst | FALLBACK % | worst over s "
        "| cpu s median | verdict |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|",
        "| demo | 10 | 0 | default | 3 | 1.010 | 1.030 | 33 | +0.30 | 20.0 "
        "| vs best 1.030 > 1.02; FALLBACK 33% |",
        "| demo | 10 | 4 | default | 2 | 1.010 | 1.020 | 0 | +0.60 | 9.5 | over +0.60 s > 0.50 s |",
        "| openb | 2 | 4 | default | 2 | 1.500 | 1.500 | 50 | +0.15 | 1.8 | 1 failed |",
    ]


def test_curve_table_gives_the_objective_gained_per_cpu_second() -> None:
    frame = pd.DataFrame(
        [
            {"input": "demo", "mode": "default", "limit_s": 2.0, "objective": 1100.0, "vs_best": 1.1,
             "cpu_s": 2.0, "wall_s": 2.5},
            {"input": "demo", "mode": "default", "limit_s": 1.0, "objective": 1500.0, "vs_best": 1.5,
             "cpu_s": 1.0, "wall_s": 1.5},
            {"input": "demo", "mode": "default", "limit_s": 5.0, "objective": 1000.0, "vs_best": 1.0,
             "cpu_s": 6.0, "wall_s": 5.5},
        ]
    )  # fmt: skip
    assert markdown(curve_summary(frame), CURVE_TABLE).splitlines()[2:] == [
        "| demo | default | 1 | 1 | 1,500 | 1.500 | 1.00 | 1.50 | - |",
        "| demo | default | 2 | 1 | 1,100 | 1.100 | 2.00 | 2.50 | 400 |",
        "| demo | default | 5 | 1 | 1,000 | 1.000 | 6.00 | 5.50 | 25 |",
    ]


def test_vs_best_divides_by_the_best_of_the_input_in_any_row_and_in_the_known_values() -> None:
    rows = with_vs_best(
        [
            {"input": "demo", "order": "file", "objective": 110.0},
            {"input": "demo", "order": "shuffled-1", "objective": 100.0},
            {"input": "demo", "order": "file", "objective": None},
            {"input": "like", "order": "file", "objective": 0.0},
            {"input": "like", "order": "file", "objective": 0.0},
            {"input": "tight", "order": "file", "objective": 5.0},
        ],
        {"demo": 95.0, "tight": 0.0, "unused": 1.0},
    )
    assert [r["vs_best"] for r in rows[:5]] == [1.1579, 1.0526, None, 1.0, 1.0]
    assert math.isinf(rows[5]["vs_best"])
    assert (
        with_vs_best([{"input": "demo", "objective": 110.0}, {"input": "demo", "objective": 100.0}], {})[0][
            "vs_best"
        ]
        == 1.1
    )


def test_best_values_merge_to_the_lowest_and_round_trip(tmp_path: Path) -> None:
    merged = merge_best({"demo": 100.0, "a": 3.0}, {"demo": 90.0, "b": 4.0}, {"demo": 95.0})
    assert merged == {"demo": 90.0, "a": 3.0, "b": 4.0}
    write_best(tmp_path / "best.csv", merged)
    assert read_best(tmp_path / "best.csv") == merged
    assert read_best(tmp_path / "absent.csv") == {}
    assert read_best(None) == {}


def test_input_and_order_names() -> None:
    assert variant_spec("variant-1") == "gpushare40"
    assert variant_spec("variant-gpushare60+shuffle") == "gpushare60+shuffle"
    with pytest.raises(SystemExit, match="variants 1 to"):
        variant_spec("variant-99")
    with pytest.raises(SystemExit, match="unknown step"):
        variant_spec("variant-gpushares")
    for order in ("file", "shuffled-3", "gpu-descending", "cpu-only-first"):
        check_order(order)
    with pytest.raises(SystemExit, match="unknown order 'gpu-desc'"):
        check_order("gpu-desc")


def test_busy_processes_are_killed_when_the_command_fails() -> None:
    done = measure([sys.executable, "-c", "raise SystemExit(3)"], 2, warmup_s=0)
    assert done.returncode == 3
    assert len(done.helpers) == 2
    assert all(p.returncode is not None for p in done.helpers)


def test_busy_processes_are_killed_when_the_command_cannot_start(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen[bytes]] = []
    real = b20_busy.busy

    @contextlib.contextmanager
    def recorded(n: int) -> Iterator[list[subprocess.Popen[bytes]]]:
        with real(n) as procs:
            started.extend(procs)
            yield procs

    monkeypatch.setattr(b20_busy, "busy", recorded)
    with pytest.raises(FileNotFoundError):
        measure(["/nonexistent/gpuplan-b20"], 2, warmup_s=0)
    assert len(started) == 2
    assert all(p.returncode is not None for p in started)


def test_an_input_in_memory_is_written_as_files_gpuplan_plan_reads(tmp_path: Path) -> None:
    """A demo-like draw in another row order, written as JSON, reads back as the same input."""
    inp = in_order(memory_input("demo-like-seed1"), "shuffled-1")
    files = write_input(inp, tmp_path)
    opts = dict(zip(files[::2], files[1::2], strict=True))
    back = load_input(Path(opts["--cluster"]), Path(opts["--workloads"]), Path(opts["--policy"]))
    assert back == inp


# --------------------------------------------------------------------------------------------- REST mode


def _demo() -> PlanningInput:
    found = file_input("demo", Path("unused"), 42)
    assert found is not None
    opts = dict(zip(found[0][::2], found[0][1::2], strict=True))
    return load_input(Path(opts["--cluster"]), Path(opts["--workloads"]), Path(opts["--policy"]))


@pytest.mark.parametrize("name", ["demo", "demo-like-seed2", "b8-seed1"])
def test_the_rest_body_of_an_input_is_read_by_the_api_as_that_input(name: str) -> None:
    """The body, as JSON, parses as the API's request and gives back the same planning input (as the
    server builds it), with the options asked for."""
    inp = _demo() if name == "demo" else memory_input(name)
    now = demo_now()
    body = json.loads(json.dumps(rest_body(inp, now, 2.5, 7, "deterministic")))
    req = PlanRequest.model_validate(body)
    back = PlanningInput.model_validate(
        {"cluster": req.cluster, "workloads": req.workloads, "policy": req.policy}
    )
    assert back == inp
    assert (req.options.time_limit_s, req.options.now, req.options.seed) == (2.5, now, 7)
    assert req.options.deterministic
    assert req.options.solver == "cpsat"
    assert not PlanRequest.model_validate(rest_body(inp, now, 1, 0)).options.deterministic


def test_rest_rounds_give_each_request_its_own_seed_and_the_inputs_in_turn_with_cycle() -> None:
    now = demo_now()
    a = RestInput("demo-like-seed1", "file", memory_input("demo-like-seed1"), now)
    b = RestInput("demo-like-seed2", "file", memory_input("demo-like-seed2"), now)
    same = rest_rounds([a, b], 3, 2, [10.0], [0], ["default"], 5, cycle=False)
    assert [[(r.src.name, r.round, r.index, r.seed) for r in batch] for batch in same] == [
        [("demo-like-seed1", 0, 0, 5), ("demo-like-seed1", 0, 1, 6), ("demo-like-seed1", 0, 2, 7)],
        [("demo-like-seed1", 1, 0, 8), ("demo-like-seed1", 1, 1, 9), ("demo-like-seed1", 1, 2, 10)],
        [("demo-like-seed2", 0, 0, 5), ("demo-like-seed2", 0, 1, 6), ("demo-like-seed2", 0, 2, 7)],
        [("demo-like-seed2", 1, 0, 8), ("demo-like-seed2", 1, 1, 9), ("demo-like-seed2", 1, 2, 10)],
    ]
    cycled = rest_rounds([a, b], 3, 1, [2.0, 5.0], [0], ["default"], 0, cycle=True)
    assert [[(r.src.name, r.limit_s, r.seed) for r in batch] for batch in cycled] == [
        [("demo-like-seed1", 2.0, 0), ("demo-like-seed2", 2.0, 1), ("demo-like-seed1", 2.0, 2)],
        [("demo-like-seed1", 5.0, 0), ("demo-like-seed2", 5.0, 1), ("demo-like-seed1", 5.0, 2)],
    ]
    options = json.loads(cycled[1][1].payload)["options"]
    assert options == {"time_limit_s": 5.0, "now": now.isoformat(), "seed": 1}


def test_rest_row_reads_the_plan_the_job_and_a_failure() -> None:
    now = demo_now()
    req = rest_rounds([RestInput("demo", "file", memory_input("demo-like-seed1"), now)], 1, 1, [2.0], [0],
                      ["default"], 0, cycle=False)[0][0]  # fmt: skip
    job = {
        "status": "done",
        "created_at": "2026-01-01T00:00:00.500+00:00",
        "started_at": "2026-01-01T00:00:00.495+00:00",
        "finished_at": "2026-01-01T00:00:03.000+00:00",
    }
    plan = {"status": "FEASIBLE", "assignments": [{}, {}],
            "solver": {"objective": 110.0, "best_bound": 100.0, "gap": 0.1, "wall_s": 2.1}}  # fmt: skip
    row = rest_row(req, {"job": job, "plan": plan}, 3.25, (1.5, 2.25))
    assert {k: row[k] for k in ("status", "objective", "best_bound", "gap", "placed", "wall_s", "over_s",
                                "solve_s", "queue_s", "run_s", "load_start", "load_end", "error")} == {
        "status": "FEASIBLE", "objective": 110.0, "best_bound": 100.0, "gap": 0.1, "placed": 2,
        "wall_s": 3.25, "over_s": 1.25, "solve_s": 2.1, "queue_s": 0.0, "run_s": 2.505,
        "load_start": 1.5, "load_end": 2.25, "error": None,
    }  # fmt: skip
    failed = rest_row(req, {"job": {**job, "status": "failed", "error": "solver process died"}}, 1.0, (0, 0))
    assert (failed["status"], failed["objective"], failed["error"]) == ("ERROR", None, "solver process died")
    refused = rest_row(req, {"error": "HTTP 413: too big"}, 0.5, (0, 0))
    assert (refused["status"], refused["queue_s"], refused["error"]) == ("ERROR", None, "HTTP 413: too big")


def _rest(
    name: str,
    status: str,
    vs: float | None,
    over: float,
    queue: float | None,
    solve: float | None,
    n_busy: int = 0,
) -> dict[str, Any]:
    return {"input": name, "order": "file", "limit_s": 10.0, "busy": n_busy, "mode": "default",
            "requests": 4, "status": status, "vs_best": vs, "over_s": over, "queue_s": queue,
            "solve_s": solve}  # fmt: skip


def test_rest_summary_table_per_input_limit_busy_mode_and_requests_at_once() -> None:
    """Medians and worst cases per group in run order; the verdict checks quality, FALLBACK and failures
    (on the demo and its draws), not the walls."""
    frame = pd.DataFrame(
        [
            _rest("demo", "FEASIBLE", 1.0, 0.3, 0.0, 9.8),
            _rest("demo", "FEASIBLE", 1.01, 0.4, 0.01, 9.9),
            _rest("demo", "FEASIBLE", 1.02, 11.0, 10.6, 9.9),
            _rest("demo", "OPTIMAL", 1.006, 10.9, 10.5, 9.7),
            _rest("demo-like-seed1", "FALLBACK", 1.2, 0.5, 0.0, 9.5),
            _rest("demo-like-seed1", "ERROR", None, 1.0, None, None),
            _rest("b8-seed1", "FALLBACK", 1.5, 0.2, 0.0, 1.0),
            _rest("demo", "FEASIBLE", 1.0, 0.1, 0.0, 9.0, n_busy=2),
        ]
    )
    assert markdown(rest_summary(frame), REST_TABLE).splitlines() == [
        "| input | limit s | busy | mode | at once | runs | vs best median | vs best worst | FALLBACK % "
        "| worst over s | worst queue s | solve s median | verdict |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        "| demo | 10 | 0 | default | 4 | 4 | 1.008 | 1.020 | 0 | +11.00 | 10.60 | 9.85 | ok |",
        "| demo-like-seed1 | 10 | 0 | default | 4 | 2 | 1.200 | 1.200 | 50 | +1.00 | 0.00 | 9.50 "
        "| 1 failed; vs best 1.200 > 1.02; FALLBACK 50% |",
        "| b8-seed1 | 10 | 0 | default | 4 | 1 | 1.500 | 1.500 | 100 | +0.20 | 0.00 | 1.00 | ok |",
        "| demo | 10 | 2 | default | 4 | 1 | 1.000 | 1.000 | 0 | +0.10 | 0.00 | 9.00 | ok |",
    ]


@pytest.mark.slow
def test_rest_mode_plans_through_a_real_server(tmp_path: Path) -> None:
    """Two requests at once of a 1 s limit, one round, on a server started and stopped by the harness."""
    out = tmp_path / "rest.csv"
    argv = ["--rest", "2", "--limits", "1", "--rounds", "1", "--inputs", "demo", "--out", str(out)]
    handler = signal.getsignal(signal.SIGTERM)
    try:
        assert b20_busy.main(argv) == 0
    finally:
        signal.signal(signal.SIGTERM, handler)  # main() turns SIGTERM into SystemExit
    frame = pd.read_csv(out)
    assert list(frame["request"]) == [0, 1]
    assert list(frame["seed"]) == [0, 1]
    assert set(frame["status"]) <= {"OPTIMAL", "FEASIBLE", "FALLBACK"}
    assert frame["objective"].notna().all()
    assert frame["solve_s"].notna().all()
    assert (frame["vs_best"] >= 1.0).all()
