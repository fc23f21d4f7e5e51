"""The one place a CP-SAT solver is made and its parameters set: every ``CpSolver`` of the back-ends (the
exact model's stages, the check of a plan against that model, the fleet engine's pricing) comes from
:func:`cp_solver`, so that the parameters a solve runs with are read here (``tests/solvers`` scans the
tree for any other). A parameter left out keeps CP-SAT's default: nothing is set that the caller did not
ask for.
"""

from __future__ import annotations

from collections.abc import Callable

from ortools.sat.python import cp_model


def cp_solver(
    *,
    time_limit_s: float | None = None,
    deterministic_s: float | None = None,
    workers: int | None = None,
    seed: int | None = None,
    interleave: bool = False,
    hint_conflict_limit: int | None = None,
    fast_presolve: bool = False,
    linearization_level: int | None = None,
    fix_to_hint: bool = False,
    log: Callable[[str], None] | None = None,
) -> cp_model.CpSolver:
    """A CP-SAT solver with these parameters (``None`` or false: CP-SAT's default).

    - ``time_limit_s``: wall-clock seconds (``max_time_in_seconds``); ``deterministic_s``: deterministic
      seconds (``max_deterministic_time``), the limit that makes a solve repeat.
    - ``workers``: search threads (``num_workers``); ``seed``: ``random_seed``.
    - ``interleave``: run the portfolio's subsolvers in turn, in fixed batches (``interleave_search``,
      what a deterministic solve needs).
    - ``hint_conflict_limit``: conflicts spent completing the solution hint before it is dropped.
    - ``fast_presolve``: no symmetry detection and no probing in presolve (``symmetry_level`` and
      ``cp_model_probing_level`` 0), which take seconds on fleet-sized models for little gain.
    - ``linearization_level``: how much of the model goes into the LP relaxation.
    - ``fix_to_hint``: every hinted variable fixed to its hint (``fix_variables_to_their_hinted_value``):
      the solve checks the hint rather than searches.
    - ``log``: where CP-SAT's search log goes (``log_search_progress`` on), if anywhere.
    """
    solver = cp_model.CpSolver()
    p = solver.parameters
    if time_limit_s is not None:
        p.max_time_in_seconds = time_limit_s
    if deterministic_s is not None:
        p.max_deterministic_time = deterministic_s
    if workers is not None:
        p.num_workers = workers
    if seed is not None:
        p.random_seed = seed
    if interleave:
        p.interleave_search = True
    if hint_conflict_limit is not None:
        p.hint_conflict_limit = hint_conflict_limit
    if fast_presolve:
        p.symmetry_level = 0
        p.cp_model_probing_level = 0
    if linearization_level is not None:
        p.linearization_level = linearization_level
    if fix_to_hint:
        p.fix_variables_to_their_hinted_value = True
    if log is not None:
        p.log_search_progress = True
        solver.log_callback = log
    return solver
