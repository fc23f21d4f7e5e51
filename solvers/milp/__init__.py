"""MILP back-end through PuLP (HiGHS or CBC): the same formulation as CP-SAT."""

from gpuplan.solvers.milp.solver import Milp, MilpCbc, MilpHighs

__all__ = ["Milp", "MilpCbc", "MilpHighs"]
