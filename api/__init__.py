"""The gpuplan REST service (FastAPI): plan jobs, history, validation, auth, limits and metrics."""

from gpuplan.api.app import create_app

__all__ = ["create_app"]
