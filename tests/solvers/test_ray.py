"""Solves on Ray (``--ray local``: a real Ray instance started on this machine): the pricing problems of
the fleet engine, the parts of a split fleet, capacity-gap scenarios and simulation seeds run as Ray tasks
and give what the local process pool gives."""

from __future__ import annotations

import csv
import json
import logging
import random
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.cli import main
from gpuplan.models import Plan, PlanningInput
from gpuplan.planner.planning import make_plan
from gpuplan.solvers import parallel
from gpuplan.solvers.base import CUT
from gpuplan.solvers.cpsat import pools, solver

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'gpuplan[ray]')")

NOW = "2026-11-29T12:00:00+00:00"


@pytest.fixture(scope="module", autouse=True)
def ray_local() -> Iterator[None]:
    """One local Ray instance of one CPU for this module (``--ray local`` then finds it running), shut
    down after it: later tests fork process pools, which must not inherit Ray's threads. One CPU, so that
    tasks do not compete for this 2-core machine with each other and the local runs they are compared to
    (competing deterministic solves can be stopped by the wall clock before their deterministic time)."""
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _comparable(plan: Plan) -> dict[str, Any]:
    """A plan's JSON without wall-clock times."""
    data = plan.model_dump(mode="json")
    data["solver"]["wall_s"] = 0
    data["solver"]["terms"] = {k: v for k, v in data["solver"]["terms"].items() if "wall" not in k}
    return data


def _ray_maps(caplog: pytest.LogCaptureFixture, task: str) -> int:
    """How many maps of ``task`` ran on Ray (from the executor's debug records)."""
    return sum(
        1
        for r in caplog.records
        if getattr(r, "parallel", {}).get("backend") == "ray" and task in r.getMessage()
    )


def _mixed_fleet(pods: int = 60) -> PlanningInput:
    """Three kinds of node (so several node classes to price) and fractional and whole-GPU demand."""
    rng = random.Random(5)
    kinds = [("L40S-48GB", 4, 32000), ("L40S-48GB", 2, 16000), ("H100-80GB", 8, 64000)]
    nodes = [
        {"name": f"n{i}", "cpu_milli": cpu, "memory_mib": 262144,
         "gpus": [{"index": g, "model": model} for g in range(count)]}
        for i, (model, count, cpu) in enumerate(kinds * 3)
    ]  # fmt: skip
    sizes: list[dict[str, Any]] = [{"gpus": 1}, {"gpus": 2}, {"gpu_milli": 500}, {"gpu_milli": 300}]
    work = [{"id": f"p{i}", "cpu_milli": 1000, **rng.choice(sizes)} for i in range(pods)]
    return PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work})


@pytest.mark.parametrize("path", ["pricing", "parts"])
def test_same_seed_and_deterministic_give_the_same_plan_on_ray(
    path: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The fleet engine's pricing problems (the configuration LP's rounds) or the parts of a split fleet
    run as Ray tasks, and the plan equals the local process pool's."""
    caplog.set_level(logging.DEBUG, logger=parallel.__name__)
    if path == "pricing":
        monkeypatch.setattr(solver, "MONOLITHIC_REPLICAS", 0)  # the fleet engine at any size
        task = "_price_one"
    else:
        monkeypatch.setattr(pools, "POOL_GPUS", 16)  # 48 GPUs: 3 parts
        monkeypatch.setattr(solver, "MIN_PART_S", 0.5)
        task = "_solve_part"
    inp = _mixed_fleet(60 if path == "pricing" else 36)  # parts small enough to be proved optimal
    kw: dict[str, Any] = {"now": datetime.fromisoformat(NOW), "time_limit_s": 6, "seed": 3, "num_workers": 2}
    kw["deterministic"] = True
    local = make_plan(inp, **kw)
    assert _ray_maps(caplog, task) == 0
    on_ray = make_plan(inp, ray=parallel.LOCAL, **kw)
    assert _ray_maps(caplog, task) >= 1
    if path == "parts":
        assert on_ray.solver.terms["parts"] == 3
    else:
        assert on_ray.solver.model_size["node_classes"] >= 2
    # Same plan, unless the wall clock cut a deterministic solve on a busy machine (then it says so).
    cut = CUT in local.solver.terms or CUT in on_ray.solver.terms
    assert _comparable(local) == _comparable(on_ray) or cut


