"""The MIG manager's configurations as device truth: the GPU Operator's mig-parted ConfigMap (``kubectl get
configmap -n gpu-operator default-mig-parted-config -o json``, or its ``config.yaml`` alone), and the
config gpuplan's export names on a node (annotation :data:`GPUPLAN_MIG_CONFIG`). A node's
``nvidia.com/mig.config`` label names one of its ``mig-configs``; each entry of that config says which GPU
indices (``devices``) are in MIG mode with which devices (``mig-devices``, counts per profile).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpuplan.models.base import InputError
from gpuplan.planner.io.files import read_structured
from gpuplan.planner.io.importers.kubernetes.conventions import _mig_profile

#: The key of the mig-parted document in the GPU Operator's ConfigMap (the MIG manager reads this one).
CONFIG_KEY = "config.yaml"


@dataclass(frozen=True)
class MigPartedConfig:
    """A mig-parted document: its ``mig-configs`` by name and, when read from a ConfigMap, that ConfigMap's
    name, namespace and the document's text as it stands (a patch tests it before it replaces it)."""

    configs: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)
    name: str | None = None
    namespace: str | None = None
    text: str = ""
    document: Mapping[str, Any] = field(default_factory=dict)


def parse_mig_parted(text: str, where: str) -> dict[str, Any]:
    """A mig-parted ``v1`` document (``version``, ``mig-configs``) from YAML text."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{where}: not YAML ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("mig-configs"), dict):
        raise InputError(f"{where}: expected a mig-parted document with 'mig-configs'")
    for name, entries in doc["mig-configs"].items():
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise InputError(f"{where}: mig-configs.{name}: expected a list of entries")
    return doc


def load_mig_parted(path: Path) -> MigPartedConfig:
    """The GPU Operator's mig-parted ConfigMap (JSON or YAML, as ``kubectl get configmap -o json`` prints
    it; its ``data.config.yaml``) or a bare mig-parted document."""
    raw = read_structured(Path(path))
    where = str(path)
    if isinstance(raw, dict) and raw.get("kind") == "ConfigMap":
        meta = raw.get("metadata") or {}
        text = (raw.get("data") or {}).get(CONFIG_KEY)
        if not isinstance(text, str):
            raise InputError(f"{where}: data.{CONFIG_KEY}: missing (the MIG manager reads that key)")
        doc = parse_mig_parted(text, f"{where}: data.{CONFIG_KEY}")
        return MigPartedConfig(
            configs={k: tuple(v) for k, v in doc["mig-configs"].items()},
            name=str(meta.get("name") or "") or None,
            namespace=str(meta.get("namespace") or "") or None,
            text=text,
            document=doc,
        )
    if isinstance(raw, dict) and isinstance(raw.get("mig-configs"), dict):
        text = Path(path).read_text()
        doc = parse_mig_parted(text, where)
        return MigPartedConfig(
            configs={k: tuple(v) for k, v in doc["mig-configs"].items()}, text=text, document=doc
        )
    raise InputError(f"{where}: expected the GPU Operator's mig-parted ConfigMap or a mig-parted document")


def annotated_config(
    annotations: Mapping[str, Any], key: str, where: str
) -> tuple[str, tuple[Any, ...]] | None:
    """The mig-parted config (name, entries) gpuplan's export wrote on a node (annotation ``key``)."""
    text = annotations.get(key)
    if not text:
        return None
    try:
        raw = json.loads(str(text))
    except ValueError:
        raise InputError(f"{where}: annotation {key}: not JSON") from None
    if (
        not isinstance(raw, dict)
        or not isinstance(raw.get("name"), str)
        or not isinstance(raw.get("entries"), list)
    ):
        raise InputError(f"{where}: annotation {key}: expected {{name, entries}}")
    return raw["name"], tuple(raw["entries"])


def gpu_counts(entries: Sequence[Mapping[str, Any]], gpus: int, where: str) -> dict[int, Counter[str] | None]:
    """Per GPU index (``0 .. gpus-1``) the MIG devices a config gives it (a profile count), or ``None``
    for a GPU it puts out of MIG mode; a GPU no entry names is left out (mig-parted leaves it as it is).
    A later entry naming the same GPU wins, as mig-parted applies them in order. ``device-filter``
    entries are taken to match (a node's GPUs are of one model)."""
    out: dict[int, Counter[str] | None] = {}
    for i, entry in enumerate(entries):
        devices = entry.get("devices")
        if devices == "all":
            indices: list[int] = list(range(gpus))
        elif isinstance(devices, list) and all(
            isinstance(d, int) and not isinstance(d, bool) for d in devices
        ):
            indices = list(devices)
        else:
            raise InputError(f"{where}[{i}].devices: expected 'all' or a list of GPU indices")
        bad = [d for d in indices if not 0 <= d < gpus]
        if bad:
            raise InputError(f"{where}[{i}].devices: GPU {bad[0]} is not one of the node's {gpus}")
        enabled = entry.get("mig-enabled")
        if not isinstance(enabled, bool):
            raise InputError(f"{where}[{i}].mig-enabled: expected true or false")
        counts: Counter[str] | None = None
        if enabled:
            devs = entry.get("mig-devices") or {}
            if not isinstance(devs, dict):
                raise InputError(f"{where}[{i}].mig-devices: expected a mapping of profile to count")
            counts = Counter()
            for prof, n in devs.items():
                if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                    raise InputError(f"{where}[{i}].mig-devices.{prof}: '{n}' is not a count")
                if n:
                    counts[_mig_profile(str(prof))] += n
        for d in indices:
            out[d] = None if counts is None else Counter(counts)
    return out
