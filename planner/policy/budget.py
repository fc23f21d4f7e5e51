"""The seconds each plan of a policy review gets: the review's solve share of its time limit, split evenly
among its plans (``gpuplan policy-cost`` and ``replay``, and their REST jobs, call this one rule)."""

from __future__ import annotations

from gpuplan.models.base import InputError
from gpuplan.planner.pipeline.deadline import Deadline, solve_share

#: The fewest seconds one plan of a review may get: less gives plans that say little.
MIN_SECONDS_EACH = 1.0


def seconds_each(
    time_limit_s: float,
    runs: int,
    deadline: Deadline | None = None,
    *,
    deterministic: bool,
    option: str = "--time-limit",
) -> float:
    """The seconds each of ``runs`` plans gets: the solve share of ``time_limit_s`` (by ``deadline``, the
    review's: by default ``time_limit_s`` from now) split evenly; an input error naming ``option`` (the
    flag or field that gave the limit) when the limit is not positive or leaves less than
    :data:`MIN_SECONDS_EACH` each."""
    if time_limit_s <= 0:
        raise InputError(f"{option}: must be more than 0 seconds")
    deadline = deadline or Deadline.after(time_limit_s)
    each = solve_share(time_limit_s, deadline, deterministic=deterministic) / max(1, runs)
    if each < MIN_SECONDS_EACH:
        raise InputError(
            f"{option} {time_limit_s:g}: {runs} plans would get {each:.2f} s each, less than "
            f"{MIN_SECONDS_EACH:g} s; give a longer {option}"
        )
    return each
