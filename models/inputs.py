"""A planning input (cluster + demand + policy) with the checks that span all three."""

from __future__ import annotations

from collections import Counter
from functools import cached_property

from pydantic import Field, ValidationInfo, model_validator

from gpuplan.models.base import Strict, did_you_mean, grouped_errors
from gpuplan.models.cluster import Cluster, catalog_from, describe_sharing, sharing_offers, unknown_model
from gpuplan.models.hardware import GpuModelSpec, HardwareCatalog
from gpuplan.models.policy import Policy
from gpuplan.models.workload import Shape, Workload


def _memory_errors(field: str, shape: Shape, allowed: list[GpuModelSpec]) -> list[str]:
    """A GPU memory ask that no allowed GPU model (or MIG profile) has room for, ever."""
    if not shape.gpu_memory_mib or shape.kind == "cpu" or not allowed:
        return []
    if any(m.fits_memory(shape.kind, shape.mig_profile, shape.gpu_memory_mib) for m in allowed):
        return []
    if shape.kind == "mig":
        sizes = [m.instance_memory_mib(p) for m in allowed for p in m.profile_map if p == shape.mig_profile]
        if not sizes:
            return []  # the MIG profile error says it all
        room = f"a {shape.mig_profile} instance has at most {max(sizes)} MiB"
    else:
        room = f"the largest allowed GPU model has {max(m.memory_mib for m in allowed)} MiB"
    return [f"field {field}: asks for {shape.gpu_memory_mib} MiB of GPU memory per GPU, but {room}"]


def _workload_errors(w: Workload, cluster: Cluster, policy: Policy, catalog: HardwareCatalog) -> list[str]:
    """Every cross-reference error of one workload, as ``field ...: reason`` (without its id)."""
    errors: list[str] = []
    tiers = {t.name for t in policy.tiers}
    teams = set(policy.teams)
    if w.tier not in tiers:
        known = ", ".join(sorted(tiers))
        errors.append(f"field tier: unknown tier '{w.tier}'{did_you_mean(w.tier, tiers)} (known: {known})")
    if teams and w.team not in teams:
        errors.append(f"field team: unknown team '{w.team}'{did_you_mean(w.team, teams)}")
    errors.extend(shape_errors(w, catalog))
    errors.extend(w.running_shape_errors())
    for r, place in enumerate(w.running_on):
        node = cluster.node_by_name.get(place.node)
        if node is None:
            hint = did_you_mean(place.node, cluster.node_by_name)
            errors.append(f"field running_on[{r}]: unknown node '{place.node}'{hint}")
            continue
        for g in place.gpus:
            gpu = node.gpu_by_index.get(g.index)
            if gpu is None:
                errors.append(f"field running_on[{r}]: node '{node.name}' has no GPU {g.index}")
            elif node.sharing is not None and gpu.mig is None and not sharing_offers(node.sharing, g.kind):
                errors.append(
                    f"field running_on[{r}]: runs on {'a fraction of' if g.milli else 'whole'} GPU {g.index} "
                    f"of node '{node.name}', whose sharing mode is {describe_sharing(node.sharing)}"
                )
    return errors


def shape_errors(w: Workload, catalog: HardwareCatalog) -> list[str]:
    """The errors of a workload's shapes against the catalog (GPU models, GPU memory, MIG profiles)."""
    errors: list[str] = []
    for k, shape in enumerate(w.shapes):
        field = "" if not w.alternatives else f"alternatives[{k}]."
        for m in shape.gpu_models:
            if not catalog.has_model(m):
                errors.append(f"field {field}gpu_models: {unknown_model(m, catalog)}")
        allowed = [catalog.model(m) for m in shape.gpu_models if catalog.has_model(m)]
        if not shape.gpu_models:
            allowed = list(catalog.models)
        errors.extend(_memory_errors(f"{field}gpu_memory_mib", shape, allowed))
        if shape.mig_profile is None:
            continue
        offering = [s for s in allowed if shape.mig_profile in s.profile_map]
        if not offering:
            names = ", ".join(s.name for s in allowed) if shape.gpu_models else "no GPU model of the catalog"
            errors.append(
                f"field {field}mig_profile: asks for MIG profile '{shape.mig_profile}' "
                f"which {names} does not offer"
            )
    return errors


def reference_errors(
    cluster: Cluster, workloads: tuple[Workload, ...], policy: Policy, catalog: HardwareCatalog
) -> list[str]:
    """Every cross-reference error, each naming the object id and the field; an error many workloads
    share is given once with their count (:func:`~gpuplan.models.base.grouped_errors`)."""
    errors = grouped_errors(
        "workload", ((w.id, e) for w in workloads for e in _workload_errors(w, cluster, policy, catalog))
    )
    nodes = cluster.node_by_name
    pools = {n.pool for n in cluster.nodes if n.pool}
    for i, q in enumerate(policy.quotas):
        if q.gpu_model and not catalog.has_model(q.gpu_model):
            errors.append(f"policy quotas[{i}] field gpu_model: {unknown_model(q.gpu_model, catalog)}")
        if q.pool and q.pool not in pools:
            errors.append(
                f"policy quotas[{i}] field pool: unknown pool '{q.pool}'{did_you_mean(q.pool, pools)}"
            )
    for i, rule in enumerate(policy.isolation):
        for name in rule.nodes:
            if name not in nodes:
                errors.append(
                    f"policy isolation[{i}] field nodes: unknown node '{name}'{did_you_mean(name, nodes)}"
                )
        if rule.pool and rule.pool not in pools:
            errors.append(f"policy isolation[{i}] field pool: unknown pool '{rule.pool}'")
    return errors


class PlanningInput(Strict):
    """Everything a solver needs: the cluster, the workloads and the policy."""

    cluster: Cluster
    workloads: tuple[Workload, ...]
    policy: Policy = Field(default_factory=Policy)
    #: Work that arrived recently (a rounds loop's window, replicas counted), whose mix of shapes is the
    #: work expected next: fragmentation is measured against it instead of the demand's own mix. Only
    #: the shapes and replica counts are read. Left out of the dump when empty, so an input without it
    #: keeps its digest.
    arrivals: tuple[Workload, ...] = Field(default=(), exclude_if=lambda v: not v)

    @model_validator(mode="after")
    def _cross_check(self, info: ValidationInfo) -> PlanningInput:
        dupes = [i for i, n in Counter(w.id for w in self.workloads).items() if n > 1]
        if dupes:
            raise ValueError(f"workload id '{min(dupes)}' appears more than once")
        catalog = catalog_from(info)
        errors = reference_errors(self.cluster, self.workloads, self.policy, catalog)
        errors += grouped_errors(
            "arrival", ((w.id, e) for w in self.arrivals for e in shape_errors(w, catalog))
        )
        if errors:
            raise ValueError("; ".join(errors))
        return self

    @cached_property
    def workload_by_id(self) -> dict[str, Workload]:
        """Workloads keyed by id."""
        return {w.id: w for w in self.workloads}
