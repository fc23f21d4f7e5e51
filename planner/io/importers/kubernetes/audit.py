"""Nothing dropped silently: why each pod is left out, and warnings about ``nvidia.com/`` resources no
node offers and MIG profiles no GPU model the pod may go to has."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from gpuplan.models import HardwareCatalog
from gpuplan.planner.io.importers.kubernetes.conventions import (
    GPU,
    HAMI_GPU_CORES,
    HAMI_GPU_MEMORY,
    HAMI_GPU_MEMORY_PERCENT,
    MIG_PREFIX,
    SHARED,
    _mig_profile,
    mig_resource,
)
from gpuplan.planner.io.importers.kubernetes.shapes import _Selection

log = logging.getLogger(__name__)


#: Why a pod is left out (the summary groups pods by these, in this order).
UNREADABLE = "unreadable (a warning names the field)"
FINISHED = "finished (Succeeded or Failed)"
TERMINATING = "terminating"
ON_UNAVAILABLE = "bound to a node that takes no new pods"
UNKNOWN_RESOURCE = "asks for a GPU resource no node offers"
UNKNOWN_PROFILE = "asks for a MIG profile no GPU model of the catalog has"
PENDING_NO_GPU = "pending, asks for no GPU"
BOUND_NO_GPU = "runs without a GPU (its CPU and memory are taken off its node)"
_REASONS = (
    UNREADABLE,
    UNKNOWN_RESOURCE,
    UNKNOWN_PROFILE,
    PENDING_NO_GPU,
    ON_UNAVAILABLE,
    FINISHED,
    TERMINATING,
    BOUND_NO_GPU,
)
#: ``nvidia.com/`` resources a pod may ask for without a node offering them (HAMi's share requests).
_SCHEDULER_RESOURCES = frozenset({HAMI_GPU_MEMORY, HAMI_GPU_MEMORY_PERCENT, HAMI_GPU_CORES})


@dataclass(frozen=True)
class LeftOut:
    """A pod the import leaves out, why, and the detail (phase, node or resource)."""

    pod: str
    reason: str
    detail: str = ""


@dataclass
class _Audit:
    """What the import leaves out or doubts: the resources some node offers (a pod asking for another
    ``nvidia.com/`` resource has a typo or a missing device plugin), the pods left out, and warnings."""

    offered: frozenset[str]
    catalog: HardwareCatalog
    #: The GPU models of the fleet's nodes, where a pod without a model selection may go.
    models: tuple[str, ...] = ()
    left_out: list[LeftOut] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def leave(self, pod: str, reason: str, detail: str = "") -> None:
        """Note a pod left out."""
        self.left_out.append(LeftOut(pod, reason, detail))

    def warn(self, message: str) -> None:
        """Log a warning and keep it for the summary."""
        log.warning("%s", message)
        self.warnings.append(message)

    def unreadable(self, pod: str, why: str) -> None:
        """Leave out a pod one of whose fields gpuplan cannot read, with a warning naming it: one bad pod
        never stops the import of the others."""
        self.warn(f"{why}; the pod is left out")
        self.leave(pod, UNREADABLE, why)

    def extra_gpu_kinds(self, key: str, req: Mapping[str, Decimal]) -> list[str]:
        """The GPU resources of a pod asking for more than one GPU kind that no node offers and (for a MIG
        device) no model of the catalog has: typos, dropped (with a warning) when another kind remains."""
        asked = [k for k, v in req.items() if v and (k in (GPU, SHARED) or k.startswith(MIG_PREFIX))]
        if len(asked) < 2:
            return []
        unknown = [
            k for k in asked
            if k not in self.offered
            and not (k.startswith(MIG_PREFIX) and self._known_profile(k))
        ]  # fmt: skip
        return sorted(unknown) if len(unknown) < len(asked) else []

    def _known_profile(self, resource: str) -> bool:
        """Whether a ``nvidia.com/mig-<profile>`` resource names a profile some catalog model has."""
        profile = _mig_profile(resource.removeprefix(MIG_PREFIX))
        return any(profile in m.profile_map for m in self.catalog.models)

    def check(
        self,
        key: str,
        req: Mapping[str, Decimal],
        shape: tuple[str, dict[str, Any]] | None,
        node_name: str | None,
        selection: _Selection,
    ) -> bool:
        """Whether the pod is imported as a workload. Warns about ``nvidia.com/`` resources no node offers
        and, for a pending pod, a MIG profile no GPU model it may go to has; notes the pod left out when
        it asks for no GPU gpuplan knows, or for a MIG profile no model of the catalog has (no plan could
        read it)."""
        unknown = sorted(
            k for k, v in req.items()
            if v and k.startswith("nvidia.com/") and k not in self.offered and k not in _SCHEDULER_RESOURCES
            and not (shape is not None and shape[0] == "mig" and k.startswith(MIG_PREFIX))
        )  # fmt: skip
        for resource in unknown:
            known = sorted({GPU, SHARED, *(k for k in self.offered if k.startswith("nvidia.com/"))})
            guess = difflib.get_close_matches(resource, known, n=1)
            hint = f" (did you mean {guess[0]}?)" if guess else ""
            kept = "" if shape is None else "; gpuplan plans its GPU request, but Kubernetes will not bind it"
            self.warn(f"pod '{key}': resources.requests.{resource}: no node offers it{hint}{kept}")
        if shape is None:
            if unknown:
                self.leave(key, UNKNOWN_RESOURCE, ", ".join(unknown))
            else:
                self.leave(key, BOUND_NO_GPU if node_name else PENDING_NO_GPU, node_name or "")
            return False
        if shape[0] == "mig" and node_name is None:
            return self._check_profile(key, shape[1]["mig_profile"], selection)
        return True

    def _check_profile(self, key: str, profile: str, selection: _Selection) -> bool:
        """Whether a pending pod's MIG profile is one the catalog knows; warns when no GPU model the pod
        may go to has it (the plan then says it never fits)."""
        resource = mig_resource(profile)
        if not any(profile in m.profile_map for m in self.catalog.models):
            self.warn(f"pod '{key}': resources.requests.{resource}: no GPU model has MIG profile '{profile}'")
            self.leave(key, UNKNOWN_PROFILE, resource)
            return False
        models = list(selection.models or self.models)
        if models and not any(profile in self.catalog.model(m).profile_map for m in models):
            self.warn(
                f"pod '{key}': resources.requests.{resource}: no GPU model it may go to "
                f"({', '.join(models)}) has MIG profile '{profile}'"
            )
        return True
