"""A policy replayed on a plan history made by ``gpuplan replan`` in a temporary SQLite file: the policy in
force gives back the stored objectives within their gaps; a tighter quota shows in its team's figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from gpuplan.models.review import ReplayReport

NOW, LATER = "2026-11-29T12:00:00+00:00", "2026-11-29T13:00:00+00:00"


def _files(tmp_path: Path) -> list[str]:
    """Two 4-GPU nodes, running work of two teams and waiting work of every tier; a policy with a quota."""
    cluster = {
        "nodes": [
            {"name": f"n{i}", "cpu_milli": 64000, "memory_mib": 262144,
             "gpus": [{"index": g, "model": "L40S-48GB"} for g in range(4)]}
            for i in range(2)
        ]
    }  # fmt: skip
    work: list[dict[str, Any]] = [
        {"id": "run", "team": "a", "gpus": 2, "running_on": "n0:0,1", "duration_s": 3600, "started_at": NOW},
        {"id": "ls", "team": "a", "gpus": 1, "tier": "latency-sensitive", "duration_s": 600},
        {"id": "std", "team": "b", "gpus": 1, "replicas": 3, "duration_s": 1200},
        {"id": "big", "team": "b", "gpus": 4, "tier": "background", "duration_s": 7200},
    ]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump({"workloads": work}))
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({"quotas": [{"team": "b", "gpus": 5}]}))
    (tmp_path / "tighter.yaml").write_text(yaml.safe_dump({"quotas": [{"team": "b", "gpus": 1}]}))
    return [
        *("--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.yaml")),
        *("--policy", str(tmp_path / "policy.yaml")),
    ]


def _replay(db: str, policy: Path, out: Path) -> ReplayReport:
    args = ["-q", "replay", "--db", db, "--policy", str(policy), "--last", "2", "--time-limit", "5"]
    assert main([*args, "--out", str(out)]) == 0
    return ReplayReport.model_validate(json.loads(out.read_text()))


def test_replaying_the_policy_in_force_gives_back_the_stored_objectives(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "plans.db")
    files = _files(tmp_path)
    for now in (NOW, LATER):
        assert main(["-q", "replan", "--db", db, "--time-limit", "3", *files, "--now", now]) == 0
    capsys.readouterr()
    report = _replay(db, tmp_path / "policy.yaml", tmp_path / "same.json")
    assert [p.plan for p in report.plans] == [1, 2]  # oldest first
    for p in report.plans:
        assert p.within_gaps
        assert p.stored.objective is not None and p.replayed.objective is not None
        assert p.stored.gap_units is not None and p.replayed.gap_units is not None
        assert abs(p.replayed.objective - p.stored.objective) <= p.stored.gap_units + p.replayed.gap_units
        assert p.total.stored.placed == p.total.replayed.placed
    out = capsys.readouterr().out
    assert "within the gaps" in out and "beyond the gaps" not in out
    tables = out.split("\n", 1)[1].split("replay written")[0]  # below the line naming the policy file
    assert "True" not in tables and "False" not in tables and "_" not in tables

    # Team b may use 1 GPU instead of 5: its 3 standard replicas and its 4-GPU job had room for 4 GPUs
    # of b's 5 before (6 GPUs free: 1 for a's latency-sensitive replica); now b gets one GPU in each plan.
    tighter = _replay(db, tmp_path / "tighter.yaml", tmp_path / "tighter.json")
    team_b = next(line for line in tighter.by_team if line.key == "b")
    assert team_b.replayed.gpus_allocated == 2  # 1 GPU in each of the 2 plans
    assert team_b.replayed.placed < team_b.stored.placed
    team_a = next(line for line in tighter.by_team if line.key == "a")
    assert team_a.replayed.placed == team_a.stored.placed
