"""The cluster: nodes, their GPUs, NUMA affinity, intra-node links and MIG layouts."""

from __future__ import annotations

import re
from collections import Counter
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from gpuplan.models.base import MAX_GPUS_PER_NODE, Name, Strict, did_you_mean
from gpuplan.models.catalog import default_catalog
from gpuplan.models.hardware import MILLI_PER_GPU, GpuModelSpec, HardwareCatalog
from gpuplan.models.scheduling import ResourceName, Taint, parse_taint, text_items

_LINK_RE = re.compile(r"^(NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")


def unknown_model(name: str, catalog: HardwareCatalog) -> str:
    """``unknown GPU model 'L40S-46GB' (did you mean L40S-48GB?)``: the catalog's closest names."""
    return f"unknown GPU model '{name}'{did_you_mean(name, (m.name for m in catalog.models))}"


def catalog_from(info: ValidationInfo) -> HardwareCatalog:
    """The catalog passed as validation context, else the bundled one."""
    ctx = info.context
    found = ctx.get("catalog") if isinstance(ctx, dict) else None
    return found if isinstance(found, HardwareCatalog) else default_catalog()


class MigInstance(Strict):
    """A MIG GPU instance: a profile started at a memory-slice offset."""

    profile: str
    start: int = Field(ge=0)


class MigConfig(Strict):
    """The MIG layout of one GPU (present = MIG mode enabled)."""

    instances: tuple[MigInstance, ...] = ()


def mig_layout_problems(spec: GpuModelSpec, instances: tuple[MigInstance, ...]) -> list[tuple[str, str]]:
    """Every reason why ``instances`` is not a valid MIG layout of ``spec``, as (rule code, sentence).

    Codes: ``gpu-model`` (no MIG, or a profile the model lacks), ``mig-bounds`` (runs past the last
    memory slice), ``mig-start`` (not a valid placement), ``mig-overlap``, ``mig-max-instances``,
    ``mig-compute``.
    """
    if not spec.mig_capable:
        return [("gpu-model", f"{spec.name} does not support MIG.")]
    problems: list[tuple[str, str]] = []
    occupied: dict[int, str] = {}
    counts: Counter[str] = Counter()
    compute = 0
    for inst in instances:
        label = f"{inst.profile}@{inst.start}"
        prof = spec.profile_map.get(inst.profile)
        if prof is None:
            problems.append(("gpu-model", f"{spec.name} does not offer MIG profile '{inst.profile}'."))
            continue
        if inst.start not in prof.starts:
            if inst.start + prof.memory_slices > spec.memory_slices:
                problems.append(
                    (
                        "mig-bounds",
                        f"MIG instance {label} would end past the {spec.memory_slices} memory slices "
                        f"of {spec.name}.",
                    )
                )
            else:
                problems.append(
                    (
                        "mig-start",
                        f"MIG profile '{inst.profile}' cannot start at memory slice {inst.start} "
                        f"on {spec.name} (valid starts: {sorted(prof.starts)}).",
                    )
                )
            continue
        counts[inst.profile] += 1
        compute += prof.compute_slices
        span = range(inst.start, inst.start + prof.size_at(inst.start))
        clash = next((occupied[s] for s in span if s in occupied), None)
        if clash is not None:
            problems.append(("mig-overlap", f"MIG instance {label} overlaps {clash} in memory slices."))
        for s in span:
            occupied.setdefault(s, label)
    for name, n in counts.items():
        limit = spec.profile_map[name].max_instances
        if n > limit:
            problems.append(
                ("mig-max-instances", f"{n} instances of '{name}'; {spec.name} allows at most {limit}.")
            )
    if len(instances) > spec.max_gpu_instances:
        problems.append(
            (
                "mig-max-instances",
                f"{len(instances)} MIG instances; {spec.name} allows at most {spec.max_gpu_instances}.",
            )
        )
    if compute > spec.compute_slices:
        problems.append(
            (
                "mig-compute",
                f"the layout uses {compute} compute slices; {spec.name} has {spec.compute_slices}.",
            )
        )
    return problems


def check_mig_layout(
    model_name: str, instances: tuple[MigInstance, ...], catalog: HardwareCatalog
) -> list[str]:
    """Sentences saying why ``instances`` is not a valid MIG layout for ``model_name`` (empty if valid)."""
    return [msg for _, msg in mig_layout_problems(catalog.model(model_name), instances)]


class Gpu(Strict):
    """One GPU of a node."""

    index: int = Field(ge=0)
    model: str
    numa: int = Field(default=0, ge=0)
    mig: MigConfig | None = None

    @field_validator("model")
    @classmethod
    def _known_model(cls, v: str, info: ValidationInfo) -> str:
        catalog = catalog_from(info)
        if not catalog.has_model(v):
            raise ValueError(unknown_model(v, catalog))
        return v

    @model_validator(mode="after")
    def _valid_mig(self, info: ValidationInfo) -> Gpu:
        if self.mig is None:
            return self
        errors = check_mig_layout(self.model, self.mig.instances, catalog_from(info))
        if errors:
            raise ValueError("; ".join(errors))
        return self


