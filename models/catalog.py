"""Loading the hardware catalog shipped in ``data/hardware`` (or a directory given by the user)."""

from __future__ import annotations

import json
import os
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.models.hardware import (
    GpuModelSpec,
    HardwareCatalog,
    MigPlacement,
    MigProfile,
    ReferenceTopology,
    TopologyGpu,
    TopologyLink,
)

#: Environment variable naming another data directory (with a ``hardware/`` folder inside).
DATA_ENV = "GPUPLAN_DATA"


def data_dir() -> Path:
    """The directory of gpuplan's bundled data (source checkout or installed wheel alike)."""
    override = os.environ.get(DATA_ENV)
    if override:
        return Path(override)
    return Path(str(resources.files("gpuplan.data")))


def _profile(raw: dict[str, Any]) -> MigProfile:
    return MigProfile(
        name=raw["name"],
        compute_slices=raw["compute_slices"],
        memory_slices=raw["memory_slices"],
        max_instances=raw["max_instances"],
        placements=tuple(MigPlacement(start=p["start"], size=p["size"]) for p in raw["placements"]),
        memory_gib=raw.get("memory_gib"),
        profile_id=raw.get("profile_id"),
        uncertain=bool(raw.get("uncertain", False)),
    )


def _mig_model(raw: dict[str, Any]) -> GpuModelSpec:
    source = raw.get("source", "")
    return GpuModelSpec(
        name=raw["model"],
        aliases=tuple(raw.get("aliases") or ()),
        memory_gib=float(raw["memory_gib"]),
        compute_slices=raw["compute_slices"],
        memory_slices=raw["memory_slices"],
        max_gpu_instances=raw["max_gpu_instances"],
        profiles=tuple(_profile(p) for p in raw["profiles"]),
        uncertain=bool(raw.get("uncertain", False)),
        source=source if isinstance(source, str) else json.dumps(source),
    )


def _plain_model(raw: dict[str, Any]) -> GpuModelSpec:
    return GpuModelSpec(
        name=raw["name"],
        aliases=tuple(raw.get("aliases") or ()),
        memory_gib=float(raw["memory_gib"]),
        uncertain=bool(raw.get("uncertain", False)),
        source=raw.get("source", ""),
    )


def _topology(raw: dict[str, Any], model: str) -> ReferenceTopology:
    numa = raw.get("numa", {})
    uncertain = bool(raw.get("uncertain") or numa.get("uncertain"))
    best: dict[tuple[int, int], TopologyLink] = {}
    for link in raw.get("pcie_links", []) + raw["links"]:
        a, b = sorted((int(link["a"]), int(link["b"])))
        # NVLink entries come last and override the PCIe class of the same pair.
        best[(a, b)] = TopologyLink(a=a, b=b, kind=link["type"], uncertain=bool(link.get("uncertain", False)))
    return ReferenceTopology(
        name=raw["name"],
        gpu_model=model,
        gpus=tuple(TopologyGpu(index=g["index"], numa=g.get("numa_node", 0)) for g in raw["gpus"]),
        links=tuple(best[k] for k in sorted(best)),
        uncertain=uncertain,
        source=str(raw.get("source", "")),
    )


def load_catalog(directory: Path) -> HardwareCatalog:
    """Read ``mig_profiles.json``, ``topologies.json`` and ``gpu_models.json`` from ``directory``."""
    mig = json.loads((directory / "mig_profiles.json").read_text())
    topo = json.loads((directory / "topologies.json").read_text())
    extra = json.loads((directory / "gpu_models.json").read_text())
    models = [_mig_model(m) for m in mig["models"]] + [_plain_model(m) for m in extra["models"]]
    topology_models: dict[str, str] = extra["topology_models"]
    topologies = [
        _topology(t, topology_models[t["name"]]) for t in topo["topologies"] if t["name"] in topology_models
    ]
    return HardwareCatalog(models=tuple(models), topologies=tuple(topologies))


@cache
def default_catalog() -> HardwareCatalog:
    """The catalog bundled with gpuplan (cached: it is immutable)."""
    return load_catalog(data_dir() / "hardware")
