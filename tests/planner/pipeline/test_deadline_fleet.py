"""The time limit on fleets: the greedy start stops at its deadline (what it did not reach waits,
labelled), a deterministic plan does not depend on how fast the machine is, and a plan the wall clock
cut anyway says so in words. Clocks are fakes: no test waits or measures time."""

from __future__ import annotations

import itertools
import logging
import random
import time
from dataclasses import replace
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from gpuplan.models import PlanningInput, default_catalog
from gpuplan.planner.pipeline.compile import compile_problem
from gpuplan.planner.pipeline.deadline import MIN_SOLVE_S, RESERVE_SHARE, Deadline, solve_share
from gpuplan.planner.planning import make_plan
from gpuplan.planner.presentation import summary
from gpuplan.solvers.base import CUT, SolveResult
from gpuplan.solvers.cpsat import CpSat
from gpuplan.solvers.cpsat.lns import improve
from gpuplan.solvers.fleet import engine as fleet_engine
from gpuplan.solvers.fleet import generation
from gpuplan.solvers.greedy import Fgd
from gpuplan.solvers.greedy import engine as greedy_engine
from gpuplan.solvers.problem import PlacementProblem
from gpuplan.solvers.run_options import RunOptions
from tests._clock import FakeClock

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)


def _inp(nodes: int, work: list[dict[str, Any]]) -> PlanningInput:
    cluster = {
        "nodes": [
            {
                "name": f"n{i}",
                "cpu_milli": 64000,
                "memory_mib": 1_000_000,
                "gpus": [{"index": 0, "model": "L40S-48GB"}],
            }
            for i in range(nodes)
        ]
    }
    return PlanningInput.model_validate({"cluster": cluster, "workloads": work, "policy": {}})


class _Ticks:
    """A clock that reads 0, 1, 2, ... : the n-th reading is n."""

    def __init__(self) -> None:
        self.calls = itertools.count()

    def __call__(self) -> float:
        return float(next(self.calls))


def test_the_greedy_loop_stops_at_its_deadline_and_labels_what_it_did_not_reach() -> None:
    """Four one-GPU nodes; queue by priority: a, the gang g (2 replicas), b, c. The clock reads 0, 1, 2,
    ... once per replica or gang reached and the deadline is 2: a and the gang are placed (readings 0
    and 1), b and c are not reached (reading 2), although there is room for b."""
    work = [
        {"id": "a", "gpus": 1, "priority": 9},
        {"id": "g", "gpus": 1, "replicas": 2, "gang": "g", "priority": 8},
        {"id": "b", "gpus": 1, "priority": 7},
        {"id": "c", "gpus": 1, "priority": 6},
    ]
    problem = compile_problem(_inp(4, work), default_catalog(), NOW)
    out = Fgd().place(problem, RunOptions(), deadline=2.0, clock=_Ticks())
    assert sorted((a.workload, a.replica) for a in out.assignments) == [("a", 0), ("g", 0), ("g", 1)]
    assert sorted((u.workload, u.code) for u in out.unplaced) == [
        ("b", "SOLVER_LIMIT"),
        ("c", "SOLVER_LIMIT"),
    ]
    assert out.terms[greedy_engine.GREEDY_CUT] == 2
    assert CUT not in out.terms  # not a deterministic run
    whole = Fgd().place(problem, RunOptions())
    assert len(whole.assignments) == 4 and greedy_engine.GREEDY_CUT not in whole.terms


def _stopping_clock(readings: int) -> SimpleNamespace:
    """A stand-in for the ``time`` module whose ``perf_counter`` jumps an hour ahead after ``readings``
    readings (a machine that stalls in the middle of the greedy loop)."""
    count = itertools.count()

    def perf_counter() -> float:
        return time.perf_counter() + (3600.0 if next(count) >= readings else 0.0)

    return SimpleNamespace(perf_counter=perf_counter)


