"""CP-SAT parameters in one place (issue 45): every ``CpSolver`` comes from
:func:`gpuplan.solvers.sat_parameters.cp_solver`, which sets exactly the parameters asked for. A scan of
the source finds any other ``CpSolver`` made, parameter set or log callback given, so that none comes back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

import pytest

from gpuplan.solvers.cpsat.solver import HINT_CONFLICT_LIMIT
from gpuplan.solvers.fleet.pricing import pattern_solver
from gpuplan.solvers.sat_parameters import cp_solver
from tests._paths import ROOT_DIR

#: What the scan reads: the code and the benchmarks.
SCANNED = ("models", "solvers", "planner", "api", "benchmarks")
#: The one module that makes CP-SAT solvers and sets their parameters.
HOME = "solvers/sat_parameters.py"
#: Names that configure a CP-SAT solver wherever they are used: its parameters (an attribute of the
#: solver, or the protobuf message) and its log callback.
CONFIGURING = frozenset({"parameters", "log_callback", "SatParameters"})
#: The solver class: made (called) or imported by name only here; a type annotation may name it.
SOLVER = "CpSolver"


def _name(node: ast.AST) -> str | None:
    """The name ``node`` uses (``x`` or ``a.b.x``: ``x``)."""
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def offences(source: str) -> list[tuple[int, str]]:
    """(line, name) of every use of a name of :data:`CONFIGURING` in ``source`` (as a name, an attribute
    or an imported name), every call of :data:`SOLVER` and every import of it by name."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        name = _name(node)
        if name in CONFIGURING:
            found.append((node.lineno, name))  # type: ignore[attr-defined]
        elif isinstance(node, ast.Call) and _name(node.func) == SOLVER:
            found.append((node.lineno, SOLVER))
        elif isinstance(node, ast.ImportFrom):
            found.extend((node.lineno, a.name) for a in node.names if a.name in {*CONFIGURING, SOLVER})
    return found


def _sources() -> Iterator[tuple[str, str]]:
    """(path from the repository, source) of every scanned module that mentions one of the names."""
    for package in SCANNED:
        for path in sorted((ROOT_DIR / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            if any(name in source for name in (*CONFIGURING, SOLVER)):
                yield path.relative_to(ROOT_DIR).as_posix(), source


def test_only_cp_solver_makes_and_configures_cp_sat_solvers() -> None:
    elsewhere = [
        f"{file}:{line} {name}"
        for file, source in _sources()
        if file != HOME
        for line, name in offences(source)
    ]
    assert not elsewhere, f"CP-SAT solvers made or configured outside {HOME}: {elsewhere}"
    assert offences((ROOT_DIR / HOME).read_text(encoding="utf-8")), "the scan no longer sees the home module"


@pytest.mark.parametrize(
    "line",
    [
        "solver = cp_model.CpSolver()",
        "solver.parameters.num_workers = 4",
        "setattr(solver.parameters, 'random_seed', 3)",
        "solver.parameters.CopyFrom(other)",
        "solver.log_callback = print",
        "from ortools.sat.python.cp_model import CpSolver",
        "from ortools.sat.sat_parameters_pb2 import SatParameters",
        "p = sat_parameters_pb2.SatParameters()",
    ],
)
def test_the_scan_finds_every_way_of_configuring(line: str) -> None:
    assert offences(line)


def test_the_scan_lets_a_type_annotation_name_the_solver() -> None:
    assert not offences("def f() -> cp_model.CpSolver: ...")


def _set(solver: object) -> dict[str, str]:
    """The parameters set explicitly on ``solver`` (text format: a field set to its default shows too)."""
    text = str(solver.parameters)  # type: ignore[attr-defined]
    return dict(row.split(": ", 1) for row in text.splitlines() if row)


def test_nothing_is_set_that_was_not_asked_for() -> None:
    assert _set(cp_solver()) == {}
    assert _set(cp_solver(seed=0, workers=1)) == {"random_seed": "0", "num_workers": "1"}


def test_each_argument_sets_its_parameters() -> None:
    logged: list[str] = []
    solver = cp_solver(
        time_limit_s=2.5,
        deterministic_s=0.5,
        workers=3,
        seed=7,
        interleave=True,
        hint_conflict_limit=HINT_CONFLICT_LIMIT,
        fast_presolve=True,
        linearization_level=2,
        fix_to_hint=True,
        log=logged.append,
    )
    assert _set(solver) == {
        "max_time_in_seconds": "2.5",
        "max_deterministic_time": "0.5",
        "num_workers": "3",
        "random_seed": "7",
        "interleave_search": "true",
        "hint_conflict_limit": "1000",
        "symmetry_level": "0",
        "cp_model_probing_level": "0",
        "linearization_level": "2",
        "fix_variables_to_their_hinted_value": "true",
        "log_search_progress": "true",
    }


def test_the_pricing_solver_keeps_its_parameters() -> None:
    """The fleet engine's pricing: one worker, full linearisation, a wall-clock floor of 0.01 s, the
    deterministic limit only when given."""
    assert _set(pattern_solver(0.0, None, 3)) == {
        "max_time_in_seconds": "0.01",
        "num_workers": "1",
        "random_seed": "3",
        "linearization_level": "2",
    }
    assert _set(pattern_solver(4.0, 1.5, 0))["max_deterministic_time"] == "1.5"
