"""Apply plans round by round: the executor loop, the back-end protocol, the simulated cluster and the
simulated arrivals of benchmark B5 (``simulate``). The Kubernetes and MIG manager exporters are in
:mod:`gpuplan.planner.io.exporters`."""

from gpuplan.planner.executor.backend import Backend, Observation, Outcome
from gpuplan.planner.executor.loop import (
    ARRIVAL_WINDOW,
    Executor,
    Planner,
    RoundReport,
    StateInput,
    state_input,
    unfit,
)
from gpuplan.planner.executor.sim import Failure, SimCluster

__all__ = [
    "ARRIVAL_WINDOW",
    "Backend",
    "Executor",
    "Failure",
    "Observation",
    "Outcome",
    "Planner",
    "RoundReport",
    "SimCluster",
    "StateInput",
    "state_input",
    "unfit",
]
