"""Loading the hardware catalog shipped in ``data/hardware`` (or a directory given by the user), extended
by a user catalog file (``GPUPLAN_CATALOG`` or the CLI's ``--hardware-catalog``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.hardware import (
    GpuModelSpec,
    HardwareCatalog,
    MigPlacement,
    MigProfile,
    ReferenceTopology,
    TopologyGpu,
    TopologyLink,
)

#: Environment variable naming another data directory (with a ``hardware/`` folder inside).
DATA_ENV = "GPUPLAN_DATA"

_T = TypeVar("_T")

#: Environment variable naming a user catalog file whose GPU models and topologies extend the bundled ones.
CATALOG_ENV = "GPUPLAN_CATALOG"


def data_dir() -> Path:
    """The directory of gpuplan's bundled data (source checkout or installed wheel alike)."""
    override = os.environ.get(DATA_ENV)
    if override:
        return Path(override)
    return Path(str(resources.files("gpuplan.data")))


def _profile(raw: dict[str, Any]) -> MigProfile:
    return MigProfile(
        name=raw["name"],
        compute_slices=raw["compute_slices"],
        memory_slices=raw["memory_slices"],
        max_instances=raw["max_instances"],
        placements=tuple(MigPlacement(start=p["start"], size=p["size"]) for p in raw["placements"]),
        memory_gib=raw.get("memory_gib"),
        profile_id=raw.get("profile_id"),
        uncertain=bool(raw.get("uncertain", False)),
    )


def _mig_model(raw: dict[str, Any]) -> GpuModelSpec:
    source = raw.get("source", "")
    return GpuModelSpec(
        name=raw["model"],
        aliases=tuple(raw.get("aliases") or ()),
        memory_gib=float(raw["memory_gib"]),
        compute_slices=raw["compute_slices"],
        memory_slices=raw["memory_slices"],
        max_gpu_instances=raw["max_gpu_instances"],
        profiles=tuple(_profile(p) for p in raw["profiles"]),
        uncertain=bool(raw.get("uncertain", False)),
        source=source if isinstance(source, str) else json.dumps(source),
    )


def _plain_model(raw: dict[str, Any], known: dict[str, GpuModelSpec]) -> GpuModelSpec:
    """A model of ``gpu_models.json``: without MIG, or with the MIG geometry of the model named by
    ``mig_profiles_of`` (another product with the same profile table, e.g. the PCIe card of an SXM GPU:
    not an alias, so that a request for one is never placed on the other)."""
    geometry: dict[str, Any] = {}
    if raw.get("mig_profiles_of"):
        base = known.get(str(raw["mig_profiles_of"]).lower())
        if base is None:
            raise KeyError(f"mig_profiles_of: unknown GPU model '{raw['mig_profiles_of']}'")
        geometry = {
            "compute_slices": base.compute_slices,
            "memory_slices": base.memory_slices,
            "max_gpu_instances": base.max_gpu_instances,
            "profiles": base.profiles,
        }
    return GpuModelSpec(
        name=raw["name"],
        aliases=tuple(raw.get("aliases") or ()),
        memory_gib=float(raw["memory_gib"]),
        uncertain=bool(raw.get("uncertain", False)),
        source=raw.get("source", ""),
        **geometry,
    )


def _model(raw: dict[str, Any], known: dict[str, GpuModelSpec]) -> GpuModelSpec:
    """A model entry in either format: with its own MIG ``profiles`` (``mig_profiles.json``) or not."""
    return _mig_model(raw) if "profiles" in raw else _plain_model(raw, known)


def _topology(raw: dict[str, Any], model: str) -> ReferenceTopology:
    numa = raw.get("numa", {})
    uncertain = bool(raw.get("uncertain") or numa.get("uncertain"))
    best: dict[tuple[int, int], TopologyLink] = {}
    for link in raw.get("pcie_links", []) + raw["links"]:
        a, b = sorted((int(link["a"]), int(link["b"])))
        # NVLink entries come last and override the PCIe class of the same pair.
        best[(a, b)] = TopologyLink(a=a, b=b, kind=link["type"], uncertain=bool(link.get("uncertain", False)))
    return ReferenceTopology(
        name=raw["name"],
        gpu_model=model,
        gpus=tuple(TopologyGpu(index=g["index"], numa=g.get("numa_node", 0)) for g in raw["gpus"]),
        links=tuple(best[k] for k in sorted(best)),
        uncertain=uncertain,
        source=str(raw.get("source", "")),
    )


