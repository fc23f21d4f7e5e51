"""Hypothesis: every plan from every solver passes the independent validator, on random small
clusters, demands and policies (``make_plan`` raises ``InvalidPlanError`` otherwise), with and without
work already running under a disruption budget."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.models import PlanningInput
from gpuplan.planner.planning import make_plan

NOW = datetime(2026, 11, 29, 12, tzinfo=UTC)
SOLVERS = ["first-fit", "best-fit", "greedy-fgd", "cpsat", "milp-highs"]
TEAMS = ["a", "b", "c"]
TIERS = ["latency-sensitive", "standard", "background"]
H100_LAYOUTS: list[list[tuple[str, int]]] = [
    [],
    [("3g.40gb", 4)],
    [("4g.40gb", 0), ("3g.40gb", 4)],
    [("1g.10gb", s) for s in range(7)],
    [("2g.20gb", 0), ("2g.20gb", 2), ("1g.10gb", 6)],
]


#: Sharing modes a drawn GPU node may have (``None``: no mode, whole GPUs and fractions both allowed).
SHARING_MODES: list[Any] = [
    None,
    "exclusive",
    {"time-slicing": {"replicas": 4}},
    {"time-slicing": {"replicas": 2}},
    {"time-slicing": {"replicas": 1}},
]


@st.composite
def nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["dgx", "nvl", "l40s", "cpu"]))
        node: dict[str, Any] = {
            "name": f"n{i}",
            "cpu_milli": draw(st.sampled_from([8000, 32000, 128000])),
            "memory_mib": draw(st.sampled_from([65536, 524288])),
            "pool": draw(st.sampled_from(["p1", "p2"])),
            "labels": {"rack": draw(st.sampled_from(["r1", "r2"]))},
        }
        if kind == "dgx":
            node["topology"] = "dgx-h100"
            node["gpus"] = [
                {
                    "index": g,
                    "model": "H100-80GB",
                    "numa": 1,
                    "mig": {"instances": [{"profile": p, "start": s} for p, s in lay]},
                }
                for g, lay in (
                    (6, draw(st.sampled_from(H100_LAYOUTS))),
                    (7, draw(st.sampled_from(H100_LAYOUTS))),
                )
            ]
        elif kind == "nvl":
            node["topology"] = "pcie-4x-h100-nvl-bridged"
        elif kind == "l40s":
            node["gpus"] = [
                {"index": g, "model": "L40S-48GB", "numa": g // 2} for g in range(draw(st.integers(1, 4)))
            ]
        mode = draw(st.sampled_from(SHARING_MODES))
        if mode is not None and kind != "cpu":
            node["sharing"] = mode
        out.append(node)
    return out


@st.composite
def workloads(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(1, 8))):
        w: dict[str, Any] = {
            "id": f"w{i}",
            "team": draw(st.sampled_from(TEAMS)),
            "tier": draw(st.sampled_from(TIERS)),
            "priority": draw(st.integers(0, 2)),
            "cpu_milli": draw(st.sampled_from([0, 1000, 16000])),
            "memory_mib": draw(st.sampled_from([0, 16384])),
            "preemptible": draw(st.booleans()),
            "queued_since": f"2026-11-29T{draw(st.integers(0, 11)):02d}:00:00Z",
        }
        kind = draw(st.sampled_from(["whole", "frac", "mig", "alt", "gang", "cpu", "memory"]))
        if kind == "whole":
            w.update(
                gpus=draw(st.integers(1, 4)),
                topology=draw(st.sampled_from(["any", "nvlink", "numa", "same-node"])),
            )
            if draw(st.integers(0, 3)) == 0:
                w["gpu_memory_mib"] = 60000  # fits an H100 (81920 MiB), not an L40S (49152 MiB)
        elif kind == "frac":
            w.update(gpu_milli=draw(st.sampled_from([100, 250, 500, 700])), replicas=draw(st.integers(1, 3)))
            if draw(st.booleans()):
                w["gpu_memory_mib"] = draw(st.sampled_from([12288, 20480, 30720]))
        elif kind == "memory":  # a memory-only ask: a fraction limited by GPU memory, not compute
            w.update(gpu_memory_mib=draw(st.sampled_from([16384, 30720])), replicas=draw(st.integers(1, 3)))
        elif kind == "mig":
            w.update(mig_profile=draw(st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"])))
            w["gpu_models"] = "H100-80GB"
        elif kind == "alt":
            w["alternatives"] = [
                {"gpus": 2, "topology": "nvlink"},
                {"gpus": 1, "gpu_models": ["L40S-48GB"]},
                {"mig_profile": "3g.40gb"},
            ]
        elif kind == "gang":
            w.update(gpus=draw(st.integers(1, 2)), replicas=2, gang="true")
            if draw(st.booleans()):
                w["gang_domain"] = "rack"
        out.append(w)
    return out


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "mig": {"allow_create": draw(st.booleans()), "allow_repartition": draw(st.booleans())}
    }
    rules: list[dict[str, Any]] = []
    if draw(st.booleans()):
        rules.append({"kind": "no-shared-gpu-across-teams"})
    if draw(st.booleans()):
        rules.append({"kind": "tiers-no-share", "tiers": ["latency-sensitive", "background"]})
    if draw(st.booleans()):
        rules.append({"kind": "team-exclusive", "team": "a", "pool": "p1"})
    policy["isolation"] = rules
    if draw(st.booleans()):
        policy["quotas"] = [
            {"team": "b", "gpus": draw(st.sampled_from([0.5, 1, 3])), "borrow": draw(st.booleans())},
            {"team": "c", "gpus": 1, "gpu_model": "H100-80GB"},
        ]
    return policy


@st.composite
def budgets(draw: st.DrawFn) -> dict[str, Any]:
    """A disruption budget: moves and preemptions per round, per team, minimum runtime."""
    return {
        "max_moves_per_round": draw(st.integers(0, 3)),
        "max_preemptions_per_round": draw(st.integers(0, 2)),
        "max_moves_per_team": draw(st.sampled_from([None, 1])),
        "min_runtime_s": draw(st.sampled_from([0, 600, 1800])),
        "preempt_latency_sensitive": draw(st.booleans()),
    }


def _plan_and_check(
    cluster: list[dict[str, Any]], demand: list[dict[str, Any]], policy: dict[str, Any], solver: str
) -> None:
    """Plan with ``solver`` (``make_plan`` validates the plan), count the replicas and check the sharing
    modes without the validator: no fraction on an exclusive node, no whole GPU on a time-sliced one and
    at most ``replicas`` fractions on each time-sliced GPU."""
    inp = PlanningInput.model_validate({"cluster": {"nodes": cluster}, "workloads": demand, "policy": policy})
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    replicas = sum(w.replicas for w in inp.workloads)
    assert len(plan.assignments) + len(plan.unplaced) == replicas
    # The modes the plan leaves the nodes in (it may change those of drained nodes).
    modes = {n["name"]: n.get("sharing") for n in cluster}
    modes |= {m.node: m.model_dump(mode="json", by_alias=True)["sharing"] for m in plan.sharing}
    for a in plan.assignments:
        for g in a.gpus:
            if modes[a.node] == "exclusive":
                assert g.milli is None, f"{a.workload} has a fraction of an exclusive GPU"
            elif modes[a.node] is not None:
                assert g.milli is not None or g.mig_profile is not None, f"{a.workload} has a time-sliced GPU"
    fractions = Counter((a.node, g.index) for a in plan.assignments for g in a.gpus if g.milli is not None)
    for (name, index), count in fractions.items():
        mode = modes[name]
        if isinstance(mode, dict):
            assert count <= mode["time-slicing"]["replicas"], f"{name}:{index} holds {count} fractions"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes(), workloads(), policies(), st.sampled_from(SOLVERS))
def test_every_solver_plan_is_valid(
    cluster: list[dict[str, Any]], demand: list[dict[str, Any]], policy: dict[str, Any], solver: str
) -> None:
    pools = {n["pool"] for n in cluster}
    policy["isolation"] = [r for r in policy["isolation"] if r.get("pool") in (None, *pools)]
    _plan_and_check(cluster, demand, policy, solver)


# ---------------------------------------------------------------------------------------------
# Running work: a current state, which the plan may keep, move or preempt. Fleets drift, so some
# running replicas break a quota, an isolation rule or their topology need (``breaks``).

H100 = "H100-80GB"
#: GPU memory (MiB) of the drawn GPU models, as the catalog has it.
GPU_MEMORY = {H100: 81920, "L40S-48GB": 49152}
#: Compute slices (of 7) of the MIG profiles ``workloads`` draws.
MIG_SLICES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 3, "7g.80gb": 7}


@dataclass
class _Gpu:
    """What runs on one GPU of the drawn cluster."""

    model: str
    numa: int
    instances: list[tuple[str, int]] | None = None  # MIG layout, None when MIG is off
    whole: bool = False
    milli: int = 0
    memory: int = 0  # GPU memory (MiB) held by its fractions
    fractions: int = 0
    used: set[tuple[str, int]] = field(default_factory=set)
    groups: set[tuple[str, str]] = field(default_factory=set)  # (team, tier) of its users


@dataclass
class _Node:
    """Free capacity of one drawn node."""

    name: str
    pool: str
    cpu: int
    memory: int
    gpus: dict[int, _Gpu]
    nvlink: list[set[int]]  # NVLink cliques
    sharing: Any = None  # the node's sharing mode as drawn


def _inventory(node: dict[str, Any]) -> _Node:
    """The GPUs of a node as ``nodes`` draws them (reference topologies spelled out)."""
    gpus: dict[int, _Gpu] = {}
    nvlink: list[set[int]] = []
    if node.get("topology") == "dgx-h100":
        gpus = {i: _Gpu(H100, i // 4) for i in range(6)}
        for g in node["gpus"]:
            gpus[g["index"]] = _Gpu(H100, 1, [(i["profile"], i["start"]) for i in g["mig"]["instances"]])
        nvlink = [set(range(8))]
    elif node.get("topology") == "pcie-4x-h100-nvl-bridged":
        gpus = {i: _Gpu(H100, i // 2) for i in range(4)}
        nvlink = [{0, 1}, {2, 3}]
    else:
        gpus = {g["index"]: _Gpu(g["model"], g["numa"]) for g in node.get("gpus", [])}
    return _Node(
        node["name"], node["pool"], node["cpu_milli"], node["memory_mib"], gpus, nvlink, node.get("sharing")
    )


def _fits_topology(node: _Node, group: tuple[int, ...], need: str) -> bool:
    if len(group) < 2 or need in ("any", "same-node"):
        return True
    if need == "numa":
        return len({node.gpus[i].numa for i in group}) == 1
    return any(set(group) <= clique for clique in node.nvlink)


@dataclass
class _State:
    """The running state built so far, checked against the policy's isolation rules and quotas."""

    nodes: list[_Node]
    policy: dict[str, Any]
    quota_used: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def may_share(self, gpu: _Gpu, team: str, tier: str) -> bool:
        """Whether a new user keeps the GPU's isolation rules."""
        for rule in self.policy["isolation"]:
            if rule["kind"] == "no-shared-gpu-across-teams" and {t for t, _ in gpu.groups} - {team}:
                return False
            if rule["kind"] == "tiers-no-share":
                tiers = {t for _, t in gpu.groups} | {tier}
                if len(tiers & set(rule["tiers"])) > 1:
                    return False
        return True

    def may_host(self, node: _Node, team: str) -> bool:
        """Whether a team may run on the node (team-exclusive pools)."""
        return all(
            not (rule["kind"] == "team-exclusive" and rule["pool"] == node.pool and team != rule["team"])
            for rule in self.policy["isolation"]
        )

    def within_quota(self, team: str, model: str, equivalents: float) -> bool:
        """Whether the team stays within every quota that counts this use."""
        for q in self.policy.get("quotas", ()):
            if q["team"] != team or q.get("gpu_model", model) != model:
                continue
            if self.quota_used[f"{team}/{q.get('gpu_model')}"] + equivalents > q["gpus"]:
                return False
        return True

    def count(self, team: str, model: str, equivalents: float) -> None:
        for q in self.policy.get("quotas", ()):
            if q["team"] == team and q.get("gpu_model", model) == model:
                self.quota_used[f"{team}/{q.get('gpu_model')}"] += equivalents


