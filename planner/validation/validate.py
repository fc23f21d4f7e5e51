"""Independent plan validation: every rule a plan must obey, checked without any solver code.

This package deliberately imports nothing from ``solvers/`` or the planner's pipeline (``compile``,
``actions``): it re-derives every rule from the schema objects in ``models/``, so that it can check any
solver's output. This module runs the rule families (one module each) in a fixed order over one shared
:class:`~gpuplan.planner.validation.context.CheckContext`; :func:`check_plan` also says which rule families
it could not check (for instance when the workloads are rebuilt from the plan itself by
:func:`implied_workloads`).
"""

from __future__ import annotations

import logging

from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.policy import Policy
from gpuplan.models.workload import STANDARD, Workload, describe_use
from gpuplan.planner.validation.context import CheckContext, GpuKey
from gpuplan.planner.validation.disruption import (
    ROUNDS_KEY,
    check_disruption,
    check_disruption_budget,
    check_disruption_total,
    check_min_runtime,
    stopped_replicas,
)
from gpuplan.planner.validation.gpus import check_gpu_models, check_gpus, check_node_capacity
from gpuplan.planner.validation.isolation import check_isolation, check_quotas
from gpuplan.planner.validation.mig import (
    check_layouts,
    check_mig_actions,
    check_mig_mode,
    check_mig_mode_actions,
    check_mig_mode_changes,
    check_mig_policy,
)
from gpuplan.planner.validation.references import (
    check_references,
    check_replicas,
    check_shapes,
    check_starts,
)
from gpuplan.planner.validation.report import (
    KEPT_RULES,
    MISSING_NAMED,
    Report,
    Skipped,
    Violation,
    gpu_subject,
    replica_subject,
)
from gpuplan.planner.validation.scheduling import SCHEDULING, check_scheduling
from gpuplan.planner.validation.sharing import check_sharing_actions, check_sharing_changes
from gpuplan.planner.validation.topology import check_gangs, check_topology

__all__ = [
    "ACTIONS_FAMILY",
    "KEPT_RULES",
    "MISSING_NAMED",
    "ROUNDS_KEY",
    "WITHOUT_ACTIONS",
    "WITHOUT_WORKLOADS",
    "WORKLOAD_FAMILIES",
    "GpuKey",
    "ImpliedWorkloadError",
    "Report",
    "Skipped",
    "Violation",
    "check_plan",
    "describe_use",
    "gpu_subject",
    "implied_workloads",
    "replica_subject",
    "validate_plan",
]

log = logging.getLogger(__name__)

#: Rule families that only the workloads file feeds (shapes, allowed GPU models, topology, gangs,
#: kube-scheduler's filters and running work, which tells a start from a replica that stays): with
#: workloads rebuilt from the plan
#: they would pass vacuously.
WORKLOAD_FAMILIES = (
    "shapes", "gpu-models", "gangs", "topology", "scheduling", "disruption", "min-runtime", "starts",
)  # fmt: skip
#: Why those families are skipped (a phrase that follows "not checked").
WITHOUT_WORKLOADS = "without the workloads"

#: Rule family of the checks that read the plan's actions for its MIG layout, MIG mode and sharing-mode
#: changes and its starts; skipped for a trial plan whose actions are not derived yet.
ACTIONS_FAMILY = "actions"
#: Why that family is skipped.
WITHOUT_ACTIONS = "before the plan's actions are derived"


def _run(ctx: CheckContext) -> list[Violation]:
    """All violations, grouped by rule family in a fixed order (families in ``ctx.skip`` are recorded
    in ``ctx.skipped`` instead of being checked)."""
    check_references(ctx)
    check_replicas(ctx)
    if ctx.checks("shapes"):
        check_shapes(ctx)
    check_mig_mode_changes(ctx)
    check_layouts(ctx)
    check_mig_mode(ctx)
    check_mig_policy(ctx)
    actions = ctx.checks(ACTIONS_FAMILY)
    if actions:
        check_mig_actions(ctx)
        check_mig_mode_actions(ctx)
        check_sharing_actions(ctx)
        if ctx.checks("starts"):
            check_starts(ctx)
    check_gpus(ctx)
    check_sharing_changes(ctx)
    if ctx.checks("gpu-models"):
        check_gpu_models(ctx)
    check_node_capacity(ctx)
    if ctx.checks("gangs"):
        check_gangs(ctx)
    if ctx.checks("topology"):
        check_topology(ctx)
    if ctx.checks(SCHEDULING):
        check_scheduling(ctx)
    if ctx.checks("isolation"):
        check_isolation(ctx)
    if ctx.checks("quotas"):
        check_quotas(ctx)
    disruption, min_runtime = ctx.checks("disruption"), ctx.checks("min-runtime")
    if disruption or min_runtime:
        stopped = stopped_replicas(ctx)
        if disruption:
            check_disruption(ctx, stopped, actions)
            check_disruption_total(ctx, stopped)
            check_disruption_budget(ctx)
        if min_runtime:
            check_min_runtime(ctx, stopped)
    return ctx.out


