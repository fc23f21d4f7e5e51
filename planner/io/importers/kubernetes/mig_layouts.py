"""The MIG layouts of a node's GPUs: from the MIG manager's ``nvidia.com/mig.config`` (``all-disabled``,
``all-<profile>``, ``all-balanced``), or else from the ``mig-<profile>`` devices the node offers, spread
over its MIG GPUs at valid start positions."""

from __future__ import annotations

import re
from collections import Counter

from gpuplan.models.base import InputError
from gpuplan.models.cluster import MigInstance, mig_layout_problems
from gpuplan.models.hardware import GpuModelSpec
from gpuplan.planner.io.importers.kubernetes.conventions import MIG_CONFIG, _mig_profile


def _fit_layout(spec: GpuModelSpec, profiles: list[str]) -> tuple[MigInstance, ...] | None:
    """A valid placement of ``profiles`` on one GPU of ``spec`` (largest first, lowest starts), if any."""
    order = sorted(profiles, key=lambda p: (-spec.profile_map[p].memory_slices, p))

    def place(i: int, taken: tuple[MigInstance, ...]) -> tuple[MigInstance, ...] | None:
        if i == len(order):
            return taken
        prof = spec.profile_map[order[i]]
        for start in sorted(prof.starts):
            trial = (*taken, MigInstance(profile=prof.name, start=start))
            if not mig_layout_problems(spec, trial):
                found = place(i + 1, trial)
                if found is not None:
                    return found
        return None

    found = place(0, ())
    return None if found is None else tuple(sorted(found, key=lambda i: i.start))


def _max_layout(spec: GpuModelSpec, profile: str) -> tuple[MigInstance, ...]:
    """As many instances of ``profile`` as one GPU of ``spec`` holds (MIG manager's ``all-<profile>``)."""
    best: tuple[MigInstance, ...] = ()
    for n in range(1, spec.profile_map[profile].max_instances + 1):
        found = _fit_layout(spec, [profile] * n)
        if found is None:
            break
        best = found
    return best


def _balanced(spec: GpuModelSpec) -> list[str]:
    """MIG manager's ``all-balanced``: two of the smallest 1g profile, one 2g and (8-slice models) one 3g."""
    plain = [p for p in spec.profiles if "+" not in p.name and "-" not in p.name]
    smallest = {
        c: min((p for p in plain if p.compute_slices == c), key=lambda p: p.memory_slices, default=None)
        for c in (1, 2, 3)
    }
    out = [p.name for p in (smallest[1], smallest[1], smallest[2]) if p is not None]
    if spec.memory_slices >= 8 and smallest[3] is not None:
        out.append(smallest[3].name)
    return out


def _config_profiles(config: str, spec: GpuModelSpec) -> list[str] | None:
    """The MIG devices of one GPU under a MIG manager default configuration (``all-<profile>``,
    ``all-balanced``); ``None`` for other names."""
    if config == "all-balanced":
        return _balanced(spec)
    named = re.fullmatch(r"all-(.+)", config)
    wanted = _mig_profile(named.group(1)) if named else ""
    return [i.profile for i in _max_layout(spec, wanted)] if wanted in spec.profile_map else None


def _distribute(spec: GpuModelSpec, counts: Counter[str], gpus: int) -> list[tuple[MigInstance, ...]] | None:
    """``counts`` MIG devices spread over ``gpus`` GPUs: largest first, each on the least filled GPU where a
    valid layout still exists (``None`` if they do not fit)."""
    held: list[list[str]] = [[] for _ in range(gpus)]
    for prof in sorted(counts, key=lambda p: (-spec.profile_map[p].memory_slices, p)):
        for _ in range(counts[prof]):
            order = sorted(
                range(gpus), key=lambda g: (sum(spec.profile_map[p].memory_slices for p in held[g]), g)
            )
            target = next((g for g in order if _fit_layout(spec, [*held[g], prof]) is not None), None)
            if target is None:
                return None
            held[target].append(prof)
    return [_fit_layout(spec, h) or () for h in held]


def _mig_layouts(
    name: str, spec: GpuModelSpec, config: str, counts: Counter[str], mig_gpus: int | None
) -> list[tuple[MigInstance, ...]]:
    """The layouts of a node's MIG GPUs (mixed strategy): the default configuration the label names when
    the offered devices match it, else the offered devices spread over the MIG GPUs."""
    per_gpu = _config_profiles(config, spec)
    if per_gpu is not None and counts:
        need = Counter(per_gpu)
        multiples = {counts[p] // need[p] for p in need} if set(counts) == set(need) else set()
        k = next(iter(multiples)) if len(multiples) == 1 else 0
        if k and all(counts[p] == k * need[p] for p in need) and mig_gpus in (None, k):
            return [_fit_layout(spec, per_gpu) or ()] * k
    if not counts:
        # MIG is on but no device is offered yet (the MIG manager is still applying the configuration).
        return [(_fit_layout(spec, per_gpu) or ()) if per_gpu else ()] * (mig_gpus or 0)
    slices = sum(spec.profile_map[p].memory_slices * n for p, n in counts.items())
    low = max(
        [-(-slices // spec.memory_slices)]
        + [-(-n // spec.profile_map[p].max_instances) for p, n in counts.items()]
    )
    for gpus in [mig_gpus] if mig_gpus else range(low, sum(counts.values()) + 1):
        found = _distribute(spec, counts, gpus)
        if found is not None:
            return found
    offered = ", ".join(f"{n}x {p}" for p, n in sorted(counts.items()))
    raise InputError(
        f"node '{name}': label {MIG_CONFIG}: the MIG devices offered ({offered}) do not fit "
        f"{mig_gpus or 'its'} {spec.name} GPUs"
    )
