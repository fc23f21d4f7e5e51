"""The B5 simulator: arrivals at the offered load, and a short run of all three policies from the CLI."""

from __future__ import annotations

import csv
import fnmatch
import itertools
import math
import statistics
import tomllib
from datetime import timedelta
from importlib import resources
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.models.catalog import default_catalog
from gpuplan.models.plan import Assignment
from gpuplan.models.workload import Workload
from gpuplan.planner.executor import SimCluster
from gpuplan.planner.executor.simulate import (
    EPOCH,
    POLICIES,
    TRACE_DIR,
    SimConfig,
    Track,
    _account,
    arrivals,
    gpu_demand,
    sample_cluster,
)
from tests._paths import ROOT_DIR

PYPROJECT = ROOT_DIR / "pyproject.toml"


def test_arrivals_offer_the_load_asked_for_with_lognormal_run_times() -> None:
    cfg = SimConfig(rho=0.95, nodes=8, hours=150, seed=3)
    cluster = sample_cluster(cfg)
    jobs = arrivals(cfg, cluster)
    span = cfg.hours * 3600
    offered = sum(gpu_demand(j.workload.model_dump()) * j.duration_s for j in jobs) / (
        span * cluster.gpu_count
    )
    assert offered == pytest.approx(0.95, rel=0.15)
    assert statistics.median(j.duration_s for j in jobs) == pytest.approx(cfg.median_duration_s, rel=0.1)
    assert statistics.fmean(math.log(j.duration_s) for j in jobs) == pytest.approx(math.log(1800), abs=0.1)
    assert {j.workload.tier for j in jobs} == {"latency-sensitive", "standard", "background"}
    assert all(a.arrival_s < b.arrival_s for a, b in itertools.pairwise(jobs))
    models = {g.model for n in cluster.nodes for g in n.gpus}
    assert all(set(j.workload.gpu_models) <= models for j in jobs)


@pytest.mark.slow
def test_simulate_runs_every_policy_on_the_same_arrivals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "b5.csv"
    args = ["simulate", "--nodes", "3", "--hours", "1", "--warmup-hours", "0.25", "--rho", "1.05"]
    assert main([*args, "--time-limit", "0.5", "--seed", "2", "-q", "--out", str(out)]) == 0
    with out.open() as fh:
        rows = {r["policy"]: r for r in csv.DictReader(fh)}
    assert set(rows) == set(POLICIES)
    assert len({r["jobs"] for r in rows.values()}) == 1 and int(rows["fgd"]["jobs"]) > 0
    for r in rows.values():
        assert 0 < float(r["alloc_pct"]) <= 100
        assert 0 <= int(r["started"]) <= int(r["jobs"])
        # Work starts only at rounds, so every policy's jobs wait for the next round at least.
        assert float(r["tier_weighted_mean_wait_s"]) > 0
    assert float(rows["fgd"]["moves_per_round"]) == 0 == float(rows["best-fit"]["moves_per_round"])
    assert "prediction_mae_median_s" in rows["gpuplan"]
    assert "results written to" in capsys.readouterr().out
    assert main(["simulate", "--rho", "0"]) == 2


def test_the_default_trace_ships_in_the_wheel() -> None:
    """``gpuplan simulate`` after ``pip install .``: the files its default trace directory holds are
    package data of ``gpuplan.data.traces`` (pyproject's globs) and found through the installed package."""
    traces = Path(str(resources.files("gpuplan.data.traces")))
    assert TRACE_DIR.parent == traces
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["package-data"]["gpuplan.data.traces"]
    needed = ["openb_node_list_gpu_node.csv", "LICENSE", "README.md"]
    needed += [f"openb_pod_list_{t}.csv" for t in ("default", "gpushare100", "multigpu50")]
    for name in needed:
        path = TRACE_DIR / name
        assert path.is_file(), path
        relative = path.relative_to(traces).as_posix()
        assert any(fnmatch.fnmatch(relative, glob) for glob in config), relative


def test_simulate_names_a_trace_dir_without_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--trace-dir", str(tmp_path), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpuplan: error: --trace-dir: ")


@pytest.mark.slow
def test_with_admission_a_job_that_fits_on_arrival_does_not_wait_for_the_round(tmp_path: Path) -> None:
    """At half load on three nodes every measured job of this seed fits when it arrives: placed at once,
    no policy makes it wait, whereas without admission each waits for the next round."""
    args = ["simulate", "--nodes", "3", "--hours", "1", "--warmup-hours", "0.25", "--rho", "0.5"]
    args += ["--time-limit", "0.5", "--seed", "2", "-q"]
    runs = {}
    for admission in ("greedy", "none"):
        out = tmp_path / f"{admission}.csv"
        assert main([*args, "--admission", admission, "--out", str(out)]) == 0
        with out.open() as fh:
            runs[admission] = {r["policy"]: r for r in csv.DictReader(fh)}
    for name in POLICIES:
        admitted, rounds = runs["greedy"][name], runs["none"][name]
        assert int(admitted["started"]) == int(admitted["jobs"]) > 0
        assert float(admitted["tier_weighted_mean_wait_s"]) == 0.0
        assert float(rounds["tier_weighted_mean_wait_s"]) > 0.0


def test_a_job_preempted_between_rounds_waits_from_its_preemption() -> None:
    """A job admitted at its arrival (100 s) and preempted between rounds (at 150 s) is back in the
    queue from 150 s: still waiting at the round at 180 s, it has waited 30 s then, and 90 s once it runs
    again at the round at 240 s. One preemption is counted."""
    cfg = SimConfig(nodes=2, seed=0)
    cluster = sample_cluster(cfg)
    track = Track("gpuplan", SimCluster(cluster, default_catalog(), EPOCH))
    job = Workload.model_validate({"id": "j", "gpus": 1, "queued_since": EPOCH + timedelta(seconds=100)})
    _account(track, [job], 180.0, {"j": 100.0}, [("j", 150.0)])
    assert track.started == {"j": 100.0} and track.preemptions == 1
    assert track.queued_at == {"j": 150.0} and track.waited.get("j", 0.0) == 0.0
    node = cluster.nodes[0]
    track.sim.place(
        Assignment.model_validate(
            {"workload": "j", "replica": 0, "node": node.name, "gpus": [{"index": node.gpus[0].index}]}
        )
    )
    _account(track, [job], 240.0, {})
    assert track.waited == {"j": 90.0} and track.queued_at == {} and track.preemptions == 1
