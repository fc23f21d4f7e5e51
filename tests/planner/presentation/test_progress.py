"""The solve progress read from the planner's and CP-SAT's log (shared by ``gpuplan replan`` and the API
worker)."""

from __future__ import annotations

import io
import logging
import re
import time
from datetime import UTC, datetime

from gpuplan.models import PlanningInput, default_catalog
from gpuplan.models.policy import ObjectiveWeights
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.presentation.progress import (
    CPSAT_LOGGER,
    PLANNING_LOGGER,
    STAGES_LOGGER,
    SearchLine,
    SolveProgress,
    TerminalProgress,
    progress_text,
    reporting,
    search_lines,
)
from gpuplan.solvers.cpsat import CpSat
from gpuplan.solvers.cpsat.lns import STEP_WEIGHTS
from gpuplan.solvers.run_options import RunOptions

LOG = """#Bound   0.22s best:inf   next:[-5927718,2273410] initial_domain
#Model   0.22s var:7502/7502 constraints:2927/2927
#1       0.25s best:540652 next:[-5927718,540651] fj_restart_decay_compound_perturb_obj
#Done    1.91s best:521260 next:[146400,521259] graph_var_lns"""


def test_search_lines_are_the_ones_with_an_incumbent_and_a_bound() -> None:
    found = list(search_lines(LOG))
    assert [(s.elapsed_s, s.best, s.bound) for s in found] == [
        (0.22, "inf", "-5927718"),
        (0.25, "540652", "-5927718"),
        (1.91, "521260", "146400"),
    ]
    assert (found[0].incumbent, found[0].lower) == (None, -5927718.0)
    assert (found[2].incumbent, found[2].lower) == (521260.0, 146400.0)


class Events(SolveProgress):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def solving(self) -> None:
        self.seen.append("solving")

    def searched(self, line: SearchLine) -> None:
        self.seen.append(line.best)

    def stage_ended(self) -> None:
        self.seen.append("stage")


def test_the_handler_reads_the_phase_the_search_and_the_stage_ends() -> None:
    events = Events()
    cpsat = logging.getLogger(CPSAT_LOGGER)
    before = (cpsat.level, cpsat.propagate)
    with reporting(events, (PLANNING_LOGGER, CPSAT_LOGGER)):
        logging.getLogger(PLANNING_LOGGER).info("planning %d replicas on %d nodes with %s", 3, 2, "cpsat")
        cpsat.debug(LOG)
        cpsat.info("CP-SAT stage ended %s after %.2f s", "UNKNOWN", 0.5)
    assert events.seen == ["solving", "inf", "540652", "521260", "stage"]
    assert (cpsat.level, cpsat.propagate) == before and events not in cpsat.handlers


def test_terminal_progress_prints_each_new_incumbent_with_its_gap() -> None:
    out = io.StringIO()
    lines = TerminalProgress(out, started=time.monotonic(), interval_s=0.0)
    for line in search_lines(LOG):
        lines.searched(line)
        lines.searched(line)  # the same incumbent and bound again: no second line
    printed = [re.sub(r"progress +[\d.]+ s", "progress <t> s", t) for t in out.getvalue().splitlines()]
    # No gap against a negative bound (it would read 1196.40%); (521260 - 146400) / 521260 = 71.91%.
    assert printed == [
        "progress <t> s  solve: incumbent 540652  bound -5927718",
        "progress <t> s  solve: incumbent 521260  bound 146400  gap 71.91%",
    ]


QUEUE_LOG = """#1       0.25s best:540652 next:[-5927718,540651] fj_restart_decay_compound_perturb_obj
#Done    1.91s best:521260 next:[146400,521259] graph_var_lns"""
FRAGMENTATION_LOG = """#1       0.10s best:-207200 next:[-3401900,-207201] complete_hint
#2       0.30s best:-210400 next:[-3401900,-210401] default_lp"""
TOPOLOGY_LOG = "#1       0.05s best:12 next:[0,11] complete_hint"


def _printed(out: io.StringIO) -> list[str]:
    """The lines printed, each without its ``progress <elapsed> s`` start."""
    lines = out.getvalue().splitlines()
    assert all(re.match(r"progress +[\d.]+ s  ", t) for t in lines)
    return [re.sub(r"^progress +[\d.]+ s  ", "", t) for t in lines]