class Link(Strict):
    """A link between two GPUs of one node, in ``nvidia-smi topo -m`` classes (NV#, PIX, …)."""

    a: int = Field(ge=0)
    b: int = Field(ge=0)
    kind: str

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if not _LINK_RE.match(v):
            raise ValueError(f"link kind '{v}' is not one of NV#, PIX, PXB, PHB, NODE, SYS")
        return "SYS" if v == "SOC" else v


#: The sharing mode of a node whose non-MIG GPUs the device plugin offers whole only.
EXCLUSIVE: Literal["exclusive"] = "exclusive"


class TimeSlicing(Strict):
    """Time-slicing settings: the device plugin offers each GPU as ``replicas`` shares (at most one per
    milli-GPU: a fraction takes at least 1 milli)."""

    replicas: int = Field(ge=1, le=MILLI_PER_GPU)


class TimeSliced(Strict):
    """The sharing mode ``{time-slicing: {replicas: r}}``: the node's non-MIG GPUs take fractions only."""

    time_slicing: TimeSlicing = Field(alias="time-slicing")


def _sharing_tag(v: Any) -> str:
    return "exclusive" if isinstance(v, str) else "time-sliced"


#: How the device plugin offers a node's non-MIG GPUs (the mode is per node, as the plugin's is).
Sharing = Annotated[
    Annotated[Literal["exclusive"], Tag("exclusive")] | Annotated[TimeSliced, Tag("time-sliced")],
    Discriminator(_sharing_tag),
]


def sharing_offers(sharing: Sharing | None, kind: str) -> bool:
    """Whether a non-MIG GPU in mode ``sharing`` takes a use of ``kind`` (``whole`` or ``fraction``).

    The one home of the rule: exclusive GPUs are given whole only, time-sliced GPUs as fractions only,
    and GPUs of a node without a mode (legacy inputs) either way. Other kinds (MIG, CPU) are not
    concerned.
    """
    if sharing is None:
        return True
    if kind == "whole":
        return sharing == EXCLUSIVE
    if kind == "fraction":
        return sharing != EXCLUSIVE
    return True


def sharing_replicas(sharing: Sharing | None) -> int | None:
    """How many fractions one non-MIG GPU in mode ``sharing`` holds at most: the ``replicas`` shares
    the device plugin offers per time-sliced GPU (one pod takes one share), ``None`` for no count limit.

    The one home of the count: every back-end, the validator and the running-state check ask this.
    """
    return sharing.time_slicing.replicas if isinstance(sharing, TimeSliced) else None


def sharing_text(sharing: Sharing | None) -> str:
    """A mode in one word, as plan actions spell it: ``exclusive``, ``time-slicing:4`` or ``none``."""
    if isinstance(sharing, TimeSliced):
        return f"time-slicing:{sharing.time_slicing.replicas}"
    return sharing or "none"


def parse_sharing_text(text: str) -> Sharing | None:
    """The mode :func:`sharing_text` spelled ``text`` (raises ``ValueError`` naming it otherwise)."""
    if text == "none":
        return None
    if text == EXCLUSIVE:
        return EXCLUSIVE
    kind, _, replicas = text.partition(":")
    if kind != "time-slicing" or not replicas.isdigit():
        raise ValueError(f"'{text}' is not a sharing mode; use exclusive or time-slicing:N")
    return TimeSliced.model_validate({"time-slicing": {"replicas": int(replicas)}})


def describe_sharing(sharing: Sharing) -> str:
    """A sharing mode in words, e.g. ``time-slicing with 4 replicas (fractions only)``."""
    if isinstance(sharing, TimeSliced):
        return f"time-slicing with {sharing.time_slicing.replicas} replicas (fractions only)"
    return "exclusive (whole GPUs only)"


