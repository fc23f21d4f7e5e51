"""The solve progress read from the planner's and CP-SAT's log (shared by ``gpuplan replan`` and the API
worker)."""

from __future__ import annotations

import io
import logging
import re
import time

from gpuplan.planner.pipeline.progress import (
    CPSAT_LOGGER,
    PLANNING_LOGGER,
    SearchLine,
    SolveProgress,
    TerminalProgress,
    reporting,
    search_lines,
)

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