def _model(stages: tuple[str, ...], weights: object = None) -> None:
    """What an exact model logs when its stages are set (``solvers.formulation.staged.stages``)."""
    logging.getLogger(STAGES_LOGGER).debug(
        "objective stages: %s", ", ".join(stages), extra={"stages": stages, "weights": weights}
    )


def test_each_progress_line_names_the_stage_its_values_are_of() -> None:
    """The queue stage's values are the plan's queue term; a later stage's are its own (negative for
    fragmentation, with a negative bound: no gap), printed beside the queue term the plan keeps."""
    out = io.StringIO()
    cpsat = logging.getLogger(CPSAT_LOGGER)
    with reporting(TerminalProgress(out, started=time.monotonic(), interval_s=0.0)):
        _model(("queue", "fragmentation", "disruption+topology"))
        for log in (QUEUE_LOG, FRAGMENTATION_LOG, TOPOLOGY_LOG):
            cpsat.debug("Starting CP-SAT solver v9.15.6755")
            cpsat.debug(log)
    assert _printed(out) == [
        "solve, queue stage: queue term 540652  bound 0  gap 100.00%",
        "solve, queue stage: queue term 521260  bound 146400  gap 71.91%",
        "solve, fragmentation stage: stage value -207200  bound -3401900  (queue term at most 521260)",
        "solve, fragmentation stage: stage value -210400  bound -3401900  (queue term at most 521260)",
        "solve, disruption+topology stage: stage value 12  bound 0  (queue term at most 521260)",
    ]


def test_a_weighted_objective_and_a_neighbourhood_step_are_labelled_as_such() -> None:
    """A weighted policy's one stage is the plan's objective; a neighbourhood-search step (one stage
    weighted as the search weighs) is the step's own value, with no gap (a second step with the same
    values prints nothing new); a solve outside a model's stages prints the bare incumbent."""
    out = io.StringIO()
    cpsat = logging.getLogger(CPSAT_LOGGER)
    with reporting(TerminalProgress(out, started=time.monotonic(), interval_s=0.0)):
        for weights, log in (
            (STEP_WEIGHTS, TOPOLOGY_LOG),
            (STEP_WEIGHTS, TOPOLOGY_LOG),
            (ObjectiveWeights(), QUEUE_LOG),
        ):
            _model(("weighted",), weights)
            cpsat.debug("Starting CP-SAT solver v9.15.6755")
            cpsat.debug(log)
        cpsat.debug("Starting CP-SAT solver v9.15.6755")  # a solve past the model's stages: no stage
        cpsat.debug(TOPOLOGY_LOG)
    assert _printed(out) == [
        "solve, neighbourhood search: step value 12  bound 0",
        "solve, weighted stage: objective 540652  bound -5927718",
        "solve, weighted stage: objective 521260  bound 146400  gap 71.91%",
        "solve: incumbent 12  bound 0  gap 100.00%",
    ]


def test_a_real_solve_prints_its_stages_in_order() -> None:
    """CP-SAT on a small lexicographic plan: every line names a stage, in the order they run, and only
    the queue stage's lines speak of the queue term."""
    nodes = [
        {"name": f"n{i}", "cpu_milli": 64000, "memory_mib": 100_000,
         "gpus": [{"index": g, "model": "L4-24GB"} for g in range(4)]}
        for i in range(4)
    ]  # fmt: skip
    work = [{"id": f"w{i}", "gpus": 1 + i % 3, "replicas": 2, "priority": i} for i in range(10)]
    inp = PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work, "policy": {}})
    problem = compile_problem(inp, default_catalog(), datetime(2026, 11, 29, 12, tzinfo=UTC))
    out = io.StringIO()
    with reporting(TerminalProgress(out, started=time.monotonic(), interval_s=0.0)):
        CpSat().solve(problem, RunOptions(time_limit_s=2.0, num_workers=1))
    order = ["queue", "fragmentation", "disruption+topology"]
    stages = [re.match(r"solve, (\S+) stage: ", t) for t in _printed(out)]
    assert stages and all(m is not None for m in stages)
    seen = [order.index(m.group(1)) for m in stages if m is not None]
    assert seen == sorted(seen) and seen[0] == 0


def test_a_negative_bound_of_the_queue_stage_reads_as_zero() -> None:
    # CP-SAT's first bounds on the queue stage's model may be below zero; the queue term never is.
    line = SearchLine(5.0, "103607", "-2212583")
    expected = "solve, queue stage: queue term 103607  bound 0  gap 100.00%"
    assert progress_text("solve", "queue", line) == expected
