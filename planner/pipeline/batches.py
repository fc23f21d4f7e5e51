"""The batch search the mode pre-passes share: switches tried in growing batches, kept while they pay.

The sharing pre-pass (:mod:`~planner.pipeline.sharing`) flips nodes' sharing modes and the MIG mode
pre-pass (:mod:`~planner.pipeline.migmode`) switches GPUs' MIG modes; both choose the same way. Units
(a node, or a node's GPUs of one direction) come grouped by kind of node, since nodes of one kind gain
or lose alike; the caller's ``penalty`` is the tier-weighted queue penalty the greedy leaves waiting
with a set of units switched, and ``worth`` says whether a gain pays for a batch's changes. Each kind
takes a number of trials logarithmic in its units, so large fleets stay quick.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

U = TypeVar("U")


def search_batches(
    kinds: Iterable[Sequence[U]],
    penalty: Callable[[Sequence[U]], int],
    worth: Callable[[int, Sequence[U]], bool],
    *,
    max_trials: int,
    budget_s: float | None = None,
    all_first: bool = False,
) -> tuple[list[U], int]:
    """The units to switch, and the trials run (the penalty of no switch is not counted).

    Within each kind, units are tried in growing batches (1, 2, 4, ... in the given order) while a
    batch pays and in halving batches after one that does not; a batch that pays is trimmed from its
    end while that does not raise the penalty (its last switches may have cost other shapes their
    place). With ``all_first``, every unit of a kind of several is tried at once first and, when that
    pays, halved from the end while the penalty does not rise (the batches are then skipped). Trials
    stop when nothing waits, after ``max_trials`` and, if given, after ``budget_s`` seconds."""
    stop = None if budget_s is None else time.perf_counter() + budget_s
    chosen: list[U] = []
    best = penalty(chosen)
    trials = 0

    def in_time() -> bool:
        return trials < max_trials and (stop is None or time.perf_counter() <= stop)

    def more() -> bool:
        return best > 0 and in_time()

    for units in kinds:
        if all_first and len(units) > 1 and more():
            found = penalty([*chosen, *units])
            trials += 1
            if worth(best - found, units):
                chosen, best = [*chosen, *units], found
                keep = len(units)
                while keep > 1 and in_time():
                    fewer = [u for u in chosen if u not in units[keep // 2 : keep]]
                    found = penalty(fewer)
                    trials += 1
                    if found > best:
                        break
                    chosen, best, keep = fewer, found, keep // 2
                continue
        at, step = 0, 1
        while at < len(units) and more():
            batch = units[at : at + step]
            trial = [*chosen, *batch]
            found = penalty(trial)
            trials += 1
            if worth(best - found, batch):
                chosen, best = trial, found
                for cut in range(len(batch) - 1, 0, -1):
                    if not in_time():
                        break
                    fewer = [u for u in chosen if u not in batch[cut:]]
                    found = penalty(fewer)
                    trials += 1
                    if found > best:
                        break
                    chosen, best = fewer, found
                at += len(batch)
                step *= 2
            elif step == 1:
                break
            else:
                step //= 2
    return chosen, trials
