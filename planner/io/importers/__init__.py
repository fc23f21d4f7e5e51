"""Importers turning third-party outputs (nvidia-smi text, the Alibaba openb trace) into gpuplan inputs."""

from gpuplan.planner.io.importers.nvidia_smi import (
    GpuInstance,
    ObservedProfile,
    TopoGpu,
    TopoMatrix,
    compare_mig_with_catalog,
    identify_gpu_model,
    is_mig_lgi,
    layout_from_lgi,
    lgi_model,
    lookup_gpu_model,
    node_from_topo,
    parse_mig_lgi,
    parse_mig_lgipp,
    parse_topo,
    resolve_mig_model,
)
from gpuplan.planner.io.importers.openb import OpenbSummary, import_openb, read_cluster, read_workloads

__all__ = [
    "GpuInstance",
    "ObservedProfile",
    "OpenbSummary",
    "TopoGpu",
    "TopoMatrix",
    "compare_mig_with_catalog",
    "identify_gpu_model",
    "import_openb",
    "is_mig_lgi",
    "layout_from_lgi",
    "lgi_model",
    "lookup_gpu_model",
    "node_from_topo",
    "parse_mig_lgi",
    "parse_mig_lgipp",
    "parse_topo",
    "read_cluster",
    "read_workloads",
    "resolve_mig_model",
]
