"""A wall-clock budget shared by the phases of one command or job.

A command creates one :class:`Deadline` when it starts (``--time-limit S`` after :func:`command_start`,
the process start for the console script) and hands it down; each phase takes a share of what remains
when it begins, so a phase that finishes early leaves its time to the phases after it, and the shares
never add up to more than the whole. The clock is injectable so that tests can check the shares
without waiting.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

Clock = Callable[[], float]

#: Of a planning command's ``--time-limit``, the part that is not the solve's (start-up, storing, the
#: diff, exports), at most ``RESERVE_MAX_S`` seconds; of that, ``OUTPUT_S`` seconds are kept after the
#: solve whatever the start-up took.
RESERVE_SHARE = 0.15
RESERVE_MAX_S = 10.0
OUTPUT_S = 0.5
#: A start-up that eats less than this into the solve's share is not worth a note.
START_UP_SLACK_S = 0.05
#: A start-up that eats less than this share of the solve's time changes little the user sees (a loaded
#: machine imports slowly): it is logged, not warned about.
START_UP_WARN_SHARE = 0.5
#: The shortest solve a command asks for.
MIN_SOLVE_S = 0.1


def process_age_s() -> float:
    """Seconds since this process started (0 where ``/proc`` does not say): the interpreter and the
    imports before the command runs count against its time limit too."""
    try:
        stat = Path("/proc/self/stat").read_text(encoding="ascii")
        start_ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
    return max(0.0, age)


def command_start(*, whole_process: bool) -> float:
    """When a command started, on the monotonic clock: the process start when the process runs just
    this command (the console script), else now (a call from Python or a test)."""
    return time.monotonic() - (process_age_s() if whole_process else 0.0)


@dataclass(frozen=True)
class Deadline:
    """The point in time (on ``clock``) by which the work must be done.

    Parameters
    ----------
    end
        The deadline, in ``clock`` seconds.
    clock
        A monotonic clock; ``time.monotonic`` unless a test injects a fake one.
    """

    end: float
    clock: Clock = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Clock = time.monotonic) -> Deadline:
        """A deadline ``seconds`` from now."""
        return cls(clock() + max(0.0, seconds), clock)

    def remaining(self) -> float:
        """Seconds left (0 once the deadline has passed)."""
        return max(0.0, self.end - self.clock())

    def expired(self) -> bool:
        """Whether no time is left."""
        return self.remaining() <= 0.0

    def share(self, fraction: float) -> float:
        """Seconds for a phase that may use ``fraction`` (0 to 1) of the time that remains."""
        return min(1.0, max(0.0, fraction)) * self.remaining()

    def sub(self, fraction: float) -> Deadline:
        """The deadline of a phase that gets ``fraction`` of the time that remains (it ends no later
        than this one)."""
        return Deadline(self.clock() + self.share(fraction), self.clock)

    def reserve(self, seconds: float) -> Deadline:
        """This deadline moved ``seconds`` earlier: time kept for the phases that must run after."""
        return Deadline(self.end - max(0.0, seconds), self.clock)


class Phases:
    """Phases that run one after another within a deadline, each with a weight.

    A phase takes, of the time left when it starts, its weight over the weights of itself and of the
    phases still to come: time a phase leaves unused goes to the phases after it, and the shares never
    add up to more than the deadline allows.
    """

    def __init__(self, deadline: Deadline, weights: Mapping[str, float]) -> None:
        self.deadline = deadline
        self.todo = dict(weights)

    def share(self, phase: str) -> float:
        """Seconds for ``phase``; it leaves the schedule, and so do the phases before it (skipped)."""
        names = list(self.todo)
        i = names.index(phase)
        total = sum(self.todo[n] for n in names[i:])
        seconds = self.deadline.share(self.todo[phase] / total) if total > 0 else 0.0
        for name in names[: i + 1]:
            del self.todo[name]
        log.debug("phase %s: %.2f s of %.2f s left", phase, seconds, self.deadline.remaining())
        return seconds

    def sub(self, phase: str) -> Deadline:
        """The deadline of ``phase`` (see :meth:`share`)."""
        return Deadline(self.deadline.clock() + self.share(phase), self.deadline.clock)


def fixed_solve_share(time_limit_s: float) -> float:
    """The seconds a command's solve gets of ``time_limit_s`` when the start-up took no time: what its
    work budgets (trials, deterministic time) are sized from, so that a slow start-up on a busy machine
    leaves the solve less time but not less work to do (:attr:`RunOptions.work_s`)."""
    return max(MIN_SOLVE_S, time_limit_s - min(RESERVE_MAX_S, RESERVE_SHARE * time_limit_s))


def solve_share(time_limit_s: float, deadline: Deadline, *, deterministic: bool = False) -> float:
    """The seconds a command's solve (``make_plan``) may take: the time limit less a part kept for the
    start-up and the output. The share depends on the limit alone, so a deterministic solve gets the
    same share (and gives the same plan) every run; only when the start-up has eaten into that part is
    it cut to what the deadline leaves, and never below :data:`MIN_SOLVE_S` (the command then says how
    late it will end). A ``deterministic`` solve keeps its share whatever the start-up took: its plan
    must not depend on the clock, so the command may then end later than the limit (and says so).
    ``deadline`` is the command's: ``time_limit_s`` after it started."""
    reserve = min(RESERVE_MAX_S, RESERVE_SHARE * time_limit_s)
    fixed = time_limit_s - reserve
    remaining = deadline.end - deadline.clock()  # negative once the start-up has run past the limit
    left = max(0.0, remaining - OUTPUT_S)
    if left >= fixed - START_UP_SLACK_S:
        return max(MIN_SOLVE_S, fixed)
    taken = time_limit_s - remaining
    within = "of the" if taken <= time_limit_s else "past the"
    start_up = f"start-up took {taken:.1f} s {within} {time_limit_s:g} s limit"
    if deterministic:
        solve_s = max(MIN_SOLVE_S, fixed)
        log.warning(
            "%s; a deterministic solve keeps its %.1f s share, so the command will end %s",
            start_up, solve_s, _late(solve_s + OUTPUT_S - remaining),
        )  # fmt: skip
        return solve_s
    if left < MIN_SOLVE_S:
        log.warning(
            "%s; the solve gets the shortest run (%g s) and the command will end %s",
            start_up, MIN_SOLVE_S, _late(MIN_SOLVE_S + OUTPUT_S - remaining),
        )  # fmt: skip
        return MIN_SOLVE_S
    # A small cut changes little that the user sees: said at INFO, a warning only past a share.
    level = logging.WARNING if left < (1 - START_UP_WARN_SHARE) * fixed else logging.INFO
    log.log(level, "%s; the solve's share is cut from %.1f s to %.1f s to end on time", start_up, fixed, left)
    return left


def _late(seconds: float) -> str:
    """How late a command will end, for a warning: ``about 0.6 s late`` (never ``about 0.0 s``)."""
    return f"about {seconds:.1f} s late" if seconds >= 0.05 else "less than 0.1 s late"


class Stopwatch:
    """The seconds each phase of one command took, in the order they ran, for the one log line a plan
    gets (``benchmarks/b12_deadline.py`` reads it to see where a time limit went)."""

    def __init__(self, clock: Clock = time.perf_counter) -> None:
        self.clock = clock
        self.last = clock()
        self.times: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        """Charge the time since the last lap to ``phase``."""
        now = self.clock()
        self.times[phase] = self.times.get(phase, 0.0) + now - self.last
        self.last = now

    def line(self) -> str:
        """``compile=0.120 solve=3.801 ...`` (seconds per phase)."""
        return " ".join(f"{phase}={seconds:.3f}" for phase, seconds in self.times.items())
