"""B20's pure helpers: the summary and curve tables, ``vs_best``, the inputs' names, and that the busy
processes never outlive a run (no wall-clock assertions)."""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from benchmarks import b20_busy
from benchmarks.b15_medium import in_order
from benchmarks.b20_busy import (
    CURVE_TABLE,
    SUMMARY_TABLE,
    check_order,
    curve_summary,
    measure,
    memory_input,
    merge_best,
    read_best,
    summary,
    variant_spec,
    with_vs_best,
    write_best,
    write_input,
)
from benchmarks.common import markdown
from gpuplan.planner.cli.common import load_input


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
