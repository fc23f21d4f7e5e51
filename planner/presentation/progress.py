"""A solve's progress, read from what the planner and CP-SAT log.

``make_plan`` logs ``planning …`` when the model is built and the solve starts; an exact model logs the
names of the objective stages it is solved in (``solvers.formulation.staged.stages``: ``queue``,
``fragmentation``, ``disruption+topology``, or one ``weighted`` stage, which a neighbourhood-search step
is); with DEBUG on, the CP-SAT back-end routes its search log through ``logging``: ``Starting CP-SAT
solver`` as each stage starts, one ``#<event> <t>s best:<incumbent> next:[<bound>,<upper>]`` line per
new incumbent or bound, and ``CP-SAT stage ended`` when a stage stops without a solution.
:class:`SolveProgress` turns those records into events for a subclass, knowing the stage each search line
belongs to: on a terminal the CLI prints progress lines (:class:`TerminalProgress`), the API worker sends
the job's progress to the server.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TextIO

#: The loggers whose records tell the phase (``planning …``) and the CP-SAT search progress.
PLANNING_LOGGER = "gpuplan.planner.planning"
CPSAT_LOGGER = "gpuplan.solvers.cpsat.solver"
#: The logger that names an exact model's objective stages.
STAGES_LOGGER = "gpuplan.solvers.formulation.staged"
#: The stage label of a neighbourhood-search step (a one-stage model weighted as the search weighs).
NEIGHBOURHOOD = "neighbourhood search"
#: The first stage of a lexicographic objective: its value is the plan's queue term.
QUEUE = "queue"

_SEARCH = re.compile(r"^#\w+\s+([\d.]+)s\s+best:(\S+)\s+next:\[([^,\]]+),")
_STAGE_END = re.compile(r"^CP-SAT stage ended")
_STAGE_START = re.compile(r"^Starting CP-SAT solver")


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


def gap_text(incumbent: float | None, bound: float | None) -> str:
    """``gap 51.76%`` of an incumbent over its bound, or ``""`` when a gap would mislead: no incumbent or
    bound, an incumbent of zero or below (a gap over it is meaningless) or a negative bound (a stage
    whose objective is not the plan's)."""
    if incumbent is None or bound is None or incumbent <= 0 or bound < 0:
        return ""
    return f"gap {100 * max(0.0, incumbent - bound) / incumbent:.2f}%"


def _searching(record: logging.LogRecord) -> bool:
    """Whether a model's stages are a neighbourhood-search step's: one stage, weighted as the search
    weighs its steps (imported here: a solver that logs stages is loaded by then)."""
    weights = getattr(record, "weights", None)
    if weights is None:
        return False
    from gpuplan.solvers.cpsat.lns import STEP_WEIGHTS

    return bool(weights == STEP_WEIGHTS)


def progress_text(phase: str, stage: str | None, line: SearchLine, queue_term: str | None = None) -> str:
    """What one search line says, by stage: the queue stage's incumbent is the plan's queue term (with its
    gap); a later lexicographic stage's is that stage's own value (the plan's queue term stays at most
    ``queue_term``); a weighted stage's is the plan's objective; a neighbourhood-search step's is the
    step's own. No stage known: the bare incumbent."""
    gap = gap_text(line.incumbent, line.lower)
    gap = f"  {gap}" if gap else ""
    bound = f"bound {line.bound}"
    if stage is None:
        return f"{phase}: incumbent {line.best}  {bound}{gap}"
    if stage == QUEUE:
        # The queue term is never negative: CP-SAT's early bounds on its model may be (a constant offset).
        if line.lower is not None and line.lower < 0:
            bound, gap = "bound 0", "  gap 100.00%" if (line.incumbent or 0) > 0 else ""
        return f"{phase}, queue stage: queue term {line.best}  {bound}{gap}"
    if stage == "weighted":
        return f"{phase}, weighted stage: objective {line.best}  {bound}{gap}"
    if stage == NEIGHBOURHOOD:
        return f"{phase}, {NEIGHBOURHOOD}: step value {line.best}  {bound}"
    kept = f"  (queue term at most {queue_term})" if queue_term is not None else ""
    return f"{phase}, {stage} stage: stage value {line.best}  {bound}{kept}"


#: The progress handlers :func:`reporting` has installed (innermost last): :func:`phase` names theirs.
_ACTIVE: list[SolveProgress] = []


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Run a named phase (``solve``, ``capacity gap``, ``scenarios``, ``re-solves``): the progress lines
    printed meanwhile carry its name."""
    saved = [(h, h.phase) for h in _ACTIVE]
    for handler, _ in saved:
        handler.phase = name
    try:
        yield
    finally:
        for handler, before in saved:
            handler.phase = before


class SolveProgress(logging.Handler):
    """A log handler that reads a solve's progress from the records of :data:`PLANNING_LOGGER` and
    :data:`CPSAT_LOGGER`; a subclass reports the events it cares about by overriding the hooks. ``phase``
    names the part of the command running (:func:`phase`)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.phase = "solve"
        #: The stages of the model being solved, and the one running (None: not known).
        self.stages: tuple[str, ...] = ()
        self.stage: str | None = None
        #: The plan's queue term as the last queue stage left it (later stages keep it or lower it).
        self.queue_term: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Pass the event in one record to its hook, keeping track of the stage."""
        text = record.getMessage()
        if record.name == PLANNING_LOGGER and text.startswith("planning "):
            self.solving()
        elif record.name == STAGES_LOGGER and hasattr(record, "stages"):
            self.stages = (NEIGHBOURHOOD,) if _searching(record) else tuple(record.stages)
            self.stage = None
        elif _STAGE_START.match(text):
            # The stages start in order; a solve outside a known model's stages has no stage name.
            after = self.stages.index(self.stage) + 1 if self.stage in self.stages else 0
            self.stage = self.stages[after] if after < len(self.stages) else None
        elif _STAGE_END.match(text):
            self.stage_ended()
        else:
            for line in search_lines(text):
                if self.stage == QUEUE and line.incumbent is not None:
                    self.queue_term = line.best
                self.searched(line)

    def solving(self) -> None:
        """The problem is compiled and the solver starts (nothing to report by default)."""

    def searched(self, line: SearchLine) -> None:
        """CP-SAT reported an incumbent and a bound (nothing to report by default)."""

    def stage_ended(self) -> None:
        """A lexicographic stage ended without a solution (nothing to report by default)."""


class TerminalProgress(SolveProgress):
    """Prints a line to ``stream`` when CP-SAT reports a new incumbent or bound, at most one line per
    ``interval_s``; ``elapsed`` counts from ``started`` (the command's start, on the monotonic clock).
    Each line names the stage its values are of (:func:`progress_text`)."""

    def __init__(self, stream: TextIO, started: float, interval_s: float = 0.5) -> None:
        super().__init__()
        self.stream = stream
        self.started = started
        self.interval_s = interval_s
        self.last: tuple[str | None, str, str] | None = None
        self.printed_at = float("-inf")

    def searched(self, line: SearchLine) -> None:
        """Print a line for a new stage, incumbent or bound, unless one was printed less than
        ``interval_s`` ago."""
        now = time.monotonic()
        if (
            line.incumbent is None
            or (self.stage, line.best, line.bound) == self.last
            or now - self.printed_at < self.interval_s
        ):
            return
        self.last, self.printed_at = (self.stage, line.best, line.bound), now
        text = progress_text(self.phase, self.stage, line, self.queue_term)
        self.stream.write(f"progress {now - self.started:7.1f} s  {text}\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """Print a progress message of a command's own (e.g. the rounds of ``gpuplan simulate``)."""
        self.stream.write(f"progress {time.monotonic() - self.started:7.1f} s  {text}\n")
        self.stream.flush()


@contextmanager
def reporting(
    handler: SolveProgress, loggers: Sequence[str] = (STAGES_LOGGER, CPSAT_LOGGER)
) -> Iterator[None]:
    """Send the DEBUG records of ``loggers`` to ``handler`` alone (CP-SAT logs its search only when its
    logger is at DEBUG; the whole search log would drown other output), and restore them afterwards."""
    saved = []
    _ACTIVE.append(handler)
    for name in loggers:
        logger = logging.getLogger(name)
        saved.append((logger, logger.level, logger.propagate))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
    try:
        yield
    finally:
        _ACTIVE.remove(handler)
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


@contextmanager
def native_stdout_elsewhere(target: int) -> Iterator[None]:
    """Keep what native code writes to file descriptor 1 (the HiGHS banner, CP-SAT's ``log_to_stdout``)
    out of the command's stdout: descriptor 1 goes to ``target`` while ``sys.stdout`` writes to the real
    stdout through a duplicate of it."""
    saved = sys.stdout
    saved.flush()
    real = os.dup(1)
    os.dup2(target, 1)
    sys.stdout = os.fdopen(real, "w", encoding=saved.encoding, errors=saved.errors, buffering=1)
    try:
        yield
    finally:
        try:
            sys.stdout.flush()
        finally:
            os.dup2(real, 1)
            with suppress(OSError):  # a closed pipe: the command's exit code says what happened
                sys.stdout.close()
            sys.stdout = saved
