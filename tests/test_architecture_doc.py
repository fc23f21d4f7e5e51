"""docs/ARCHITECTURE.md names only what exists: every backticked file or folder path, and every dotted
module (``gpuplan.solvers.base``, ``planner.pipeline``, ``gpuplan.cli.plan``) with the first name it takes
from that module."""

from __future__ import annotations

import fnmatch
import re
import subprocess

import pytest

from tests._paths import ROOT_DIR

DOC = ROOT_DIR / "docs" / "ARCHITECTURE.md"
PACKAGES = ("models", "solvers", "planner", "api", "data")
#: The root package's own sub-packages, by where they live (the command line, ``gpuplan.cli``).
ROOT_PACKAGES = {"cli": ROOT_DIR / "src" / "gpuplan" / "cli"}
_TICKED = re.compile(r"`([^`\s]+)`")
_PATH = re.compile(r"^[\w.*-]+(/[\w.*-]+)*/?$")
_DOTTED = re.compile(
    rf"^((gpuplan\.)?({'|'.join(PACKAGES)})(\.\w+)+|gpuplan\.({'|'.join(ROOT_PACKAGES)})(\.\w+)*)$"
)


def _repo_files() -> list[str]:
    """Every file git knows in the repository (tracked or not ignored), by its path from the root."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT_DIR, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [f for f in listed.stdout.splitlines() if (ROOT_DIR / f).exists()]


FILES = _repo_files()
TICKED = sorted(set(_TICKED.findall(DOC.read_text(encoding="utf-8"))))


def _path_exists(token: str) -> bool:
    """Whether ``token`` (``a/b.py``, ``dir/``, ``data/hardware/*.json``) names files of the repository,
    from its root, from ``docs/``, or as the end of a path (``formulation/staged.py``)."""
    bare = token.rstrip("/")
    if (ROOT_DIR / bare).exists() or (ROOT_DIR / "docs" / bare).exists():
        return True
    patterns = [bare, f"*/{bare}"]
    if token.endswith("/"):
        patterns += [f"{bare}/*", f"*/{bare}/*"]
    return any(fnmatch.fnmatch(f, p) for f in FILES for p in patterns)


def _module_names(token: str) -> bool:
    """Whether the longest module prefix of dotted ``token`` exists and defines or imports the first
    name after it (``solvers.base.get_solver``: ``get_solver`` in ``solvers/base.py``)."""
    parts = token.removeprefix("gpuplan.").split(".")
    path = ROOT_PACKAGES.get(parts[0], ROOT_DIR / parts[0])
    i = 1
    while i < len(parts) and ((path / parts[i]).is_dir() or path.joinpath(f"{parts[i]}.py").exists()):
        path = path / parts[i]
        i += 1
    source = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if i == len(parts):
        return source.exists() or path.is_dir()
    return source.exists() and re.search(rf"\b{parts[i]}\b", source.read_text(encoding="utf-8")) is not None


PATHS = [t for t in TICKED if ("/" in t or t.endswith((".py", ".md", ".toml"))) and _PATH.match(t)]
DOTTED = [t for t in TICKED if _DOTTED.match(t)]


def test_the_doc_names_paths_and_modules() -> None:
    assert len(PATHS) > 50 and len(DOTTED) > 5


@pytest.mark.parametrize("token", PATHS)
def test_every_path_the_doc_names_exists(token: str) -> None:
    assert _path_exists(token), f"docs/ARCHITECTURE.md names `{token}`, which is not in the repository"


@pytest.mark.parametrize("token", DOTTED)
def test_every_dotted_module_the_doc_names_exists(token: str) -> None:
    assert _module_names(token), f"docs/ARCHITECTURE.md names `{token}`, which no module defines"
