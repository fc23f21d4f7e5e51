"""The deadline a command hands down: shares of the time left, sub-deadlines, reserves and phases,
checked on a fake clock (no test waits or measures time)."""

from __future__ import annotations

from gpuplan.planner.pipeline.deadline import Deadline, Phases, command_start, process_age_s
from tests._clock import FakeClock


def test_remaining_share_and_expiry() -> None:
    clock = FakeClock()
    d = Deadline.after(10.0, clock)
    assert d.remaining() == 10.0 and not d.expired()
    assert d.share(0.25) == 2.5 and d.share(2.0) == 10.0 and d.share(-1.0) == 0.0
    clock.advance(4.0)
    assert d.remaining() == 6.0 and d.share(0.5) == 3.0
    clock.advance(7.0)
    assert d.remaining() == 0.0 and d.expired() and d.share(1.0) == 0.0


def test_sub_deadlines_end_no_later_than_their_parent() -> None:
    clock = FakeClock()
    d = Deadline.after(12.0, clock)
    half = d.sub(0.5)
    assert half.remaining() == 6.0 and half.end <= d.end
    assert d.sub(3.0).end == d.end
    clock.advance(8.0)
    assert half.expired() and d.remaining() == 4.0


def test_reserve_keeps_time_for_later_phases() -> None:
    clock = FakeClock()
    d = Deadline.after(10.0, clock)
    work = d.reserve(1.5)
    assert work.remaining() == 8.5 and d.remaining() == 10.0
    assert d.reserve(20.0).expired()


def test_phases_share_by_weight_and_pass_on_unused_time() -> None:
    clock = FakeClock()
    phases = Phases(Deadline.after(100.0, clock), {"a": 2.0, "b": 1.0, "c": 1.0})
    a = phases.share("a")
    assert a == 50.0
    clock.advance(10.0)  # "a" finished early: "b" and "c" share what it left
    b = phases.share("b")
    assert b == 45.0
    clock.advance(b)
    c = phases.share("c")
    assert c == 45.0
    assert 10.0 + b + c <= 100.0


def test_phases_that_never_run_leave_their_time_to_the_next() -> None:
    clock = FakeClock()
    phases = Phases(Deadline.after(60.0, clock), {"a": 1.0, "b": 1.0, "c": 1.0})
    assert phases.share("b") == 30.0  # "a" skipped
    assert list(phases.todo) == ["c"]
    sub = phases.sub("c")
    assert sub.remaining() == 60.0


def test_shares_of_every_phase_never_exceed_the_whole() -> None:
    clock = FakeClock()
    weights = {"plan": 4.0, "re-plan": 3.0, "milp": 1.0, "check": 2.0, "repair": 1.5}
    phases = Phases(Deadline.after(30.0, clock), weights)
    used = 0.0
    for name in weights:
        seconds = phases.share(name)
        clock.advance(seconds)  # every phase uses its whole share
        used += seconds
    assert used <= 30.0 + 1e-9


def test_command_start_counts_the_process_start_for_the_console_script() -> None:
    """The console script's time limit counts the interpreter and the imports; a call from Python
    counts from the call."""
    assert process_age_s() > 0.0
    assert command_start(whole_process=True) < command_start(whole_process=False)
