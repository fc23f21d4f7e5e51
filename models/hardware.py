"""GPU model specifications, MIG profiles and reference server topologies (the hardware catalog)."""

from __future__ import annotations

import logging
from functools import cached_property

from pydantic import Field, model_validator

from gpuplan.models.base import Strict

log = logging.getLogger(__name__)

#: Capacity of one GPU in milli-GPU: the unit of fractions, in the data model and every solver.
MILLI_PER_GPU = 1000

#: Link classes of ``nvidia-smi topo -m`` from best to worst (``NV#`` stands for any NVLink bond).
LINK_CLASSES: tuple[str, ...] = ("NV#", "PIX", "PXB", "PHB", "NODE", "SYS")


class MigPlacement(Strict):
    """A valid position of a MIG GPU instance: an interval of memory slices."""

    start: int = Field(ge=0)
    size: int = Field(ge=1)


class MigProfile(Strict):
    """A MIG GPU-instance profile (e.g. ``3g.40gb``) and where it may be instantiated."""

    name: str
    compute_slices: int = Field(ge=1)
    memory_slices: int = Field(ge=1)
    max_instances: int = Field(ge=1)
    placements: tuple[MigPlacement, ...]
    memory_gib: float | None = None
    profile_id: int | None = None
    uncertain: bool = False

    @cached_property
    def starts(self) -> frozenset[int]:
        """Memory-slice offsets at which this profile may start."""
        return frozenset(p.start for p in self.placements)

    def size_at(self, start: int) -> int:
        """Memory slices this profile occupies when started at ``start``."""
        for p in self.placements:
            if p.start == start:
                return p.size
        raise KeyError(start)


class GpuModelSpec(Strict):
    """One GPU model: memory, MIG geometry and profiles (empty when MIG is not supported)."""

    name: str
    aliases: tuple[str, ...] = ()
    memory_gib: float
    compute_slices: int = Field(default=1, ge=1)
    memory_slices: int = Field(default=1, ge=1)
    max_gpu_instances: int = Field(default=0, ge=0)
    profiles: tuple[MigProfile, ...] = ()
    uncertain: bool = False
    source: str = ""

    @model_validator(mode="after")
    def _profiles_fit(self) -> GpuModelSpec:
        for p in self.profiles:
            for pl in p.placements:
                if pl.start + pl.size > self.memory_slices:
                    raise ValueError(
                        f"GPU model '{self.name}': profile '{p.name}' placement at {pl.start} "
                        f"(size {pl.size}) exceeds {self.memory_slices} memory slices"
                    )
        return self

    @property
    def memory_mib(self) -> int:
        """GPU memory in whole MiB (the unit of ``gpu_memory_mib`` asks)."""
        return round(self.memory_gib * 1024)

    def instance_memory_mib(self, profile: str) -> int:
        """Memory of one MIG instance of ``profile`` in MiB: the catalog's observed size, else the
        profile's share of the GPU's memory slices."""
        prof = self.profile(profile)
        if prof.memory_gib is not None:
            return round(prof.memory_gib * 1024)
        return self.memory_mib * prof.memory_slices // self.memory_slices

    def fits_memory(self, kind: str, profile: str | None, gpu_memory_mib: int) -> bool:
        """Whether one GPU of this model (or one ``profile`` instance, for ``kind`` ``mig``) has
        ``gpu_memory_mib`` MiB: the single rule for which GPUs a memory ask may use at all."""
        if not gpu_memory_mib:
            return True
        if kind == "mig":
            return (
                profile is not None
                and profile in self.profile_map
                and (self.instance_memory_mib(profile) >= gpu_memory_mib)
            )
        return self.memory_mib >= gpu_memory_mib

    @property
    def mig_capable(self) -> bool:
        """Whether the model supports MIG partitioning."""
        return bool(self.profiles)

    @cached_property
    def profile_map(self) -> dict[str, MigProfile]:
        """Profiles by name."""
        return {p.name: p for p in self.profiles}

    def profile(self, name: str) -> MigProfile:
        """The named profile, or a ``KeyError`` naming what the model offers."""
        try:
            return self.profile_map[name]
        except KeyError:
            raise KeyError(
                f"{self.name} does not offer MIG profile '{name}' "
                f"(it offers: {', '.join(self.profile_map) or 'none'})"
            ) from None


class TopologyGpu(Strict):
    """A GPU position in a reference server topology."""

    index: int = Field(ge=0)
    numa: int = Field(default=0, ge=0)


class TopologyLink(Strict):
    """A GPU pair link in a reference topology, in ``nvidia-smi topo -m`` classes."""

    a: int
    b: int
    kind: str
    uncertain: bool = False


class ReferenceTopology(Strict):
    """A reference server (e.g. ``dgx-h100``): GPU positions, NUMA affinity and links."""

    name: str
    gpu_model: str
    gpus: tuple[TopologyGpu, ...]
    links: tuple[TopologyLink, ...]
    uncertain: bool = False
    source: str = ""


class HardwareCatalog(Strict):
    """All GPU models and reference topologies known to gpuplan."""

    models: tuple[GpuModelSpec, ...]
    topologies: tuple[ReferenceTopology, ...] = ()

    @model_validator(mode="after")
    def _names_are_unique(self) -> HardwareCatalog:
        """Each name or alias means one GPU model, each topology name one topology: a second entry may
        never turn one product into another (``H20`` is not ``GH200``)."""
        owner: dict[str, str] = {}
        for m in self.models:
            for key in dict.fromkeys(k.lower() for k in (m.name, *m.aliases)):
                if key in owner:
                    raise ValueError(
                        f"GPU model '{m.name}': the name '{key}' already means GPU model {owner[key]}"
                    )
                owner[key] = m.name
        seen: set[str] = set()
        for t in self.topologies:
            if t.name.lower() in seen:
                raise ValueError(f"reference topology '{t.name}' is defined twice")
            seen.add(t.name.lower())
        return self

    @cached_property
    def _model_index(self) -> dict[str, GpuModelSpec]:
        return {key.lower(): m for m in self.models for key in (m.name, *m.aliases)}

    @cached_property
    def _topology_index(self) -> dict[str, ReferenceTopology]:
        return {t.name.lower(): t for t in self.topologies}

    def has_model(self, name: str) -> bool:
        """Whether ``name`` (or an alias) is a known GPU model."""
        return name.lower() in self._model_index

    def model(self, name: str) -> GpuModelSpec:
        """The GPU model named ``name`` or one of its aliases."""
        try:
            return self._model_index[name.lower()]
        except KeyError:
            raise KeyError(f"unknown GPU model '{name}'") from None

    def topology(self, name: str) -> ReferenceTopology:
        """The reference topology named ``name``."""
        try:
            return self._topology_index[name.lower()]
        except KeyError:
            known = ", ".join(sorted(t.name for t in self.topologies))
            raise KeyError(f"unknown reference topology '{name}' (known: {known})") from None

    def canonical(self, name: str) -> str:
        """The catalog's own name for a model given by name or alias."""
        return self.model(name).name
