"""The validator's verdict and its wording: violations, skipped rule families, the report, and the helpers
that name replicas and GPUs in every rule family's messages (GPU entries and places in words:
:func:`gpuplan.models.workload.where`)."""

from __future__ import annotations

from dataclasses import dataclass

#: Missing replicas of one workload named one by one; more are counted in one violation, so that a
#: demand or plan claiming millions of replicas costs no more than the replicas it lists. Also the most
#: replicas a whole-plan budget violation names.
MISSING_NAMED = 10

#: Rules that a current state may already break (fleets drift: quotas change, isolation rules, node
#: topologies, GPU model needs, node labels and taints change after work started). A plan keeps such a
#: violation, without breaking the rule itself, when every replica it concerns is a running replica that
#: stays exactly where it runs (for ``gang``: a gang outside one value of its domain label, or one that
#: runs in part now and whose running replicas alone are placed, where they run:
#: :func:`gpuplan.models.rules.gang.kept_in_part`).
KEPT_RULES = ("quota", "isolation", "topology-nvlink", "topology-numa", "gpu-model", "gang", "scheduling")


@dataclass(frozen=True)
class Violation:
    """One broken rule.

    Attributes
    ----------
    rule
        A short stable code such as ``gpu-overcommit`` or ``mig-start``.
    subject
        The ids concerned, e.g. ``node dgx-01 gpu 3`` or ``workload llm-a replica 0``.
    message
        A full sentence saying what is wrong.
    """

    rule: str
    subject: str
    message: str


@dataclass(frozen=True)
class Skipped:
    """A rule family the validator could not check.

    Attributes
    ----------
    family
        A short stable code: ``shapes``, ``gpu-models``, ``gangs``, ``topology``, ``isolation``,
        ``quotas``, ``disruption``, ``min-runtime`` or ``actions``.
    reason
        Why, as a phrase that follows "not checked", e.g. ``without the workloads``.
    """

    family: str
    reason: str


@dataclass(frozen=True)
class Report:
    """The validator's verdict: every broken rule, the rule families it could not check, and the
    rules the current state already broke and the plan keeps broken (:data:`KEPT_RULES`; not
    violations: see :meth:`~gpuplan.planner.validation.context.CheckContext.only_kept`)."""

    violations: tuple[Violation, ...]
    skipped: tuple[Skipped, ...] = ()
    kept: tuple[Violation, ...] = ()

    @property
    def valid(self) -> bool:
        """Whether no checked rule is broken."""
        return not self.violations


def replica_subject(workload: str, replica: int) -> str:
    """Subject naming one replica."""
    return f"workload {workload} replica {replica}"


def gpu_subject(node: str, gpu: int) -> str:
    """Subject naming one GPU."""
    return f"node {node} gpu {gpu}"