def test_capacity_gap_scenarios_on_ray_equal_the_local_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """``capacity-gap --scenarios --ray local``: each scenario a Ray task; the report equals the local
    run's but for wall times."""
    caplog.set_level(logging.DEBUG, logger=parallel.__name__)
    cluster, work, cat, scen = (tmp_path / f for f in ("c.yaml", "w.yaml", "types.yaml", "s.yaml"))
    cluster.write_text(yaml.safe_dump({"nodes": [
        {"name": "n1", "cpu_milli": 64000, "memory_mib": 262144, "gpus": [{"index": 0, "model": "L4-24GB"}]},
    ]}))  # fmt: skip
    work.write_text(yaml.safe_dump({"workloads": [
        {"id": "emb", "team": "search", "replicas": 2, "gpus": 2, "gpu_models": ["L40S-48GB"]},
        {"id": "big", "team": "vision", "gpus": 8, "topology": "nvlink", "gpu_models": ["H100-80GB"]},
    ]}))  # fmt: skip
    cat.write_text(yaml.safe_dump({"currency": "EUR", "node_types": [
        {"name": "l40s-4", "gpu_model": "L40S-48GB", "gpus": 4, "cpu_milli": 64000, "memory_mib": 524288,
         "unit_cost": 40},
        {"name": "h100-8", "gpu_model": "H100-80GB", "topology": "dgx-h100", "cpu_milli": 224000,
         "memory_mib": 2097152, "unit_cost": 300},
    ]}))  # fmt: skip
    scen.write_text(yaml.safe_dump({"scenarios": [
        {"name": "search-x2", "growth": {"teams": {"search": 2.0}}},
        {"name": "vision-x2", "growth": {"teams": {"vision": 2.0}}},
        {"name": "cheap-h100", "prices": {"h100-8": 200}},
    ]}))  # fmt: skip
    args = ["capacity-gap", "--cluster", str(cluster), "--workloads", str(work), "--catalog", str(cat),
            "--scenarios", str(scen), "--time-limit", "20", "--now", NOW, "-q"]  # fmt: skip
    reports = []
    for extra in ([], ["--ray", "local"]):
        out = tmp_path / f"gap{len(extra)}.json"
        assert main([*args, *extra, "--out", str(out)]) == 0
        reports.append(_without_walls(json.loads(out.read_text())))
    assert _ray_maps(caplog, "_scenario_gap") == 1
    local, on_ray = reports
    assert [s["gap"]["cost"] for s in on_ray["scenarios"]] == [380.0, 640.0, 240.0]
    assert on_ray == local
    capsys.readouterr()


def _without_walls(data: Any) -> Any:
    """``data`` without its ``wall_s`` fields (at any depth)."""
    if isinstance(data, dict):
        return {k: _without_walls(v) for k, v in data.items() if k != "wall_s"}
    if isinstance(data, list):
        return [_without_walls(v) for v in data]
    return data


def test_simulate_two_seeds_on_ray_equal_the_local_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simulate --seeds 2,3 --ray local``: one Ray task per seed; the metrics equal the local runs' but
    for the planner's wall times."""
    caplog.set_level(logging.DEBUG, logger=parallel.__name__)
    args = ["simulate", "--nodes", "3", "--hours", "1", "--warmup-hours", "0.25", "--rho", "0.5"]
    args += ["--time-limit", "2", "--seeds", "2,3", "--deterministic", "-q"]
    runs = []
    for extra in ([], ["--ray", "local"]):
        out = tmp_path / f"sim{len(extra)}.csv"
        assert main([*args, *extra, "--out", str(out)]) == 0
        with out.open() as fh:
            runs.append([{k: v for k, v in r.items() if "planner_s" not in k} for r in csv.DictReader(fh)])
    assert _ray_maps(caplog, "_simulate_task") == 1
    local, on_ray = runs
    policies = ("gpuplan", "fgd", "best-fit")
    assert [(r["seed"], r["policy"]) for r in on_ray] == [(s, p) for s in "23" for p in policies]
    assert on_ray == local
    assert on_ray[0]["jobs"] != on_ray[3]["jobs"]  # two seeds: two runs on different arrivals
    capsys.readouterr()
