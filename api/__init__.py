"""The gpuplan REST service (FastAPI): plan jobs, history, validation, auth, limits and metrics.

``create_app`` is imported on first use: the command line finds ``gpuplan serve`` in ``gpuplan.api.cli``
when it builds its parser, and the other commands must not load FastAPI for that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuplan.api.app import create_app

__all__ = ["create_app"]


def __getattr__(name: str) -> Any:
    """``create_app``, from :mod:`gpuplan.api.app` (imported on first use)."""
    if name == "create_app":
        from gpuplan.api.app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
