"""OR-Tools CP-SAT back-end: the exact whole-cluster placement model."""

from gpuplan.solvers.cpsat.solver import CpSat

__all__ = ["CpSat"]
