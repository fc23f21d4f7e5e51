"""The planning pipeline's stages, one module each: compiling the checked input into the solver-neutral
problem, the passes around the solve (sharing and MIG mode pre-passes, idle-move repair, predicted
starts, actions and rounds), the state a plan leaves (layouts), deadlines and metrics.
:mod:`gpuplan.planner.planning` runs them in order. The input files are read by ``planner.io.files``,
the state every stage moves replicas on is ``planner.validation.occupancy``, and what people read of a
plan is ``planner.presentation``."""
