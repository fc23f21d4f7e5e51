"""The example the workbook tests export (as data in ``test_export``, as printed pages in
``test_workbook_render``): two nodes, one with a MIG GPU, and an 8-GPU NVLink job no node can hold, which
makes a capacity gap."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gpuplan.models import Plan, PlanningInput, default_catalog
from gpuplan.models.capacity import CapacityGap, NodeTypeCatalog
from gpuplan.planner.capacity.gap import capacity_gap
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import validate_plan

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

CLUSTER: dict[str, Any] = {
    "nodes": [
        {"name": "a100-1", "pool": "train", "cpu_milli": 64000, "memory_mib": 524288,
         "gpus": [{"index": 0, "model": "A100-SXM4-80GB"}, {"index": 1, "model": "A100-SXM4-80GB"},
                  {"index": 2, "model": "A100-SXM4-80GB",
                   "mig": {"instances": [{"profile": "3g.40gb", "start": 0}]}}]},
        {"name": "l40s-1", "pool": "infer", "cpu_milli": 32000, "memory_mib": 262144,
         "gpus": [{"index": 0, "model": "L40S-48GB"}, {"index": 1, "model": "L40S-48GB"}]},
    ]
}  # fmt: skip

WORKLOADS: list[dict[str, Any]] = [
    {"id": "train", "team": "vision", "tier": "standard", "gpus": 2, "gpu_models": "A100-SXM4-80GB",
     "cpu_milli": 16000, "memory_mib": 65536, "duration_s": 7200},
    {"id": "nb", "team": "research", "tier": "background", "mig_profile": "3g.40gb", "cpu_milli": 2000,
     "memory_mib": 8192},
    {"id": "emb", "team": "search", "tier": "latency-sensitive", "replicas": 3, "gpu_milli": 500,
     "gpu_models": "L40S-48GB", "cpu_milli": 2000, "memory_mib": 8192, "duration_s": 3600},
    {"id": "big", "team": "vision", "tier": "standard", "gpus": 8, "topology": "nvlink", "cpu_milli": 64000,
     "memory_mib": 524288},
]  # fmt: skip


def planned_gap() -> tuple[PlanningInput, Plan, CapacityGap, NodeTypeCatalog]:
    """The example planned (the plan validated) and its capacity gap over the bundled node types."""
    inp = PlanningInput.model_validate({"cluster": CLUSTER, "workloads": WORKLOADS})
    plan = make_plan(inp, now=NOW, time_limit_s=3.0)
    assert validate_plan(plan, inp, default_catalog()) == []
    types = load_node_types(None)
    gap = capacity_gap(inp, types, GapOptions(time_limit_s=3.0, now=NOW), baseline=plan)
    return inp, plan, gap, types
