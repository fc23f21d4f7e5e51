"""gpuplan: a whole-cluster GPU placement planner.

The repository keeps its layers as top-level folders (``models``, ``solvers``, ``planner``, ``api``,
``data``); they are installed as sub-packages of this one package (``gpuplan.models``, ...), so that no
generic top-level name lands in a user's site-packages. ``docs/ARCHITECTURE.md`` maps them.
"""

from importlib import metadata

try:
    __version__ = metadata.version("gpuplan")
except metadata.PackageNotFoundError:  # pragma: no cover - only when run without being installed
    __version__ = "0+unknown"
