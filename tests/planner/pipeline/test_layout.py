"""The repository's layout rules: one installed top-level package, no bare imports of its folders."""

from __future__ import annotations

import ast
import importlib.util
import tomllib
from pathlib import Path

from tests._paths import ROOT_DIR

ROOT = ROOT_DIR
#: The repository's top-level folders, installed as ``gpuplan.<folder>``.
FOLDERS = ("models", "planner", "solvers", "api", "data")


def _python_files() -> list[Path]:
    dirs = [*FOLDERS, "tests", "benchmarks"]
    # src/gpuplan holds the root package's modules, the command line (cli/) and links to the folders (for
    # mypy): the links are not followed.
    root = ROOT / "src/gpuplan"
    folders = [p for d in dirs for p in (ROOT / d).rglob("*.py")]
    return sorted([*folders, *root.glob("*.py"), *(root / "cli").rglob("*.py")])


def test_no_bare_imports_of_the_repository_folders() -> None:
    """``import models`` would pick up whatever ``models`` comes first on sys.path."""
    bare = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            bare += [f"{where} {n}" for n in names if n.split(".")[0] in FOLDERS]
    assert not bare, bare


def test_the_distribution_installs_one_top_level_package() -> None:
    """Every package the wheel ships is ``gpuplan`` or below it, and no folder is importable bare."""
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in setup["packages"]} == {"gpuplan"}
    assert {p.split(".")[0] for p in setup["package-dir"]} == {"gpuplan"}
    import gpuplan

    installed = Path(gpuplan.__file__).resolve().parent
    for folder in FOLDERS:
        spec = importlib.util.find_spec(folder)
        assert spec is None or installed not in Path(spec.origin or "").resolve().parents, folder
        assert importlib.util.find_spec(f"gpuplan.{folder}") is not None


def test_the_console_script_runs_the_command_line() -> None:
    """``gpuplan`` names the command line's ``main`` (the CLI is a package: ``gpuplan.cli``)."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["gpuplan"].partition(":")
    from gpuplan.cli import main

    assert getattr(importlib.import_module(module), attr) is main
