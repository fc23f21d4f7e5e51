"""The import contracts bite: each forbidden import, injected into a copy of the tree, fails the check.

``lint-imports`` runs on a temporary copy of the repository with one line added; the copy without it
passes, and the contract the line breaks is the one named for it. Imports by name at run time
(``importlib``, ``importlib.util``, ``pkgutil``, ``runpy``, ``__import__``) escape import-linter, so the
tree is also scanned for them: only the solver registry may import by name, and only its own back-ends.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = ("models", "planner", "solvers", "api")
#: What the scan for imports by name reads: the code, the command line (``gpuplan.cli``, in the root
#: package) and the benchmarks (a root package of the contracts).
SCANNED = (*CODE, "src/gpuplan/cli", "benchmarks")
#: Where the tree may import a module by name: the solver registry, which names its back-ends.
BY_NAME_ALLOWED = {Path("solvers/base.py")}
#: Functions that import a module, or load one from a file, by a name known only at run time:
#: ``importlib.import_module`` and ``reload``, ``__import__``, ``importlib.util``'s specs and loaders,
#: ``pkgutil.resolve_name`` and ``walk_packages`` (which imports what it walks), ``runpy``.
BY_NAME = frozenset(
    {
        "__import__",
        "import_module",
        "reload",
        "find_spec",
        "spec_from_file_location",
        "spec_from_loader",
        "module_from_spec",
        "exec_module",
        "load_module",
        "resolve_name",
        "walk_packages",
        "run_module",
        "run_path",
    }
)

#: Contract names (``pyproject.toml``, each the start of one name), as the injected imports below expect them
#: broken.
LAYERS = "Layers: the command line uses the API and the planner, the API the planner"
NO_CLI_IN_API = "The API does not import the command line"
LAYERS_PLANNER = "The planner's packages are layered: the presentation on top, the rulebook at the bottom"
SOLVERS_LAYERED = "The solvers are layered: back-ends over the greedy kernel"
NO_CYCLES = "No cycles: the modules of every package import one another without cycles"
VALIDATOR = "The validator is independent of every solver"
API_INTERNALS = "The API uses the planner and the solver registry, never a solver's internals"
SOLVER_LIBRARIES = "The data model and the validator import no solver library"
#: The solver modules the API may import: the registry and the run options; every other module of
#: ``gpuplan.solvers`` is forbidden to it.
SOLVERS_PUBLIC = {"base", "run_options"}

#: (file, line added, contract it breaks): the forbidden imports of the architecture's rules.
INJECTED = {
    "planner imports the command line": (
        "planner/planning.py",
        "from gpuplan.cli import common as _injected",
        LAYERS,
    ),
    "API imports the command line": (
        "api/cli.py",
        "from gpuplan.cli import common as _injected",
        NO_CLI_IN_API,
    ),
    "validator imports a planning pass": (
        "planner/validation/validate.py",
        "from gpuplan.planner.pipeline import actions as _injected",
        LAYERS_PLANNER,
    ),
    "validator imports a back-end": (
        "planner/validation/validate.py",
        "from gpuplan.solvers.cpsat import solver as _injected",
        VALIDATOR,
    ),
    "cycle inside the solvers": (
        "solvers/greedy/engine.py",
        "from gpuplan.solvers.greedy import fgd as _injected",
        NO_CYCLES,
    ),
    "formulation imports a back-end": (
        "solvers/formulation/constraints.py",
        "from gpuplan.solvers.cpsat import solver as _injected",
        SOLVERS_LAYERED,
    ),
    "router imports a solver internal": (
        "api/routers/plans.py",
        "from gpuplan.solvers.cpsat import lns as _injected",
        API_INTERNALS,
    ),
    "job handling imports a solver internal": (
        "api/jobs.py",
        "from gpuplan.solvers.cpsat import lns as _injected",
        API_INTERNALS,
    ),
    "runner imports a solver internal": (
        "api/runner.py",
        "from gpuplan.solvers.fleet import pricing as _injected",
        API_INTERNALS,
    ),
    "models import OR-Tools": (
        "models/plan.py",
        "from ortools.sat.python import cp_model as _injected",
        SOLVER_LIBRARIES,
    ),
    "models import PuLP, inside a function": (
        "models/catalog.py",
        "def _injected() -> None:\n    import pulp",
        SOLVER_LIBRARIES,
    ),
    "validator imports HiGHS": (
        "planner/validation/validate.py",
        "import highspy as _injected",
        SOLVER_LIBRARIES,
    ),
}


def _copy(tmp: Path) -> Path:
    """The repository's code, ``src/`` links and configuration in ``tmp``."""
    dest = tmp / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in (*CODE, "src", "benchmarks"):
        shutil.copytree(ROOT / name, dest / name, symlinks=True, ignore=ignore)
    # gpuplan.data holds files, not code: its packages without the files will do.
    for init in (ROOT / "data").rglob("__init__.py"):
        target = dest / init.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(init, target)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def _lint(repo: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``repo``, with its ``gpuplan`` first on the path and no cache."""
    env = {**os.environ, "PYTHONPATH": f"{repo / 'src'}{os.pathsep}{repo}"}
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(exe), "--no-cache"], cwd=repo, env=env, capture_output=True, text=True, check=False
    )


def _inject(repo: Path, file: str, line: str) -> None:
    path = repo / file
    text = path.read_text()
    # After the module's code, so that the line is an ordinary module-level statement.
    path.write_text(text + f"\n{line}  # noqa\n")


def _broken(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The names of the contracts ``lint-imports`` reported broken (names wrapped over lines joined)."""
    text = " ".join(done.stdout.split())
    return [name for name in _contract_names() if f"{name} BROKEN" in text]


def _contract_names() -> list[str]:
    return [c["name"] for c in _importlinter()["contracts"]]


def _importlinter() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        config: dict[str, Any] = tomllib.load(f)["tool"]["importlinter"]
    return config


def _by_name_lines(tree: ast.AST) -> set[int]:
    """The lines of ``tree`` that import by name: a call or mention of a :data:`BY_NAME` function, however
    reached (``importlib.import_module``, ``importlib.util.find_spec``, ``pkgutil.resolve_name``,
    ``__import__``), an import of one (``from importlib import import_module as im``) and every use of the
    name it is bound to, and ``getattr(module, "import_module")``."""
    aliases: set[str] = set()
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name in BY_NAME or (alias.name == "*" and node.module in ("importlib", "pkgutil")):
                    aliases.add(alias.asname or alias.name)
                    lines.add(node.lineno)
    for node in ast.walk(tree):
        if not isinstance(node, ast.expr):
            continue
        if _mentioned(node) in BY_NAME or (isinstance(node, ast.Name) and node.id in aliases):
            lines.add(node.lineno)
    return lines


def _mentioned(node: ast.expr) -> str | None:
    """The name ``node`` reads: an attribute's, a variable's, or the one ``getattr(x, "name")`` looks up."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        return node.args[1].value
    return None


def by_name_imports(repo: Path) -> list[str]:
    """Every import by name (:func:`_by_name_lines`) outside :data:`BY_NAME_ALLOWED`, as ``file:line``."""
    found: list[str] = []
    for top in SCANNED:
        for path in sorted((repo / top).rglob("*.py")):
            rel = path.relative_to(repo)
            if rel in BY_NAME_ALLOWED:
                continue
            found += [f"{rel}:{line}" for line in sorted(_by_name_lines(ast.parse(path.read_text())))]
    return found


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(tmp_path_factory.mktemp("contracts"))


def test_the_copy_of_the_tree_keeps_every_contract(pristine: Path) -> None:
    done = _lint(pristine)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("case", sorted(INJECTED))
def test_a_forbidden_import_breaks_its_contract(case: str, tmp_path: Path) -> None:
    file, line, contract = INJECTED[case]
    repo = _copy(tmp_path)
    _inject(repo, file, line)
    done = _lint(repo)
    assert done.returncode != 0
    [name] = [n for n in _contract_names() if n.startswith(contract)]
    assert name in _broken(done), done.stdout[-2000:]


def test_the_api_may_import_no_solver_module_but_the_public_ones() -> None:
    """The API's contract lists every module of ``gpuplan.solvers`` but :data:`SOLVERS_PUBLIC`, so that a
    new solver module is forbidden to the API from the start."""
    solvers = ROOT / "solvers"
    modules = {p.stem for p in solvers.glob("*.py")} | {p.parent.name for p in solvers.glob("*/__init__.py")}
    [api] = [c for c in _importlinter()["contracts"] if c["name"] == API_INTERNALS]
    assert api["source_modules"] == ["gpuplan.api"]
    expected = {f"gpuplan.solvers.{m}" for m in modules - SOLVERS_PUBLIC - {"__init__"}}
    assert set(api["forbidden_modules"]) == expected


def test_nothing_imports_a_module_by_name_but_the_solver_registry() -> None:
    assert by_name_imports(ROOT) == []


#: One line each that imports ``gpuplan.api.app`` by name, around the layers.
AROUND = {
    "importlib.import_module": 'import importlib; importlib.import_module("gpuplan.api.app")',
    "import_module, renamed": 'from importlib import import_module as im; im("gpuplan.api.app")',
    "import_module, star": 'from importlib import *; import_module("gpuplan.api.app")',
    "import_module, by getattr": 'import importlib; getattr(importlib, "import_module")("gpuplan.api.app")',
    "__import__": '__import__("gpuplan.api.app")',
    "builtins.__import__": 'import builtins; builtins.__import__("gpuplan.api.app")',
    "importlib.util.find_spec": 'import importlib.util; importlib.util.find_spec("gpuplan.api.app")',
    "find_spec, renamed": 'from importlib.util import find_spec as fs; fs("gpuplan.api.app")',
    "spec_from_file_location": (
        'import importlib.util as u; m = u.module_from_spec(u.spec_from_file_location("app", "api/app.py"))'
    ),
    "pkgutil.resolve_name": 'import pkgutil; pkgutil.resolve_name("gpuplan.api.app:create_app")',
    "resolve_name, renamed": 'from pkgutil import resolve_name as rn; rn("gpuplan.api.app:create_app")',
    "runpy.run_module": 'import runpy; runpy.run_module("gpuplan.api.app")',
}


@pytest.mark.parametrize("case", sorted(AROUND))
def test_an_import_by_name_around_a_layer_is_found(case: str, tmp_path: Path) -> None:
    # One file of the tree, copied where the scan looks (the whole tree is scanned once, above).
    repo = tmp_path / "repo"
    for top in SCANNED:
        (repo / top).mkdir(parents=True, exist_ok=True)
    file = "planner/presentation/summary.py"
    (repo / file).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / file, repo / file)
    assert by_name_imports(repo) == []
    _inject(repo, file, AROUND[case])
    assert by_name_imports(repo) == [f"{file}:{len((repo / file).read_text().splitlines())}"]


def test_an_import_by_name_in_a_function_is_found_on_its_line() -> None:
    source = "import importlib as il\n\n\ndef load(name):\n    f = il.import_module\n    return f(name)\n"
    assert _by_name_lines(ast.parse(source)) == {5}
