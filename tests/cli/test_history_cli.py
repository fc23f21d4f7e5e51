"""``gpuplan history list|show|diff`` on plans stored by real ``gpuplan replan`` runs and by the API's job
path, on SQLite and (when CI runs one) PostgreSQL; bad numbers and bad databases are one line, exit 2."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.api.store import Actor, Store
from gpuplan.cli import main
from gpuplan.models.plan import Plan
from gpuplan.planner.io.files import planning_input
from gpuplan.planner.planning import make_plan
from gpuplan.planner.store.history import PlanHistory
from gpuplan.planner.store.records import PLAN_KIND, JobSource, JobStatus
from tests._factories import queued_job, two_pools

NOW = "2026-11-29T12:00:00+00:00"
LATER = "2026-11-29T13:00:00+00:00"
API = Actor("0123456789ab", "planner")


def _files(tmp_path: Path, later: bool = False) -> list[str]:
    """Two pools (four L40S; one H100 in MIG mode) and work that does not all fit; ``later``: the running
    job has ended, and a second MIG slice and a job larger than any node are asked for."""
    cluster = two_pools()
    work: list[dict[str, Any]] = [
        {"id": "serve", "tier": "latency-sensitive", "gpus": 1, "duration_s": 600},
        {"id": "train", "gpus": 2, "duration_s": 3600},
        {"id": "slice", "mig_profile": "3g.40gb", "duration_s": 1800},
        {"id": "big", "tier": "background", "gpus": 2, "duration_s": 7200},
    ]
    if later:
        work.append({"id": "tiny", "mig_profile": "1g.10gb", "duration_s": 600})
        work.append({"id": "huge", "tier": "background", "gpus": 4, "duration_s": 600})
    else:
        work.append({"id": "run", "gpus": 2, "running_on": "l2:0,1", "duration_s": 3600, "started_at": NOW})
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump({"workloads": work}))
    return ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.yaml")]


def _api_job(db: str, status: JobStatus, plan: Plan | None = None) -> None:
    """A job of team ``ml`` through the API's store path: queued, running, then closed."""
    stored = PlanHistory(db).store.latest_done(PLAN_KIND)
    store = Store.open(db)
    assert stored is not None
    job = queued_job(
        uuid.uuid4().hex,
        source=JobSource.API,
        kind=PLAN_KIND,
        time_limit_s=2.0,
        nodes=3,
        workloads=5,
        submitted_by=API.key_id,
    )
    store.create_job(job, stored.input, API, {})
    if plan is None:
        store.finish(job.id, status, error="solver process died")
    else:
        store.finish(
            job.id, status, plan_json=plan.model_dump_json(by_alias=True), plan_status=plan.status.value
        )
    store.close()


