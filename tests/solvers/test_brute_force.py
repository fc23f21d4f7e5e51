"""The brute force of the differential harness (:mod:`tests._brute`) judges by the validator alone.

Its enumeration restates no rule (every placement a shape defines, every MIG start, every sharing mode),
and its cuts are the validator's own verdict on partial plans for the rules that stay broken once broken
(:data:`tests._brute.MONOTONE_RULES`), the bound and the order of interchangeable waiting replicas. These
tests are the proof that the cuts keep every valid plan: on every stratum of instances, plain enumeration
(the bound only) finds the same optimum. The strata draw legal running states and make their rules bind.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gpuplan.models.inputs import PlanningInput
from gpuplan.planner.validation.validate import validate_plan
from tests._brute import (
    CATALOG,
    KNOWN_STRATUM,
    MONOTONE_RULES,
    TooLarge,
    _Search,
    current_plan,
    instances,
    optimum,
    placements,
    strata,
)

SETTINGS: dict[str, Any] = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "phases": [Phase.explicit, Phase.generate],
    "suppress_health_check": list(HealthCheck),
}
#: Instances per stratum for plain enumeration, and its node limit (an instance past it is not compared).
PRUNE_EXAMPLES, PLAIN_NODES = 8, 5000

#: Every stratum, cut down where plain enumeration would be too slow, and the generic instances.
SMALL: dict[str, st.SearchStrategy[PlanningInput]] = {
    **strata(small=True),
    "known": KNOWN_STRATUM,
    "generic": instances(max_replicas=3),
}


@pytest.mark.parametrize("stratum", sorted(SMALL))
def test_the_cuts_keep_every_valid_plan(stratum: str) -> None:
    """The cuts (partial verdicts on :data:`MONOTONE_RULES`, the order of twin replicas) never change the
    optimum: plain enumeration of every plan, judged whole by the validator, finds the same one (or the
    same absence of one). At least half the instances must be small enough to compare."""
    compared: list[int | None] = []

    @settings(max_examples=PRUNE_EXAMPLES, **SETTINGS)
    @given(inp=SMALL[stratum])
    def check(inp: PlanningInput) -> None:
        cut = _Search(inp, CATALOG, prune=True)
        cut.run()
        plain = _Search(inp, CATALOG, prune=False, max_nodes=PLAIN_NODES)
        try:
            plain.run()
        except TooLarge:
            return
        compared.append(plain.best)
        assert cut.best == plain.best, inp.model_dump_json(exclude_defaults=True)

    check()
    assert len(compared) >= PRUNE_EXAMPLES // 2, f"only {len(compared)} instance(s) small enough to compare"


def test_the_cut_rules_are_the_validators() -> None:
    """The search cuts on rule names the validator reports; ``preempt-higher-tier`` (a replica started
    later may allow the preemption) is not one of them."""
    assert "preempt-higher-tier" not in MONOTONE_RULES
    assert {"quota", "disruption-budget", "min-runtime", "gang", "sharing-replicas"} <= MONOTONE_RULES


@pytest.mark.parametrize("stratum", sorted(set(SMALL) - {"known", "generic"}))
def test_the_strata_draw_legal_running_states(stratum: str) -> None:
    """Outside the known stratum (drift on purpose), the running states drawn are valid plans as they
    stand."""

    @settings(max_examples=10, **SETTINGS)
    @given(inp=SMALL[stratum])
    def check(inp: PlanningInput) -> None:
        assert validate_plan(current_plan(inp), inp, CATALOG) == []

    check()


def test_placements_restate_no_rule() -> None:
    """A 2g.12gb replica may be tried at every memory slice of an A30 (valid starts 0 and 2 only), on a
    GPU of a node reserved for another team, and a whole GPU on a model the workload does not allow: the
    validator says no, not the enumeration."""
    inp = PlanningInput.model_validate(
        {
            "cluster": {
                "nodes": [
                    {
                        "name": "n",
                        "cpu_milli": 1000,
                        "memory_mib": 1024,
                        "gpus": [{"index": 0, "model": "A30-24GB", "mig": {"instances": []}}],
                    }
                ]
            },
            "workloads": [
                {"id": "m", "team": "a", "mig_profile": "2g.12gb"},
                {"id": "w", "team": "a", "gpus": 1, "gpu_models": ["L4-24GB"], "cpu_milli": 4000},
            ],
            "policy": {
                "teams": ["a", "b"],
                "isolation": [{"kind": "team-exclusive", "team": "b", "nodes": ["n"]}],
            },
        }
    )
    m, w = inp.workloads
    assert sorted(o.uses[0].mig_start or 0 for o in placements(inp, m, CATALOG)) == [0, 1, 2, 3]
    assert [o.node for o in placements(inp, w, CATALOG)] == ["n"]
    assert optimum(inp).cost == 3 * 50 * 8 + 3 * 100 * 8


def test_a_plan_with_an_invalid_start_is_judged_by_the_validator() -> None:
    """On an A30 whose 1g.6gb instances at 0 and 3 run replicas that may not stop, a 2g.12gb fits only at
    memory slice 1, which is not a valid start: the validator rejects it, so the replica waits."""
    running = [
        {
            "id": f"r{s}",
            "mig_profile": "1g.6gb",
            "started_at": "2026-01-05T07:00:00+00:00",
            "running_on": [{"node": "n", "gpus": [{"index": 0, "mig_profile": "1g.6gb", "mig_start": s}]}],
        }
        for s in (0, 3)
    ]
    layout = {"instances": [{"profile": "1g.6gb", "start": 0}, {"profile": "1g.6gb", "start": 3}]}
    gpus = [{"index": 0, "model": "A30-24GB", "mig": layout}]
    inp = PlanningInput.model_validate(
        {
            "cluster": {"nodes": [{"name": "n", "cpu_milli": 4000, "memory_mib": 4096, "gpus": gpus}]},
            "workloads": [*running, {"id": "w", "mig_profile": "2g.12gb"}],
            "policy": {"mig": {"allow_repartition": True}},
        }
    )
    plain = _Search(inp, CATALOG, prune=False)
    plain.run()
    found = optimum(inp)
    assert plain.best == found.cost == 3 * 50 * 8
    assert [u.workload for u in found.plan.unplaced] == ["w"]
