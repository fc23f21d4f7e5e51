"""The demand of each period of a capacity plan over time: the growth file (:class:`GrowthFile`), its
periods, period length and budget (the command's flags win over the file), checked against the inputs
(every error names its field), and today's workloads (running and waiting) grown period by period.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.capacity import MAX_GROWTH, Growth, GrowthFile
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.workload import Workload
from gpuplan.planner.capacity.scenarios import grow
from gpuplan.planner.io.files import describe, read_structured

#: Periods and period length (days) without a flag or a value in the growth file: four quarters.
DEFAULT_PERIODS, DEFAULT_PERIOD_DAYS = 4, 91


def load_growth(path: Path) -> GrowthFile:
    """The growth file (YAML/JSON); a bad one is an input error naming the field."""
    raw = read_structured(path)
    try:
        return GrowthFile.model_validate(raw)
    except ValidationError as exc:
        raise InputError(f"{path}: {describe(exc, raw, GrowthFile)}") from None


@dataclass(frozen=True)
class Horizon:
    """The periods of a plan, their length in days and the budget of each (``None``: no cap)."""

    periods: int
    period_days: int
    budget: tuple[float | None, ...]

    @property
    def hours(self) -> float:
        """Hours in one period."""
        return 24.0 * self.period_days


def horizon(
    growth: GrowthFile,
    where: str,
    periods: int | None = None,
    period_days: int | None = None,
    budget: float | None = None,
) -> Horizon:
    """The periods, their length and budgets: the flags given, else the growth file's, else four
    quarters without a budget. A budget list must have one amount per period."""
    n = periods or growth.periods or DEFAULT_PERIODS
    days = period_days or growth.period_days or DEFAULT_PERIOD_DAYS
    if budget is not None:
        return Horizon(n, days, (budget,) * n)
    given = growth.budget
    if given is None:
        return Horizon(n, days, (None,) * n)
    if isinstance(given, tuple):
        if len(given) != n:
            raise InputError(f"{where}: field budget: {len(given)} amounts for {n} periods (one per period)")
        return Horizon(n, days, given)
    return Horizon(n, days, (given,) * n)


def _rates(value: float | tuple[float, ...], periods: int, field: str, where: str) -> tuple[float, ...]:
    """The growth rate of each period after today: one number for all, or a list of ``periods - 1``."""
    if not isinstance(value, tuple):
        return (value,) * (periods - 1)
    if len(value) != periods - 1:
        raise InputError(
            f"{where}: field {field}: {len(value)} rates for {periods - 1} periods after today (one rate "
            "per period from period 1, or one number for every period)"
        )
    return value


def _check(growth: GrowthFile, inp: PlanningInput, periods: int, where: str) -> None:
    """Every team, tier and workload the file names exists, and each workload's counts fit."""
    known = {
        "teams": {w.team for w in inp.workloads} | set(inp.policy.teams),
        "tiers": {t.name for t in inp.policy.tiers},
        "workloads": set(inp.workload_by_id),
    }
    for name, given in (("teams", growth.teams), ("tiers", growth.tiers), ("workloads", growth.workloads)):
        unknown = sorted(set(given) - known[name])
        if unknown:
            raise InputError(
                f"{where}: field {name}.{unknown[0]}: unknown {name[:-1]} (known: "
                f"{', '.join(sorted(known[name])) or 'none'})"
            )
    for wid, counts in growth.workloads.items():
        if len(counts) != periods:
            raise InputError(
                f"{where}: field workloads.{wid}: {len(counts)} replica counts for {periods} periods (one "
                "per period, today first)"
            )
        running = len(inp.workload_by_id[wid].running_on)
        if min(counts) < running:
            raise InputError(
                f"{where}: field workloads.{wid}: {min(counts)} replicas in a period, fewer than the "
                f"{running} it runs now"
            )


def demand_per_period(
    inp: PlanningInput, growth: GrowthFile, periods: int, where: str, catalog: HardwareCatalog
) -> list[PlanningInput]:
    """The planning input of each period: today's workloads (period 0 as given), grown by the compounded
    team and tier rates (:func:`~planner.capacity.scenarios.grow`: rounded half up per group of equal
    factors, spread by largest remainder), explicit counts winning; a workload with no replicas in a
    period is left out of it."""
    _check(growth, inp, periods, where)
    teams = {k: _rates(v, periods, f"teams.{k}", where) for k, v in growth.teams.items()}
    tiers = {k: _rates(v, periods, f"tiers.{k}", where) for k, v in growth.tiers.items()}
    out = []
    for p in range(periods):
        factors = Growth(
            teams={k: _compound(r[:p], f"teams.{k}", where) for k, r in teams.items()},
            tiers={k: _compound(r[:p], f"tiers.{k}", where) for k, r in tiers.items()},
        )
        # Workloads with explicit counts are left out of the rates' rounding groups.
        rated = iter(grow(tuple(w for w in inp.workloads if w.id not in growth.workloads), factors))
        grown: list[Workload] = []
        for w in inp.workloads:
            n = growth.workloads[w.id][p] if w.id in growth.workloads else None
            if n is None:
                grown.append(next(rated))
            elif n:
                grown.append(w if n == w.replicas else w.model_copy(update={"replicas": n}))
        data = {"cluster": inp.cluster, "workloads": tuple(grown), "policy": inp.policy}
        try:
            out.append(PlanningInput.model_validate(data, context={"catalog": catalog}))
        except ValidationError as exc:
            msg = str(exc.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
            raise InputError(f"{where}: period {p}: {msg}") from None
    return out


def _compound(rates: tuple[float, ...], field: str, where: str) -> float:
    """The factor of rates applied one after the other."""
    factor = 1.0
    for r in rates:
        factor *= 1.0 + r
    if factor > MAX_GROWTH:
        raise InputError(f"{where}: field {field}: the rates grow demand more than {MAX_GROWTH:g} times")
    return factor
