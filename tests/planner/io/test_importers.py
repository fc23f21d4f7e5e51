"""Importers: nvidia-smi topo/MIG text (every real sample) and the Alibaba openb trace."""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.models import Cluster, Node, Workload, data_dir
from gpuplan.planner.io.importers import (
    OpenbSummary,
    compare_mig_with_catalog,
    identify_gpu_model,
    import_openb,
    lookup_gpu_model,
    node_from_topo,
    parse_mig_lgipp,
    parse_topo,
    resolve_mig_model,
)
from gpuplan.planner.io.importers.openb import WORKLOAD_COLUMNS, read_cluster, read_workloads
from tests._paths import ROOT_DIR

SMI = data_dir() / "hardware" / "nvidia-smi"
TRACE = ROOT_DIR / "data" / "traces" / "alibaba-gpu-v2023"
TOPO_FILES = sorted(p.name for p in SMI.glob("topo-*.txt"))
LINK_KIND = re.compile(r"^(NV\d+|PIX|PXB|PHB|NODE|SYS)$")

# The C loader reads the 1,213-node cluster 5x faster than yaml.safe_load, with the same safe
# semantics; test_yaml_loaders_agree checks that both read the importer's output alike.
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def smi(name: str) -> str:
    return (SMI / name).read_text()


# --------------------------------------------------------------------------------------------
# nvidia-smi topo -m


@pytest.mark.parametrize("name", TOPO_FILES)
def test_every_topo_sample_parses_into_a_valid_node(name: str) -> None:
    topo = parse_topo(smi(name))
    n = len(topo.gpus)
    assert n >= 2
    assert topo.gpu_indices == tuple(range(n))
    assert len(topo.links) == n * (n - 1) // 2
    assert all(LINK_KIND.match(kind) for kind in topo.links.values())
    raw = node_from_topo(smi(name), name="n1", gpu_model="A10", cpu_milli=64_000, memory_mib=262_144)
    node = Node.model_validate(raw)
    assert len(node.gpus) == n
    assert len(node.links) == n * (n - 1) // 2


def test_topo_samples_cover_the_formats() -> None:
    assert len(TOPO_FILES) == 19


