"""The placement plan: assignments, MIG layouts, actions, waits, metrics, solver report, provenance."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from gpuplan.models.base import Strict
from gpuplan.models.cluster import MigInstance, Sharing


class PlanStatus(StrEnum):
    """Outcome of a planning run.

    ``OPTIMAL``: proved optimal for the full problem (every node and every movable replica free in the
    model), objective equal to the bound. ``FEASIBLE``: a valid plan, not proved optimal (a time limit,
    a restricted or decomposed model, a later pass that changed the plan). ``FALLBACK``: the exact
    solver found nothing in time and the greedy (FGD) plan is returned. There is no infeasible
    status: every replica may wait, so a valid plan always exists; input that breaks the rules is an
    error, never a plan.
    """

    OPTIMAL = "OPTIMAL"
    FEASIBLE = "FEASIBLE"
    FALLBACK = "FALLBACK"


class GpuUse(Strict):
    """A whole GPU (``index`` only), a fraction (``milli``) or a MIG instance (profile + start)."""

    index: int = Field(ge=0)
    milli: int | None = Field(default=None, ge=1, le=999)
    mig_profile: str | None = None
    mig_start: int | None = Field(default=None, ge=0)

    @property
    def kind(self) -> str:
        """``whole``, ``fraction`` or ``mig``."""
        if self.mig_profile is not None:
            return "mig"
        return "fraction" if self.milli is not None else "whole"


class Assignment(Strict):
    """Where one replica of a workload is placed."""

    workload: str
    replica: int = Field(ge=0)
    node: str
    gpus: tuple[GpuUse, ...] = ()
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    #: GPU memory (MiB) the replica holds on each GPU it uses (its shape's ``gpu_memory_mib``).
    gpu_memory_mib: int = Field(default=0, ge=0)
    alternative: int = Field(default=0, ge=0)


class Change(Strict):
    """One concrete change to the cluster, the demand or the policy that a counterfactual makes.

    ``kind``: ``migrate`` (a replica from ``node`` to ``to`` on ``gpus``), ``preempt``, ``end`` (a
    replica ends at ``at``), ``raise_quota`` (quota number ``index`` by ``amount`` GPU-equivalents),
    ``repartition`` (GPU ``gpu`` of ``node`` to ``instances``), ``relax_topology`` (alternative
    ``alternative`` to ``topology``), ``allow_model``, ``allow_team`` (on ``node`` despite isolation
    rule ``index``) or ``add_node`` (a node like ``node`` named ``to`` with ``amount`` GPUs of ``model``).
    """

    kind: str
    workload: str | None = None
    replica: int | None = None
    node: str | None = None
    to: str | None = None
    gpu: int | None = None
    gpus: tuple[GpuUse, ...] = ()
    team: str | None = None
    index: int | None = None
    amount: float | None = None
    instances: tuple[MigInstance, ...] = ()
    alternative: int | None = None
    topology: str | None = None
    model: str | None = None
    at: str | None = None


class Counterfactual(Strict):
    """A smallest change that would place a replica now, verified by re-solving with it applied."""

    summary: str
    kind: str
    changes: tuple[Change, ...]
    disruption: int = Field(default=0, ge=0)
    cost: float = Field(default=0.0, ge=0)
    verified: bool = False
    verified_by: str | None = None
    placement: Assignment | None = None


class ReasonDetail(Strict):
    """Why one alternative shape of a replica could not be used."""

    alternative: int = Field(ge=0)
    code: str
    reason: str


class Unplaced(Strict):
    """A replica left waiting, with a reason code and a sentence."""

    workload: str
    replica: int = Field(ge=0)
    code: str
    reason: str
    predicted_start: str | None = None
    reserved_node: str | None = None
    reserved_gpus: tuple[GpuUse, ...] = ()
    resources: tuple[str, ...] = ()
    details: tuple[ReasonDetail, ...] = ()
    counterfactuals: tuple[Counterfactual, ...] = ()


class Explanation(Strict):
    """Why a replica waits (``alternative`` is ``None``) or runs on a worse alternative than its first."""

    workload: str
    replica: int = Field(ge=0)
    alternative: int | None = None
    code: str
    reason: str
    resources: tuple[str, ...] = ()
    details: tuple[ReasonDetail, ...] = ()
    counterfactuals: tuple[Counterfactual, ...] = ()


class MigLayout(Strict):
    """The target MIG layout of one GPU."""

    node: str
    gpu: int = Field(ge=0)
    instances: tuple[MigInstance, ...]


class MigMode(Strict):
    """The MIG mode a plan gives a GPU (changed from the GPU's own by a ``set-mig-mode`` action): ``enabled``
    false turns MIG off (the GPU is then given whole or as fractions, its instances gone); true turns it on
    with no instance (the plan's ``mig_layouts`` may then create some)."""

    node: str
    gpu: int = Field(ge=0)
    enabled: bool


class NodeSharing(Strict):
    """The sharing mode a plan gives a node (changed from the node's own by a ``set-sharing`` action)."""

    node: str
    sharing: Sharing


#: Action kinds: stop a replica, move it (stop here, start there), destroy or create a MIG instance,
#: start a replica that does not run yet.
PREEMPT, MIGRATE, DESTROY, CREATE, START = "preempt", "migrate", "destroy-mig", "create-mig", "start"
#: Action kind: change a drained node's sharing mode (``from`` and ``to`` as ``sharing_text`` spells them).
SET_SHARING = "set-sharing"
#: Action kind: turn MIG mode of a drained GPU ``on`` or ``off`` (``from`` and ``to``; its node's label
#: ``nvidia.com/mig.config`` in Kubernetes).
SET_MIG_MODE = "set-mig-mode"
#: ``detail`` of a migration that only restarts a replica in place while its GPU is re-partitioned.
DRAIN = "drain for MIG re-partition"


class Action(Strict):
    """A step from the current state towards the plan (``kind``: one of the action kinds above)."""

    round: int = Field(default=1, ge=1)
    kind: str
    workload: str | None = None
    replica: int | None = None
    node: str | None = None
    gpu: int | None = None
    from_: str | None = Field(default=None, alias="from")
    to: str | None = None
    detail: str | None = None


class StaysBroken(Strict):
    """A rule the current state already breaks and the plan keeps broken: every replica concerned runs
    now and stays where it runs (a team over its quota, a node or GPU shared against an isolation rule, a
    running replica whose GPUs lack the NVLink or NUMA locality it asks for). ``rule``, ``subject`` and
    ``message`` as the validator's violations."""

    rule: str
    subject: str
    message: str


class SolverReport(Strict):
    """What the solver did and proved.

    ``objective`` is that of the plan returned (the tier-weighted queue term, or the weighted sum in
    weighted mode); ``best_bound`` a lower bound on it valid for the full problem, from
    ``bound_source``; ``gap`` = (objective - bound) / max(1, objective).
    """

    name: str
    objective: float | None = None
    best_bound: float | None = None
    bound_source: str | None = None
    gap: float | None = None
    wall_s: float = 0.0
    terms: dict[str, float] = Field(default_factory=dict)
    model_size: dict[str, int] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)


class Plan(Strict):
    """A complete, validated plan (see ``docs/FORMATS.md``)."""

    status: PlanStatus
    solver: SolverReport
    assignments: tuple[Assignment, ...] = ()
    unplaced: tuple[Unplaced, ...] = ()
    mig_layouts: tuple[MigLayout, ...] = ()
    #: GPUs whose MIG mode the plan changes (applied before ``mig_layouts``).
    mig_modes: tuple[MigMode, ...] = ()
    sharing: tuple[NodeSharing, ...] = ()
    actions: tuple[Action, ...] = ()
    explanations: tuple[Explanation, ...] = ()
    #: Rules the current state breaks that the plan keeps broken (never new violations).
    stays_broken: tuple[StaysBroken, ...] = ()
    metrics: dict[str, float] = Field(default_factory=dict)
    provenance: dict[str, Any] = Field(default_factory=dict)
