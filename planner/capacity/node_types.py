"""The purchasable node-type catalog: loading it (the bundled example by default), building the
nodes a purchase adds, and compiling each type for the purchase MILP. Kept apart from the gap run so
that the CLI, the API and the exports load a catalog without the run's machinery.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.capacity import NodeType, NodeTypeCatalog
from gpuplan.models.catalog import data_dir
from gpuplan.models.cluster import Node
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.planner.capacity.purchase import TypeSpec
from gpuplan.planner.io.files import describe, read_structured
from gpuplan.planner.pipeline.compile import compile_node

#: Default purchasable catalog (example prices).
DEFAULT_NODE_TYPES = "node_types.yaml"


def default_node_types_path() -> Path:
    """The bundled example node-type catalog."""
    return data_dir() / "examples" / DEFAULT_NODE_TYPES


def load_node_types(path: Path | None, catalog: HardwareCatalog | None = None) -> NodeTypeCatalog:
    """A node-type catalog from YAML/JSON (the bundled example when ``path`` is None)."""
    path = path or default_node_types_path()
    raw = read_structured(path)
    try:
        return NodeTypeCatalog.model_validate(raw, context={"catalog": catalog} if catalog else None)
    except ValidationError as exc:
        raise InputError(f"{path}: {describe(exc, raw)}") from None


def node_for(t: NodeType, name: str, mig_gpus: int, labels: dict[str, str], catalog: HardwareCatalog) -> Node:
    """A purchased node of type ``t``; its last ``mig_gpus`` GPUs are in MIG mode with no instances."""
    mig_from = t.gpus - mig_gpus
    raw: dict[str, Any] = {
        "name": name,
        "pool": t.pool or t.name,
        "labels": {**labels, **t.labels},
        "cpu_milli": t.cpu_milli,
        "memory_mib": t.memory_mib,
    }
    if t.topology:
        raw["topology"] = t.topology
        raw["gpu_model"] = t.gpu_model
        raw["gpus"] = [{"index": i, "mig": {"instances": []}} for i in range(mig_from, t.gpus)]
    else:
        raw["gpus"] = [
            {"index": i, "model": t.gpu_model, **({"mig": {"instances": []}} if i >= mig_from else {})}
            for i in range(t.gpus)
        ]
    return Node.model_validate(raw, context={"catalog": catalog})


def type_specs(types: NodeTypeCatalog, catalog: HardwareCatalog) -> list[TypeSpec]:
    """Each node type compiled as one node for the purchase MILP."""
    return [
        TypeSpec(
            name=t.name,
            cost=t.unit_cost,
            node=compile_node(node_for(t, t.name, 0, {}, catalog), catalog),
            spec=catalog.model(t.gpu_model),
        )
        for t in types.node_types
    ]
