"""Demand: workloads with one or several alternative GPU shapes, replicas, gangs and state."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from functools import cached_property
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gpuplan.models.base import Name, Seconds, Strict
from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.plan import GpuUse
from gpuplan.models.scheduling import (
    Key,
    NodeSelectorTerm,
    ResourceName,
    Toleration,
    Value,
    parse_affinity,
    parse_term,
    parse_toleration,
    sorted_pairs,
    text_items,
)

#: Compute share (milli-GPU) a memory-only ask (``gpu_memory_mib`` without ``gpu_milli``) is planned
#: with: the smallest fraction, so it marks the GPU as shared everywhere a fraction does while its
#: memory, not its compute, is what limits how much fits on the GPU.
MEMORY_ONLY_MILLI = 1

#: Default tier names, best first.
LATENCY_SENSITIVE = "latency-sensitive"
STANDARD = "standard"
BACKGROUND = "background"


class TopologyNeed(StrEnum):
    """What a multi-GPU replica requires of the links between its GPUs."""

    ANY = "any"
    SAME_NODE = "same-node"
    NVLINK = "nvlink"
    NUMA = "numa"


class ShapeFields(Strict):
    """The fields that describe one way to run a replica (shared by a shape and a workload)."""

    gpus: int = Field(default=0, ge=0, description="whole GPUs (at most one of gpus, gpu_milli, mig_profile)")
    gpu_milli: int = Field(default=0, ge=0, le=999, description="a fraction of one GPU, in thousandths")
    mig_profile: str | None = Field(default=None, description="a MIG profile of the GPU model, e.g. 1g.10gb")
    gpu_models: tuple[str, ...] = Field(
        default=(), description="GPU models of the hardware catalog it may run on (any if empty)"
    )
    cpu_milli: int = Field(default=0, ge=0)
    memory_mib: int = Field(default=0, ge=0)
    #: GPU memory (MiB) on each GPU the replica uses: shared with the other fractions of that GPU, and
    #: within the GPU model's (or MIG profile's) memory for whole GPUs and MIG instances.
    gpu_memory_mib: int = Field(default=0, ge=0)
    topology: TopologyNeed = TopologyNeed.ANY
    resource: ResourceName | None = Field(
        default=None,
        description="the extended resource it asks the node for (nvidia.com/gpu, nvidia.com/gpu.shared, "
        "nvidia.com/mig-1g.10gb, ...): a node that lists its resources and lacks it is refused",
    )

    @field_validator("gpu_models", mode="before")
    @classmethod
    def _split_models(cls, v: Any) -> Any:
        if isinstance(v, str):
            return tuple(m.strip() for m in v.split("|") if m.strip())
        return v


class Shape(ShapeFields):
    """One way to run a replica: whole GPUs, a fraction of one GPU, a MIG profile, or CPU only."""

    @model_validator(mode="after")
    def _one_kind(self) -> Shape:
        kinds = [self.gpus > 0, self.gpu_milli > 0, self.mig_profile is not None]
        if sum(kinds) > 1:
            raise ValueError("a shape asks for exactly one of gpus, gpu_milli or mig_profile")
        return self

    @property
    def kind(self) -> str:
        """``whole``, ``fraction``, ``mig`` or ``cpu`` (GPU memory alone asks for a fraction)."""
        if self.gpus:
            return "whole"
        if self.mig_profile is not None:
            return "mig"
        if self.gpu_milli or self.gpu_memory_mib:
            return "fraction"
        return "cpu"

    @property
    def share_milli(self) -> int:
        """The milli-GPU a fraction is planned with (:data:`MEMORY_ONLY_MILLI` for a memory-only
        ask), 0 for other kinds."""
        if self.kind != "fraction":
            return 0
        return self.gpu_milli or MEMORY_ONLY_MILLI

    @property
    def gpu_milli_total(self) -> int:
        """GPU request in milli-GPU for non-MIG shapes (a MIG shape counts 0 here)."""
        return self.gpus * MILLI_PER_GPU + self.share_milli


def shape_fits(shape: Shape, uses: Sequence[GpuUse]) -> bool:
    """Whether GPU entries are exactly what ``shape`` asks for: its number of distinct whole GPUs, its
    fraction of one GPU, one instance of its MIG profile, or none."""
    if shape.kind == "whole":
        return (
            len(uses) == shape.gpus
            and all(u.kind == "whole" for u in uses)
            and len({u.index for u in uses}) == len(uses)
        )
    if shape.kind == "fraction":
        return len(uses) == 1 and uses[0].kind == "fraction" and uses[0].milli == shape.share_milli
    if shape.kind == "mig":
        return (
            len(uses) == 1
            and uses[0].mig_profile == shape.mig_profile
            and uses[0].milli is None
            and uses[0].mig_start is not None
        )
    return not uses


def fitting_alternative(shapes: Sequence[Shape], uses: Sequence[GpuUse]) -> int:
    """The index of the first of ``shapes`` whose ask ``uses`` are exactly (:func:`shape_fits`), else 0
    (an input whose running GPUs no shape asks for is refused: :meth:`Workload.running_shape_errors`)."""
    if len(shapes) == 1:
        return 0
    return next((k for k, s in enumerate(shapes) if shape_fits(s, uses)), 0)


def describe_shape(shape: Shape) -> str:
    """What a shape asks of GPUs, in words."""
    if shape.kind == "whole":
        return f"{shape.gpus} whole GPU(s)"
    if shape.kind == "fraction":
        return f"{shape.share_milli} milli of one GPU"
    if shape.kind == "mig":
        return f"one MIG {shape.mig_profile} instance"
    return "no GPU"


class GpuRef(GpuUse):
    """One GPU used by a running replica: whole (index only), a fraction (milli) or a MIG instance; the
    same entry as a plan's :class:`~gpuplan.models.plan.GpuUse`, named for the ``running_on`` field."""


