"""Rules in one place (issue 39): a scan of the source, so that no copy of a rule comes back.

- The capacity of one GPU in milli-GPU is :data:`gpuplan.models.hardware.MILLI_PER_GPU`, defined once and
  never aliased; no other number 1000 in ``models``, ``solvers``, ``planner`` or ``api`` means it. The
  1000s that mean something else are listed below by exact place (file, enclosing definition, source
  line), each with its reason: a new 1000 fails until it is either ``MILLI_PER_GPU`` or listed.
- The quota unit (GPU-equivalents in whole units: milli-GPU times the lcm of the catalog's compute slices)
  and a quota's limit in units are defined only in :mod:`gpuplan.models.rules.quota`.
- The per-GPU rules live in :mod:`gpuplan.models.rules.gpu`; ``models/gpu_rules.py`` is gone, with no
  shim.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._paths import ROOT_DIR

#: The packages scanned, and the rulebook where quota units may be defined.
PACKAGES = ("models", "solvers", "planner", "api")
RULEBOOK = "models/rules/"

#: The number 1000 where it is not a GPU's capacity in milli-GPU: (file, enclosing definition, line) and why.
NOT_A_GPU: dict[tuple[str, str, str], str] = {
    ("models/hardware.py", "", "MILLI_PER_GPU = 1000"): "the one definition of a GPU's milli-GPU",
    ("models/policy.py", "ObjectiveWeights", "queue: int = Field(default=1000, ge=0)"):
        "the queue term's default weight in weighted mode",
    ("solvers/cpsat/lns.py", "", "STEP_WEIGHTS = ObjectiveWeights(queue=1000, fragmentation=0, disruption=1, "
     "topology=0)"): "an LNS step's weight of the queue term over moves",
    ("solvers/cpsat/solver.py", "", "ROOM_STEPS_PER_S = 1000"):
        "make-room trials per second of a deterministic run",
    ("solvers/cpsat/solver.py", "", "HINT_CONFLICT_LIMIT = 1000"):
        "CP-SAT's conflict limit for completing the hint",
    ("solvers/fleet/pricing.py", "", "SCALE = 1000"): "the scale of reduced costs made integers for CP-SAT",
    ("solvers/formulation/staged.py", "", "DISRUPTION_OVER_TOPOLOGY = 1000"):
        "the weight of the disruption term over the topology term",
    ("planner/executor/loop.py", "", "ARRIVAL_WINDOW = 1000"): "replicas of recent arrivals remembered",
    ("planner/io/exporters/kubernetes.py", "", "PRIORITY_PER_WEIGHT = 1000"):
        "a pod's priority per unit of tier weight",
    ("planner/io/importers/kubernetes/conventions.py", "cpu_milli",
     "return int((cores * 1000).to_integral_value(ROUND_CEILING if up else ROUND_FLOOR))"):
        "milli-CPU per CPU core",
    ("planner/planning.py", "", "TRIAL_REPLICAS_PER_S = 1000"): "the pace of deterministic trial plans",
    ("api/settings.py", "Limits",
     'default=1000, ge=1, description="open connections and requests at once; beyond them 503"'):
        "the server's connection limit",
    ("planner/store/db.py", "", "MS_PER_S = 1000"): "milliseconds per second, for the databases' timeouts",
}  # fmt: skip


def _sources() -> Iterator[tuple[str, str]]:
    """(path relative to the repository, source) of every module of the scanned packages."""
    for package in PACKAGES:
        for path in sorted((ROOT_DIR / package).rglob("*.py")):
            yield path.relative_to(ROOT_DIR).as_posix(), path.read_text(encoding="utf-8")


def _scoped(tree: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """Every node of ``tree`` with the dotted name of the classes and functions around it."""

    def walk(node: ast.AST, scope: tuple[str, ...]) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            yield ".".join(scope), child
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = (*scope, child.name)
            yield from walk(child, inner)

    yield from walk(tree, ())


def thousands(source: str) -> list[tuple[str, str]]:
    """(enclosing definition, source line) of every number 1000 in ``source``."""
    lines = source.splitlines()
    return [
        (scope, lines[node.lineno - 1].strip())
        for scope, node in _scoped(ast.parse(source))
        if isinstance(node, ast.Constant)
        and type(node.value) in (int, float)
        and node.value == 1000  # 1000, 1000.0, 1e3, 1_000
    ]


def _named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (
        isinstance(node, ast.Attribute) and node.attr == name
    )


def milli_definitions_and_aliases(source: str) -> tuple[int, list[str]]:
    """How many times ``source`` assigns ``MILLI_PER_GPU``, and its aliases (``X = MILLI_PER_GPU``,
    ``import MILLI_PER_GPU as X``)."""
    defined, aliases = 0, []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined += sum(_named(t, "MILLI_PER_GPU") for t in targets)
            if node.value is not None and _named(node.value, "MILLI_PER_GPU"):
                aliases.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom):
            renamed = [a for a in node.names if a.name == "MILLI_PER_GPU" and a.asname]
            aliases += [f"import {a.name} as {a.asname}" for a in renamed]
    return defined, aliases


def _unit_of_catalog(node: ast.AST) -> bool:
    """An lcm of compute slices (the catalog's quota unit)."""
    return (
        isinstance(node, ast.Call)
        and _named(node.func, "lcm")
        and any(_named(n, "compute_slices") for n in ast.walk(node))
    )


def _limit_from_decimal(node: ast.AST) -> bool:
    """``Fraction(str(q.gpus))`` or ``Fraction(repr(q.gpus))`` (a quota's limit from its decimal form)."""
    if not (isinstance(node, ast.Call) and _named(node.func, "Fraction") and node.args):
        return False
    inner = node.args[0]
    return (
        isinstance(inner, ast.Call)
        and (_named(inner.func, "str") or _named(inner.func, "repr"))
        and bool(inner.args)
        and _named(inner.args[0], "gpus")
    )


def _unit_constant(node: ast.AST) -> bool:
    """``X_UNIT = 28000`` or ``X_UNIT = ... MILLI_PER_GPU ...``: a unit of GPU shares named as a constant."""
    return (
        isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and "UNIT" in t.id.upper() for t in node.targets)
        and (
            isinstance(node.value, ast.Constant)
            or any(_named(n, "MILLI_PER_GPU") for n in ast.walk(node.value))
        )
    )


