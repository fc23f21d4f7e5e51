"""The one quota charge (:mod:`gpuplan.models.rules.quota`) against a naive computation with fractions, on
random catalogs: the unit divides every share, a GPU use charges exactly its GPU-equivalents, a sum of
charges is within a decimal quota exactly when its GPU-equivalents are, and a quota handed on in units
keeps every unit."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.models import GpuModelSpec, HardwareCatalog, MigPlacement, MigProfile
from gpuplan.models.rules.quota import (
    gpu_equivalents,
    gpus_for_units,
    limit_units,
    quota_unit,
    use_units,
)


def _model(i: int, slices: int) -> GpuModelSpec:
    """A GPU of ``slices`` compute and memory slices with a profile of every size, each at start 0."""
    profiles = tuple(
        MigProfile(
            name=f"{size}g",
            compute_slices=size,
            memory_slices=size,
            max_instances=slices // size,
            placements=(MigPlacement(start=0, size=size),),
        )
        for size in range(1, slices + 1)
    )
    return GpuModelSpec(
        name=f"gpu-{i}",
        memory_gib=8.0 * slices,
        compute_slices=slices,
        memory_slices=slices,
        max_gpu_instances=slices,
        profiles=profiles,
    )


catalogs = st.lists(st.integers(1, 8), min_size=1, max_size=5).map(
    lambda slices: HardwareCatalog(models=tuple(_model(i, s) for i, s in enumerate(slices)))
)


#: A GPU use (kind, milli, MIG profile, GPU model) and its GPU-equivalents computed naively.
Use = tuple[str, int | None, str | None, GpuModelSpec, Fraction]


@st.composite
def uses(draw: st.DrawFn, catalog: HardwareCatalog) -> Use:
    """One GPU use on a GPU of the catalog, and its GPU-equivalents computed naively."""
    spec = draw(st.sampled_from(catalog.models))
    kind = draw(st.sampled_from(["whole", "fraction", "mig"]))
    if kind == "whole":
        return kind, None, None, spec, Fraction(1)
    if kind == "fraction":
        milli = draw(st.integers(1, 999))
        return kind, milli, None, spec, Fraction(milli, 1000)
    prof = draw(st.sampled_from(spec.profiles))
    return kind, None, prof.name, spec, Fraction(prof.compute_slices, spec.compute_slices)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), catalog=catalogs)
def test_the_charge_is_the_naive_fraction(data: st.DataObject, catalog: HardwareCatalog) -> None:
    unit = quota_unit(catalog)
    for spec in catalog.models:
        assert unit % (1000 * spec.compute_slices) == 0
    for kind, milli, profile, spec, naive in data.draw(st.lists(uses(catalog), min_size=1, max_size=6)):
        assert Fraction(use_units(kind, milli, profile, spec, unit), unit) == naive
        assert gpu_equivalents(kind, milli, profile, spec if kind == "mig" else None) == naive


decimals = st.integers(0, 10**7).map(lambda n: float(Fraction(n, 10**5)))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), catalog=catalogs, gpus=decimals)
def test_a_sum_is_within_a_decimal_quota_exactly_when_its_fraction_is(
    data: st.DataObject, catalog: HardwareCatalog, gpus: float
) -> None:
    unit = quota_unit(catalog)
    drawn = data.draw(st.lists(uses(catalog), max_size=8))
    used = sum(use_units(kind, milli, profile, spec, unit) for kind, milli, profile, spec, _ in drawn)
    naive = sum((n for *_, n in drawn), Fraction(0))
    limit = limit_units(gpus, unit)
    assert limit is not None
    assert (used <= limit) == (naive <= Fraction(repr(gpus)))
    assert limit_units(float("inf"), unit) is None


@settings(max_examples=300, deadline=None)
@given(catalog=catalogs, units=st.integers(0, 10**6 * 840_000))
def test_a_quota_handed_on_in_units_keeps_every_unit(catalog: HardwareCatalog, units: int) -> None:
    unit = quota_unit(catalog)
    assert limit_units(gpus_for_units(units, unit), unit) == units
