"""Benchmarks of gpuplan's solvers (run as modules, e.g. ``python -m benchmarks.b1_online``)."""
