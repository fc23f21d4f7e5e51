"""Quota charges on a user catalog whose GPUs have 3, 5 and 6 compute slices (issue 39).

The bundled catalog's MIG geometries (4 and 7 compute slices) let a fixed quota unit of 28,000 per GPU
charge every share exactly; a GPU of 3 or 6 slices does not (28,000 / 3 is no whole number), so CP-SAT
used to round a third of a GPU down and make plans the validator rejects. The unit is now the catalog's
(:func:`gpuplan.models.rules.quota.quota_unit`): CP-SAT's formulation, the placement kernel and the
validator charge the same exact amounts, and a quota that binds at a third, fifth or sixth of a GPU is
kept by every back-end and judged the same way by the validator.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.models import HardwareCatalog, Plan, PlanningInput, default_catalog
from gpuplan.models.catalog import extend_catalog
from gpuplan.models.rules.quota import quota_unit, use_units
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validation.validate import validate_plan
from gpuplan.solvers.formulation.constraints import charged_units
from gpuplan.solvers.placement import FirstFitScorer, Placer
from gpuplan.solvers.problem import Running
from tests._factories import node_data

NOW = datetime(2026, 3, 1, tzinfo=UTC)
SOLVERS = ["cpsat", "greedy-fgd"]


def _profiles(slices: int) -> list[dict[str, Any]]:
    """MIG profiles of a GPU of ``slices`` compute and memory slices: every size that divides it, at
    the starts that are multiples of its size."""
    return [
        {
            "name": f"{size}g.{16 * size}gb",
            "compute_slices": size,
            "memory_slices": size,
            "memory_gib": 16 * size,
            "max_instances": slices // size,
            "placements": [{"start": s, "size": size} for s in range(0, slices, size)],
        }
        for size in range(1, slices + 1)
        if slices % size == 0
    ]


#: A user catalog (``mig_profiles.json`` format): GPUs of 3, 5 and 6 compute slices.
USER_CATALOG = {
    "models": [
        {
            "model": name,
            "memory_gib": 16 * slices,
            "compute_slices": slices,
            "memory_slices": slices,
            "max_gpu_instances": slices,
            "profiles": _profiles(slices),
        }
        for name, slices in (("TRI-48GB", 3), ("PENTA-80GB", 5), ("HEXA-96GB", 6))
    ]
}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> HardwareCatalog:
    path = tmp_path_factory.mktemp("catalog") / "gpus.yaml"
    path.write_text(yaml.safe_dump(USER_CATALOG, sort_keys=False))
    return extend_catalog(default_catalog(), Path(path))


def _naive(use: Any, model: str, catalog: HardwareCatalog) -> Fraction:
    """GPU-equivalents of one GPU entry, computed directly with fractions."""
    if use.mig_profile is not None:
        spec = catalog.model(model)
        return Fraction(spec.profile(use.mig_profile).compute_slices, spec.compute_slices)
    return Fraction(use.milli, 1000) if use.milli is not None else Fraction(1)


def _inp(
    catalog: HardwareCatalog,
    nodes: list[dict[str, Any]],
    work: list[dict[str, Any]],
    gpus: float | None,
    **quota: Any,
) -> PlanningInput:
    """The input of ``nodes`` and ``work`` on ``catalog``, with a quota of ``gpus`` for team ``t``."""
    policy = {"quotas": [{"team": "t", "gpus": gpus, **quota}]} if gpus is not None else {}
    return PlanningInput.model_validate(
        {"cluster": {"nodes": nodes}, "workloads": work, "policy": policy}, context={"catalog": catalog}
    )


def _quota_broken(plan: Plan, inp: PlanningInput, catalog: HardwareCatalog) -> bool:
    return any(v.rule == "quota" for v in validate_plan(plan, inp, catalog))


def test_the_unit_is_the_catalogs_and_divides_every_share(catalog: HardwareCatalog) -> None:
    unit = quota_unit(catalog)
    assert unit == 1000 * math.lcm(3, 4, 5, 6, 7) == 420_000
    assert quota_unit(default_catalog()) == 28_000  # the bundled catalog's, as before
    for spec in catalog.models:
        for prof in spec.profiles:
            units = use_units("mig", None, prof.name, spec, unit)
            assert Fraction(units, unit) == Fraction(prof.compute_slices, spec.compute_slices)
    with pytest.raises(ValueError, match="quota unit"):
        use_units("mig", None, "1g.16gb", catalog.model("TRI-48GB"), 28_000)


def test_cpsat_the_kernel_and_the_validator_charge_the_same(catalog: HardwareCatalog) -> None:
    """One plan of CP-SAT on all three GPUs (MIG instances of every size, fractions, whole GPUs): the
    formulation's and the kernel's charges are the naive fractions exactly, and the validator accepts a
    quota just above the plan's use and rejects one just below."""
    mig = [
        {"index": i, "model": model, "mig": {"instances": []}}
        for i, model in enumerate(("TRI-48GB", "PENTA-80GB", "HEXA-96GB"))
    ]
    nodes = [node_data("mig", gpus=mig), node_data("plain", "HEXA-96GB", 2)]
    work: list[dict[str, Any]] = [
        {"id": "tri", "team": "t", "mig_profile": "1g.16gb", "gpu_models": ["TRI-48GB"]},
        {"id": "penta", "team": "t", "mig_profile": "1g.16gb", "gpu_models": ["PENTA-80GB"], "replicas": 3},
        {"id": "hexa1", "team": "t", "mig_profile": "1g.16gb", "gpu_models": ["HEXA-96GB"]},
        {"id": "hexa2", "team": "t", "mig_profile": "2g.32gb", "gpu_models": ["HEXA-96GB"]},
        {"id": "hexa3", "team": "t", "mig_profile": "3g.48gb", "gpu_models": ["HEXA-96GB"]},
        {"id": "frac", "team": "t", "gpu_milli": 333, "gpu_models": ["HEXA-96GB"]},
        {"id": "whole", "team": "t", "gpus": 1, "gpu_models": ["HEXA-96GB"]},
    ]
    inp = _inp(catalog, nodes, work, None)
    plan = make_plan(inp, solver="cpsat", catalog=catalog, now=NOW, time_limit_s=10)
    assert len(plan.assignments) == 9
    problem = compile_problem(_inp(catalog, nodes, work, 1000.0), catalog, NOW)
    (q,) = problem.policy.quotas
    unit = quota_unit(catalog)
    placer = Placer(problem.nodes, catalog, FirstFitScorer(), policy=problem.policy)
    by_key = {r.key: r for r in problem.requests}
    node_pos = {n.name: i for i, n in enumerate(problem.nodes)}
    naive = formulation = kernel = Fraction(0)
    for a in plan.assignments:
        req, n = by_key[(a.workload, a.replica)], node_pos[a.node]
        models = {g.index: g.model for g in problem.nodes[n].gpus}
        naive += sum((_naive(g, models[g.index], catalog) for g in a.gpus), Fraction(0))
        where = Running(a.node, a.gpus, a.alternative)
        formulation += Fraction(charged_units(problem, q, req, n, where, unit), unit)
        info = placer.infos[n]
        positions = [info.position_of[g.index] for g in a.gpus]
        (units,) = placer.rules.charges(info, req.shapes[a.alternative], positions, placer.rules.demand(req))
        kernel += Fraction(units, unit)
    assert naive == formulation == kernel
    instances = Fraction(1, 3) + 3 * Fraction(1, 5) + Fraction(1 + 2 + 3, 6)
    assert naive == instances + Fraction(333, 1000) + 1
    above, below = math.ceil(naive * 10**5) / 10**5, math.floor(naive * 10**5 - 1) / 10**5
    assert not _quota_broken(plan, _inp(catalog, nodes, work, above), catalog)
    assert _quota_broken(plan, _inp(catalog, nodes, work, below), catalog)


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize(("model", "share"), [("TRI-48GB", 3), ("PENTA-80GB", 5), ("HEXA-96GB", 6)])
def test_a_quota_that_binds_at_a_slice_is_kept_and_judged_alike(
    catalog: HardwareCatalog, solver: str, model: str, share: int
) -> None:
    """A team asks for three 1-slice instances of a GPU of ``share`` slices; its quota for that model is
    two slices' GPU-equivalents, as a decimal just above (or exactly, for a fifth) and just below: the
    plan places two, respectively one, and the validator rejects the two-instance plan under the lower
    quota."""
    nodes = [node_data("n", model, 1, mig={0: []})]
    work: list[dict[str, Any]] = [{"id": "w", "team": "t", "mig_profile": "1g.16gb", "replicas": 3}]
    two = Fraction(2, share)
    above, below = math.ceil(two * 10**5) / 10**5, math.floor(two * 10**5 - 1) / 10**5
    plans = {}
    for gpus in (above, below):
        inp = _inp(catalog, nodes, work, gpus, gpu_model=model)
        plans[gpus] = make_plan(inp, solver=solver, catalog=catalog, now=NOW, time_limit_s=5)
    assert len(plans[above].assignments) == 2
    assert len(plans[below].assignments) == 1
    assert _quota_broken(plans[above], _inp(catalog, nodes, work, below, gpu_model=model), catalog)
    assert not _quota_broken(plans[below], _inp(catalog, nodes, work, below, gpu_model=model), catalog)