def _spots(
    state: _State, w: dict[str, Any], *, breaks: bool = False
) -> list[tuple[_Node, str, list[tuple[int, Any]], float]]:
    """Where replica 0 of ``w`` could run now: (node, ``running_on`` text, GPUs taken, equivalents);
    ``breaks``: also where it breaks a quota, an isolation rule or its topology need (never capacity,
    sharing modes, GPU memory or MIG instances: those are input errors)."""
    team, tier = w["team"], w["tier"]
    out: list[tuple[_Node, str, list[tuple[int, Any]], float]] = []
    if "alternatives" in w or "gang" in w:
        return out  # a running alternative or part of a gang is left to other tests
    for node in state.nodes:
        if w["cpu_milli"] > node.cpu or w["memory_mib"] > node.memory:
            continue
        if not (breaks or state.may_host(node, team)):
            continue
        if "gpus" in w:
            if isinstance(node.sharing, dict):
                continue  # a time-sliced node offers fractions only
            free = [i for i, g in node.gpus.items() if g.instances is None and not g.whole and not g.milli]
            for group in itertools.combinations(sorted(free), w["gpus"]):
                model = node.gpus[group[0]].model
                if w.get("gpu_memory_mib", 0) > GPU_MEMORY[model]:
                    continue
                if breaks or (
                    _fits_topology(node, group, w["topology"]) and state.within_quota(team, model, len(group))
                ):
                    text = f"{node.name}:{','.join(map(str, group))}"
                    out.append((node, text, [(i, "whole") for i in group], len(group)))
        elif "gpu_milli" in w or "gpu_memory_mib" in w:
            m = w.get("gpu_milli", 1)  # a memory-only ask runs as a 1 milli-GPU fraction
            mib = w.get("gpu_memory_mib", 0)
            for i, g in node.gpus.items() if node.sharing != "exclusive" else ():
                shares = node.sharing["time-slicing"]["replicas"] if isinstance(node.sharing, dict) else 1000
                fits = g.instances is None and not g.whole and g.milli + m <= 1000 and g.fractions < shares
                fits = fits and g.memory + mib <= GPU_MEMORY[g.model]
                allowed = state.may_share(g, team, tier) and state.within_quota(team, g.model, m / 1000)
                if fits and (breaks or allowed):
                    out.append((node, f"{node.name}:{i}={m}", [(i, m)], m / 1000))
        elif "mig_profile" in w:
            prof = w["mig_profile"]
            for i, g in node.gpus.items():
                for inst in g.instances or ():
                    if inst[0] != prof or inst in g.used:
                        continue
                    allowed = state.may_share(g, team, tier) and state.within_quota(
                        team, g.model, MIG_SLICES[prof] / 7
                    )
                    if breaks or allowed:
                        out.append(
                            (node, f"{node.name}:{i}/{prof}@{inst[1]}", [(i, inst)], MIG_SLICES[prof] / 7)
                        )
        else:
            out.append((node, node.name, [], 0.0))
    return out


