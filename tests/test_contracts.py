"""The import contracts bite: each forbidden import, injected into a copy of the tree, fails the check.

``lint-imports`` runs on a temporary copy of the repository with one line added; the copy without it
passes. Imports by name at run time (``importlib``) escape import-linter, so the tree is also scanned
for them: only the solver registry may import by name, and only its own back-ends.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CODE = ("models", "planner", "solvers", "api")
#: Where the tree may import a module by name: the solver registry, which names its back-ends.
BY_NAME_ALLOWED = {Path("solvers/base.py")}

#: (file, line added): the forbidden imports of the architecture's rules.
INJECTED = {
    "validator imports a planning pass": (
        "planner/validation/validate.py",
        "from gpuplan.planner.pipeline import actions as _injected",
    ),
    "cycle inside the solvers": (
        "solvers/greedy/engine.py",
        "from gpuplan.solvers.greedy import fgd as _injected",
    ),
    "formulation imports a back-end": (
        "solvers/formulation/constraints.py",
        "from gpuplan.solvers.cpsat import solver as _injected",
    ),
    "router imports a solver internal": (
        "api/routers/plans.py",
        "from gpuplan.solvers.cpsat import lns as _injected",
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
    # After the module's imports, so that the line is an ordinary module-level import.
    path.write_text(text + f"\n{line}  # noqa\n")


def by_name_imports(repo: Path) -> list[str]:
    """Every ``importlib.import_module`` / ``__import__`` call outside :data:`BY_NAME_ALLOWED`."""
    found: list[str] = []
    for top in CODE:
        for path in sorted((repo / top).rglob("*.py")):
            rel = path.relative_to(repo)
            if rel in BY_NAME_ALLOWED:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                    if name in ("import_module", "__import__"):
                        found.append(f"{rel}:{node.lineno}")
    return found


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _copy(tmp_path_factory.mktemp("contracts"))


def test_the_copy_of_the_tree_keeps_every_contract(pristine: Path) -> None:
    done = _lint(pristine)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("case", sorted(INJECTED))
def test_a_forbidden_import_breaks_a_contract(case: str, tmp_path: Path) -> None:
    repo = _copy(tmp_path)
    _inject(repo, *INJECTED[case])
    done = _lint(repo)
    assert done.returncode != 0
    assert "BROKEN" in done.stdout


def test_nothing_imports_a_module_by_name_but_the_solver_registry() -> None:
    assert by_name_imports(ROOT) == []


def test_an_import_by_name_around_a_layer_is_found(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "planner", repo / "planner", ignore=shutil.ignore_patterns("__pycache__"))
    for top in ("models", "solvers", "api"):
        (repo / top).mkdir()
    summary = repo / "planner/pipeline/summary.py"
    around = 'import importlib; importlib.import_module("gpuplan.api.app")'
    _inject(repo, "planner/pipeline/summary.py", around)
    assert by_name_imports(repo) == [f"planner/pipeline/summary.py:{len(summary.read_text().splitlines())}"]