class Placement(Strict):
    """Where one replica runs: a node and the GPUs (or GPU parts) it uses."""

    node: Name
    gpus: tuple[GpuRef, ...] = ()
    alternative: int | None = Field(default=None, ge=0)

    @classmethod
    def parse(cls, text: str) -> Placement:
        """Parse ``node:0,1`` (whole), ``node:2=470`` (milli) or ``node:0/3g.40gb@4`` (MIG)."""
        node, _, rest = text.strip().partition(":")
        gpus: list[GpuRef] = []
        for part in filter(None, (p.strip() for p in rest.split(","))):
            m = re.fullmatch(r"(\d+)(?:=(\d+)|/([\w.+-]+)@(\d+))?", part)
            if m is None:
                raise ValueError(f"cannot read GPU '{part}' in running_on '{text}'")
            idx, milli, prof, start = m.groups()
            gpus.append(
                GpuRef(
                    index=int(idx),
                    milli=int(milli) if milli else None,
                    mig_profile=prof,
                    mig_start=int(start) if start else None,
                )
            )
        if not node:
            raise ValueError(f"running_on '{text}' names no node")
        return cls(node=node, gpus=tuple(gpus))


#: How :func:`where` writes a place: ``running_on`` (the syntax :meth:`Placement.parse` reads, for files
#: and annotations), ``sentence`` (every GPU entry in words, for the validator's messages) or ``short``
#: (node and GPU indices, MIG instances as ``profile@start``, for table cells people read).
WhereStyle = Literal["running_on", "sentence", "short"]


def describe_use(use: GpuUse) -> str:
    """A GPU entry in words: ``whole GPU 0``, ``470 milli of GPU 1`` or ``MIG 3g.40gb@0 on GPU 2``."""
    if use.mig_profile is not None:
        return f"MIG {use.mig_profile}@{use.mig_start} on GPU {use.index}"
    if use.milli is not None:
        return f"{use.milli} milli of GPU {use.index}"
    return f"whole GPU {use.index}"


