"""Where the tests find the repository and their data, wherever a test module sits in the tree."""

from pathlib import Path

#: The repository's root (``pyproject.toml``, ``data/``, ``benchmarks/``).
ROOT_DIR = Path(__file__).resolve().parent.parent
#: The tests' own data (``tests/data``).
TESTS_DATA = Path(__file__).resolve().parent / "data"
