"""Importers turning third-party outputs (nvidia-smi text, the Alibaba openb trace) into gpuplan inputs."""

from gpuplan.planner.importers.nvidia_smi import (
    ObservedProfile,
    TopoGpu,
    TopoMatrix,
    compare_mig_with_catalog,
    identify_gpu_model,
    lookup_gpu_model,
    node_from_topo,
    parse_mig_lgipp,
    parse_topo,
    resolve_mig_model,
)
from gpuplan.planner.importers.openb import OpenbSummary, import_openb, read_cluster, read_workloads

__all__ = [
    "ObservedProfile",
    "OpenbSummary",
    "TopoGpu",
    "TopoMatrix",
    "compare_mig_with_catalog",
    "identify_gpu_model",
    "import_openb",
    "lookup_gpu_model",
    "node_from_topo",
    "parse_mig_lgipp",
    "parse_topo",
    "read_cluster",
    "read_workloads",
    "resolve_mig_model",
]
