"""Team quotas: the unit their sums are kept in, what one GPU use charges, which quota charges which
replica on which GPU, and a quota's limit.

A quota counts GPU-equivalents: a whole GPU is 1, a fraction its milli-GPU over
:data:`~gpuplan.models.hardware.MILLI_PER_GPU`, a MIG instance its profile's compute slices over its GPU
model's. Every part keeps the sums as integers, in :func:`quota_unit` units per GPU: a number of units
in which every one of those shares is whole for the catalog at hand (28,000 for the bundled catalog; a
user GPU of 3, 5 or 6 compute slices makes it larger), so the solvers' integer sums and the validator's
exact ones are the same numbers, and a limit is exact from the quota's decimal form (:func:`limit_units`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction

from gpuplan.models.hardware import MILLI_PER_GPU, GpuModelSpec, HardwareCatalog
from gpuplan.models.policy import Quota


def quota_unit(catalog: HardwareCatalog) -> int:
    """Quota units per GPU for ``catalog``: :data:`MILLI_PER_GPU` times the least common multiple of
    every model's compute slices, so a fraction and every MIG profile of every model charge a whole
    number of units."""
    return MILLI_PER_GPU * math.lcm(*(m.compute_slices for m in catalog.models))


def _exactly(numerator: int, denominator: int) -> int:
    """``numerator / denominator``, which must be a whole number (a unit of another catalog is an error,
    never a rounded charge)."""
    whole, rest = divmod(numerator, denominator)
    if rest:
        raise ValueError(f"the quota unit does not divide {numerator}/{denominator}: not this catalog's unit")
    return whole


def use_units(
    kind: str, milli: int | None, mig_profile: str | None, spec: GpuModelSpec | None, unit: int
) -> int:
    """Units (``unit`` per GPU, :func:`quota_unit`) that one GPU use of a shape of ``kind`` charges on a
    GPU of model ``spec`` (read for a MIG instance only): a whole GPU ``unit``, a fraction of ``milli``
    milli-GPU its share, a MIG instance of ``mig_profile`` its compute slices' share of the model's (a
    CPU-only shape uses no GPU: 0)."""
    if kind == "whole":
        return unit
    if kind == "fraction":
        assert milli is not None
        return _exactly(unit * milli, MILLI_PER_GPU)
    if kind == "mig":
        assert mig_profile is not None and spec is not None
        return _exactly(unit * spec.profile(mig_profile).compute_slices, spec.compute_slices)
    return 0


def gpu_equivalents(
    kind: str, milli: int | None, mig_profile: str | None, spec: GpuModelSpec | None
) -> Fraction:
    """The GPU-equivalents one GPU use charges, exactly (:func:`use_units` in a unit of the GPU model
    ``spec`` alone, which is read for a MIG instance only)."""
    unit = MILLI_PER_GPU * (1 if spec is None else spec.compute_slices)
    return Fraction(use_units(kind, milli, mig_profile, spec, unit), unit)


def quota_model(q: Quota, catalog: HardwareCatalog) -> str | None:
    """The catalog's name of the GPU model quota ``q`` is for (``None``: every model)."""
    return None if q.gpu_model is None else catalog.canonical(q.gpu_model)


def charges_replica(q: Quota, team: str, preemptible: bool) -> bool:
    """Whether quota ``q`` counts a replica of ``team``: its own team's work, except preemptible work under
    a borrowing quota (borrowed capacity goes to preemptible work)."""
    return team == q.team and not (q.borrow and preemptible)


def on_borrowed_capacity(quotas: Iterable[Quota], team: str, preemptible: bool) -> bool:
    """Whether a replica of ``team`` runs on borrowed capacity: it is preemptible work of a team whose
    quota borrows (no borrowing quota counts it: :func:`charges_replica`)."""
    return preemptible and any(q.team == team and q.borrow for q in quotas)


def charges_gpu(q: Quota, model: str | None, pool: str | None, gpu_model: str) -> bool:
    """Whether quota ``q``, for GPU model ``model`` (:func:`quota_model`), counts a GPU of (catalog name)
    ``gpu_model`` on a node of ``pool``: its pool and GPU model, when it names them."""
    return (q.pool is None or pool == q.pool) and (model is None or gpu_model == model)


def charges(
    q: Quota, model: str | None, *, team: str, preemptible: bool, pool: str | None, gpu_model: str
) -> bool:
    """Whether quota ``q`` (for GPU model ``model``, :func:`quota_model`) counts a GPU use of a replica of
    ``team`` (``preemptible`` or not) on a GPU of ``gpu_model`` on a node of ``pool``."""
    return charges_replica(q, team, preemptible) and charges_gpu(q, model, pool, gpu_model)


def fleet_wide(q: Quota) -> bool:
    """Whether quota ``q`` counts every GPU of the fleet (it names neither a GPU model nor a pool)."""
    return q.gpu_model is None and q.pool is None


def exact_gpus(gpus: float) -> Fraction | None:
    """GPU-equivalents given as a decimal (a quota, or an amount added to one), exactly from the decimal
    form: 0.3 means 3/10, not the nearest float. ``None``: infinite."""
    return None if math.isinf(gpus) else Fraction(repr(gpus))


def limit_units(gpus: float, unit: int) -> int | None:
    """A quota of ``gpus`` GPU-equivalents in units (``unit`` per GPU), exactly from its decimal form
    (:func:`exact_gpus`), rounded down: a sum of whole units is within it exactly when the
    GPU-equivalents are within the decimal quota. ``None``: an infinite quota, which never binds."""
    exact = exact_gpus(gpus)
    return None if exact is None else math.floor(exact * unit)


def gpus_for_units(units: int, unit: int) -> float:
    """The quota, in GPU-equivalents, whose :func:`limit_units` is exactly ``units``: how a solver hands
    the rest of a quota to a sub-problem (a part of the fleet, a neighbourhood) without losing a unit to
    float rounding."""
    gpus = float(Fraction(units, unit))
    while (limit_units(gpus, unit) or 0) < units:
        gpus = math.nextafter(gpus, math.inf)
    assert limit_units(gpus, unit) == units
    return gpus
