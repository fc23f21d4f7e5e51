"""gpuplan's data model: hardware catalog, cluster, demand, policy and plan (pydantic v2).

This package imports nothing else of gpuplan's.
"""

from gpuplan.models.base import InputError, Strict
from gpuplan.models.catalog import data_dir, default_catalog, load_catalog
from gpuplan.models.cluster import (
    Cluster,
    Gpu,
    Link,
    MigConfig,
    MigInstance,
    Node,
    check_mig_layout,
    mig_layout_problems,
)
from gpuplan.models.hardware import (
    LINK_CLASSES,
    GpuModelSpec,
    HardwareCatalog,
    MigPlacement,
    MigProfile,
    ReferenceTopology,
)
from gpuplan.models.plan import (
    Action,
    Assignment,
    GpuUse,
    MigLayout,
    Plan,
    PlanStatus,
    SolverReport,
    Unplaced,
)
from gpuplan.models.policy import (
    DisruptionBudget,
    IsolationKind,
    IsolationRule,
    MigPolicy,
    ObjectiveMode,
    ObjectiveWeights,
    Policy,
    Quota,
    Tier,
)
from gpuplan.models.problem import PlanningInput, reference_errors
from gpuplan.models.workload import (
    BACKGROUND,
    LATENCY_SENSITIVE,
    STANDARD,
    GpuRef,
    Placement,
    Shape,
    TopologyNeed,
    Workload,
    Workloads,
)

__all__ = [
    "BACKGROUND",
    "LATENCY_SENSITIVE",
    "LINK_CLASSES",
    "STANDARD",
    "Action",
    "Assignment",
    "Cluster",
    "DisruptionBudget",
    "Gpu",
    "GpuModelSpec",
    "GpuRef",
    "GpuUse",
    "HardwareCatalog",
    "InputError",
    "IsolationKind",
    "IsolationRule",
    "Link",
    "MigConfig",
    "MigInstance",
    "MigLayout",
    "MigPlacement",
    "MigPolicy",
    "MigProfile",
    "Node",
    "ObjectiveMode",
    "ObjectiveWeights",
    "Placement",
    "Plan",
    "PlanStatus",
    "PlanningInput",
    "Policy",
    "Quota",
    "ReferenceTopology",
    "Shape",
    "SolverReport",
    "Strict",
    "Tier",
    "TopologyNeed",
    "Unplaced",
    "Workload",
    "Workloads",
    "check_mig_layout",
    "data_dir",
    "default_catalog",
    "load_catalog",
    "mig_layout_problems",
    "reference_errors",
]