def describe_uses(uses: Sequence[GpuUse]) -> str:
    """``whole GPU 0, whole GPU 1``, or ``no GPU``."""
    return ", ".join(describe_use(u) for u in uses) if uses else "no GPU"


def where(node: str, gpus: Sequence[GpuUse], style: WhereStyle = "running_on") -> str:
    """Where a replica runs or is placed, the one writer of a place (:data:`WhereStyle`):
    ``running_on``: ``node:0,1`` / ``node:2=470`` / ``node:0/3g.40gb@4`` (``node`` alone without GPUs);
    ``sentence``: ``node 'dgx-01' (whole GPU 0, 470 milli of GPU 1)``;
    ``short``: ``dgx-01 GPU 0,1`` / ``dgx-01 GPU 0 (3g.40gb@0)`` (``dgx-01`` alone without GPUs)."""
    if style == "sentence":
        return f"node '{node}' ({describe_uses(gpus)})"
    run = style == "running_on"
    parts = []
    for g in gpus:
        if g.mig_profile is not None:
            mig = f"{g.mig_profile}@{g.mig_start}"
            parts.append(f"{g.index}/{mig}" if run else f"{g.index} ({mig})")
        elif g.milli is not None and run:
            parts.append(f"{g.index}={g.milli}")
        else:
            parts.append(str(g.index))
    if not parts:
        return node
    return f"{node}:{','.join(parts)}" if run else f"{node} GPU {','.join(parts)}"


def _entries(gpus: Iterable[Any]) -> frozenset[tuple[int, int | None, str | None, int | None]]:
    """GPU entries as plain values in any order."""
    return frozenset((g.index, g.milli, g.mig_profile, g.mig_start) for g in gpus)


def _held(gpus: Iterable[Any]) -> list[tuple[int, str]]:
    """What GPU entries hold without where: the milli-GPU and MIG profile of each, sorted."""
    return sorted((g.milli or 0, g.mig_profile or "") for g in gpus)