def test_dgx1_v100_hybrid_cube_mesh_numa_from_cpu_affinity() -> None:
    topo = parse_topo(smi("topo-dgx1-v100-01.txt"))
    assert len(topo.gpus) == 8
    assert (topo.link(0, 1), topo.link(0, 3), topo.link(0, 5), topo.link(7, 4)) == (
        "NV1",
        "NV2",
        "SYS",
        "NV2",
    )
    assert [g.numa for g in topo.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {g.numa_source for g in topo.gpus} == {"cpu-affinity"}
    assert topo.gpus[4].cpu_affinity == "12-23,36-47"
    assert 36 in topo.gpus[4].cpus
    assert topo.nics == ("mlx5_0",)


def test_damaged_header_of_dgx1_p100_is_read_from_the_rows() -> None:
    topo = parse_topo(smi("topo-dgx1-p100-01.txt"))
    assert len(topo.gpus) == 8
    assert topo.link(0, 4) == "NV1"
    assert topo.link(0, 5) == "SYS"  # printed as SOC
    assert topo.nics == ("mlx5_0", "mlx5_2", "mlx5_1", "mlx5_3")
    assert {(g.cpu_affinity, g.numa) for g in topo.gpus} == {("1-1", 0)}


def test_old_soc_format_normalised_to_sys() -> None:
    topo = parse_topo(smi("topo-k40m-x4-mlx4-soc-01.txt"))
    assert (topo.link(0, 1), topo.link(0, 2), topo.link(2, 3)) == ("PHB", "SYS", "PHB")
    assert [g.numa for g in topo.gpus] == [0, 0, 1, 1]
    oldest = parse_topo(smi("topo-k80-x2-mlx4-oldest-01.txt"))
    assert (oldest.link(0, 1), oldest.link(1, 2)) == ("PIX", "PHB")
    assert [g.numa for g in oldest.gpus] == [0, 0, 0, 0]
    assert oldest.nics == ("mlx4_0",)


def test_nic_rows_and_columns_are_ignored() -> None:
    topo = parse_topo(smi("topo-hgx-a100-80gb-8nic-01.txt"))
    assert topo.gpu_indices == tuple(range(8))
    assert set(topo.links.values()) == {"NV12"}
    assert topo.nics == tuple(f"mlx5_{i}" for i in range(8))
    assert [(g.numa, g.numa_source) for g in topo.gpus] == [(0, "printed")] * 4 + [(1, "printed")] * 4
    wide = parse_topo(smi("topo-a100-x8-17nic-bond-01.txt"))
    assert len(wide.gpus) == 8
    assert len(wide.nics) == 17
    assert wide.nics[-1] == "mlx5_bond_0"


def test_numa_columns_printed_missing_or_blank() -> None:
    power9 = parse_topo(smi("topo-ibm-power9-v100-x4-traverse-01.txt"))
    assert [g.numa for g in power9.gpus] == [0, 0, 8, 8]
    assert (power9.link(0, 1), power9.link(1, 2), power9.link(2, 3)) == ("NV3", "SYS", "NV3")
    slurm = parse_topo(smi("topo-hgx-h200-10nic-slurm-01.txt"))
    assert [g.cpu_affinity for g in slurm.gpus] == [""] * 4 + ["56"] * 4
    assert [g.numa for g in slurm.gpus] == [0] * 4 + [1] * 4
    consumer = parse_topo(smi("topo-gtx1080ti-x2-consumer-01.txt"))  # NUMA Affinity N/A
    assert [(g.numa, g.numa_source) for g in consumer.gpus] == [(0, "cpu-affinity")] * 2
    assert consumer.link(0, 1) == "PHB"
    b300 = parse_topo(smi("topo-b300-x8-4socket-11nic-01.txt"))  # no legend
    assert [g.numa for g in b300.gpus] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert b300.nics == tuple(f"NIC{i}" for i in range(11))
    bridged = parse_topo(smi("topo-a30-x4-nvlink-bridge-pairs-01.txt"))
    assert (bridged.link(0, 1), bridged.link(2, 3), bridged.link(1, 2)) == ("NV4", "NV4", "SYS")
    assert [g.numa for g in bridged.gpus] == [0, 0, 1, 1]
    della = parse_topo(smi("topo-a100-x2-2nic-della-01.txt"))  # tab-separated
    assert [g.numa for g in della.gpus] == [0, 1]
    assert della.link(0, 1) == "SYS"


def test_node_from_real_topo_validates() -> None:
    raw = node_from_topo(
        smi("topo-aws-p5-48xlarge-h100-01.txt"),
        name="p5-01",
        gpu_model="H100 80GB HBM3",
        cpu_milli=192_000,
        memory_mib=2_097_152,
        pool="h100",
    )
    node = Node.model_validate(raw)
    assert node.pool == "h100"
    assert {g.model for g in node.gpus} == {"H100-80GB"}
    assert [g.numa for g in node.gpus] == [0] * 4 + [1] * 4
    assert {lk.kind for lk in node.links} == {"NV18"}
    assert len(node.links) == 28
    with pytest.raises(ValueError, match="unknown GPU model 'X9000'"):
        node_from_topo(
            smi("topo-aws-p5-48xlarge-h100-01.txt"), name="x", gpu_model="X9000", cpu_milli=1, memory_mib=1
        )


def _replace_line(text: str, number: int, old: str, new: str) -> str:
    lines = text.splitlines()
    assert old in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty text"),
        ("GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1\n", r"line 1: expected the header"),
        ("\n\n        GPU0    GPU1\n\nLegend:\n", r"line 3: the header is not followed by any matrix row"),
        (
            _replace_line(smi("topo-dgx1-v100-01.txt"), 4, "GPU2    NV1", "GPU2    NV7"),
            "lines 2 and 4: GPU0-GPU2 reads 'NV1' one way and 'NV7' the other",
        ),
        (
            _replace_line(smi("topo-dgx1-v100-01.txt"), 4, "SYS     SYS     NV1", "FOO     SYS     NV1"),
            r"line 4: 'FOO' in row 'GPU2', column 'GPU4' is not a link class",
        ),
        (
            _replace_line(smi("topo-rtx3090-x2-nvlink-bridge-01.txt"), 2, "X ", "NV4"),
            r"line 2: row 'GPU0' has 'NV4' in column 'GPU0'; X must appear exactly on the diagonal",
        ),
        (
            _replace_line(
                smi("topo-gtx1080ti-x2-consumer-01.txt"), 3, "PHB      X      0-11            N/A", "PHB"
            ),
            r"line 3: row 'GPU1' has 1 entries, expected a link class for each of the 2 devices",
        ),
        (
            _replace_line(smi("topo-gtx1080ti-x2-consumer-01.txt"), 1, "GPU1", "GPU7"),
            r"line 1: the header should name the devices of the rows in order; expected 'GPU1', found 'GPU7'",
        ),
        (
            _replace_line(smi("topo-k40m-x4-mlx4-soc-01.txt"), 4, "GPU2", "GPU1"),
            r"line 4: device 'GPU1' already has a row",
        ),
        (
            _replace_line(smi("topo-k40m-x4-mlx4-soc-01.txt"), 2, "0-5", "cpus"),
            r"line 2: CPU affinity 'cpus' is not a CPU list",
        ),
        (
            _replace_line(smi("topo-k40m-x4-mlx4-soc-01.txt"), 2, "0-5", "0-5\t7\t9"),
            r"line 2: row 'GPU0' has 3 values after the link classes but the header names only 1",
        ),
    ],
)
def test_text_that_is_not_a_topo_matrix_is_rejected(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_topo(text)


# --------------------------------------------------------------------------------------------
# nvidia-smi mig -lgipp / -lgip


@pytest.mark.parametrize(
    ("name", "model", "canonical"),
    [
        ("mig-lgipp-h100-sxm-80gb-01.txt", "H100 80GB HBM3", "H100-80GB"),
        ("mig-lgipp-h100-nvl-94gb-01.txt", "H100 NVL", "H100-94GB"),
    ],
)
def test_lgipp_samples_agree_with_catalog(name: str, model: str, canonical: str) -> None:
    observed = parse_mig_lgipp(smi(name), model=model)
    assert len(observed) == 7
    assert all(o.name is not None for o in observed)
    by_id = {o.profile_id: o for o in observed}
    assert [(p.start, p.size) for p in by_id[15].placements] == [(0, 2), (2, 2), (4, 2), (6, 2)]
    assert resolve_mig_model(smi(name), model) == canonical
    assert compare_mig_with_catalog(observed, model) == []


def test_lgipp_of_older_drivers_lacks_newer_catalog_profiles() -> None:
    a100 = parse_mig_lgipp(smi("mig-lgipp-a100-pcie-40gb-01.txt"), model="A100-PCIE-40GB")
    assert [o.name for o in a100] == ["1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"]
    assert compare_mig_with_catalog(a100, "A100-PCIE-40GB") == [
        "the catalog's A100-PCIE-40GB offers profile '1g.5gb+me' (ID 20) which the table does not list",
        "the catalog's A100-PCIE-40GB offers profile '1g.10gb' (ID 15) which the table does not list",
    ]
    a30 = parse_mig_lgipp(smi("mig-lgipp-a30-24gb-01.txt"), model="A30")
    assert compare_mig_with_catalog(a30, "A30") == [
        "the catalog's A30-24GB offers profile '2g.12gb+me' (ID 6) which the table does not list"
    ]


def test_tampered_lgipp_reports_each_difference() -> None:
    text = smi("mig-lgipp-h100-sxm-80gb-01.txt")
    text = text.replace("{0,4}:4", "{0,2,4}:4")
    text = "\n".join(line for line in text.splitlines() if "Profile ID 20 " not in line)
    text += "\nGPU  0 Profile ID 99 Placements: {0}:1\n"
    diffs = compare_mig_with_catalog(parse_mig_lgipp(text, model="H100-80GB"), "H100-80GB")
    assert diffs == [
        "profile ID 9 ('3g.40gb'): placements {0,2,4}:4 in the table, {0,4}:4 in the catalog",
        "the table lists profile ID 99 which the catalog's H100-80GB does not offer",
        "the catalog's H100-80GB offers profile '1g.10gb+me' (ID 20) which the table does not list",
    ]


def test_lgip_tables_identify_the_model_and_agree() -> None:
    assert identify_gpu_model(smi("mig-lgip-h100-nvl-94gb-01.txt")) == "H100-94GB"
    # The A100 SXM4 and PCIe cards (other products) print the same table: the text cannot tell them apart.
    assert identify_gpu_model(smi("mig-lgip-a100-pcie-40gb-01.txt")) is None
    assert identify_gpu_model(smi("mig-lgip-a100-pcie-80gb-01.txt")) is None
    assert identify_gpu_model(smi("mig-lgip-h100-sxm-80gb-01.txt")) is None  # nor H100 SXM5, PCIe, H800
    both = smi("mig-lgip-h100-sxm-80gb-01.txt") + "\n" + smi("mig-lgipp-h100-sxm-80gb-01.txt")
    observed = parse_mig_lgipp(both)
    assert all(o.name and o.placements and o.instances_total for o in observed)
    assert compare_mig_with_catalog(observed, resolve_mig_model(both, "H100-80GB")) == []
    a30 = parse_mig_lgipp(smi("mig-lgip-a30-24gb-01.txt"))  # Free/Total 0/4: Total is what counts
    assert [o.instances_total for o in a30] == [4, 1, 2, 1]
    tampered = smi("mig-lgip-h100-nvl-94gb-01.txt").replace("3/3 ", "2/3 ").replace("2/2 ", "2/3 ")
    assert compare_mig_with_catalog(parse_mig_lgipp(tampered), "H100 NVL") == [
        "profile ID 9 ('3g.47gb'): at most 3 instances in the table, 2 in the catalog"
    ]


def test_model_named_by_nvidia_smi_list() -> None:
    text = smi("mig-list-L-h100-sxm-80gb-01.txt") + "\n" + smi("mig-lgipp-h100-sxm-80gb-01.txt")
    assert identify_gpu_model(text) == "H100-80GB"
    assert {o.name for o in parse_mig_lgipp(text)} >= {"1g.10gb", "7g.80gb"}
    assert identify_gpu_model(smi("mig-lgipp-h100-sxm-80gb-01.txt")) is None
    with pytest.raises(ValueError, match="cannot tell the GPU model"):
        resolve_mig_model(smi("mig-lgipp-h100-sxm-80gb-01.txt"))


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("A100-PCIE-40GB", "A100-PCIE-40GB"),
        ("H100 80GB HBM3", "H100-80GB"),
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("H100 NVL", "H100-94GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
        ("NVIDIA A30", "A30-24GB"),
        ("V100M32", "V100-SXM2-32GB"),
        ("H100", None),
        ("Quadro", None),
    ],
)
def test_gpu_model_lookup(name: str, canonical: str | None) -> None:
    spec = lookup_gpu_model(name)
    assert (spec.name if spec else None) == canonical


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (smi("mig-lgi-h100-sxm-80gb-01.txt"), r"line 2: this is an nvidia-smi mig -lgi table"),
        (smi("topo-dgx1-v100-01.txt"), r"line 1: not part of nvidia-smi mig -lgipp or -lgip output"),
        (smi("mig-list-L-a100-pcie-40gb-01.txt"), "no MIG profile found"),
        ("GPU  0 Profile ID 19 Placements: {}:1\n", r"line 1: profile ID 19 lists no placement"),
        ("GPU  0 Profile ID 19 Placements: {0,1}:1\nGPU 0 Profile 7\n", r"line 2: not part of"),
        ("GPU  0 Profile ID 19 Placements: {0,1}:0\n", r"line 1: profile ID 19 has placements of size 0"),
    ],
)
def test_text_that_is_not_a_mig_listing_is_rejected(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_mig_lgipp(text)


def test_compare_with_unknown_or_non_mig_model() -> None:
    observed = parse_mig_lgipp(smi("mig-lgipp-a30-24gb-01.txt"))
    with pytest.raises(ValueError, match="unknown GPU model 'Z1'"):
        compare_mig_with_catalog(observed, "Z1")
    assert compare_mig_with_catalog(observed, "T4") == [
        "the catalog's T4-16GB does not support MIG but the table lists MIG profiles"
    ]


def test_several_gpus_are_compared_one_by_one() -> None:
    one = smi("mig-lgipp-h100-nvl-94gb-01.txt")
    two = one + "\n" + one.replace("GPU  0", "GPU  1").replace("{0,4}:4", "{4}:4")
    diffs = compare_mig_with_catalog(parse_mig_lgipp(two), "H100 NVL")
    assert diffs == ["GPU 1: profile ID 9: placements {4}:4 in the table, {0,4}:4 in the catalog"]


# --------------------------------------------------------------------------------------------
# Alibaba openb trace


def read_workloads_csv(path: Path) -> list[Workload]:
    """The obvious reading of a workloads CSV: empty cells dropped, then validated."""
    with path.open(newline="") as fh:
        return [Workload.model_validate({k: v for k, v in row.items() if v}) for row in csv.DictReader(fh)]


@pytest.fixture(scope="module")
def default_trace(tmp_path_factory: pytest.TempPathFactory) -> OpenbSummary:
    out = tmp_path_factory.mktemp("openb-default")
    return import_openb(TRACE / "openb_node_list_gpu_node.csv", TRACE / "openb_pod_list_default.csv", out)


def test_openb_default_trace_counts_match_readme(default_trace: OpenbSummary) -> None:
    s = default_trace
    assert (s.nodes, s.gpu_nodes, s.gpus) == (1213, 1213, 6212)
    assert s.gpus_by_model == {
        "G2": 4392,
        "T4-16GB": 842,
        "G3": 312,
        "P100-16GB": 265,
        "V100-SXM2-32GB": 204,
        "V100-SXM2-16GB": 195,
        "A10-24GB": 2,
    }
    assert s.workloads == 8152
    assert s.workloads_by_kind == {"cpu": 1088, "fraction": 3078, "whole": 3911 + 75}
    assert s.multi_gpu_workloads == 75
    assert s.gpu_request_milli == 6_086_800
    assert s.gpu_request == pytest.approx(6086.8)
    assert "6,086.8" in s.describe()


def test_openb_workloads_csv_validates_row_by_row(default_trace: OpenbSummary) -> None:
    with default_trace.workloads_path.open(newline="") as fh:
        assert tuple(next(csv.reader(fh))) == WORKLOAD_COLUMNS
    workloads = read_workloads_csv(default_trace.workloads_path)
    assert len(workloads) == 8152
    assert len({w.id for w in workloads}) == 8152
    assert sum(s.gpu_milli_total for w in workloads for s in w.shapes) == 6_086_800
    first = workloads[1]
    assert (first.id, first.team, first.tier, first.gpu_milli, first.cpu_milli, first.memory_mib) == (
        "openb-pod-0001",
        "openb",
        "latency-sensitive",
        460,
        6000,
        12288,
    )
    multi = [w for w in workloads if w.gpus > 1]
    assert len(multi) == 75
    assert {w.topology.value for w in multi} == {"same-node"}
    tiers: dict[str, int] = {}
    for w in workloads:
        tiers[w.tier] = tiers.get(w.tier, 0) + 1
    assert tiers == {"latency-sensitive": 4647 + 7, "background": 3398, "standard": 100}


def test_openb_cluster_yaml_loads_back(default_trace: OpenbSummary) -> None:
    cluster = Cluster.model_validate(yaml.load(default_trace.cluster_path.read_text(), Loader=SAFE_LOADER))
    assert len(cluster.nodes) == 1213
    assert cluster.gpu_count == 6212
    node = cluster.node_by_name["openb-node-0000"]
    assert (node.pool, node.cpu_milli, node.memory_mib) == ("P100", 64000, 262144)
    assert [(g.index, g.model, g.numa) for g in node.gpus] == [(0, "P100-16GB", 0), (1, "P100-16GB", 0)]
    assert node.links == ()


def test_openb_read_in_memory_agrees_with_the_written_files(default_trace: OpenbSummary) -> None:
    cluster = read_cluster(TRACE / "openb_node_list_gpu_node.csv")
    written = Cluster.model_validate(yaml.load(default_trace.cluster_path.read_text(), Loader=SAFE_LOADER))
    assert cluster == written
    workloads = read_workloads(TRACE / "openb_pod_list_default.csv")
    assert workloads == tuple(read_workloads_csv(default_trace.workloads_path))


def test_openb_readers_name_the_bad_row(tmp_path: Path) -> None:
    (tmp_path / "pods.csv").write_text(PODS + "p1,1,1,1,1500,,LS\n")
    with pytest.raises(ValueError, match=r"row 1 \('p1'\), column 'gpu_milli'"):
        read_workloads(tmp_path / "pods.csv")
    (tmp_path / "nodes.csv").write_text(NODES + "n1,1,1,2,K9\n")
    with pytest.raises(ValueError, match=r"column 'model': unknown GPU model 'K9'"):
        read_cluster(tmp_path / "nodes.csv")


def test_yaml_loaders_agree(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text(
        "sn,cpu_milli,memory_mib,gpu,model\na,32000,262144,0,\nb,96000,393216,8,G2\nc,64000,262144,2,V100M16\n"
    )
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,500\n")
    summary = import_openb(nodes, pods, tmp_path / "out")
    text = summary.cluster_path.read_text()
    assert yaml.safe_load(text) == yaml.load(text, Loader=SAFE_LOADER)
    cluster = Cluster.model_validate(yaml.safe_load(text))
    assert [(n.name, n.pool, len(n.gpus)) for n in cluster.nodes] == [
        ("a", "cpu", 0),
        ("b", "G2", 8),
        ("c", "V100M16", 2),
    ]
    assert cluster.node_by_name["c"].gpus[0].model == "V100-SXM2-16GB"


def test_openb_all_nodes_and_five_column_pod_list(tmp_path: Path) -> None:
    s = import_openb(
        TRACE / "openb_node_list_all_node.csv", TRACE / "openb_pod_list_multigpu50.csv", tmp_path
    )
    assert (s.nodes, s.gpu_nodes, s.gpus) == (1523, 1213, 6212)
    assert s.workloads == 9061
    assert s.workloads_by_kind["cpu"] == 1088
    assert s.multi_gpu_workloads == 984
    assert s.gpu_request == pytest.approx(11358.8)
    with s.workloads_path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["tier"] for r in rows} == {"standard"}  # no qos column
    cpu_nodes = [
        n for n in yaml.load(s.cluster_path.read_text(), Loader=SAFE_LOADER)["nodes"] if n["pool"] == "cpu"
    ]
    assert len(cpu_nodes) == 310
    assert all("gpus" not in n for n in cpu_nodes)


def test_openb_missing_or_binary_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"nodes\.csv: cannot read \(No such file or directory\)"):
        import_openb(tmp_path / "nodes.csv", tmp_path / "pods.csv", tmp_path / "out")
    (tmp_path / "nodes.csv").write_bytes(b"sn,cpu_milli\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"nodes\.csv: not a readable CSV file"):
        import_openb(tmp_path / "nodes.csv", tmp_path / "pods.csv", tmp_path / "out")


def test_openb_gpu_spec_and_qos_mapping(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,8,G1\n")
    pods = tmp_path / "pods.csv"
    pods.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
        "a,1000,1024,1,1000,T4|V100M32,Guaranteed\n"
        "b,1000,1024,4,1000,,BE\n"
        "c,1000,1024,1,250,P100,Burstable\n"
        "d,1000,1024,0,0,,\n"
    )
    import_openb(nodes, pods, tmp_path / "out")
    by_id = {w.id: w for w in read_workloads_csv(tmp_path / "out" / "workloads.csv")}
    a, b, c, d = by_id["a"], by_id["b"], by_id["c"], by_id["d"]
    assert (a.gpus, a.gpu_models, a.tier, a.topology.value) == (
        1,
        ("T4-16GB", "V100-SXM2-32GB"),
        "latency-sensitive",
        "any",
    )
    assert (b.gpus, b.tier, b.topology.value) == (4, "background", "same-node")
    assert (c.gpu_milli, c.gpu_models, c.tier) == (250, ("P100-16GB",), "standard")
    assert (d.shapes[0].kind, d.tier, d.team) == ("cpu", "standard", "openb")


NODES = "sn,cpu_milli,memory_mib,gpu,model\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
BAD_NODES: list[tuple[str, str]] = [
    ("sn,cpu_milli,gpu,model\nn1,1,2,T4\n", r"nodes\.csv: missing column\(s\) 'memory_mib'"),
    (NODES + "n1,lots,1,2,T4\n", r"nodes\.csv: row 1 \('n1'\), column 'cpu_milli': 'lots' is not a whole"),
    (NODES + "n1,1,1,2,T4\nn2,1,1,2,K9\n", r"row 2 \('n2'\), column 'model': unknown GPU model 'K9'"),
    (NODES + "n1,1,1,2,\n", r"row 1 \('n1'\), column 'model': 2 GPUs but no GPU model"),
    (NODES + "n1,1,1,2,T4\nn1,1,1,2,T4\n", r"row 2 \('n1'\), column 'sn': node 'n1' appears more than once"),
    (NODES + "n1,1,1,-2,T4\n", r"row 1 \('n1'\), column 'gpu': -2 is negative"),
    (NODES + "n1,1,1,2\n", r"row 1 \(line 2\) has fewer fields than the 5 columns of the header"),
]
BAD_PODS: list[tuple[str, str]] = [
    ("name,cpu_milli,memory_mib,gpu_milli\n", r"pods\.csv: missing column\(s\) 'num_gpu'"),
    (PODS + "p1,1,1,1,1000,,LS,extra\n", r"pods\.csv: row 1 \(line 2\) has more fields"),
    (PODS + "p1,1,1,1,1000,,LS\np2,1,1,one,1000,,LS\n", r"row 2 \('p2'\), column 'num_gpu': 'one' is not"),
    (PODS + "p1,1,1,1,,,LS\n", r"row 1 \('p1'\), column 'gpu_milli': '' is not a whole number"),
    (PODS + "p1,1,1,2,500,,LS\n", r"column 'gpu_milli': 500 milli-GPU on each of 2 GPUs"),
    (PODS + "p1,1,1,1,1500,,LS\n", r"column 'gpu_milli': 1500 is not a share of 1-1000"),
    (PODS + "p1,1,1,1,1000,,Gold\n", r"column 'qos': unknown QoS class 'Gold'"),
    (PODS + "p1,1,1,1,1000,T4|Z80,LS\n", r"column 'gpu_spec': unknown GPU model 'Z80'"),
    (PODS + "p1,1,1,1,1000,,LS\np1,1,1,1,1000,,LS\n", r"row 2 \('p1'\), column 'name': pod 'p1' appears"),
]


@pytest.mark.parametrize(
    ("nodes", "pods", "message"),
    [(n, PODS, m) for n, m in BAD_NODES] + [(NODES, p, m) for p, m in BAD_PODS],
)
def test_malformed_openb_csv_names_file_row_and_column(
    tmp_path: Path, nodes: str, pods: str, message: str
) -> None:
    (tmp_path / "nodes.csv").write_text(nodes)
    (tmp_path / "pods.csv").write_text(pods)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=message) as err:
        import_openb(tmp_path / "nodes.csv", tmp_path / "pods.csv", out)
    bad = "nodes.csv" if pods == PODS else "pods.csv"
    assert str(tmp_path / bad) in str(err.value)
    assert not out.exists()
