"""kube-scheduler's filters against the brute force (issue 40): tiny instances of :mod:`tests._brute` with
taints, tolerations, node selectors, required node affinity and advertised resources drawn on them, and
every solver path judged against the true optimum, which the brute force finds with the validator (rule
``scheduling`` included) as its only judge: each plan valid, its objective reported as its queue term,
its bound never above the optimum, ``OPTIMAL`` only at the optimum.

Instances are drawn with waiting work only, with running work that may have drifted (a running replica
on a node whose taints or labels now refuse it: kept while it stays), and with sharing-mode changes
allowed (the device plugin's resources follow the mode).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gpuplan.models.inputs import PlanningInput
from gpuplan.models.rules.scheduling import admits
from tests._brute import PATHS, NoValidPlan, Optimum, TooLarge, instances, judge, optimum

SETTINGS: dict[str, Any] = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "phases": [Phase.explicit, Phase.generate],
    "suppress_health_check": list(HealthCheck),
}
#: Instances per path and group (the same instances for every path: derandomised).
EXAMPLES = 25

TAINTS = st.sampled_from(
    [
        [],
        [],
        ["dedicated=x:NoSchedule"],
        ["spot:PreferNoSchedule"],
        ["gpu:NoExecute"],
        ["dedicated=y:NoSchedule"],
    ]
)
TOLERATIONS = st.sampled_from(
    ["", "", "dedicated=x:NoSchedule", "dedicated:NoSchedule", "*", "gpu:NoExecute"]
)
RESOURCES = st.sampled_from(
    [[], [], ["nvidia.com/gpu"], ["nvidia.com/gpu.shared"], ["nvidia.com/gpu", "nvidia.com/mig-1g.6gb"]]
)
ASKS = st.sampled_from([None, None, "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.6gb"])
SELECTORS = st.sampled_from([{}, {}, {}, {"rack": "r0"}])
AFFINITY = st.sampled_from(["", "", "", "rack in (r1)", "!rack", "rack notin (r0) | rack in (r0),rack"])


@st.composite
def scheduling_instances(draw: st.DrawFn, *, features: frozenset[str]) -> PlanningInput:
    """A :func:`tests._brute.instances` input with kube-scheduler's filters drawn on its nodes and
    workloads."""
    inp = draw(instances(features=features, max_replicas=4))
    data = inp.model_dump(mode="json", by_alias=True, exclude_none=True)
    for node in data["cluster"]["nodes"]:
        node["taints"] = draw(TAINTS)
        node["resources"] = draw(RESOURCES)
    for w in data["workloads"]:
        w["tolerations"] = draw(TOLERATIONS)
        w["node_selector"] = draw(SELECTORS)
        w["node_affinity"] = draw(AFFINITY)
        ask = draw(ASKS)
        if ask is not None:
            w["resource"] = ask
    return PlanningInput.model_validate(data)


_OPTIMA: dict[str, Optimum | None] = {}


def _optimum(inp: PlanningInput) -> Optimum | None:
    key = inp.model_dump_json()
    if key not in _OPTIMA:
        try:
            _OPTIMA[key] = optimum(inp)
        except (NoValidPlan, TooLarge):
            _OPTIMA[key] = None
    return _OPTIMA[key]


def _refuses(inp: PlanningInput) -> bool:
    return any(
        admits(n, w, s) is not None for n in inp.cluster.nodes for w in inp.workloads for s in w.shapes
    )


#: Waiting work only; running work that may have drifted; sharing-mode changes (a node switched to
#: time-slicing advertises ``nvidia.com/gpu.shared`` instead of ``nvidia.com/gpu``).
GROUPS = {
    "waiting": frozenset(),
    "running": frozenset({"running", "drift"}),
    "sharing": frozenset({"sharing-change"}),
}


@pytest.mark.parametrize("group", sorted(GROUPS))
@pytest.mark.parametrize("path", PATHS)
def test_every_path_reaches_the_optimum_under_the_filters(path: str, group: str) -> None:
    seen = {"refusing": 0}

    @settings(max_examples=EXAMPLES, **SETTINGS)
    @given(inp=scheduling_instances(features=GROUPS[group]))
    def check(inp: PlanningInput) -> None:
        best = _optimum(inp)
        if best is None:
            return
        seen["refusing"] += _refuses(inp)
        verdict = judge(inp, best.cost, path)
        assert not verdict.problems, (verdict, inp.model_dump_json(exclude_defaults=True))

    check()
    assert seen["refusing"], "no drawn instance had a node that refuses a workload"
