"""The hardware catalog: names keep their product's identity, a user catalog adds GPU models and reference
topologies (``--hardware-catalog`` or ``$GPUPLAN_CATALOG``), ``gpuplan import mig`` reads an ``nvidia-smi
mig -lgi`` layout, and the "marked uncertain" notes come once, for what the inputs use, and not with ``-q``.

The commands run as the installed console script does: ``python -m gpuplan.cli`` in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.models import Cluster, default_catalog
from gpuplan.models.base import InputError
from gpuplan.models.catalog import CATALOG_ENV, extend_catalog
from gpuplan.planner.io.importers import lookup_gpu_model
from tests._paths import ROOT_DIR

ROOT = ROOT_DIR

#: A user catalog: H20 (the MIG geometry of GH200 96GB, another product), two GPUs without MIG, and an
#: 8-GPU H20 server whose GPUs 0-1 and 2-3 are NVLink pairs.
USER_CATALOG: dict[str, Any] = {
    "models": [
        {"name": "H20-96GB", "aliases": ["H20"], "memory_gib": 96, "mig_profiles_of": "GH200-96GB"},
        {"name": "RTX-6000-Ada-48GB", "aliases": ["RTX 6000 Ada Generation"], "memory_gib": 48},
        {"name": "K80-12GB", "aliases": ["K80"], "memory_gib": 12, "uncertain": True},
    ],
    "topologies": [
        {
            "name": "hgx-h20-pairs",
            "gpu_model": "H20-96GB",
            "gpus": [{"index": i, "numa_node": i // 4} for i in range(8)],
            "links": [{"a": 0, "b": 1, "type": "NV18"}, {"a": 2, "b": 3, "type": "NV18"}],
        }
    ],
}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``gpuplan ARGS`` as a separate process (pipes for stdout and stderr)."""
    base = {k: v for k, v in os.environ.items() if k != CATALOG_ENV}
    return subprocess.run(
        [sys.executable, "-m", "gpuplan.cli", *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def write(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- names keep their identity ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("A100-PCIE-80GB", "A100-SXM4-80GB"),
        ("A100-PCIE-40GB", "A100-SXM4-40GB"),
        ("H100-PCIE-80GB", "H100-80GB"),
        ("H800-80GB", "H100-80GB"),
        ("A800-80GB", "A100-SXM4-80GB"),
    ],
)
def test_another_product_with_the_same_mig_table_is_not_an_alias(one: str, other: str) -> None:
    cat = default_catalog()
    assert cat.canonical(one) == one != cat.canonical(other)
    assert cat.model(one).profiles == cat.model(other).profiles  # the same MIG geometry
    found = lookup_gpu_model(one)
    assert found is not None and found.name == one


def test_h20_is_not_gh200_and_product_names_find_their_own_model(tmp_path: Path) -> None:
    for name in ("H20", "NVIDIA H20", "H20 (96GB)"):
        found = lookup_gpu_model(name)
        assert found is None or not found.name.startswith("GH200"), name
    pcie = lookup_gpu_model("NVIDIA A100 80GB PCIe")
    assert pcie is not None and pcie.name == "A100-PCIE-80GB"
    sxm = lookup_gpu_model("NVIDIA A100-SXM4-80GB")
    assert sxm is not None and sxm.name == "A100-SXM4-80GB"
    user = extend_catalog(default_catalog(), write(tmp_path / "gpus.yaml", USER_CATALOG))
    h20 = lookup_gpu_model("NVIDIA H20", user)
    assert h20 is not None and h20.name == "H20-96GB"
    assert (
        user.model("H20").profile("3g.48gb").starts
        == default_catalog().model("GH200-96GB").profile("3g.48gb").starts
    )


def test_a_request_for_the_sxm_card_does_not_run_on_the_pcie_card(tmp_path: Path) -> None:
    gpus = [{"index": i, "model": "A100-PCIE-80GB"} for i in range(2)]
    node = {"name": "p1", "cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus}
    cluster = write(tmp_path / "c.yaml", {"nodes": [node]})
    work = write(tmp_path / "w.yaml", {"workloads": [
        {"id": "sxm", "team": "ml", "gpus": 1, "gpu_models": ["A100-SXM4-80GB"]},
        {"id": "pcie", "team": "ml", "gpus": 1, "gpu_models": ["A100-PCIE-80GB"]},
    ]})  # fmt: skip
    out = tmp_path / "plan.json"
    done = run(
        "plan",
        "--cluster",
        str(cluster),
        "--workloads",
        str(work),
        "--solver",
        "first-fit",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    plan = json.loads(out.read_text())
    assert {a["workload"] for a in plan["assignments"]} == {"pcie"}
    assert {u["workload"] for u in plan["unplaced"]} == {"sxm"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"models": [{"name": "X1", "aliases": ["A100-SXM4-80GB"], "memory_gib": 80}]},
         "the name 'a100-sxm4-80gb' already means GPU model A100-SXM4-80GB"),
        ({"models": [{"name": "X1"}]}, "models[0].memory_gib: field required"),
        ({"models": [{"name": "X1", "memory_gib": "lots"}]}, "models[0]: could not convert string to float"),
        ({"models": [{"name": "X1", "memory_gib": 8, "mig_profiles_of": "Z9"}]},
         "models[0].mig_profiles_of: unknown GPU model 'Z9'"),
        ({"topologies": [{**USER_CATALOG["topologies"][0], "gpu_model": "Z9"}]},
         "topologies[0].gpu_model: unknown GPU model 'Z9'"),
        ({"gpus": []}, "expected a mapping with 'models' and/or 'topologies'"),
    ],
)  # fmt: skip
def test_a_bad_user_catalog_is_one_line_naming_the_entry(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    bad = write(tmp_path / "bad.yaml", change)
    with pytest.raises(InputError, match="^" + str(bad).replace(".", r"\.") + ": ") as caught:
        extend_catalog(default_catalog(), bad)
    assert message in str(caught.value)
    done = run("--hardware-catalog", str(bad), "schema", "plan")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"gpuplan: error: {caught.value}"


# --- a user catalog used in a plan ----------------------------------------------------------------


@pytest.mark.slow
def test_a_user_catalog_adds_h20_and_a_topology_used_in_a_plan(tmp_path: Path) -> None:
    user = write(tmp_path / "gpus.yaml", USER_CATALOG)
    cluster = write(tmp_path / "c.yaml", {"nodes": [
        {"name": "h20-01", "cpu_milli": 192000, "memory_mib": 1048576, "topology": "hgx-h20-pairs"},
        {"name": "ada-01", "cpu_milli": 64000, "memory_mib": 262144,
         "gpus": [{"index": 0, "model": "RTX 6000 Ada Generation"}]},
    ]})  # fmt: skip
    work = write(tmp_path / "w.yaml", {"workloads": [
        {"id": "train", "team": "ml", "gpus": 2, "gpu_models": ["H20"], "topology": "nvlink"},
        {"id": "render", "team": "viz", "gpus": 1, "gpu_models": ["RTX-6000-Ada-48GB"]},
    ]})  # fmt: skip
    files = ["--cluster", str(cluster), "--workloads", str(work)]
    without = run("plan", *files)
    assert without.returncode == 2 and "unknown reference topology 'hgx-h20-pairs'" in without.stderr
    by_option = tmp_path / "by-option.json"
    done = run("plan", *files, "--hardware-catalog", str(user), "--time-limit", "20", "--out", str(by_option))
    assert done.returncode == 0, done.stderr
    by_env = tmp_path / "by-env.json"
    done = run("plan", *files, "--solver", "best-fit", "--out", str(by_env), env={CATALOG_ENV: str(user)})
    assert done.returncode == 0, done.stderr
    for out in (by_option, by_env):
        placed = {a["workload"]: a for a in json.loads(out.read_text())["assignments"]}
        assert placed["render"]["node"] == "ada-01"
        train = placed["train"]
        assert train["node"] == "h20-01"
        assert sorted(g["index"] for g in train["gpus"]) in ([0, 1], [2, 3])  # one NVLink pair


# --- the "marked uncertain" notes -------------------------------------------------------------------


@pytest.mark.slow
def test_uncertain_notes_once_for_what_the_inputs_use_and_none_with_q(tmp_path: Path) -> None:
    l40s = {"cpu_milli": 64000, "memory_mib": 262144, "topology": "pcie-8x-l40s"}
    cluster = write(tmp_path / "c.yaml", {"nodes": [{"name": f"l{i}", **l40s} for i in range(3)]})
    work = write(tmp_path / "w.yaml", {"workloads": [
        {"id": f"w{i}", "team": "ml", "gpus": 8, "gpu_models": ["L40S-48GB"]} for i in range(5)
    ]})  # fmt: skip
    files = ["--cluster", str(cluster), "--workloads", str(work), "--time-limit", "20"]
    # The bundled node types include other uncertain servers (e.g. pcie-4x-h100-nvl-bridged): not in use.
    done = run("capacity-gap", *files)
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "uncertain" in line]
    assert notes == [
        "gpuplan: WARNING: marked uncertain in the hardware catalog (check against the real machines): "
        "reference topology pcie-8x-l40s"
    ]
    for quiet in (["-q", "capacity-gap"], ["capacity-gap", "--quiet"]):
        done = run(*quiet, *files)
        assert done.returncode == 0 and "uncertain" not in done.stderr, done.stderr


