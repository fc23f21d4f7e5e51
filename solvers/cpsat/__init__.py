"""OR-Tools CP-SAT back-end: the exact whole-cluster placement model."""

from solvers.cpsat.solver import CpSat

__all__ = ["CpSat"]