def _run(state: _State, w: dict[str, Any], spot: tuple[_Node, str, list[tuple[int, Any]], float]) -> None:
    """Record replica 0 of ``w`` as running at ``spot``."""
    node, text, taken, equivalents = spot
    w["running_on"] = text
    node.cpu -= w["cpu_milli"]
    node.memory -= w["memory_mib"]
    for i, what in taken:
        g = node.gpus[i]
        g.groups.add((w["team"], w["tier"]))
        if what == "whole":
            g.whole = True
        elif isinstance(what, int):
            g.milli += what
            g.memory += w.get("gpu_memory_mib", 0)
            g.fractions += 1
        else:
            g.used.add(what)
        state.count(w["team"], g.model, equivalents / len(taken))


@st.composite
def running_states(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """A cluster, a demand of which some replicas already run (where their shape allows, most where
    the isolation rules, quotas and topology needs allow too, some breaking them; some preemptible, some
    latency-sensitive, some with a start time), and a policy with a disruption budget and a MIG policy."""
    cluster = draw(nodes())
    demand = draw(workloads())
    policy = draw(policies())
    pools = {n["pool"] for n in cluster}
    policy["isolation"] = [r for r in policy["isolation"] if r.get("pool") in (None, *pools)]
    policy["disruption"] = draw(budgets())
    state = _State([_inventory(n) for n in cluster], policy)
    for w in demand:
        w.setdefault("topology", "any")
        spots = _spots(state, w, breaks=draw(st.integers(0, 2)) == 0)
        if not spots or draw(st.integers(0, 3)) == 0:
            continue
        _run(state, w, draw(st.sampled_from(spots)))
        minutes = draw(st.sampled_from([None, 1, 5, 15, 60, 120]))
        if minutes is not None:
            w["started_at"] = (NOW - timedelta(minutes=minutes)).isoformat()
    return cluster, demand, policy


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(running_states(), st.sampled_from(SOLVERS))
def test_every_solver_plan_with_running_work_is_valid(
    drawn: tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]], solver: str
) -> None:
    cluster, demand, policy = drawn
    _plan_and_check(cluster, demand, policy, solver)