def quota_unit_definitions(source: str) -> list[str]:
    """Definitions of a quota unit or of a quota's limit in units: an lcm of compute slices, a constant
    named ``*UNIT*``, or a quota's decimal form read as a fraction."""
    return [
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if _unit_of_catalog(node) or _limit_from_decimal(node) or _unit_constant(node)
    ]


def test_no_number_1000_means_a_gpu_outside_its_one_definition() -> None:
    found = {(path, scope, line) for path, source in _sources() for scope, line in thousands(source)}
    new = sorted(found - NOT_A_GPU.keys())
    assert not new, (
        "a number 1000 that is not listed in NOT_A_GPU: write MILLI_PER_GPU (gpuplan.models.hardware) if it "
        f"is a GPU's milli-GPU, else list it with its reason: {new}"
    )
    stale = sorted(NOT_A_GPU.keys() - found)
    assert not stale, f"NOT_A_GPU lists places that no longer hold a 1000: {stale}"


def test_milli_per_gpu_is_defined_once_and_never_aliased() -> None:
    defined: list[str] = []
    aliases: list[str] = []
    for path, source in _sources():
        count, names = milli_definitions_and_aliases(source)
        defined += [path] * count
        aliases += [f"{path}: {a}" for a in names]
    assert defined == ["models/hardware.py"]
    assert not aliases, f"aliases of MILLI_PER_GPU (use the name itself): {aliases}"


def test_quota_units_are_defined_only_in_the_rulebook() -> None:
    outside = [
        f"{path}: {found}"
        for path, source in _sources()
        if not path.startswith(RULEBOOK)
        for found in quota_unit_definitions(source)
    ]
    assert not outside, f"quota units defined outside {RULEBOOK} (use gpuplan.models.rules.quota): {outside}"
    rulebook = (ROOT_DIR / RULEBOOK / "quota.py").read_text(encoding="utf-8")
    assert quota_unit_definitions(rulebook), "the scan no longer finds the rulebook's own definitions"


def test_the_per_gpu_rules_moved_without_a_shim() -> None:
    assert not (ROOT_DIR / "models" / "gpu_rules.py").exists()
    importers = [
        path
        for path, source in _sources()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module == "gpuplan.models.gpu_rules"
    ]
    assert not importers


@pytest.mark.parametrize(
    ("source", "check"),
    [
        ("def f(g):\n    return g.milli or 1000\n", "thousand"),
        ("x = 1e3\n", "thousand"),
        ("MILLI = MILLI_PER_GPU\n", "alias"),
        ("from gpuplan.models.hardware import MILLI_PER_GPU as FULL\n", "alias"),
        ("QUOTA_UNIT = 28000\n", "unit"),
        ("_UNIT = 7 * MILLI_PER_GPU\n", "unit"),
        ("u = 1000 * math.lcm(*(m.compute_slices for m in models))\n", "unit"),
        ("limit = int(Fraction(str(q.gpus)) * 28000)\n", "unit"),
    ],
)
def test_the_scan_finds_what_it_forbids(source: str, check: str) -> None:
    if check == "thousand":
        assert thousands(source)
    elif check == "alias":
        assert milli_definitions_and_aliases(source)[1]
    else:
        assert quota_unit_definitions(source)


def test_the_listed_places_exist() -> None:
    for path, _, _ in NOT_A_GPU:
        assert Path(ROOT_DIR / path).is_file(), path