def load_catalog(directory: Path) -> HardwareCatalog:
    """Read ``mig_profiles.json``, ``topologies.json`` and ``gpu_models.json`` from ``directory``."""
    mig = json.loads((directory / "mig_profiles.json").read_text())
    topo = json.loads((directory / "topologies.json").read_text())
    extra = json.loads((directory / "gpu_models.json").read_text())
    models = [_mig_model(m) for m in mig["models"]]
    known = {m.name.lower(): m for m in models}
    models += [_plain_model(m, known) for m in extra["models"]]
    topology_models: dict[str, str] = extra["topology_models"]
    topologies = [
        _topology(t, topology_models[t["name"]]) for t in topo["topologies"] if t["name"] in topology_models
    ]
    return HardwareCatalog(models=tuple(models), topologies=tuple(topologies))


def _where(loc: tuple[int | str, ...]) -> str:
    """``models[0].memory_gib`` from a location path."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _entries(raw: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The list of mappings under ``key`` of a user catalog (none when absent)."""
    found = raw.get(key) or []
    if not isinstance(found, list) or not all(isinstance(e, dict) for e in found):
        raise InputError(f"{key}: expected a list of mappings")
    return found


def _entry(key: str, index: int, build: Callable[[], _T]) -> _T:
    """``build()``, with an error naming the entry (``models[2].memory_gib: ...``) when it fails."""
    try:
        return build()
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise InputError(f"{_where((key, index, *first['loc']))}: {first['msg']}") from None
    except KeyError as exc:
        what = str(exc.args[0])
        raise InputError(
            f"{key}[{index}].{what}" if ":" in what else f"{key}[{index}].{what}: field required"
        ) from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{key}[{index}]: {exc}") from None


def extend_catalog(base: HardwareCatalog, path: Path) -> HardwareCatalog:
    """``base`` with the GPU models and reference topologies of the user catalog file ``path`` (YAML or
    JSON: ``models`` in the format of ``gpu_models.json`` or ``mig_profiles.json``, ``topologies`` in the
    format of ``topologies.json`` with a ``gpu_model``). A name or alias already known is an error: a
    user entry adds a model, it never changes what another name means."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read the hardware catalog: {exc}") from None
    if not isinstance(raw, dict) or not set(raw) <= {"models", "topologies"}:
        raise InputError(f"{path}: expected a mapping with 'models' and/or 'topologies'")
    known = {key.lower(): m for m in base.models for key in (m.name, *m.aliases)}
    try:
        models = [
            _entry("models", i, partial(_model, m, known)) for i, m in enumerate(_entries(raw, "models"))
        ]
        names = {key.lower() for m in (*base.models, *models) for key in (m.name, *m.aliases)}
        topologies = []
        for i, t in enumerate(_entries(raw, "topologies")):
            if str(t.get("gpu_model", "")).lower() not in names:
                raise InputError(f"topologies[{i}].gpu_model: unknown GPU model '{t.get('gpu_model')}'")
            topologies.append(_entry("topologies", i, partial(_topology, t, str(t["gpu_model"]))))
        return HardwareCatalog(models=(*base.models, *models), topologies=(*base.topologies, *topologies))
    except ValidationError as exc:
        raise InputError(f"{path}: {exc.errors(include_url=False)[0]['msg']}") from None
    except InputError as exc:
        raise InputError(f"{path}: {exc}") from None


@cache
def _catalog(user_file: str | None) -> HardwareCatalog:
    """The bundled catalog, extended by ``user_file`` (cached: catalogs are immutable)."""
    if user_file is None:
        return load_catalog(data_dir() / "hardware")
    return extend_catalog(_catalog(None), Path(user_file))


def default_catalog() -> HardwareCatalog:
    """The catalog bundled with gpuplan, extended by the user catalog file ``GPUPLAN_CATALOG`` names."""
    return _catalog(os.environ.get(CATALOG_ENV) or None)