# --- nvidia-smi mig -lgi ------------------------------------------------------------------------------

#: ``nvidia-smi mig -lgi`` of two A100 40GB GPUs, in the driver's table format: GPU 0 split 2g+1g+1g+3g,
#: GPU 1 one 7g instance.
LGI = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 3g.20gb          9        2          4:4     |
+-------------------------------------------------------+
|   0  MIG 2g.10gb         14        3          0:2     |
+-------------------------------------------------------+
|   0  MIG 1g.5gb          19        9          2:1     |
+-------------------------------------------------------+
|   0  MIG 1g.5gb          19       10          3:1     |
+-------------------------------------------------------+
|   1  MIG 7g.40gb          0        0          0:8     |
+-------------------------------------------------------+
"""


@pytest.mark.slow
def test_import_mig_reads_an_lgi_layout_and_names_the_flag_it_needs(tmp_path: Path) -> None:
    lgi = tmp_path / "lgi.txt"
    lgi.write_text(LGI)
    ambiguous = run("import", "mig", str(lgi))
    assert ambiguous.returncode == 2 and ambiguous.stdout == ""
    err = ambiguous.stderr.strip()
    assert "\n" not in err and "give --model" in err
    assert "A100-SXM4-40GB" in err and "A100-PCIE-40GB" in err
    done = run("import", "mig", str(lgi), "--model", "A100-PCIE-40GB")
    assert done.returncode == 0, done.stderr
    first, rest = done.stdout.split("\n", 1)
    assert first == f"{lgi}: GPU instance layout of A100-PCIE-40GB (valid in the catalog)"
    gpus = yaml.safe_load(rest)["gpus"]
    assert gpus[0]["mig"]["instances"] == [
        {"profile": "2g.10gb", "start": 0},
        {"profile": "1g.5gb", "start": 2},
        {"profile": "1g.5gb", "start": 3},
        {"profile": "3g.20gb", "start": 4},
    ]
    assert gpus[1]["mig"]["instances"] == [{"profile": "7g.40gb", "start": 0}]
    node = {"name": "a1", "cpu_milli": 1000, "memory_mib": 1024, "gpus": gpus}
    assert Cluster.model_validate({"nodes": [node]}).nodes[0].gpus[0].model == "A100-PCIE-40GB"
    # 3g.20gb may start at 0 or 4 only; the ID of 2g.10gb is 14, not 15
    (tmp_path / "bad.txt").write_text(LGI.replace("9        2          4:4", "9        2          2:4")
                                      .replace("14        3", "15        3"))  # fmt: skip
    bad = run("import", "mig", str(tmp_path / "bad.txt"), "--model", "A100-SXM4-40GB")
    assert bad.returncode == 1
    assert "GPU 0: GPU instance 3 ('2g.10gb') has profile ID 15, 14 in the catalog" in bad.stdout
    assert "3g.20gb" in bad.stdout and "cannot start at memory slice 2" in bad.stdout