def _out(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(args) == 0
    return capsys.readouterr().out


def test_list_show_and_diff(db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    replan = ["replan", "--db", db_url, "--solver", "greedy-fgd", "-q"]
    _out([*replan, *_files(tmp_path), "--now", NOW], capsys)  # plan 1
    stored = PlanHistory(db_url).latest()
    assert stored is not None
    api_plan = make_plan(
        planning_input(stored.inputs.cluster, stored.inputs.workloads, stored.inputs.policy),
        solver="cpsat", time_limit_s=2.0, now=stored.created_at.replace(microsecond=0),
    )  # fmt: skip
    _api_job(db_url, JobStatus.DONE, api_plan)  # plan 2
    _api_job(db_url, JobStatus.FAILED)  # job 3: no plan
    _out([*replan, *_files(tmp_path, later=True), "--now", LATER], capsys)  # plan 4
    history = PlanHistory(db_url)
    plans = {n: p for n, _, p in history.recent(10)}
    assert sorted(plans) == [1, 2, 4]

    lines = _out(["history", "list", "--db", db_url], capsys).splitlines()
    assert lines[0].split() == [
        "plan", "when", "(UTC)", "source", "solver", "status", "objective", "allocated", "waiting", "team",
    ]  # fmt: skip
    rows = [line.split() for line in lines[1:]]
    assert [r[0] for r in rows] == ["4", "2", "1"]  # newest first; the failed job is no plan
    replanned = ("replan", "greedy-fgd", "default")
    assert [(r[3], r[4], r[-1]) for r in rows] == [replanned, ("api", "cpsat", "ml"), replanned]
    for r in rows:
        plan = plans[int(r[0])]
        assert r[5] == plan.status.value and float(r[6]) == pytest.approx(plan.solver.objective, rel=1e-5)
        assert r[7] == f"{plan.metrics['allocated_gpu_fraction']:.1%}" and r[8] == str(len(plan.unplaced))
    assert _out(["history", "list", "--db", db_url, "--limit", "1"], capsys).count("\n") == 2

    show = _out(["history", "show", "4", "--db", db_url], capsys)
    last = plans[4]
    assert show.startswith("plan 4: ")
    assert "replan, team default, 3 nodes, 6 workloads" in show.splitlines()[0]
    assert f"status: {last.status.value}" in show and "best bound:" in show and "gap:" in show
    pools = {r.split()[0]: r.split()[1:] for r in show.split("\npool ")[1].splitlines()[1:]}
    placed = {"l40s": 0, "h100": 0}
    for a in last.assignments:
        placed["h100" if a.node == "h1" else "l40s"] += 1
    assert {p: int(v[0]) for p, v in pools.items()} == placed
    assert pools["l40s"][2] == "4" and pools["h100"][2] == "1"
    # GPUs used in one number format: two decimals, whole or fractional.
    assert all(re.fullmatch(r"\d+\.\d\d", v[1]) for v in pools.values()), pools
    codes = {u.code for u in last.unplaced}
    assert all(c in show.split("waiting: ")[1] for c in codes) and "actions: " in show

    diff = _out(["history", "diff", "1", "4", "--db", db_url], capsys)
    assert diff.startswith("from plan 1 to plan 4\n")
    sections = _sections(diff)
    # The running job ended (plan 4's inputs no longer hold it): finished, not stopped by the plan.
    assert any(line.startswith("run#0: was l2:") for line in sections["finished"])
    assert not any(line.startswith("run#0") for line in sections.get("stops", []))
    assert any(line.startswith("tiny#0: ") for line in sections["new starts"])
    layout = [line for line in sections["MIG layouts"] if line.startswith("h1:0: ")]
    assert layout and "1g.10gb@" in layout[0].split(" -> ")[1]
    waited = {u.workload for u in plans[1].unplaced} - {u.workload for u in last.unplaced}
    started = {u.workload for u in last.unplaced} - {u.workload for u in plans[1].unplaced}
    assert "huge" in started and waited  # both lists have something to show
    assert {line.split("#")[0] for line in sections.get("waits ended", [])} == waited
    assert {line.split("#")[0] for line in sections.get("waits started", [])} == started
    assert "0 move(s), 0 new start(s), 0 stop(s), 0 finished, 0 MIG layout(s) changed" in _out(
        ["history", "diff", "4", "4", "--db", db_url], capsys
    )


def _sections(diff: str) -> dict[str, list[str]]:
    """The diff's sections: title -> its indented lines."""
    out: dict[str, list[str]] = {}
    title = ""
    for line in diff.splitlines()[2:]:
        if line.startswith("  "):
            out[title].append(line.strip())
        else:
            title = line.rstrip(":")
            out[title] = []
    return out


def _error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a command that fails on its input (exit 2, nothing on stdout)."""
    assert main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = [line for line in captured.err.splitlines() if "WARNING" not in line]
    assert len(lines) == 1, captured.err
    return lines[0]


def test_unknown_plans_are_one_line(db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["replan", "--db", db_url, "--solver", "greedy-fgd", "-q", *_files(tmp_path), "--now", NOW]) == 0
    )
    capsys.readouterr()
    missing = "gpuplan: error: no plan 7 in the plan history (gpuplan history list shows them)"
    assert _error(["history", "show", "7", "--db", db_url], capsys) == missing
    assert _error(["history", "diff", "1", "7", "--db", db_url], capsys) == missing
    assert _error(["history", "list", "--db", db_url, "--limit", "0"], capsys).endswith("at least 1")


def test_bad_databases_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    absent = tmp_path / "absent.db"
    assert (
        _error(["history", "list", "--db", str(absent)], capsys)
        == f"gpuplan: error: database {absent} does not exist"
    )
    assert not absent.exists()  # reading the history makes no database
    garbage = tmp_path / "garbage.db"
    garbage.write_text("not a database\n" * 100)
    line = _error(["history", "show", "1", "--db", str(garbage)], capsys)
    assert line == f"gpuplan: error: database {garbage}: file is not a database"
    line = _error(["history", "list", "--db", "postgresql://planner:s3cret@127.0.0.1:1/gpuplan"], capsys)
    assert line.startswith("gpuplan: error: database postgresql://planner:***@127.0.0.1:1/gpuplan: ")
    assert "s3cret" not in line
    empty = tmp_path / "empty.db"
    PlanHistory(str(empty))  # a store with no plan yet
    assert main(["history", "list", "--db", str(empty)]) == 0
    assert capsys.readouterr().out == "no plans stored yet\n"
