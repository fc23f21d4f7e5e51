"""The planning pipeline's parts: reading the input files, compiling them into the solver-neutral
problem, the passes around the solve (sharing-mode pre-pass, idle-move repair, predicted starts,
actions and rounds), the state a plan leaves (layouts, occupancy), deadlines, metrics and summaries.
:mod:`gpuplan.planner.planning` runs them in order."""