class Node(Strict):
    """A server: CPU, memory, GPUs and links, optionally filled from a reference topology.

    ``sharing`` is how the device plugin offers the non-MIG GPUs: ``exclusive`` (whole GPUs only) or
    ``{time-slicing: {replicas: r}}`` (fractions only); absent, both may share the node as before. A
    plan may change the mode of a drained node (a ``set-sharing`` action, see :class:`NodeSharing`).
    """

    name: Name = Field(min_length=1)
    pool: Name | None = None
    labels: dict[Name, Name] = Field(default_factory=dict)
    cpu_milli: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    topology: str | None = None
    gpu_model: str | None = None
    gpus: tuple[Gpu, ...] = Field(default=(), json_schema_extra={"maxItems": MAX_GPUS_PER_NODE})
    links: tuple[Link, ...] = ()
    sharing: Sharing | None = None
    #: Kubernetes taints (``key=value:Effect`` text or mappings) and the extended resources the node
    #: advertises (allocatable names; empty: not known, every resource taken as offered), read by
    #: :mod:`gpuplan.models.rules.scheduling`.
    taints: tuple[Taint, ...] = ()
    resources: tuple[ResourceName, ...] = ()

    @field_validator("taints", mode="before")
    @classmethod
    def _taint_text(cls, v: Any) -> Any:
        return text_items(v, parse_taint)

    @field_validator("sharing", mode="before")
    @classmethod
    def _sharing_form(cls, v: Any) -> Any:
        """One plain sentence for a mode that is neither form (not the tagged union's own wording)."""
        if v is None or v == EXCLUSIVE or isinstance(v, dict | TimeSliced):
            return v
        raise ValueError(f"{v!r} is not a sharing mode; use exclusive or {{time-slicing: {{replicas: N}}}}")

    @field_validator("gpus", mode="before")
    @classmethod
    def _gpu_count(cls, v: Any) -> Any:
        """At most :data:`MAX_GPUS_PER_NODE` GPUs, refused before any of them is validated."""
        if isinstance(v, list | tuple) and len(v) > MAX_GPUS_PER_NODE:
            raise ValueError(f"{len(v)} GPUs; a node has at most {MAX_GPUS_PER_NODE}")
        return v

    @model_validator(mode="before")
    @classmethod
    def _expand_topology(cls, data: Any, info: ValidationInfo) -> Any:
        """Fill GPUs and links from a reference topology; explicit GPU entries override by index."""
        if not isinstance(data, dict) or not data.get("topology"):
            return data
        catalog = catalog_from(info)
        try:
            ref = catalog.topology(str(data["topology"]))
        except KeyError as exc:
            raise ValueError(str(exc.args[0])) from None
        model = data.get("gpu_model") or ref.gpu_model
        overrides = {int(g["index"]): g for g in data.get("gpus", []) if isinstance(g, dict)}
        gpus = []
        for g in ref.gpus:
            entry: dict[str, Any] = {"index": g.index, "model": model, "numa": g.numa}
            entry.update(overrides.pop(g.index, {}))
            gpus.append(entry)
        gpus.extend(overrides.values())
        explicit = {
            tuple(sorted((int(lk["a"]), int(lk["b"])))): lk
            for lk in data.get("links", [])
            if isinstance(lk, dict)
        }
        links: list[Any] = [
            explicit.pop((lk.a, lk.b), {"a": lk.a, "b": lk.b, "kind": lk.kind}) for lk in ref.links
        ]
        links.extend(explicit.values())
        return {**data, "gpus": gpus, "links": links}

    @model_validator(mode="after")
    def _consistent(self) -> Node:
        known = Counter(g.index for g in self.gpus)
        dupes = [i for i, n in known.items() if n > 1]
        if dupes:
            raise ValueError(f"GPU index {min(dupes)} appears more than once")
        for lk in self.links:
            if lk.a not in known or lk.b not in known:
                raise ValueError(f"link {lk.a}-{lk.b} names a GPU the node does not have")
            if lk.a == lk.b:
                raise ValueError(f"link {lk.a}-{lk.b} joins a GPU to itself")
        return self

    @cached_property
    def gpu_by_index(self) -> dict[int, Gpu]:
        """GPUs keyed by their index."""
        return {g.index: g for g in self.gpus}


class Cluster(Strict):
    """All nodes of a fleet."""

    nodes: tuple[Node, ...]

    @model_validator(mode="after")
    def _unique_names(self) -> Cluster:
        seen: set[str] = set()
        for n in self.nodes:
            if n.name in seen:
                raise ValueError(f"node name '{n.name}' appears more than once")
            seen.add(n.name)
        return self

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        """Nodes keyed by name."""
        return {n.name: n for n in self.nodes}

    @property
    def gpu_count(self) -> int:
        """Number of GPUs in the cluster."""
        return sum(len(n.gpus) for n in self.nodes)


def uncertain_in_use(cluster: Cluster, catalog: HardwareCatalog) -> list[str]:
    """The catalog entries marked ``uncertain`` that ``cluster`` uses (reference topologies, GPU models and
    MIG profiles), each named once, in cluster order: what a run should ask the user to check."""
    found: dict[str, None] = {}
    for node in cluster.nodes:
        if node.topology and catalog.topology(node.topology).uncertain:
            found[f"reference topology {catalog.topology(node.topology).name}"] = None
        for gpu in node.gpus:
            spec = catalog.model(gpu.model)
            if spec.uncertain:
                found[f"GPU model {spec.name}"] = None
            for inst in gpu.mig.instances if gpu.mig is not None else ():
                if spec.profile(inst.profile).uncertain:
                    found[f"MIG profile {inst.profile} of {spec.name}"] = None
    return list(found)
