"""The data model: catalog, topology expansion, MIG layouts and cross-reference errors."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from gpuplan.models import (
    Cluster,
    Node,
    PlanningInput,
    Policy,
    Workload,
    check_mig_layout,
    default_catalog,
)
from gpuplan.models.cluster import MigInstance, uncertain_in_use
from gpuplan.models.plan import GpuUse
from gpuplan.models.workload import Placement, where
from tests._factories import node_data


def test_catalog_has_every_reference_topology_and_alias() -> None:
    cat = default_catalog()
    names = {t.name for t in cat.topologies}
    assert names == {
        "dgx1-v100", "dgx-a100", "dgx-h100", "hgx-h200", "pcie-8x-l40s", "pcie-4x-h100-nvl-bridged",
    }  # fmt: skip
    assert cat.canonical("V100M32") == "V100-SXM2-32GB"
    assert cat.canonical("h100 nvl") == "H100-94GB"
    assert cat.model("H100-80GB").profile("3g.40gb").starts == {0, 4}
    assert cat.model("GH200-96GB").uncertain


def test_topology_fills_gpus_links_and_numa() -> None:
    n = Node.model_validate(node_data("n1", topology="dgx-a100"))
    assert len(n.gpus) == 8
    assert {g.model for g in n.gpus} == {"A100-SXM4-80GB"}
    assert n.gpu_by_index[0].numa == 3 and n.gpu_by_index[6].numa == 5
    assert len(n.links) == 28 and {lk.kind for lk in n.links} == {"NV12"}


def test_topology_override_by_index_keeps_other_gpus() -> None:
    mig = {"instances": [{"profile": "4g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}
    n = Node.model_validate(
        node_data("n1", topology="dgx-h100", gpus=[{"index": 3, "model": "H100-80GB", "mig": mig}])
    )
    assert n.gpu_by_index[3].mig is not None and n.gpu_by_index[3].numa == 0
    assert n.gpu_by_index[2].mig is None


def test_uncertain_entries_in_use_are_named_once() -> None:
    cluster = Cluster.model_validate(
        {"nodes": [node_data("a", topology="hgx-h200"), node_data("b", topology="hgx-h200")]}
    )
    assert uncertain_in_use(cluster, default_catalog()) == ["reference topology hgx-h200"]


@pytest.mark.parametrize(
    ("instances", "fragment"),
    [
        ([("3g.40gb", 2)], "cannot start at memory slice 2"),
        ([("4g.40gb", 4)], "valid starts: [0]"),
        ([("4g.40gb", 0), ("3g.40gb", 0)], "overlaps"),
        ([("1g.10gb", s) for s in range(7)] + [("1g.20gb", 6)], "overlaps"),
        ([("5g.50gb", 0)], "does not offer MIG profile '5g.50gb'"),
    ],
)
def test_invalid_mig_layouts_are_explained(instances: list[tuple[str, int]], fragment: str) -> None:
    errors = check_mig_layout(
        "H100-80GB", tuple(MigInstance(profile=p, start=s) for p, s in instances), default_catalog()
    )
    assert any(fragment in e for e in errors), errors


def test_valid_mig_layouts_pass() -> None:
    for layout in ([("4g.40gb", 0), ("3g.40gb", 4)], [("1g.10gb", s) for s in range(7)], [("7g.80gb", 0)]):
        insts = tuple(MigInstance(profile=p, start=s) for p, s in layout)
        assert check_mig_layout("H100-80GB", insts, default_catalog()) == []


def test_mig_on_non_mig_model_is_rejected() -> None:
    with pytest.raises(ValidationError, match="L40S-48GB does not support MIG"):
        Node.model_validate(
            node_data(
                "n1",
                gpus=[
                    {"index": 0, "model": "L40S", "mig": {"instances": [{"profile": "1g.10gb", "start": 0}]}}
                ],
            )
        )


def test_node_errors_name_the_field() -> None:
    with pytest.raises(ValidationError) as exc:
        Cluster.model_validate({"nodes": [node_data("n1", cpu_milli=-1)]})
    assert exc.value.errors()[0]["loc"] == ("nodes", 0, "cpu_milli")
    with pytest.raises(ValidationError, match="unknown GPU model 'H100-90GB'"):
        Cluster.model_validate({"nodes": [node_data("n1", gpus=[{"index": 0, "model": "H100-90GB"}])]})
    with pytest.raises(ValidationError, match="appears more than once"):
        Cluster.model_validate({"nodes": [node_data("n1"), node_data("n1")]})


def test_workload_shapes_and_running_on() -> None:
    w = Workload.model_validate(
        {
            "id": "llm",
            "cpu_milli": 8000,
            "replicas": 2,
            "alternatives": [
                {"gpus": 2, "topology": "nvlink"},
                {"mig_profile": "3g.40gb", "cpu_milli": 4000},
            ],
            "running_on": "dgx-01:0,1;dgx-02:5/3g.40gb@4",
            "queued_since": "2026-11-29T10:00:00Z",
        }
    )
    assert [s.kind for s in w.shapes] == ["whole", "mig"]
    assert w.shapes[0].cpu_milli == 8000 and w.shapes[1].cpu_milli == 4000
    assert w.running_on[1].gpus[0].mig_profile == "3g.40gb" and w.running_on[1].gpus[0].mig_start == 4
    with pytest.raises(ValidationError, match="exactly one of"):
        Workload.model_validate({"id": "x", "alternatives": [{"gpus": 1, "gpu_milli": 500}]})
    with pytest.raises(ValidationError, match="more than one of"):
        Workload.model_validate({"id": "x", "gpus": 1, "mig_profile": "1g.10gb"})


def _input(workloads: list[dict[str, Any]], policy: dict[str, Any] | None = None) -> PlanningInput:
    cluster = {"nodes": [node_data("n1", topology="dgx-h100")]}
    return PlanningInput.model_validate({"cluster": cluster, "workloads": workloads, "policy": policy or {}})


def test_cross_references_name_workload_and_field() -> None:
    msg = "workload 'llm-a' field mig_profile: asks for MIG profile '5g.40gb' which H100-80GB does not offer"
    with pytest.raises(ValidationError, match=re.escape(msg)):
        _input([{"id": "llm-a", "mig_profile": "5g.40gb", "gpu_models": "H100-80GB"}])
    with pytest.raises(ValidationError, match="workload 'w' field tier: unknown tier 'gold'"):
        _input([{"id": "w", "tier": "gold"}])
    with pytest.raises(ValidationError, match="workload 'w' field team: unknown team 'x'"):
        _input([{"id": "w", "team": "x"}], {"teams": ["a"]})
    with pytest.raises(ValidationError, match="running_on\\[0\\]: node 'n1' has no GPU 9"):
        _input([{"id": "w", "gpus": 1, "running_on": "n1:9"}])
    with pytest.raises(ValidationError, match="gpu_models: unknown GPU model 'Z9'"):
        _input([{"id": "w", "gpus": 1, "gpu_models": "Z9"}])


def test_policy_defaults_and_checks() -> None:
    p = Policy()
    assert [(t.name, t.weight) for t in p.tiers] == [
        ("latency-sensitive", 10),
        ("standard", 3),
        ("background", 1),
    ]
    assert p.tier_rank("latency-sensitive") == 0 and p.tier_rank("background") == 2
    with pytest.raises(ValidationError, match="unknown team 'ghost'"):
        Policy.model_validate({"teams": ["a"], "quotas": [{"team": "ghost", "gpus": 2}]})


def test_out_of_range_epoch_is_a_validation_error() -> None:
    with pytest.raises(ValidationError, match="not a valid Unix time"):
        Workload.model_validate({"id": "w", "gpus": 1, "queued_since": 1e300})


def test_where_writes_a_place_in_each_style_and_running_on_reads_back() -> None:
    uses = (GpuUse(index=0), GpuUse(index=2, milli=470), GpuUse(index=3, mig_profile="3g.40gb", mig_start=4))
    assert where("dgx-01", uses) == "dgx-01:0,2=470,3/3g.40gb@4"
    assert where("dgx-01", uses, "short") == "dgx-01 GPU 0,2,3 (3g.40gb@4)"
    assert where("dgx-01", uses, "sentence") == (
        "node 'dgx-01' (whole GPU 0, 470 milli of GPU 2, MIG 3g.40gb@4 on GPU 3)"
    )
    assert where("cpu-01", ()) == "cpu-01"
    assert where("cpu-01", (), "short") == "cpu-01"
    assert where("cpu-01", (), "sentence") == "node 'cpu-01' (no GPU)"
    back = Placement.parse(where("dgx-01", uses))
    assert back.node == "dgx-01"
    assert [(g.index, g.milli, g.mig_profile, g.mig_start) for g in back.gpus] == [
        (0, None, None, None), (2, 470, None, None), (3, None, "3g.40gb", 4),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("alternatives", "running_on", "expected"),
    [
        # Two whole-GPU alternatives: the GPU count tells them apart.
        ([{"gpus": 2, "cpu_milli": 40000}, {"gpus": 1, "cpu_milli": 8000}], "n0:2", 1),
        ([{"gpus": 2, "cpu_milli": 40000}, {"gpus": 1, "cpu_milli": 8000}], "n0:1,2", 0),
        # Fractions: the share tells them apart.
        ([{"gpus": 1}, {"gpu_milli": 500}, {"gpu_milli": 250}], "n0:0=250", 2),
        ([{"gpus": 1}, {"gpu_milli": 500}, {"gpu_milli": 250}], "n0:0=500", 1),
        ([{"gpus": 1}, {"mig_profile": "1g.10gb"}, {"mig_profile": "3g.40gb"}], "n0:0/3g.40gb@4", 2),
        ([{"gpus": 1}, {"cpu_milli": 2000}], "n0", 1),
        # The alternative a placement names wins.
        ([{"gpus": 2}, {"gpus": 1}], [{"node": "n0", "gpus": [{"index": 2}], "alternative": 0}], 0),
    ],
)
def test_a_running_replica_runs_as_the_alternative_its_gpus_are(
    alternatives: list[dict[str, Any]], running_on: Any, expected: int
) -> None:
    w = Workload.model_validate({"id": "w", "alternatives": alternatives, "running_on": running_on})
    assert w.running_alternative(0) == expected
