"""B6's setting: the openb GPU nodes as MIG GPUs with standard layouts, and gpushare100's pods as MIG
profiles in B1's arrival order.

Every GPU of the (sub-sampled) openb GPU nodes becomes an 80 GB MIG-capable GPU (nodes alternate
A100-SXM4-80GB and H100-80GB), MIG mode on, with per-node layouts in the style of NVIDIA mig-parted's
``config-default.yaml`` (``mixed``) or none at all (``empty``). Each sharing pod asks for the smallest
MIG profile whose *compute* share (compute slices / 7) covers its ``gpu_milli``; whole-GPU pods ask for
``7g.80gb``; CPU-only pods stay CPU-only; CPU and memory requests are kept.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache

from benchmarks.common import arrivals, openb_cluster, openb_pods, openb_trace, unique
from gpuplan.models import Cluster, Node, Workload, default_catalog
from gpuplan.models.hardware import GpuModelSpec, HardwareCatalog
from gpuplan.planner.validation.occupancy import Holding, Key

#: The two MIG-capable 80 GB models, alternating over the (sub-sampled) node list.
GPU_MODELS = ("A100-SXM4-80GB", "H100-80GB")

#: A MIG layout: (profile, start memory slice) per instance.
Layout = tuple[tuple[str, int], ...]

#: Standard per-node layouts (one config per node, every GPU of the node alike); the ``mixed`` start
#: cycles the nodes through them in this order.
STANDARD_LAYOUTS: dict[str, Layout] = {
    "all-balanced": (("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)),
    "all-3g.40gb": (("3g.40gb", 0), ("3g.40gb", 4)),
    "all-4g.40gb": (("4g.40gb", 0),),
    "all-7g.80gb": (("7g.80gb", 0),),
}

#: Profiles a sharing pod may be mapped to (media-extension and 1g.20gb variants are left out: the
#: smallest covering profile by compute is always one of these).
PROFILES = ("1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")

#: Trace whose pods are used.
TRACE = "gpushare100"


def node_layout(start: str, position: int) -> Layout:
    """Initial layout of every GPU of the node at ``position``."""
    if start == "empty":
        return ()
    if start == "mixed":
        names = list(STANDARD_LAYOUTS)
        return STANDARD_LAYOUTS[names[position % len(names)]]
    raise ValueError(f"unknown start '{start}' (choose mixed or empty)")


def subsample(nodes: Sequence[Node], count: int | None) -> list[Node]:
    """``count`` nodes evenly spread over the file order (all of them when ``count`` is None)."""
    if count is None or count >= len(nodes):
        return list(nodes)
    return [nodes[(i * len(nodes)) // count] for i in range(count)]


def build_cluster(count: int | None, start: str, catalog: HardwareCatalog) -> Cluster:
    """The (sub-sampled) openb GPU nodes as MIG nodes with the ``start`` layouts, validated against the
    catalog."""
    nodes = subsample(openb_cluster().nodes, count)
    return Cluster.model_validate(
        {
            "nodes": [
                {
                    "name": n.name,
                    "cpu_milli": n.cpu_milli,
                    "memory_mib": n.memory_mib,
                    "gpus": [
                        {
                            "index": g.index,
                            "model": GPU_MODELS[i % len(GPU_MODELS)],
                            "mig": {
                                "instances": [{"profile": p, "start": s} for p, s in node_layout(start, i)]
                            },
                        }
                        for g in n.gpus
                    ],
                }
                for i, n in enumerate(nodes)
            ]
        },
        context={"catalog": catalog},
    )


def spec(catalog: HardwareCatalog) -> GpuModelSpec:
    """The MIG profiles both GPU models offer (checked to be the same)."""
    first = catalog.model(GPU_MODELS[0])
    if any(catalog.model(m).profile_map.keys() != first.profile_map.keys() for m in GPU_MODELS):
        raise ValueError("the GPU models must offer the same MIG profiles")
    return first


def capacity_slices(cluster: Cluster, catalog: HardwareCatalog) -> int:
    """GPU capacity in compute slices."""
    return sum(catalog.model(g.model).compute_slices for n in cluster.nodes for g in n.gpus)


def profile_for(milli: int, model: GpuModelSpec) -> str:
    """The smallest profile of :data:`PROFILES` whose compute share covers ``milli`` milli-GPU."""
    for name in PROFILES:
        if 1000 * model.profile(name).compute_slices >= milli * model.compute_slices:
            return name
    raise ValueError(f"no MIG profile covers {milli} milli-GPU")


def mig_twin(w: Workload, model: GpuModelSpec) -> Workload:
    """The pod asking for a MIG profile instead of a share or a whole GPU (CPU-only pods unchanged)."""
    if w.gpus > 1:
        raise ValueError(f"pod {w.id} asks for {w.gpus} GPUs; B6 maps single-GPU pods only")
    if not w.gpus and not w.gpu_milli:
        return w
    fields = w.model_dump(exclude_defaults=True, exclude={"gpus", "gpu_milli"})
    return Workload.model_validate({**fields, "mig_profile": profile_for(w.gpu_milli or 1000, model)})


@cache
def mig_pods() -> tuple[Workload, ...]:
    """The trace's pods (name order) as MIG twins."""
    model = spec(default_catalog())
    return tuple(mig_twin(w, model) for w in openb_pods(TRACE))


def slices(w: Workload, catalog: HardwareCatalog) -> int:
    """Compute slices a pod asks for (0 for CPU-only pods)."""
    profile = w.shapes[0].mig_profile
    return 0 if profile is None else spec(catalog).profile(profile).compute_slices


def held_slices(running: Mapping[Key, Holding], catalog: HardwareCatalog) -> int:
    """Compute slices held by what runs."""
    model = spec(catalog)
    return sum(
        model.profile(g.mig_profile).compute_slices
        for h in running.values()
        for g in h.gpus
        if g.mig_profile is not None
    )


def mig_arrivals(
    seed: int, cluster: Cluster, catalog: HardwareCatalog, until: float
) -> tuple[list[Workload], list[int]]:
    """B1's arrival order for ``seed`` on this cluster (inflated on the trace's milli-GPU as in B1) as MIG
    pods with unique ids, cut after the pod whose MIG demand reaches ``until`` of capacity; and the node
    tie-break ranks."""
    _, requests = openb_trace(TRACE)
    order, rank = arrivals(requests, 1000 * cluster.gpu_count, len(cluster.nodes), seed)
    pods = mig_pods()
    limit = until * capacity_slices(cluster, catalog)
    out: list[Workload] = []
    arrived = 0
    for i in order:
        out.append(pods[i])
        arrived += slices(pods[i], catalog)
        if arrived >= limit:
            break
    return unique(out), rank