class Workload(ShapeFields):
    """A request for ``replicas`` copies of one of several alternative shapes (the shape fields at
    top level, or ``alternatives``)."""

    id: Name = Field(min_length=1)
    team: Name = Field(default="default", min_length=1)
    tier: Name = Field(default="standard", min_length=1)
    priority: int = 0
    replicas: int = Field(default=1, ge=1)
    alternatives: tuple[Shape, ...] = Field(
        default=(),
        description="other ways to run a replica, best first; exclusive with a top-level shape (gpus, "
        "gpu_milli or mig_profile above 0 or set): giving both is refused",
    )
    gang: Name | None = None
    gang_domain: Name | None = None
    preemptible: bool = False
    queued_since: datetime | None = None
    duration_s: Seconds | None = None
    started_at: datetime | None = None
    running_on: tuple[Placement, ...] = ()
    #: Whether the GPU indices (and MIG starts) of ``running_on`` are a guess: the node and the GPUs'
    #: kind and count are known, which GPUs are not (the Kubernetes API does not say). A plan that keeps
    #: such a replica on its node with the same GPUs, whatever their indices, does not move it.
    gpus_guessed: bool = False
    #: What a pod imported from Kubernetes is, so that an export acts on that pod: its namespace, the
    #: image of its first container, its controller (``Kind/name``: ``ReplicaSet/embed-6c9b``), its labels,
    #: the scheduler that places it (``spec.schedulerName``) and its scheduling gates.
    namespace: str | None = None
    image: str | None = None
    owner: str | None = None
    #: The labels as sorted ``(key, value)`` pairs (a mapping or ``key=value,...`` text is accepted), so a
    #: workload stays hashable.
    labels: tuple[tuple[str, str], ...] = ()
    scheduler_name: str | None = None
    scheduling_gates: tuple[str, ...] = ()
    #: What kube-scheduler's filters read (:mod:`gpuplan.models.rules.scheduling`): tolerations of node
    #: taints, the node selector (sorted ``(key, value)`` pairs; a mapping or ``key=value,...`` text is
    #: accepted) and required node affinity (terms, any one of which must hold, each of match
    #: expressions that must all hold; text: :func:`gpuplan.models.scheduling.parse_affinity`).
    tolerations: tuple[Toleration, ...] = ()
    node_selector: tuple[tuple[Key, Value], ...] = ()
    node_affinity: tuple[NodeSelectorTerm, ...] = ()
    #: ``False``: the plan never moves, preempts or drains a running replica of this workload (``gpuplan
    #: import kubernetes --pdbs`` sets it on the pods a PodDisruptionBudget allows no more evictions of).
    disruptible: bool = True

    @field_validator("labels", mode="before")
    @classmethod
    def _split_labels(cls, v: Any) -> Any:
        """``key=value,key2=value2`` (the CSV form) or a mapping as sorted pairs."""
        if isinstance(v, dict):
            return tuple(sorted((str(k), str(x)) for k, x in v.items()))
        if not isinstance(v, str):
            return v
        out: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in v.split(","))):
            key, eq, value = part.partition("=")
            if not eq or not key.strip():
                raise ValueError(f"label '{part}' is not key=value")
            out[key.strip()] = value.strip()
        return tuple(sorted(out.items()))

    @field_validator("tolerations", mode="before")
    @classmethod
    def _toleration_text(cls, v: Any) -> Any:
        return text_items(v, parse_toleration)

    @field_validator("node_selector", mode="before")
    @classmethod
    def _selector_pairs(cls, v: Any) -> Any:
        return sorted_pairs(v, "node selector")

    @field_validator("node_affinity", mode="before")
    @classmethod
    def _affinity_text(cls, v: Any) -> Any:
        if isinstance(v, str):
            return parse_affinity(v)
        if isinstance(v, list | tuple):
            return [parse_term(t) if isinstance(t, str) else t for t in v]
        return v

    @field_validator("scheduling_gates", mode="before")
    @classmethod
    def _split_gates(cls, v: Any) -> Any:
        """``gate-a,gate-b`` (the CSV form) as a tuple."""
        if isinstance(v, str):
            return tuple(g.strip() for g in v.split(",") if g.strip())
        return v

    @field_validator("owner", mode="after")
    @classmethod
    def _owner(cls, v: str | None) -> str | None:
        """A controller is named ``Kind/name``."""
        if v is not None and not re.fullmatch(r"[A-Za-z][\w.]*/[^/\s]+", v):
            raise ValueError(f"owner '{v}' is not Kind/name (ReplicaSet/web-6c9b)")
        return v

    @property
    def pod_name(self) -> str | None:
        """The name of the Kubernetes pod this workload is (a one-replica workload ``<namespace>/<pod>``
        with a ``namespace``), else ``None``."""
        if self.namespace is None or self.replicas != 1:
            return None
        ns, slash, name = self.id.partition("/")
        return name if slash and ns == self.namespace and name else None

    @field_validator("queued_since", "started_at", mode="before")
    @classmethod
    def _epoch(cls, v: Any) -> Any:
        number = isinstance(v, int | float) and not isinstance(v, bool)
        if not (number or (isinstance(v, str) and re.fullmatch(r"\d+(\.\d+)?", v.strip()))):
            return v
        try:
            return datetime.fromtimestamp(float(v), tz=UTC)
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"{v} is not a valid Unix time") from None

    @field_validator("queued_since", "started_at", mode="after")
    @classmethod
    def _utc(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            return v.replace(tzinfo=UTC)
        return v

    @field_validator("running_on", mode="before")
    @classmethod
    def _parse_running(cls, v: Any) -> Any:
        if isinstance(v, str):
            return tuple(Placement.parse(p) for p in v.split(";") if p.strip())
        return v

    @field_validator("gang", mode="before")
    @classmethod
    def _gang(cls, v: Any) -> Any:
        if v is True:  # YAML's unquoted true: a gang of this workload's own replicas
            return "true"
        if v is False or (isinstance(v, str) and v.strip().lower() in ("", "false", "no", "0")):
            return None
        return v

    @model_validator(mode="after")
    def _shapes(self) -> Workload:
        top = [self.gpus > 0, self.gpu_milli > 0, self.mig_profile is not None]
        if sum(top) > 1:
            raise ValueError("asks for more than one of gpus, gpu_milli and mig_profile")
        if self.alternatives and any(top):
            raise ValueError("gives both a top-level shape and alternatives; use alternatives only")
        if len(self.running_on) > self.replicas:
            raise ValueError(f"runs {len(self.running_on)} replicas but asks for only {self.replicas}")
        return self

    @cached_property
    def shapes(self) -> tuple[Shape, ...]:
        """The alternative shapes, with the workload's defaults filled in (never empty)."""
        if not self.alternatives:
            return (Shape(**{f: getattr(self, f) for f in ShapeFields.model_fields}),)
        return tuple(
            s.model_copy(
                update={
                    "gpu_models": s.gpu_models or self.gpu_models,
                    "cpu_milli": s.cpu_milli or self.cpu_milli,
                    "memory_mib": s.memory_mib or self.memory_mib,
                    "gpu_memory_mib": s.gpu_memory_mib or self.gpu_memory_mib,
                    "resource": s.resource or self.resource,
                }
            )
            for s in self.alternatives
        )

    def running_shape_errors(self) -> list[str]:
        """Each running replica whose placement names no alternative of the workload, or holds GPUs
        that are not what the alternative it runs as asks for (``field running_on[r]...: reason``)."""
        errors: list[str] = []
        for r, place in enumerate(self.running_on):
            if place.alternative is not None and place.alternative >= len(self.shapes):
                errors.append(
                    f"field running_on[{r}].alternative: {place.alternative} names no alternative "
                    f"(the workload has {len(self.shapes)})"
                )
                continue
            k = self.running_alternative(r)
            if not shape_fits(self.shapes[k], place.gpus):
                asks = f"alternative {k}" if self.alternatives else "the workload"
                errors.append(
                    f"field running_on[{r}]: holds {describe_uses(place.gpus)}, but {asks} asks for "
                    f"{describe_shape(self.shapes[k])}"
                )
        return errors

    def running_alternative(self, replica: int) -> int:
        """The alternative running ``replica`` runs as: the one its placement names, else the one its
        GPU entries tell (:func:`fitting_alternative`)."""
        place = self.running_on[replica]
        if place.alternative is not None:
            return place.alternative
        return fitting_alternative(self.shapes, place.gpus)

    @property
    def gang_id(self) -> str | None:
        """Gang key: replicas of all workloads sharing it are placed all together or not at all."""
        if self.gang is None:
            return None
        return self.id if self.gang.lower() in ("true", "yes", "1") else self.gang

    def stays(self, replica: int, node: str, gpus: Iterable[Any]) -> bool:
        """Whether ``node`` and ``gpus`` (GPU entries with ``index``, ``milli``, ``mig_profile``,
        ``mig_start``) are where ``replica`` runs now: the same entries, or, when the indices are a guess
        (``gpus_guessed``), the same node and the same GPUs held whatever their indices and MIG starts."""
        if replica >= len(self.running_on):
            return False
        place = self.running_on[replica]
        wanted = tuple(gpus)
        if place.node != node:
            return False
        if self.gpus_guessed:
            return _held(place.gpus) == _held(wanted)
        return _entries(place.gpus) == _entries(wanted)

    def waited_s(self, now: datetime) -> float:
        """Seconds waited at ``now`` (0 when ``queued_since`` is unknown or in the future)."""
        if self.queued_since is None:
            return 0.0
        return max(0.0, (now - self.queued_since).total_seconds())


class Workloads(Strict):
    """A demand list (the YAML/JSON form of the workloads file)."""

    workloads: tuple[Workload, ...]

    @model_validator(mode="after")
    def _unique(self) -> Workloads:
        seen: set[str] = set()
        for w in self.workloads:
            if w.id in seen:
                raise ValueError(f"workload id '{w.id}' appears more than once")
            seen.add(w.id)
        return self
