"""The cluster: nodes, their GPUs, NUMA affinity, intra-node links and MIG layouts."""

from __future__ import annotations

import logging
import re
from functools import cached_property
from typing import Any

from pydantic import Field, ValidationInfo, field_validator, model_validator

from models.base import Strict
from models.catalog import default_catalog
from models.hardware import HardwareCatalog, MigProfile

log = logging.getLogger(__name__)

_LINK_RE = re.compile(r"^(NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_warned: set[str] = set()


def warn_uncertain(what: str) -> None:
    """Log once per process that a catalog entry marked ``uncertain`` is in use."""
    if what not in _warned:
        _warned.add(what)
        log.warning("%s is marked uncertain in the hardware catalog; check it against the real machine", what)


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


def check_mig_layout(
    model_name: str, instances: tuple[MigInstance, ...], catalog: HardwareCatalog
) -> list[str]:
    """Every reason why ``instances`` is not a valid MIG layout for ``model_name`` (empty if valid)."""
    spec = catalog.model(model_name)
    if not spec.mig_capable:
        return [f"{spec.name} does not support MIG"]
    errors: list[str] = []
    used: dict[int, str] = {}
    counts: dict[str, int] = {}
    compute = 0
    for inst in instances:
        if inst.profile not in spec.profile_map:
            errors.append(f"{spec.name} does not offer MIG profile '{inst.profile}'")
            continue
        prof: MigProfile = spec.profile_map[inst.profile]
        if inst.start not in prof.starts:
            starts = sorted(prof.starts)
            errors.append(
                f"MIG profile '{inst.profile}' cannot start at memory slice {inst.start} "
                f"on {spec.name} (valid starts: {starts})"
            )
            continue
        counts[inst.profile] = counts.get(inst.profile, 0) + 1
        compute += prof.compute_slices
        for s in range(inst.start, inst.start + prof.size_at(inst.start)):
            if s in used:
                errors.append(
                    f"MIG instance {inst.profile}@{inst.start} overlaps {used[s]} at memory slice {s}"
                )
                break
            used[s] = f"{inst.profile}@{inst.start}"
    for name, n in counts.items():
        if n > spec.profile_map[name].max_instances:
            errors.append(
                f"{n} instances of '{name}' exceed its maximum of {spec.profile_map[name].max_instances}"
            )
    if compute > spec.compute_slices:
        errors.append(f"MIG layout uses {compute} compute slices of {spec.compute_slices}")
    if len(instances) > spec.max_gpu_instances:
        errors.append(
            f"{len(instances)} MIG instances exceed the maximum of {spec.max_gpu_instances}"
        )
    return errors


class Gpu(Strict):
    """One GPU of a node."""

    index: int = Field(ge=0)
    model: str
    numa: int = Field(default=0, ge=0)
    mig: MigConfig | None = None

    @model_validator(mode="after")
    def _known_model(self, info: ValidationInfo) -> Gpu:
        catalog = catalog_from(info)
        if not catalog.has_model(self.model):
            raise ValueError(f"unknown GPU model '{self.model}'")
        spec = catalog.model(self.model)
        if spec.uncertain:
            warn_uncertain(f"GPU model {spec.name}")
        if self.mig is not None:
            errors = check_mig_layout(self.model, self.mig.instances, catalog)
            if errors:
                raise ValueError("; ".join(errors))
            for inst in self.mig.instances:
                if spec.profile(inst.profile).uncertain:
                    warn_uncertain(f"MIG profile {inst.profile} of {spec.name}")
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


class Node(Strict):
    """A server: CPU, memory, GPUs and links, optionally filled from a reference topology."""

    name: str = Field(min_length=1)
    pool: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    cpu_milli: int = Field(ge=0)
    memory_mib: int = Field(ge=0)
    topology: str | None = None
    gpu_model: str | None = None
    gpus: tuple[Gpu, ...] = ()
    links: tuple[Link, ...] = ()

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
        if ref.uncertain:
            warn_uncertain(f"reference topology {ref.name}")
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
        indices = [g.index for g in self.gpus]
        dupes = sorted({i for i in indices if indices.count(i) > 1})
        if dupes:
            raise ValueError(f"GPU index {dupes[0]} appears more than once")
        known = set(indices)
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