def check_plan(
    plan: Plan,
    inp: PlanningInput,
    catalog: HardwareCatalog | None = None,
    *,
    workloads_implied: bool = False,
    actions_derived: bool = True,
) -> Report:
    """Every rule ``plan`` breaks for ``inp`` (in a deterministic order) and the rule families that
    could not be checked.

    Parameters
    ----------
    plan
        The plan to check, from any solver or from a file.
    inp
        The cluster, workloads and policy the plan is for.
    catalog
        The hardware catalog (MIG profiles and placements); the bundled one by default.
    workloads_implied
        ``inp``'s workloads were rebuilt from the plan by :func:`implied_workloads`: the families only
        the demand feeds (:data:`WORKLOAD_FAMILIES`, and isolation and quotas when the policy has such
        rules, as they read teams and tiers) are reported as skipped instead of passing vacuously.
    actions_derived
        ``plan`` carries its actions; false for a trial plan built before they are derived, whose MIG
        layout changes, moves and preemptions are then not required to have their actions (family
        :data:`ACTIONS_FAMILY`, reported as skipped).
    """
    skip: dict[str, str] = {}
    if workloads_implied:
        families = [*WORKLOAD_FAMILIES]
        families += ["isolation"] if inp.policy.isolation else []
        families += ["quotas"] if inp.policy.quotas else []
        skip = dict.fromkeys(families, WITHOUT_WORKLOADS)
    if not actions_derived:
        skip[ACTIONS_FAMILY] = WITHOUT_ACTIONS
    checker = CheckContext(plan=plan, inp=inp, catalog=catalog or default_catalog(), skip=skip)
    violations = _run(checker)
    if checker.kept:
        log.info("%d rule(s) the current state breaks stay broken", len(checker.kept))
    log.debug(
        "validated %d assignments: %d violation(s), %d rule family(ies) skipped",
        len(plan.assignments),
        len(violations),
        len(checker.skipped),
    )
    return Report(tuple(violations), tuple(checker.skipped), tuple(checker.kept))


def validate_plan(
    plan: Plan,
    inp: PlanningInput,
    catalog: HardwareCatalog | None = None,
    *,
    actions_derived: bool = True,
) -> list[Violation]:
    """Every rule ``plan`` breaks for ``inp``, in a deterministic order (empty when the plan is valid);
    :func:`check_plan` also says which rule families could not be checked (and what
    ``actions_derived`` means)."""
    return list(check_plan(plan, inp, catalog, actions_derived=actions_derived).violations)


class ImpliedWorkloadError(InputError):
    """A plan entry from which no workload can be rebuilt; ``loc`` is its path inside the plan."""

    def __init__(self, loc: tuple[str | int, ...], reason: str) -> None:
        self.loc = loc
        self.reason = reason
        path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
        super().__init__(f"plan {path}: {reason}")


def implied_workloads(plan: Plan, policy: Policy | None = None) -> tuple[Workload, ...]:
    """Workloads as the plan itself describes them, to validate a plan without its demand.

    Each workload gets the replicas the plan names and the shape of its first assignment. Its team and
    tier are placeholders that ``policy`` knows (its first team, else ``default``; the ``standard`` tier,
    else its first): the rule families that read them are skipped by
    ``check_plan(..., workloads_implied=True)``. Raises :class:`ImpliedWorkloadError` naming the plan
    field when an entry makes no valid workload (an empty workload id).
    """
    policy = policy or Policy()
    tiers = [t.name for t in policy.tiers]
    placeholders = {
        "team": policy.teams[0] if policy.teams else "default",
        "tier": STANDARD if STANDARD in tiers or not tiers else tiers[0],
    }
    replicas: dict[str, int] = {}
    shapes: dict[str, dict[str, object]] = {}
    first: dict[str, tuple[str | int, ...]] = {}
    for i, a in enumerate(plan.assignments):
        replicas[a.workload] = max(replicas.get(a.workload, 0), a.replica + 1)
        first.setdefault(a.workload, ("assignments", i))
        shape: dict[str, object] = {
            "cpu_milli": a.cpu_milli,
            "memory_mib": a.memory_mib,
            "gpu_memory_mib": a.gpu_memory_mib,
        }
        if a.gpus and a.gpus[0].mig_profile is not None:
            shape["mig_profile"] = a.gpus[0].mig_profile
        elif a.gpus and a.gpus[0].milli is not None:
            shape["gpu_milli"] = a.gpus[0].milli
        elif a.gpus:
            shape["gpus"] = len(a.gpus)
        shapes.setdefault(a.workload, shape)
    for i, u in enumerate(plan.unplaced):
        replicas[u.workload] = max(replicas.get(u.workload, 0), u.replica + 1)
        first.setdefault(u.workload, ("unplaced", i))
        shapes.setdefault(u.workload, {})
    workloads: list[Workload] = []
    for w, n in sorted(replicas.items()):
        try:
            workloads.append(Workload.model_validate({"id": w, "replicas": n, **placeholders, **shapes[w]}))
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            field_path = tuple("workload" if p == "id" else p for p in error["loc"])
            raise ImpliedWorkloadError((*first[w], *field_path), str(error["msg"])) from None
    return tuple(workloads)
