"""The solver-neutral formulation of the exact placement model, shared by CP-SAT and the MILP back-ends."""
