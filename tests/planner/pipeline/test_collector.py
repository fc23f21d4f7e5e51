"""The collector's thresholds while plans are made: raised inside, the process's own ones back after."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from gpuplan.models import Workload
from gpuplan.planner.pipeline.collector import YOUNG_THRESHOLD, collector_spaced_out
from gpuplan.planner.planning import make_plan
from tests._factories import gpus, node, planning_input


@pytest.fixture(autouse=True)
def _thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_raised_inside_and_restored_after() -> None:
    gc.set_threshold(700, 10, 10)
    with collector_spaced_out():
        young, older, oldest = gc.get_threshold()
        assert young == YOUNG_THRESHOLD
        assert older >= 10 and oldest >= 10
    assert gc.get_threshold() == (700, 10, 10)


def test_higher_thresholds_are_kept() -> None:
    gc.set_threshold(10 * YOUNG_THRESHOLD, 500, 500)
    with collector_spaced_out():
        assert gc.get_threshold() == (10 * YOUNG_THRESHOLD, 500, 500)
    assert gc.get_threshold() == (10 * YOUNG_THRESHOLD, 500, 500)


def test_collection_turned_off_stays_off() -> None:
    gc.set_threshold(0, 10, 10)
    with collector_spaced_out():
        assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0


def test_restored_after_an_error() -> None:
    gc.set_threshold(700, 10, 10)
    with pytest.raises(RuntimeError), collector_spaced_out():
        raise RuntimeError("planning failed")
    assert gc.get_threshold() == (700, 10, 10)


def test_overlapping_plans_restore_only_after_the_last() -> None:
    gc.set_threshold(700, 10, 10)
    first_in, second_done, seen = threading.Event(), threading.Event(), []

    def first() -> None:
        with collector_spaced_out():
            first_in.set()
            second_done.wait(10)
            seen.append(gc.get_threshold()[0])  # the other plan ended: still raised for this one

    t = threading.Thread(target=first)
    t.start()
    first_in.wait(10)
    with collector_spaced_out():
        pass
    second_done.set()
    t.join(10)
    assert seen == [YOUNG_THRESHOLD]
    assert gc.get_threshold() == (700, 10, 10)


def test_make_plan_leaves_the_thresholds_as_it_found_them() -> None:
    inp = planning_input(
        [node("n1", gpus=gpus("H100-80GB", [0, 0]))],
        [Workload(id="w", gpus=1)],
    )
    gc.set_threshold(700, 10, 10)
    plan = make_plan(inp, solver="greedy-fgd", time_limit_s=5)
    assert [a.node for a in plan.assignments] == ["n1"]
    assert gc.get_threshold() == (700, 10, 10)
