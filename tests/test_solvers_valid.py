"""Hypothesis: every plan from every solver passes the independent validator, on random small
clusters, demands and policies (``make_plan`` raises ``InvalidPlanError`` otherwise)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import PlanningInput
from gpuplan.planner.planning import make_plan

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
SOLVERS = ["first-fit", "best-fit", "greedy-fgd", "cpsat", "milp-highs"]
TEAMS = ["a", "b", "c"]
TIERS = ["latency-sensitive", "standard", "background"]
H100_LAYOUTS: list[list[tuple[str, int]]] = [
    [],
    [("3g.40gb", 4)],
    [("4g.40gb", 0), ("3g.40gb", 4)],
    [("1g.10gb", s) for s in range(7)],
    [("2g.20gb", 0), ("2g.20gb", 2), ("1g.10gb", 6)],
]


@st.composite
def nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["dgx", "nvl", "l40s", "cpu"]))
        node: dict[str, Any] = {
            "name": f"n{i}",
            "cpu_milli": draw(st.sampled_from([8000, 32000, 128000])),
            "memory_mib": draw(st.sampled_from([65536, 524288])),
            "pool": draw(st.sampled_from(["p1", "p2"])),
            "labels": {"rack": draw(st.sampled_from(["r1", "r2"]))},
        }
        if kind == "dgx":
            node["topology"] = "dgx-h100"
            node["gpus"] = [
                {
                    "index": g,
                    "model": "H100-80GB",
                    "numa": 1,
                    "mig": {"instances": [{"profile": p, "start": s} for p, s in lay]},
                }
                for g, lay in (
                    (6, draw(st.sampled_from(H100_LAYOUTS))),
                    (7, draw(st.sampled_from(H100_LAYOUTS))),
                )
            ]
        elif kind == "nvl":
            node["topology"] = "pcie-4x-h100-nvl-bridged"
        elif kind == "l40s":
            node["gpus"] = [
                {"index": g, "model": "L40S-48GB", "numa": g // 2} for g in range(draw(st.integers(1, 4)))
            ]
        out.append(node)
    return out


@st.composite
def workloads(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 8))):
        w: dict[str, Any] = {
            "id": f"w{i}",
            "team": draw(st.sampled_from(TEAMS)),
            "tier": draw(st.sampled_from(TIERS)),
            "priority": draw(st.integers(0, 2)),
            "cpu_milli": draw(st.sampled_from([0, 1000, 16000])),
            "memory_mib": draw(st.sampled_from([0, 16384])),
            "preemptible": draw(st.booleans()),
            "queued_since": f"2026-11-29T{draw(st.integers(0, 11)):02d}:00:00Z",
        }
        kind = draw(st.sampled_from(["whole", "frac", "mig", "alt", "gang", "cpu"]))
        if kind == "whole":
            w.update(
                gpus=draw(st.integers(1, 4)),
                topology=draw(st.sampled_from(["any", "nvlink", "numa", "same-node"])),
            )
        elif kind == "frac":
            w.update(gpu_milli=draw(st.sampled_from([100, 250, 500, 700])), replicas=draw(st.integers(1, 3)))
        elif kind == "mig":
            w.update(mig_profile=draw(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"])))
            w["gpu_models"] = "H100-80GB"
        elif kind == "alt":
            w["alternatives"] = [
                {"gpus": 2, "topology": "nvlink"},
                {"gpus": 1, "gpu_models": ["L40S-48GB"]},
                {"mig_profile": "3g.40gb"},
            ]
        elif kind == "gang":
            w.update(gpus=draw(st.integers(1, 2)), replicas=2, gang="true")
            if draw(st.booleans()):
                w["gang_domain"] = "rack"
        out.append(w)
    return out


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "mig": {"allow_create": draw(st.booleans()), "allow_repartition": draw(st.booleans())}
    }
    rules: list[dict[str, Any]] = []
    if draw(st.booleans()):
        rules.append({"kind": "no-shared-gpu-across-teams"})
    if draw(st.booleans()):
        rules.append({"kind": "tiers-no-share", "tiers": ["latency-sensitive", "background"]})
    if draw(st.booleans()):
        rules.append({"kind": "team-exclusive", "team": "a", "pool": "p1"})
    policy["isolation"] = rules
    if draw(st.booleans()):
        policy["quotas"] = [
            {"team": "b", "gpus": draw(st.sampled_from([0.5, 1, 3])), "borrow": draw(st.booleans())},
            {"team": "c", "gpus": 1, "gpu_model": "H100-80GB"},
        ]
    return policy


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), workloads(), policies(), st.sampled_from(SOLVERS))
def test_every_solver_plan_is_valid(
    cluster: list[dict[str, Any]], demand: list[dict[str, Any]], policy: dict[str, Any], solver: str
) -> None:
    pools = {n["pool"] for n in cluster}
    policy["isolation"] = [r for r in policy["isolation"] if r.get("pool") in (None, *pools)]
    inp = PlanningInput.model_validate({"cluster": {"nodes": cluster}, "workloads": demand, "policy": policy})
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    replicas = sum(w.replicas for w in inp.workloads)
    assert len(plan.assignments) + len(plan.unplaced) == replicas
