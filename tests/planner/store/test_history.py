"""``gpuplan replan`` and the plan history: storage on SQLite and PostgreSQL, diffs, reproducibility, and
a run killed mid-solve that leaves the previous plan intact."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import common, main
from gpuplan.models import Plan, PlanningInput
from gpuplan.planner import planning
from gpuplan.planner.pipeline.deadline import (
    MIN_SOLVE_S,
    OUTPUT_S,
    RESERVE_MAX_S,
    RESERVE_SHARE,
    Deadline,
    solve_share,
)
from gpuplan.planner.planning import make_plan
from gpuplan.planner.store.history import PlanHistory, plan_diff
from tests._clock import FakeClock
from tests._paths import ROOT_DIR

ROOT = ROOT_DIR
NOW = "2026-11-29T12:00:00+00:00"
LATER = "2026-11-29T13:00:00+00:00"


def _files(tmp_path: Path, extra: list[dict[str, Any]] | None = None) -> list[str]:
    """A two-node cluster and a few workloads (one running) as files; the replan arguments for them."""
    cluster = {
        "nodes": [
            {"name": f"n{i}", "cpu_milli": 64000, "memory_mib": 262144, "gpus": [
                {"index": g, "model": "L40S-48GB"} for g in range(4)
            ]}
            for i in range(2)
        ]
    }  # fmt: skip
    work: list[dict[str, Any]] = [
        {"id": "run", "gpus": 2, "running_on": "n0:0,1", "duration_s": 3600, "started_at": NOW},
        {"id": "run2", "gpus": 1, "running_on": "n1:0", "duration_s": 1800, "started_at": NOW},
        {"id": "a", "gpus": 1, "tier": "latency-sensitive", "duration_s": 600},
        {"id": "b", "gpu_milli": 500, "replicas": 3, "duration_s": 1200},
        {"id": "big", "gpus": 4, "tier": "background", "duration_s": 7200},
        *(extra or []),
    ]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump({"workloads": work}))
    return ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.yaml")]


def test_replan_stores_the_plan_and_prints_the_diff(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["replan", "--db", db_url, "--time-limit", "3", "-q"]
    assert main([*args, *_files(tmp_path), "--now", NOW]) == 0
    out = capsys.readouterr().out
    assert "stored as plan 1 (first plan)" in out and "new start(s)" in out
    assert "a#0:" in out.split("new starts:")[1] and "run#0:" not in out  # running work is no new start
    history = PlanHistory(db_url)
    first = history.latest()
    assert first is not None and first.plan.provenance["inputs_sha256"]
    assert {w.id for w in first.inputs.workloads} == {"run", "run2", "a", "b", "big"}
    waiting = {u.workload: u for u in first.plan.unplaced}
    assert waiting["big"].predicted_start is not None  # a reservation, once the running job ends
    more = [{"id": "c", "gpus": 1, "tier": "latency-sensitive", "duration_s": 60}]
    assert main([*args, *_files(tmp_path, more), "--now", LATER]) == 0
    out = capsys.readouterr().out
    assert "stored as plan 2 (previous: plan 1)" in out
    assert "c#0:" in out.split("new starts:")[1]
    assert history.count() == 2
    # With no files, replan reads the stored state.
    assert main([*args, "--now", LATER]) == 0
    assert "stored as plan 3 (previous: plan 2)" in capsys.readouterr().out


def test_same_inputs_and_seed_give_the_same_plan(tmp_path: Path) -> None:
    files = _files(tmp_path)
    plans = []
    for name in ("one.db", "two.db"):
        db = str(tmp_path / name)
        assert (
            main(["replan", "--db", db, "--time-limit", "3", "--seed", "5", "-q", *files, "--now", NOW]) == 0
        )
        stored = PlanHistory(db).latest()
        assert stored is not None
        plans.append(stored.plan)
    assert plans[0].assignments == plans[1].assignments
    assert plans[0].unplaced == plans[1].unplaced
    diff = plan_diff(plans[0], plans[1])
    assert not (diff.moves or diff.new_starts or diff.stops or diff.wait_changes)


def test_bad_replan_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replan", "--db", str(tmp_path / "h.db"), "--rounds", "0"]) == 2
    assert main(["replan", "--db", str(tmp_path / "h.db")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == "gpuplan: error: no stored plan to replan from: give --cluster and --workloads"


def _busy_files(tmp_path: Path) -> list[str]:
    """Six 8-GPU nodes and 60 fractional replicas: small to build, enough for CP-SAT to search a while."""
    cluster = {
        "nodes": [
            {"name": f"n{i}", "cpu_milli": 256000, "memory_mib": 1048576, "gpus": [
                {"index": g, "model": "L40S-48GB"} for g in range(8)
            ]}
            for i in range(6)
        ]
    }  # fmt: skip
    work = [
        {"id": f"w{i}", "gpu_milli": 150 + 71 * (i % 11), "replicas": 2, "duration_s": 600 + 60 * (i % 7)}
        for i in range(30)
    ]
    (tmp_path / "busy-cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "busy-workloads.yaml").write_text(yaml.safe_dump({"workloads": work}))
    return [
        "--cluster",
        str(tmp_path / "busy-cluster.yaml"),
        "--workloads",
        str(tmp_path / "busy-workloads.yaml"),
    ]


def _replan(db: str, files: list[str], *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "gpuplan.cli", "replan", "--db", db, "--now", NOW, *files, *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_replan_killed_mid_solve_leaves_the_previous_plan_and_the_next_run_completes(
    db_url: str, tmp_path: Path
) -> None:
    files = _busy_files(tmp_path)
    fast = ["replan", "--db", db_url, "--now", NOW, *files, "--solver", "greedy-fgd", "-q"]
    assert main(fast) == 0
    history = PlanHistory(db_url)
    before = history.latest()
    assert before is not None and history.count() == 1
    run = _replan(db_url, files, "--time-limit", "60", "-v")
    assert run.stderr is not None
    for line in run.stderr:  # the planner says the solve starts
        if line.startswith("gpuplan: INFO: planning "):
            break
    run.send_signal(signal.SIGKILL)
    run.wait(timeout=30)
    after = history.latest()
    assert history.count() == 1 and after is not None
    assert (after.id, after.plan) == (before.id, before.plan)
    assert main(fast) == 0
    latest = history.latest()
    assert history.count() == 2 and latest is not None and latest.id > before.id


# --- the time limit bounds the whole command (fake clock: nothing waits) --------------------------


def test_the_solve_share_depends_on_the_limit_alone_until_the_start_up_eats_into_it() -> None:
    clock = FakeClock()
    fresh = Deadline.after(20.0, clock)
    assert solve_share(20.0, fresh) == 20.0 - RESERVE_SHARE * 20.0
    clock.advance(1.0)  # a start-up within the reserve leaves the (deterministic) share as it is
    assert solve_share(20.0, fresh) == 20.0 - RESERVE_SHARE * 20.0
    assert solve_share(600.0, Deadline.after(600.0, clock)) == 600.0 - RESERVE_MAX_S
    clock.advance(5.0)  # a slow start-up: the solve gets what is left, less the time to store and print
    assert solve_share(20.0, fresh) == pytest.approx(20.0 - 6.0 - OUTPUT_S)
    clock.advance(60.0)
    assert solve_share(20.0, fresh) == MIN_SOLVE_S


def test_replan_gives_the_solve_its_share_and_says_when_it_overran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    limits: list[float] = []

    def solve(inp: PlanningInput, **kw: Any) -> Plan:
        limits.append(kw["time_limit_s"])
        clock.advance(2 * kw["time_limit_s"])  # a solve that takes twice its share
        return make_plan(inp, **{**kw, "solver": "greedy-fgd"})

    monkeypatch.setattr(planning, "make_plan", solve)
    monkeypatch.setattr(common, "Deadline", lambda end: Deadline.after(20.0, clock))
    args = ["replan", "--db", str(tmp_path / "h.db"), "--time-limit", "20", "-q", "--now", NOW]
    with caplog.at_level(logging.WARNING, logger="gpuplan.cli.rounds"):
        assert main([*args, *_files(tmp_path)]) == 0
    assert limits == [solve_share(20.0, Deadline.after(20.0, FakeClock()))]
    assert any("past its 17.0 s share" in r.getMessage() for r in caplog.records)
    stored = PlanHistory(str(tmp_path / "h.db")).latest()
    assert stored is not None and stored.plan.provenance["replan_time_limit_s"] == 20.0
