"""The GPU topology of imported nodes: ``--topology NODE=SPEC`` (a reference topology of the catalog or
a ``nvidia-smi topo -m`` file) for nodes whose ``nvidia.com/gpu.machine`` label names none, the
multi-GPU nodes still without one, and the reference topologies that would fit them."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuplan.models import HardwareCatalog
from gpuplan.models.base import InputError
from gpuplan.planner.io.files import read_structured
from gpuplan.planner.io.importers.kubernetes.nodes import _NodeInfo
from gpuplan.planner.io.importers.nvidia_smi import node_from_topo


def _topology_entries(
    spec: str, info: _NodeInfo, entry: Mapping[str, Any], catalog: HardwareCatalog
) -> dict[str, Any]:
    """The cluster-file topology fields of a node from ``--topology NODE=SPEC``: a reference topology of
    the catalog by name, or a file of ``nvidia-smi topo -m`` output (NUMA nodes and links per GPU)."""
    where = f"--topology {info.name}={spec}"
    mig = {g["index"]: g["mig"] for g in entry.get("gpus", ()) if "mig" in g}
    path = Path(spec)
    if path.is_file():
        try:
            node = node_from_topo(
                path.read_text(), name=info.name, gpu_model=info.model.name, cpu_milli=0, memory_mib=0,
                catalog=catalog,
            )  # fmt: skip
        except ValueError as exc:
            raise InputError(f"{where}: {exc}") from None
        gpus = node["gpus"]
        if len(gpus) != info.gpus:
            raise InputError(f"{where}: the file shows {len(gpus)} GPUs, the node has {info.gpus}")
        # The node's GPUs are numbered 0..n-1 in the dump's order (a dump may skip indices).
        index = {gpu["index"]: i for i, gpu in enumerate(gpus)}
        for i, gpu in enumerate(gpus):
            gpu["index"] = i
            if i in mig:
                gpu["mig"] = mig[i]
        links = [{**lk, "a": index[lk["a"]], "b": index[lk["b"]]} for lk in node["links"]]
        return {"gpus": gpus, "links": links}
    try:
        ref = catalog.topology(spec)
    except KeyError as exc:
        raise InputError(f"{where}: not a file, and {exc.args[0]}") from None
    if catalog.canonical(ref.gpu_model) != info.model.name or len(ref.gpus) != info.gpus:
        raise InputError(
            f"{where}: {ref.name} has {len(ref.gpus)} {catalog.canonical(ref.gpu_model)} GPUs, "
            f"the node {info.gpus} {info.model.name}"
        )
    return {
        "topology": ref.name,
        **({"gpus": [{"index": i, "mig": m} for i, m in sorted(mig.items())]} if mig else {}),
    }


def attach_topologies(
    entries: list[dict[str, Any]],
    infos: Mapping[str, _NodeInfo],
    topologies: Mapping[str, str],
    catalog: HardwareCatalog,
) -> list[str]:
    """Give nodes the topology ``--topology`` names (``NODE`` may be a shell pattern such as ``gpu-*``) and
    return the multi-GPU nodes still without one, whose GPUs are then all on NUMA node 0 without NVLink."""
    given: dict[str, str] = {}
    for pattern, spec in topologies.items():
        matched = [e for e in entries if fnmatch.fnmatchcase(e["name"], pattern)]
        if not matched:
            raise InputError(f"--topology {pattern}={spec}: no GPU node of the node list is called that")
        for entry in matched:
            earlier = given.setdefault(entry["name"], pattern)
            if earlier != pattern:
                raise InputError(
                    f"--topology {pattern}={spec}: node '{entry['name']}' also matches --topology {earlier}"
                )
            info = infos[entry["name"]]
            fields = _topology_entries(spec, info, entry, catalog)
            for key in ("topology", "gpus", "links"):
                entry.pop(key, None)
            entry.update(fields)
    return [
        e["name"] for e in entries if "topology" not in e and not e.get("links") and infos[e["name"]].gpus > 1
    ]


def topology_hint(names: Sequence[str], infos: Mapping[str, _NodeInfo], catalog: HardwareCatalog) -> str:
    """The catalog's reference topologies that fit nodes without one (same GPU model and count), as
    ``dgx-h100 fits gpu-a, gpu-b``; "" when none does."""
    fits: dict[str, list[str]] = {}
    for name in names:
        info = infos[name]
        for ref in catalog.topologies:
            if catalog.canonical(ref.gpu_model) == info.model.name and len(ref.gpus) == info.gpus:
                fits.setdefault(ref.name, []).append(name)
    return "; ".join(f"{ref} fits {', '.join(nodes)}" for ref, nodes in sorted(fits.items()))


def load_topologies(path: Path) -> dict[str, str]:
    """Node (or pattern) to topology from a YAML/JSON mapping, as ``--topology`` gives them; a relative
    file path is taken from the mapping file's folder."""
    raw = read_structured(path)
    if not isinstance(raw, dict) or not all(isinstance(v, str) and v for v in raw.values()):
        raise InputError(
            f"{path}: expected a mapping of node name (or pattern) to a topo -m file or reference"
        )
    folder = Path(path).parent
    return {str(k): str(folder / v) if (folder / v).is_file() else v for k, v in raw.items()}
