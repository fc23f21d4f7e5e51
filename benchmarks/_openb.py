"""The Alibaba openb trace (FGD paper) as gpuplan nodes and requests, through the models and compiler."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from gpuplan.models import Cluster, Node, PlanningInput, Workload, default_catalog
from gpuplan.planner.compile import compile_node, compile_problem
from gpuplan.solvers.problem import NodeSpec, Request

#: Folder of the trace inside the repository.
TRACE_DIR = Path(__file__).resolve().parent.parent / "data" / "traces" / "alibaba-gpu-v2023"

#: Node list the FGD simulator uses (GPU nodes only).
NODE_FILE = "openb_node_list_gpu_node.csv"


def load_nodes(path: Path = TRACE_DIR / NODE_FILE) -> tuple[NodeSpec, ...]:
    """The openb GPU nodes, validated as :class:`models.Node` and compiled, in file order."""
    catalog = default_catalog()
    frame = pd.read_csv(path, keep_default_na=False)
    nodes = [
        Node.model_validate(
            {
                "name": str(row["sn"]),
                "cpu_milli": int(row["cpu_milli"]),
                "memory_mib": int(row["memory_mib"]),
                "gpus": [{"index": i, "model": str(row["model"])} for i in range(int(row["gpu"]))],
            }
        )
        for _, row in frame.iterrows()
    ]
    return tuple(compile_node(n, catalog) for n in Cluster(nodes=tuple(nodes)).nodes)


def _workload(row: pd.Series) -> Workload:
    """One pod as a workload: CPU-only, a shared GPU (milli < 1000) or whole GPUs."""
    num, milli = int(row["num_gpu"]), int(row["gpu_milli"])
    spec = str(row.get("gpu_spec", "") or "")
    fields: dict[str, object] = {
        "id": str(row["name"]),
        "cpu_milli": int(row["cpu_milli"]),
        "memory_mib": int(row["memory_mib"]),
        "gpu_models": spec,
    }
    if num == 1 and 0 < milli < 1000:
        fields["gpu_milli"] = milli
    elif num > 0:
        fields["gpus"] = num
    return Workload.model_validate(fields)


def load_pods(trace: str) -> tuple[Request, ...]:
    """The pods of ``openb_pod_list_<trace>.csv`` as compiled requests, sorted by pod name."""
    frame = pd.read_csv(TRACE_DIR / f"openb_pod_list_{trace}.csv", keep_default_na=False)
    frame = frame.sort_values("name", kind="stable")
    workloads = tuple(_workload(row) for _, row in frame.iterrows())
    inp = PlanningInput(cluster=Cluster(nodes=()), workloads=workloads)
    return compile_problem(inp, default_catalog(), datetime.now(UTC)).requests
