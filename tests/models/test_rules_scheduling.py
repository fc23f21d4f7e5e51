"""kube-scheduler's filters as a rule of the model (issue 40): :func:`gpuplan.models.rules.scheduling.admits`
agrees with a straightforward re-implementation of TaintToleration, NodeAffinity (node selector and
required affinity, every operator) and NodeResourcesFit by name written here from Kubernetes' rules, on
raw Kubernetes-shaped data; the text forms read back what they write; bad values name their field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.models.cluster import EXCLUSIVE, Node, TimeSliced
from gpuplan.models.rules.scheduling import admits, advertised, refusal
from gpuplan.models.scheduling import (
    affinity_text,
    parse_affinity,
    parse_toleration,
    taint_text,
    toleration_text,
)
from gpuplan.models.workload import Workload
from gpuplan.planner.io.files import load_workloads

# --- the reference: kube-scheduler's filters, from the Kubernetes docs, on plain dicts -------------------


def _go_int(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64)."""
    if not re.fullmatch(r"[+-]?\d+", text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


def ref_taints_tolerated(taints: list[dict[str, str]], tolerations: list[dict[str, str]]) -> bool:
    """TaintToleration: every NoSchedule/NoExecute taint is tolerated by some toleration."""
    for taint in taints:
        if taint["effect"] == "PreferNoSchedule":
            continue
        tolerated = False
        for tol in tolerations:
            effect_ok = not tol.get("effect") or tol["effect"] == taint["effect"]
            key_ok = not tol.get("key") or tol["key"] == taint["key"]
            if tol.get("operator", "Equal") == "Exists":
                value_ok = True
            else:
                value_ok = tol.get("value", "") == taint.get("value", "")
            if effect_ok and key_ok and value_ok:
                tolerated = True
        if not tolerated:
            return False
    return True


def ref_expression(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr["key"], expr["operator"], expr.get("values", [])
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present:
        return False
    have, want = _go_int(labels[key]), _go_int(values[0])
    if have is None or want is None:
        return False
    return have > want if op == "Gt" else have < want


def ref_node_affinity(
    labels: dict[str, str], selector: dict[str, str], terms: list[list[dict[str, Any]]]
) -> bool:
    """NodeAffinity: every nodeSelector pair, and (with required affinity) one term whose expressions all
    hold; an empty term matches nothing."""
    for key, value in selector.items():
        if labels.get(key) != value:
            return False
    if not terms:
        return True
    return any(term and all(ref_expression(e, labels) for e in term) for term in terms)


def ref_resources_fit(advertised_names: list[str], resource: str | None) -> bool:
    """NodeResourcesFit by name: a node that lists its extended resources offers the one asked for; a
    MIG device of any profile where the node has MIG devices at all (its layout, which a plan may change,
    says which profiles)."""
    if resource is None or not advertised_names or resource in advertised_names:
        return True
    mig = "nvidia.com/mig-"
    return resource.startswith(mig) and any(name.startswith(mig) for name in advertised_names)


# --- strategies ---------------------------------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "dedicated", "nvidia.com/gpu"])
VALUES = st.sampled_from(["", "x", "y", "vision"])
LABEL_VALUES = st.sampled_from(["x", "y", "1", "10", "-2", "+3", "007", "9223372036854775808"])
NUMBERS = st.sampled_from(["1", "5", "-2", "10", "+3"])
EFFECTS = st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"])
RESOURCES = st.sampled_from(
    ["nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"]
)

TAINTS = st.lists(st.fixed_dictionaries({"key": KEYS, "value": VALUES, "effect": EFFECTS}), max_size=3)


@st.composite
def tolerations(draw: st.DrawFn) -> dict[str, str]:
    key = draw(st.one_of(st.just(""), KEYS))
    op = "Exists" if not key else draw(st.sampled_from(["Equal", "Exists"]))
    out = {"operator": op}
    if key:
        out["key"] = key
    if op == "Equal":
        out["value"] = draw(VALUES)
    effect = draw(st.one_of(st.just(""), EFFECTS))
    if effect:
        out["effect"] = effect
    return out


@st.composite
def expressions(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(KEYS)
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    if op in ("In", "NotIn"):
        return {"key": key, "operator": op, "values": draw(st.lists(LABEL_VALUES, min_size=1, max_size=3))}
    if op in ("Gt", "Lt"):
        return {"key": key, "operator": op, "values": [draw(NUMBERS)]}
    return {"key": key, "operator": op}


CASES = st.fixed_dictionaries(
    {
        "taints": TAINTS,
        "labels": st.dictionaries(KEYS, LABEL_VALUES, max_size=3),
        "resources": st.lists(RESOURCES, unique=True, max_size=2),
        "tolerations": st.lists(tolerations(), max_size=3),
        "selector": st.dictionaries(KEYS, LABEL_VALUES, max_size=2),
        "terms": st.lists(st.lists(expressions(), max_size=3), max_size=3),
        "resource": st.one_of(st.none(), RESOURCES),
    }
)


def _models(case: dict[str, Any]) -> tuple[Node, Workload]:
    node = Node.model_validate(
        {
            "name": "n",
            "cpu_milli": 1000,
            "memory_mib": 1024,
            "labels": case["labels"],
            "taints": case["taints"],
            "resources": case["resources"],
        }
    )
    workload = Workload.model_validate(
        {
            "id": "w",
            "gpus": 1,
            "resource": case["resource"],
            "tolerations": case["tolerations"],
            "node_selector": case["selector"],
            "node_affinity": case["terms"],
        }
    )
    return node, workload


@settings(max_examples=600, deadline=None)
@given(case=CASES)
def test_admits_agrees_with_the_three_filters(case: dict[str, Any]) -> None:
    node, workload = _models(case)
    taints_ok = ref_taints_tolerated(case["taints"], case["tolerations"])
    affinity_ok = ref_node_affinity(case["labels"], case["selector"], case["terms"])
    fits = ref_resources_fit(case["resources"], case["resource"])
    reason = admits(node, workload, workload.shapes[0])
    assert (reason is None) == (taints_ok and affinity_ok and fits), (case, reason)
    # The reason names the first filter that refuses (taints, then affinity, then the resource).
    if not taints_ok:
        assert reason is not None and reason.startswith("no toleration for ")
    elif not affinity_ok:
        assert reason is not None and (
            reason == "no node affinity term matched"
            or re.fullmatch(r"node selector \S+ not matched", reason)
        )
    elif not fits:
        assert reason == f"node does not offer {case['resource']}"


@settings(max_examples=300, deadline=None)
@given(case=CASES)
def test_text_forms_read_back_what_they_write(case: dict[str, Any]) -> None:
    node, workload = _models(case)
    again = Workload.model_validate(
        {
            "id": "w",
            "gpus": 1,
            "tolerations": ",".join(toleration_text(t) for t in workload.tolerations),
            "node_selector": ",".join(f"{k}={v}" for k, v in workload.node_selector),
            "node_affinity": affinity_text(workload.node_affinity),
        }
    )
    assert again.tolerations == workload.tolerations
    assert again.node_selector == workload.node_selector
    # An empty term has no text: it reads back as no term (both match no node only when alone).
    assert again.node_affinity == tuple(t for t in workload.node_affinity if t) or not all(
        workload.node_affinity
    )
    taints = Node.model_validate(
        {"name": "n", "cpu_milli": 0, "memory_mib": 0, "taints": ",".join(taint_text(t) for t in node.taints)}
    ).taints
    assert taints == node.taints


def test_examples_of_each_reason() -> None:
    node = Node.model_validate(
        {
            "name": "h100-1",
            "cpu_milli": 1000,
            "memory_mib": 1024,
            "labels": {"accelerator": "h100", "zone": "a"},
            "taints": ["dedicated=vision:NoSchedule", "spot:PreferNoSchedule"],
            "resources": ["nvidia.com/gpu"],
        }
    )

    def reason(**fields: Any) -> str | None:
        w = Workload.model_validate({"id": "w", "gpus": 1, **fields})
        return admits(node, w, w.shapes[0])

    assert reason() == "no toleration for dedicated=vision:NoSchedule"
    ok = {"tolerations": "dedicated=vision:NoSchedule"}
    assert reason(**ok) is None
    assert reason(tolerations="dedicated:NoSchedule") is None  # Exists, any value
    assert reason(tolerations="dedicated=other:NoSchedule") == "no toleration for dedicated=vision:NoSchedule"
    assert reason(tolerations="*") is None
    assert reason(**ok, node_selector="accelerator=h200") == "node selector accelerator=h200 not matched"
    assert (
        reason(**ok, node_affinity="zone in (b,c) | accelerator notin (h100)")
        == "no node affinity term matched"
    )
    assert reason(**ok, node_affinity="zone in (b,c) | accelerator in (h100)") is None
    assert reason(**ok, resource="nvidia.com/gpu.shared") == "node does not offer nvidia.com/gpu.shared"
    assert reason(**ok, resource="nvidia.com/gpu") is None
    found = refusal(node, Workload.model_validate({"id": "w", "gpus": 1}), Workload(id="w").shapes[0])
    assert found is not None and (found.filter, found.names) == ("taint", "dedicated=vision:NoSchedule")


def test_a_node_without_resources_or_taints_admits_as_before() -> None:
    node = Node.model_validate({"name": "n", "cpu_milli": 0, "memory_mib": 0})
    w = Workload.model_validate({"id": "w", "gpu_milli": 250, "resource": "nvidia.com/gpu.shared"})
    assert admits(node, w, w.shapes[0]) is None


def test_a_sharing_change_swaps_the_device_plugin_resources() -> None:
    node = Node.model_validate(
        {
            "name": "n",
            "cpu_milli": 0,
            "memory_mib": 0,
            "sharing": "exclusive",
            "resources": ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"],
        }
    )
    sliced = TimeSliced.model_validate({"time-slicing": {"replicas": 4}})
    assert advertised(node, sliced) == ("nvidia.com/gpu.shared", "nvidia.com/mig-1g.10gb")
    assert advertised(node, EXCLUSIVE) == node.resources
    back = node.model_copy(update={"sharing": sliced, "resources": advertised(node, sliced)})
    assert advertised(back, EXCLUSIVE) == ("nvidia.com/gpu", "nvidia.com/mig-1g.10gb")


def test_alternatives_take_the_workload_resource_unless_they_name_their_own() -> None:
    w = Workload.model_validate(
        {
            "id": "w",
            "resource": "nvidia.com/gpu",
            "alternatives": [{"gpus": 1}, {"mig_profile": "1g.10gb", "resource": "nvidia.com/mig-1g.10gb"}],
        }
    )
    assert [s.resource for s in w.shapes] == ["nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"tolerations": [{"operator": "Exists", "key": "a", "value": "x"}]}, "tolerations", "must be empty"),
        ({"tolerations": [{"operator": "Equal", "value": "x"}]}, "tolerations", "key is empty"),
        ({"tolerations": "a=b:Sometimes"}, "tolerations", "not NoSchedule"),
        (
            {"node_affinity": [[{"key": "c", "operator": "Gt", "values": ["x"]}]]},
            "node_affinity",
            "whole number",
        ),
        ({"node_affinity": [[{"key": "c", "operator": "In"}]]}, "node_affinity", "at least one value"),
        (
            {"node_affinity": [[{"key": "c", "operator": "Exists", "values": ["x"]}]]},
            "node_affinity",
            "no value",
        ),
        ({"node_affinity": "zone in (a"}, "node_affinity", "cannot read"),
        ({"node_selector": "zone"}, "node_selector", "not key=value"),
        ({"resource": "nvidia.com/gpu shared"}, "resource", "pattern"),
    ],
)
def test_bad_values_name_their_field(fields: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ValidationError) as info:
        Workload.model_validate({"id": "w", "gpus": 1, **fields})
    error = info.value.errors()[0]
    assert error["loc"][0] == field and says in str(error["msg"]), info.value


def test_bad_taint_names_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        Node.model_validate({"name": "n", "cpu_milli": 0, "memory_mib": 0, "taints": ["dedicated"]})
    assert info.value.errors()[0]["loc"][0] == "taints"


def test_the_csv_form_reads_the_filters(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(
        "id,gpu_milli,resource,tolerations,node_selector,node_affinity\n"
        'f,250,nvidia.com/gpu.shared,"dedicated=vision:NoSchedule,nvidia.com/gpu:NoSchedule",'
        '"accelerator=h100","zone in (a,b),!spot | cores>4"\n'
    )
    (w,) = load_workloads(path)
    assert w.shapes[0].resource == "nvidia.com/gpu.shared"
    assert [toleration_text(t) for t in w.tolerations] == [
        "dedicated=vision:NoSchedule",
        "nvidia.com/gpu:NoSchedule",
    ]
    assert w.node_selector == (("accelerator", "h100"),)
    assert affinity_text(w.node_affinity) == "zone in (a,b),!spot | cores>4"
    assert parse_affinity("") == [] and parse_toleration("*") == {"operator": "Exists"}
    bad = tmp_path / "bad.csv"
    bad.write_text("id,gpus,tolerations\nw,1,a=b:Never\n")
    with pytest.raises(InputError, match=r"row 2 \(id 'w'\): tolerations"):
        load_workloads(bad)