@pytest.mark.parametrize("solver", SOLVERS)
def test_young_replicas_stay_put(solver: str) -> None:
    # Two shared L40S, each with a 300-milli replica started 5 minutes ago; a latency-sensitive job wants
    # a whole GPU. Moving one replica would free a GPU, but both ran less than min_runtime_s: all stay.
    started = (NOW - timedelta(minutes=5)).isoformat()
    gpus = [{"index": i, "model": "L40S-48GB"} for i in range(2)]
    inp = PlanningInput.model_validate(
        {
            "cluster": {"nodes": [{"name": "n0", "cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus}]},
            "workloads": [
                {"id": "a", "gpu_milli": 300, "running_on": "n0:0=300", "started_at": started},
                {"id": "b", "gpu_milli": 300, "running_on": "n0:1=300", "started_at": started},
                {"id": "big", "tier": "latency-sensitive", "gpus": 1},
            ],
            "policy": {"disruption": {"max_moves_per_round": 1, "min_runtime_s": 600}},
        }
    )
    plan = make_plan(inp, solver=solver, now=NOW, time_limit_s=5)
    placed = {a.workload: (a.node, [g.index for g in a.gpus]) for a in plan.assignments}
    assert placed == {"a": ("n0", [0]), "b": ("n0", [1])}
    assert [u.workload for u in plan.unplaced] == ["big"]
