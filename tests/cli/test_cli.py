"""The command line: plans, validation, schemas, and one-line errors with exit code 2 on bad input."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml

from gpuplan.cli import main
from gpuplan.models import data_dir
from tests._paths import ROOT_DIR

EXAMPLES = data_dir() / "examples"

CLUSTER = {
    "nodes": [
        {
            "name": "dgx-01",
            "cpu_milli": 64000,
            "memory_mib": 524288,
            "gpus": [
                {"index": 0, "model": "H100-80GB"},
                {
                    "index": 1,
                    "model": "H100-80GB",
                    "mig": {"instances": [{"profile": "3g.40gb", "start": 4}]},
                },
            ],
            "links": [{"a": 0, "b": 1, "kind": "NV18"}],
        }
    ]
}
WORKLOADS_CSV = (
    "id,team,tier,priority,replicas,gpus,gpu_milli,mig_profile,gpu_models,cpu_milli,memory_mib,"
    "topology,gang,preemptible,queued_since,duration_s,running_on\n"
    "w1,a,standard,,,1,,,,1000,1024,,,,,,\n"
    "w2,a,latency-sensitive,,,,,3g.40gb,H100-80GB,1000,1024,,,,,,\n"
    "w3,a,background,,,1,,,,1000,1024,,,,,,\n"
)


def write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    return write(tmp_path, "cluster.yaml", yaml.safe_dump(CLUSTER)), write(tmp_path, "w.csv", WORKLOADS_CSV)


def test_plan_then_validate(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, workloads = files
    out_plan = tmp_path / "plan.json"
    code, out, _ = run(
        ["plan", "--cluster", str(cluster), "--workloads", str(workloads), "--out", str(out_plan)], capsys
    )
    assert code == 0
    assert "latency-sensitive" in out and "GPU allocation" in out and "GPU memory: " in out
    plan = json.loads(out_plan.read_text())
    placed = {a["workload"]: a for a in plan["assignments"]}
    assert placed["w2"]["gpus"] == [{"index": 1, "mig_profile": "3g.40gb", "mig_start": 4}]
    assert {u["workload"] for u in plan["unplaced"]} == {
        "w3"
    }  # one whole GPU left, standard beats background
    assert plan["provenance"]["inputs_sha256"]
    code, out, _ = run(["validate", "--cluster", str(cluster), "--plan", str(out_plan)], capsys)
    assert code == 0
    assert out == (
        f"{out_plan}: valid (2 assignments, 1 waiting); not checked without the workloads: "
        "shapes, starts, gpu-models, gangs, topology, scheduling, disruption, min-runtime\n"
    )
    args = ["validate", "--cluster", str(cluster), "--plan", str(out_plan), "--workloads", str(workloads)]
    code, out, _ = run(args, capsys)
    assert code == 0
    assert out == f"{out_plan}: valid (2 assignments, 1 waiting)\n"


def test_validate_checks_running_work(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, _ = files
    demand = {"workloads": [{"id": "svc", "gpus": 1, "running_on": "dgx-01:0", "started_at": 0}]}
    workloads = write(tmp_path, "w.yaml", yaml.safe_dump(demand))
    stopped = {
        "status": "FEASIBLE",
        "solver": {"name": "hand"},
        "unplaced": [{"workload": "svc", "replica": 0, "code": "X", "reason": "Stopped."}],
    }
    plan = write(tmp_path, "stop.json", json.dumps(stopped))
    args = ["validate", "--cluster", str(cluster), "--plan", str(plan), "--workloads", str(workloads)]
    code, out, _ = run(args, capsys)
    assert code == 1
    assert out.splitlines()[0] == f"{plan}: 3 violation(s)"
    assert "[preempt-forbidden] workload svc replica 0: " in out
    assert "[disruption-unscheduled] workload svc replica 0: " in out
    assert "[disruption-budget] plan: " in out  # one preemption, none allowed
    stays = {"workload": "svc", "replica": 0, "node": "dgx-01", "gpus": [{"index": 0}]}
    plan.write_text(json.dumps({"status": "FEASIBLE", "solver": {"name": "hand"}, "assignments": [stays]}))
    code, out, _ = run(args, capsys)
    assert code == 0 and out == f"{plan}: valid (1 assignments, 0 waiting)\n"


def test_validate_lists_violations(
    files: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, _ = files
    bad = {
        "status": "FEASIBLE",
        "solver": {"name": "hand"},
        "assignments": [
            {
                "workload": "w1",
                "replica": 0,
                "node": "dgx-01",
                "gpus": [{"index": 0}],
                "cpu_milli": 1000,
                "memory_mib": 1024,
            },
            {
                "workload": "w3",
                "replica": 0,
                "node": "dgx-01",
                "gpus": [{"index": 0}],
                "cpu_milli": 1000,
                "memory_mib": 1024,
            },
        ],
    }
    plan = write(tmp_path, "bad.json", json.dumps(bad))
    code, out, _ = run(["validate", "--cluster", str(cluster), "--plan", str(plan)], capsys)
    assert code == 1
    assert "dgx-01" in out and "violation" in out


def test_schema_prints_every_format(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["schema"], capsys)
    assert code == 0
    schemas = json.loads(out)
    assert set(schemas) == {"cluster", "workloads", "policy", "plan"}
    assert "mig_start" in json.dumps(schemas["plan"])


@pytest.mark.slow
def test_demo_plans_the_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_plan = tmp_path / "demo.json"
    code, out, _ = run(["demo", "--out", str(out_plan)], capsys)
    assert code == 0 and "status: FEASIBLE" in out
    code, out, _ = run(
        [
            "validate", "--cluster", str(EXAMPLES / "cluster.yaml"),
            "--workloads", str(EXAMPLES / "workloads.yaml"),
            "--policy", str(EXAMPLES / "policy.yaml"), "--plan", str(out_plan),
        ],
        capsys,
    )  # fmt: skip
    assert code == 0, out
    # Without the demand: alternatives, shapes and running work are not checked, and said so.
    code, out, _ = run(
        ["validate", "--cluster", str(EXAMPLES / "cluster.yaml"), "--plan", str(out_plan)], capsys
    )
    assert code == 0, out
    assert out.rstrip().endswith(
        "; not checked without the workloads: shapes, starts, gpu-models, gangs, topology, scheduling, "
        "disruption, min-runtime"
    )


def _bad_cluster(tmp: Path, gpu: dict[str, object], **node: object) -> Path:
    n: dict[str, object] = {"name": "n1", "cpu_milli": 1000, "memory_mib": 1024, "gpus": [gpu], **node}
    return write(tmp, "c.yaml", yaml.safe_dump({"nodes": [n]}))


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("missing", "file not found"),
        ("malformed", "not valid YAML"),
        ("unknown-model", "nodes[0] (n1).gpus[0].model"),
        ("mig-profile", "does not offer MIG profile '5g.50gb'"),
        ("negative-cpu", "nodes[0] (n1).cpu_milli: Input should be greater than or equal to 0"),
        ("workload-profile", "workload 'w' field mig_profile"),
        ("csv-number", "row 2 (id 'w')"),
        ("sharing-mode", "nodes[0] (n1).sharing: 'timeslice' is not a sharing mode"),
        ("running-against-sharing", "field running_on[0]: runs on whole GPU 0 of node 'n1', whose sharing"),
    ],
)
def test_bad_input_exits_2_with_one_line(
    case: str, fragment: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good_cluster = write(tmp_path, "good.yaml", yaml.safe_dump(CLUSTER))
    workloads = write(tmp_path, "w.csv", WORKLOADS_CSV)
    cluster = good_cluster
    if case == "missing":
        cluster = tmp_path / "nope.yaml"
    elif case == "malformed":
        cluster = write(tmp_path, "c.yaml", "nodes: [ {name: n1, cpu_milli: 1\n")
    elif case == "unknown-model":
        cluster = _bad_cluster(tmp_path, {"index": 0, "model": "H100-90GB"})
    elif case == "mig-profile":
        mig = {"instances": [{"profile": "5g.50gb", "start": 0}]}
        cluster = _bad_cluster(tmp_path, {"index": 0, "model": "H100-80GB", "mig": mig})
    elif case == "negative-cpu":
        cluster = _bad_cluster(tmp_path, {"index": 0, "model": "H100-80GB"}, cpu_milli=-5)
    elif case == "workload-profile":
        workloads = write(tmp_path, "w.yaml", yaml.safe_dump([{"id": "w", "mig_profile": "5g.40gb"}]))
    elif case == "csv-number":
        workloads = write(tmp_path, "w.csv", "id,gpus\nw,two\n")
    elif case == "sharing-mode":
        cluster = _bad_cluster(tmp_path, {"index": 0, "model": "L40S-48GB"}, sharing="timeslice")
    elif case == "running-against-sharing":
        ts = {"time-slicing": {"replicas": 4}}
        cluster = _bad_cluster(tmp_path, {"index": 0, "model": "L40S-48GB"}, sharing=ts)
        workloads = write(tmp_path, "w.csv", "id,gpus,running_on\nw,1,n1:0\n")
    code, out, err = run(["plan", "--cluster", str(cluster), "--workloads", str(workloads)], capsys)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gpuplan: error: ") and fragment in lines[0]
    assert "Traceback" not in err


HW = data_dir() / "hardware" / "nvidia-smi"


def test_import_mig_reports_agreement_and_differences(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["import", "mig", str(HW / "mig-lgipp-h100-sxm-80gb-01.txt"), "--model", "H100-80GB"], capsys
    )
    assert code == 0 and "agree" in out
    code, out, _ = run(
        ["import", "mig", str(HW / "mig-lgipp-a30-24gb-01.txt"), "--model", "A30-24GB"], capsys
    )
    assert code == 1 and "2g.12gb+me" in out


def test_import_topo_writes_a_valid_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "node.yaml"
    args = [
        "import",
        "topo",
        str(HW / "topo-aws-p5-48xlarge-h100-01.txt"),
        "--name",
        "p5",
        "--model",
        "H100-80GB",
    ]
    code, _, _ = run(
        [*args, "--cpu-milli", "192000", "--memory-mib", "2097152", "--out", str(out_file)], capsys
    )
    assert code == 0
    from gpuplan.models import Cluster

    cluster = Cluster.model_validate(yaml.safe_load(out_file.read_text()))
    assert cluster.gpu_count == 8


def test_import_openb_then_plan_a_slice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = ROOT_DIR / "data" / "traces" / "alibaba-gpu-v2023"
    code, out, _ = run(
        [
            "import", "openb", "--nodes", str(trace / "openb_node_list_gpu_node.csv"),
            "--pods", str(trace / "openb_pod_list_default.csv"), "--out", str(tmp_path),
        ],
        capsys,
    )  # fmt: skip
    assert code == 0 and "6212 GPUs" in out
    lines = (tmp_path / "workloads.csv").read_text().splitlines()
    assert lines[0].startswith("id,team,tier,priority,replicas,gpus,gpu_milli,mig_profile")
    assert len(lines) == 8153


def test_import_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    garbage = write(tmp_path, "topo.txt", "hello\nworld\n")
    args = ["import", "topo", str(garbage), "--name", "x", "--model", "H100-80GB"]
    code, _, err = run([*args, "--cpu-milli", "1", "--memory-mib", "1"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(garbage) in err


def test_every_code_package_is_shipped() -> None:
    """Each package directory of the source tree is in pyproject's explicit package list."""
    root = ROOT_DIR
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(("gpuplan", *d.relative_to(root).parts))
        for top in ("models", "planner", "solvers", "api")
        for d in [root / top, *(root / top).rglob("*")]
        if d.is_dir() and any(d.glob("*.py"))
    }
    # The root package's own sub-packages (the command line) live in src/gpuplan, beside the links.
    cli = root / "src/gpuplan/cli"
    found |= {
        ".".join(("gpuplan", *d.relative_to(root / "src/gpuplan").parts))
        for d in [cli, *cli.rglob("*")]
        if d.is_dir() and any(d.glob("*.py"))
    }
    assert "gpuplan.cli" in found
    assert found <= listed, sorted(found - listed)
