"""A solve's progress, read from what the planner and CP-SAT log.

``make_plan`` logs ``planning …`` when the model is built and the solve starts; with DEBUG on, the
CP-SAT back-end routes its search log through ``logging``, one ``#<event> <t>s best:<incumbent>
next:[<bound>,<upper>]`` line per new incumbent or bound, and logs ``CP-SAT stage ended`` when a
lexicographic stage stops without a solution. :class:`SolveProgress` turns those records into events for
a subclass: ``gpuplan replan`` prints a progress line, the API worker sends the job's progress to the
server.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

#: The loggers whose records tell the phase (``planning …``) and the CP-SAT search progress.
PLANNING_LOGGER = "gpuplan.planner.planning"
CPSAT_LOGGER = "gpuplan.solvers.cpsat.solver"

_SEARCH = re.compile(r"^#\w+\s+([\d.]+)s\s+best:(\S+)\s+next:\[([^,\]]+),")
_STAGE_END = re.compile(r"^CP-SAT stage ended")


def _number(text: str) -> float | None:
    """The finite number ``text`` spells, else None (``inf``, ``nan``, empty)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


@dataclass(frozen=True)
class SearchLine:
    """One line of CP-SAT's search log: the seconds into the stage, and the incumbent objective and the
    bound as CP-SAT printed them."""

    elapsed_s: float
    best: str
    bound: str

    @property
    def incumbent(self) -> float | None:
        """The incumbent objective (None before the first solution)."""
        return _number(self.best)

    @property
    def lower(self) -> float | None:
        """The objective bound (None when CP-SAT prints none)."""
        return _number(self.bound)


def search_lines(text: str) -> Iterator[SearchLine]:
    """The search-log lines (with an incumbent and a bound) in a log message."""
    for line in text.splitlines():
        m = _SEARCH.match(line.strip())
        if m is not None:
            yield SearchLine(float(m.group(1)), m.group(2), m.group(3))


class SolveProgress(logging.Handler):
    """A log handler that reads a solve's progress from the records of :data:`PLANNING_LOGGER` and
    :data:`CPSAT_LOGGER`; a subclass reports the events it cares about by overriding the hooks."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)

    def emit(self, record: logging.LogRecord) -> None:
        """Pass the event in one record to its hook."""
        text = record.getMessage()
        if record.name == PLANNING_LOGGER and text.startswith("planning "):
            self.solving()
        elif _STAGE_END.match(text):
            self.stage_ended()
        else:
            for line in search_lines(text):
                self.searched(line)

    def solving(self) -> None:
        """The problem is compiled and the solver starts (nothing to report by default)."""

    def searched(self, line: SearchLine) -> None:
        """CP-SAT reported an incumbent and a bound (nothing to report by default)."""

    def stage_ended(self) -> None:
        """A lexicographic stage ended without a solution (nothing to report by default)."""


@contextmanager
def reporting(handler: SolveProgress, loggers: Sequence[str] = (CPSAT_LOGGER,)) -> Iterator[None]:
    """Send the DEBUG records of ``loggers`` to ``handler`` alone (CP-SAT logs its search only when its
    logger is at DEBUG; the whole search log would drown other output), and restore them afterwards."""
    saved = []
    for name in loggers:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, level, propagate in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


@contextmanager
def stdout_silenced() -> Iterator[None]:
    """Send file descriptor 1 to /dev/null: with its search log on, CP-SAT also prints the whole log to
    stdout (``log_to_stdout``), which the progress read from ``logging`` replaces."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