@pytest.mark.parametrize("deterministic", [False, True])
def test_a_greedy_plan_cut_by_the_clock_is_valid_and_the_summary_says_so(
    deterministic: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six one-GPU replicas on four one-GPU nodes (distinct priorities): the greedy back-end's clock
    stalls after its deadline, its start and three loop readings, so it places w0-w2 and does not reach
    w3-w5. The plan is valid (make_plan validates it); the pass after the solve that starts what fits
    now fills the fourth GPU with w3; w4 and w5 wait. The summary says the time limit cut the greedy
    placement, and for a deterministic plan that a repeat may differ."""
    work = [{"id": f"w{i}", "gpus": 1, "priority": 10 - i} for i in range(6)]
    monkeypatch.setattr(greedy_engine, "time", _stopping_clock(2 + 3))
    inp = _inp(4, work)
    plan = make_plan(inp, solver="greedy-fgd", now=NOW, time_limit_s=10, deterministic=deterministic)
    assert plan.solver.terms["placed"] == 3
    assert plan.solver.terms[greedy_engine.GREEDY_CUT] == 3
    assert sorted(a.workload for a in plan.assignments) == ["w0", "w1", "w2", "w3"]
    assert sorted(u.workload for u in plan.unplaced) == ["w4", "w5"]
    assert (CUT in plan.solver.terms) is deterministic
    line = summary.wall_clock_cut(plan)
    assert line is not None and "did not reach 3 replica(s)" in line
    assert ("a repeat with the same input and seed may differ" in line) is deterministic
    assert line in summary.render(plan, inp)


def _fleet_input(seed: int) -> PlanningInput:
    rng = random.Random(seed)
    sizes = [{"gpus": 1}, {"gpus": 2}, {"gpu_milli": 500}, {"gpu_milli": 300}, {}]
    nodes = [
        {
            "name": f"n{i}",
            "cpu_milli": rng.choice([8000, 16000, 32000]),
            "memory_mib": 1_000_000,
            "gpus": [{"index": g, "model": "L40S-48GB"} for g in range(rng.choice([1, 2, 4]))],
        }
        for i in range(6)
    ]
    work = [
        {"id": f"p{i}", "cpu_milli": rng.choice([1000, 2000, 4000]), **rng.choice(sizes)} for i in range(40)
    ]
    return PlanningInput.model_validate({"cluster": {"nodes": nodes}, "workloads": work, "policy": {}})


def _slow_time(factor: float) -> SimpleNamespace:
    """A stand-in for the ``time`` module on a machine ``factor`` times slower: every interval the
    planner measures looks ``factor`` times longer."""
    origin = time.perf_counter()
    return SimpleNamespace(perf_counter=lambda: origin + factor * (time.perf_counter() - origin))


@pytest.mark.parametrize("seed", [1, 2])
def test_a_deterministic_fleet_plan_is_the_same_on_a_slow_machine(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The configuration path with the same seed gives the same plan when every phase looks 200 times
    slower (column generation bounded by rounds, the integer master by nodes, the first plans complete)
    and is not marked as cut."""
    problem = compile_problem(_fleet_input(seed), default_catalog(), NOW)
    options = RunOptions(time_limit_s=20, seed=3, deterministic=True)
    quick = fleet_engine.plan_fleet(problem, options, time.perf_counter() + 600)
    slow_time = _slow_time(200.0)
    for module in (fleet_engine, generation, greedy_engine):
        monkeypatch.setattr(module, "time", slow_time)
    slow = fleet_engine.plan_fleet(problem, options, slow_time.perf_counter() + 600)
    assert slow.result.assignments == quick.result.assignments
    assert slow.result.mig_layouts == quick.result.mig_layouts
    assert CUT not in slow.result.terms and CUT not in quick.result.terms
    assert slow.configuration is not None
    assert slow.configuration.rounds <= int(fleet_engine.DETERMINISTIC_ROUNDS_PER_S * 20)


def test_a_deterministic_solve_keeps_its_share_after_a_slow_start_up() -> None:
    """A 20 s limit keeps 15% (3 s) for start-up and output: the solve's share is 17 s. A start-up of
    10 s leaves 9.5 s before the output's 0.5 s: a deterministic solve keeps 17 s (its plan must not
    depend on the start-up), others get 9.5 s; past the limit, others get the shortest solve."""
    clock = FakeClock()
    deadline = Deadline.after(20.0, clock)
    clock.advance(10.0)
    assert (
        solve_share(20.0, deadline, deterministic=True) == pytest.approx(17.0) == 20.0 * (1 - RESERVE_SHARE)
    )
    assert solve_share(20.0, deadline) == pytest.approx(9.5)
    clock.advance(30.0)
    assert solve_share(20.0, deadline) == MIN_SOLVE_S
    assert solve_share(20.0, deadline, deterministic=True) == pytest.approx(17.0)


# A 10 s limit keeps 1.5 s (15%) for start-up and output, 0.5 s of it after the solve: the solve's
# share is 8.5 s. Each case: the start-up's seconds, deterministic, the share, the level, the text.
SHARE_NOTES = [
    (1.0, False, 8.5, None, None),
    (1.0, True, 8.5, None, None),
    (
        1.5, False, 8.0, logging.INFO,
        "start-up took 1.5 s of the 10 s limit; the solve's share is cut from 8.5 s to 8.0 s to end on time",
    ),
    (
        6.0, False, 3.5, logging.WARNING,
        "start-up took 6.0 s of the 10 s limit; the solve's share is cut from 8.5 s to 3.5 s to end on time",
    ),
    (
        6.0, True, 8.5, logging.WARNING,
        "start-up took 6.0 s of the 10 s limit; a deterministic solve keeps its 8.5 s share, so the command"
        " will end about 5.0 s late",
    ),
    (
        9.5, False, MIN_SOLVE_S, logging.WARNING,
        "start-up took 9.5 s of the 10 s limit; the solve gets the shortest run (0.1 s) and the command will"
        " end about 0.1 s late",
    ),
    (
        9.42, False, MIN_SOLVE_S, logging.WARNING,
        "start-up took 9.4 s of the 10 s limit; the solve gets the shortest run (0.1 s) and the command will"
        " end less than 0.1 s late",
    ),
    (
        12.0, False, MIN_SOLVE_S, logging.WARNING,
        "start-up took 12.0 s past the 10 s limit; the solve gets the shortest run (0.1 s) and the command"
        " will end about 2.6 s late",
    ),
    (
        12.0, True, 8.5, logging.WARNING,
        "start-up took 12.0 s past the 10 s limit; a deterministic solve keeps its 8.5 s share, so the"
        " command will end about 11.0 s late",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("start_up_s", "deterministic", "share", "level", "text"), SHARE_NOTES)
def test_the_command_says_what_a_slow_start_up_did_to_the_solve_and_the_end(
    start_up_s: float,
    deterministic: bool,
    share: float,
    level: int | None,
    text: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    deadline = Deadline.after(10.0, clock)
    clock.advance(start_up_s)
    with caplog.at_level(logging.INFO, logger="gpuplan"):
        assert solve_share(10.0, deadline, deterministic=deterministic) == pytest.approx(share)
    notes = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert notes == ([] if level is None else [(level, text)])


@pytest.mark.parametrize("stopped", [False, True])
def test_a_search_step_the_wall_clock_stopped_marks_the_deterministic_search_as_cut(stopped: bool) -> None:
    """Six one-GPU replicas on four one-GPU nodes: two always wait, so a deterministic search takes
    steps. A step whose CP-SAT stage the wall clock stopped (its result carries CUT) makes the whole
    search cut; steps that ran to their deterministic limits do not."""
    work = [{"id": f"w{i}", "gpus": 1} for i in range(6)]
    problem = compile_problem(_inp(4, work), default_catalog(), NOW)
    options = RunOptions(time_limit_s=2, deterministic=True)

    def step(sub: PlacementProblem, sub_options: RunOptions, movable: set[int]) -> SolveResult:
        out = CpSat(movable_running=movable, decompose=False).solve(sub, sub_options)
        return replace(out, terms={**out.terms, **({CUT: 1.0} if stopped else {})})

    _, report = improve(problem, options, Fgd().place(problem, options), time.perf_counter() + 600, step)
    assert report.steps >= 1
    assert report.cut is stopped
