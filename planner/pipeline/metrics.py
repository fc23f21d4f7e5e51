"""Plan metrics: GPU allocation, placement counts per tier, FGD fragmentation, fair-share standings."""

from __future__ import annotations

from collections import Counter

from gpuplan.models.hardware import MILLI_PER_GPU, HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Assignment, GpuUse, MigLayout
from gpuplan.models.policy import FAIR_FACTOR_SCALE
from gpuplan.models.rules import quota
from gpuplan.solvers.evaluate import fragmented_milli
from gpuplan.solvers.problem import PlacementProblem


def gpu_equivalents(use: GpuUse, model: str, catalog: HardwareCatalog) -> float:
    """Share of one GPU that a GPU entry takes, as a quota charges it: 1 whole, a fraction's share of
    :data:`MILLI_PER_GPU`, or MIG compute slices (:func:`gpuplan.models.rules.quota.gpu_equivalents`)."""
    spec = None if use.mig_profile is None else catalog.model(model)
    return float(quota.gpu_equivalents(use.kind, use.milli, use.mig_profile, spec))


def gpu_memory_held(use: GpuUse, model: str, gpu_memory_mib: int, catalog: HardwareCatalog) -> int:
    """GPU memory (MiB) a GPU entry holds: a whole GPU's or MIG instance's memory, or a fraction's ask
    (``gpu_memory_mib``, 0 for a fraction that asks for none)."""
    spec = catalog.model(model)
    if use.mig_profile is not None:
        return spec.instance_memory_mib(use.mig_profile)
    if use.milli is not None:
        return gpu_memory_mib
    return spec.memory_mib


def plan_metrics(
    inp: PlanningInput, assignments: tuple[Assignment, ...], catalog: HardwareCatalog
) -> dict[str, float]:
    """Headline numbers of a plan (fractions in [0, 1], counts as floats for JSON)."""
    nodes = inp.cluster.node_by_name
    total_gpus = inp.cluster.gpu_count
    used = 0.0
    memory = 0
    for a in assignments:
        node = nodes[a.node]
        for g in a.gpus:
            model = node.gpu_by_index[g.index].model
            used += gpu_equivalents(g, model, catalog)
            memory += gpu_memory_held(g, model, a.gpu_memory_mib, catalog)
    memory_total = sum(catalog.model(g.model).memory_mib for n in inp.cluster.nodes for g in n.gpus)
    placed: Counter[str] = Counter()
    for a in assignments:
        placed[inp.workload_by_id[a.workload].tier] += 1
    wanted: Counter[str] = Counter()
    for w in inp.workloads:
        wanted[w.tier] += w.replicas
    out: dict[str, float] = {
        "gpus_total": float(total_gpus),
        "gpus_allocated": round(used, 4),
        "allocated_gpu_fraction": round(used / total_gpus, 6) if total_gpus else 0.0,
        "gpu_memory_total_mib": float(memory_total),
        "gpu_memory_allocated_mib": float(memory),
        "allocated_gpu_memory_fraction": round(memory / memory_total, 6) if memory_total else 0.0,
        "replicas_total": float(sum(wanted.values())),
        "replicas_placed": float(sum(placed.values())),
    }
    for tier in sorted(wanted):
        out[f"placed_{tier}"] = float(placed[tier])
        out[f"unplaced_{tier}"] = float(wanted[tier] - placed[tier])
    return out


def fragmentation(
    problem: PlacementProblem, assignments: tuple[Assignment, ...], layouts: tuple[MigLayout, ...]
) -> dict[str, float]:
    """The metrics measured on the compiled problem: FGD fragmentation of the planned cluster for the
    problem's target mix (the expected arrivals' when the input gives them, else the demand's own) and,
    under a fair-share policy, each team's standing (:func:`fair_share_metrics`; the plan's metrics get
    them here, where the planning time they depend on is compiled in).

    ``fragmented_gpus`` is the expected free GPU capacity (in GPUs) that the target shapes cannot use;
    ``fragmentation_rate`` is its share of all free GPU capacity.
    """
    fragmented, free = fragmented_milli(problem, assignments, layouts)
    return {
        "fragmented_gpus": round(fragmented / MILLI_PER_GPU, 4),
        "fragmentation_rate": round(fragmented / free, 6) if free else 0.0,
        **fair_share_metrics(problem),
    }


#: The fair-share figures of one team in the plan's metrics: ``fair_share.<team>.<figure>``.
FAIR_SHARE_FIGURES = ("share", "usage_gpu_hours", "usage_share", "standing", "factor")


def fair_share_metrics(problem: PlacementProblem) -> dict[str, float]:
    """Each team's fair share at planning time, as ``fair_share.<team>.<figure>``: its normalised
    ``share``, decayed usage (``usage_gpu_hours``) and its share of everyone's (``usage_share``), its
    ``standing`` (Slurm's fair-share factor) and the ``factor`` its waiting replicas' queue penalty is
    multiplied by; none without a fair-share policy."""
    out: dict[str, float] = {}
    for team, s in sorted(problem.fair_share.items()):
        figures = (s.share, s.usage_gpu_hours, s.usage_share, s.factor, s.units / FAIR_FACTOR_SCALE)
        for name, value in zip(FAIR_SHARE_FIGURES, figures, strict=True):
            out[f"fair_share.{team}.{name}"] = round(value, 6)
    return out
