"""The first hour of a newcomer: every message read is true, specific and calm (help, request bodies,
errors that suggest, explain by gang name, named waiting work, readable statuses and progress)."""

from __future__ import annotations

import argparse
import io
import json
import logging
import re
import shlex
import time
from datetime import datetime
from pathlib import Path

import pytest

from gpuplan.api.schemas import PlanRequest
from gpuplan.cli import COMMAND_GROUPS, build_parser, main
from gpuplan.models.catalog import data_dir
from gpuplan.models.plan import Plan, PlanStatus, SolverReport, Unplaced
from gpuplan.planner.io.files import load_input, load_plan
from gpuplan.planner.pipeline.deadline import Deadline, solve_share
from gpuplan.planner.presentation import summary
from gpuplan.planner.presentation.progress import CPSAT_LOGGER, TerminalProgress, gap_text, phase, reporting
from gpuplan.solvers.base import SolveResult, get_solver
from gpuplan.solvers.problem import PlacementProblem
from gpuplan.solvers.run_options import RunOptions
from tests._paths import ROOT_DIR

ROOT = ROOT_DIR
EXAMPLES = data_dir() / "examples"
INPUTS = [
    "--cluster", str(EXAMPLES / "cluster.yaml"),
    "--workloads", str(EXAMPLES / "workloads.yaml"),
    "--policy", str(EXAMPLES / "policy.yaml"),
]  # fmt: skip


def test_help_says_what_gpuplan_does_and_groups_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    description = out.split("\n\n")[1]
    assert description.startswith("gpuplan places GPU workloads on a cluster")
    assert "``" not in out  # no reStructuredText
    titles = ["plan and check:", "explain and look:", "import and export:", "nightly and history:"]
    titles.append("service:")
    positions = [out.index(f"\n{t}\n") for t in titles]
    assert positions == sorted(positions)
    registered = {
        name
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }
    grouped = [name for _, commands in COMMAND_GROUPS for name, _ in commands]
    assert sorted(grouped) == sorted(registered)  # each command in exactly one group
    for name in registered:
        assert f"\n  {name} " in out


def test_every_help_example_parses() -> None:
    parser = build_parser()
    for _, commands in COMMAND_GROUPS:
        for name, example in commands:
            argv = shlex.split(example.split(">")[0])
            assert argv[0] == "gpuplan"
            assert parser.parse_args(argv[1:]).command == name


def test_request_prints_a_body_the_api_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["request", *INPUTS, "--solver", "greedy-fgd", "--time-limit", "5"]) == 0
    body = json.loads(capsys.readouterr().out)
    request = PlanRequest.model_validate(body)
    assert request.options.solver == "greedy-fgd"
    assert request.options.time_limit_s == 5.0
    assert len(request.cluster.nodes) == 14  # the example fleet: 14 nodes, 112 GPUs, 189 workloads
    assert request.cluster.gpu_count == 112
    assert len(request.workloads) == 189
    tiers = [t.name for t in request.policy.tiers]
    assert tiers == ["latency-sensitive", "standard", "background"]


def test_request_from_bad_files_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["request", "--cluster", str(missing), "--workloads", str(EXAMPLES / "workloads.yaml")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"gpuplan: error: {missing}: file not found"


class _Overrunning:
    """A solver that answers as greedy-fgd does, then overruns its time limit by ``overrun_s`` (as CP-SAT
    does on a loaded machine)."""

    def __init__(self, overrun_s: float) -> None:
        self.overrun_s = overrun_s

    def solve(self, problem: PlacementProblem, options: RunOptions) -> SolveResult:
        result = get_solver("greedy-fgd").solve(problem, options)
        time.sleep(options.time_limit_s + self.overrun_s)
        return result


@pytest.mark.slow
def test_a_solve_that_overruns_still_leaves_the_predicted_starts_their_time(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Limit 6 s: the explanations keep 1.2 s, the passes after the solve 0.6 s, the solve gets 4.2 s. A solve
    # overrunning by 1.2 s leaves 0.6 s: before, the predicted starts kept the explanations' share from it
    # and had nothing left, so every demo on a loaded machine warned that they were cut short.
    from gpuplan.planner import planning

    monkeypatch.setattr(planning, "get_solver", lambda name: _Overrunning(1.2))
    inp = load_input(EXAMPLES / "cluster.yaml", EXAMPLES / "workloads.yaml", EXAMPLES / "policy.yaml")
    now = datetime.fromisoformat((EXAMPLES / "now.txt").read_text().strip())
    with caplog.at_level(logging.WARNING, logger="gpuplan"):
        plan = planning.make_plan(inp, solver="greedy-fgd", now=now, time_limit_s=6.0, explain=True)
    assert "predicted starts" not in plan.provenance.get("cut_short", [])
    assert not [r for r in caplog.records if "predicted starts" in r.getMessage()]


@pytest.mark.slow
def test_the_demo_prints_no_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="gpuplan"):
        assert main(["demo", "--out", str(tmp_path / "demo.json")]) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []
    out = capsys.readouterr().out
    assert out.startswith("gpuplan demo: 14 nodes, 112 GPUs, 189 workloads")


def test_a_start_up_that_eats_a_little_of_the_solve_is_not_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Limit 10 s: the solve's share is 8.5 s; a 1.5 s start-up leaves 10 - 1.5 - 0.5 = 8 s (6% less).
    def clock() -> float:
        return 101.5

    with caplog.at_level(logging.INFO, logger="gpuplan"):
        assert solve_share(10.0, Deadline(110.0, clock)) == pytest.approx(8.0)
    assert [r.levelno for r in caplog.records] == [logging.INFO]
    caplog.clear()

    # A 6 s start-up leaves 3.5 s of the 8.5 s: that is a warning.
    def later() -> float:
        return 106.0

    with caplog.at_level(logging.INFO, logger="gpuplan"):
        assert solve_share(10.0, Deadline(110.0, later)) == pytest.approx(3.5)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


# --- errors that suggest ------------------------------------------------------------------------------


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a command that must fail with exit 2."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_a_misspelt_field_is_named_first_with_the_field_meant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "w.yaml"
    work.write_text("workloads:\n- {id: a, team: search, gpus: 1, cpu_mili: 4000}\n")
    err = _error(["request", "--cluster", str(EXAMPLES / "cluster.yaml"), "--workloads", str(work)], capsys)
    assert (
        err
        == f"gpuplan: error: {work}: workloads[0] (id 'a'): unknown field cpu_mili (did you mean cpu_milli?)"
    )
    # A node's cpu_milli is required: its misspelling is one mistake, not "cpu_milli: Field required".
    cluster = tmp_path / "c.yaml"
    cluster.write_text("nodes:\n- {name: n1, cpu_mili: 64000, memory_mib: 262144}\n")
    err = _error(["request", "--cluster", str(cluster), "--workloads", str(work)], capsys)
    assert (
        err == f"gpuplan: error: {cluster}: nodes[0] (n1): unknown field cpu_mili (did you mean cpu_milli?)"
    )


def test_an_unknown_field_far_from_any_is_named_without_a_guess(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = tmp_path / "c.yaml"
    cluster.write_text("nodes:\n- {name: n1, cpu_milli: 64000, memory_mib: 262144, colour: blue}\n")
    err = _error(
        ["request", "--cluster", str(cluster), "--workloads", str(EXAMPLES / "workloads.yaml")], capsys
    )
    assert err == f"gpuplan: error: {cluster}: nodes[0] (n1): unknown field colour"


def test_an_unknown_gpu_model_names_the_closest_known(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "w.csv"
    work.write_text("id,team,gpus,gpu_models\na,search,1,L40S-46GB\nb,search,1,L40S-46GB\n")
    err = _error(["request", "--cluster", str(EXAMPLES / "cluster.yaml"), "--workloads", str(work)], capsys)
    assert err.endswith("unknown GPU model 'L40S-46GB' (did you mean L40S-48GB?) (2 workloads: a, b)")
    cluster = tmp_path / "c.yaml"
    cluster.write_text(
        "nodes:\n- {name: n1, cpu_milli: 64000, memory_mib: 262144, gpus: [{index: 0, model: L40S-46GB}]}\n"
    )
    err = _error(["request", "--cluster", str(cluster), "--workloads", str(work)], capsys)
    where = f"gpuplan: error: {cluster}: nodes[0] (n1).gpus[0].model"
    assert err == f"{where}: unknown GPU model 'L40S-46GB' (did you mean L40S-48GB?)"


def test_an_unknown_team_names_the_closest_known(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "w.csv"
    work.write_text("id,team,gpus\na,serach,1\n")
    err = _error(["request", *INPUTS[:2], "--workloads", str(work), *INPUTS[4:]], capsys)
    assert err.endswith("workload 'a' field team: unknown team 'serach' (did you mean search?)")


def test_import_with_an_unknown_model_blames_the_option_and_names_the_catalog_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    topo = ROOT / "data" / "hardware" / "nvidia-smi" / "topo-hgx-h20-8nic-01.txt"
    argv = ["import", "topo", str(topo), "--name", "n", "--cpu-milli", "1", "--memory-mib", "1"]
    err = _error([*argv, "--model", "H20"], capsys)
    assert err.startswith("gpuplan: error: --model H20: not a GPU model of the hardware catalog;")
    assert "--hardware-catalog FILE" in err and str(topo) not in err
    err = _error([*argv, "--model", "H100-80G"], capsys)
    assert err.startswith(
        "gpuplan: error: --model H100-80G: not a GPU model of the hardware catalog (did you mean H100-80GB"
    )


# --- explain what the user names ----------------------------------------------------------------------

#: One node of 8 GPUs; the gang ``nlp/finetune`` of two workloads of 8 GPUs each cannot start (all or
#: none), ``solo`` (1 GPU) runs.
CLUSTER = "nodes:\n- {name: n1, cpu_milli: 64000, memory_mib: 262144, topology: dgx-h100}\n"
WORKLOADS = """workloads:
- {id: ft-a, team: nlp, gpus: 8, gang: nlp/finetune}
- {id: ft-b, team: nlp, gpus: 8, gang: nlp/finetune}
- {id: solo, team: nlp, gpus: 1}
"""


def _planned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, Path, Path]:
    cluster, work, plan = tmp_path / "c.yaml", tmp_path / "w.yaml", tmp_path / "plan.json"
    cluster.write_text(CLUSTER)
    work.write_text(WORKLOADS)
    argv = ["plan", "--cluster", str(cluster), "--workloads", str(work), "--solver", "greedy-fgd"]
    assert main([*argv, "--out", str(plan), "--now", "2026-12-01T00:00:00+00:00"]) == 0
    capsys.readouterr()
    return cluster, work, plan


def test_explain_takes_a_gang_name_and_explains_each_member(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, _, plan = _planned(tmp_path, capsys)
    # The plan names its input files: explain needs no --cluster and --workloads.
    assert main(["explain", "nlp/finetune", "--plan", str(plan), "--counterfactuals", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gang nlp/finetune: 2 workloads (ft-a, ft-b)\n")
    assert "ft-a replica 0: waiting" in out and "ft-b replica 0: waiting" in out
    assert main(["explain", "solo", "--plan", str(plan), "--counterfactuals", "0"]) == 0
    assert (
        capsys.readouterr().out.strip()
        == "solo: every replica is placed on its first choice; nothing to explain"
    )
    err = _error(["explain", "nlp/finetun", "--plan", str(plan)], capsys)
    assert (
        err == "gpuplan: error: explain: no workload or gang named 'nlp/finetun' (did you mean nlp/finetune?)"
    )


def test_explain_against_other_inputs_says_which_differs_and_how_to_fix_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, work, plan = _planned(tmp_path, capsys)
    work.write_text(WORKLOADS.replace("gpus: 1}", "gpus: 2}"))
    err = _error(["explain", "solo", "--plan", str(plan)], capsys)
    assert err == (
        f"gpuplan: error: --plan {plan}: the plan was made from other inputs "
        "(workloads changed; inputs_sha256 differs); "
        f"give the --workloads file the plan was made from, or make the plan again from these inputs "
        f"(gpuplan plan ... --out {plan})"
    )
    work.write_text(WORKLOADS)
    policy = tmp_path / "p.yaml"
    policy.write_text("teams: [nlp]\n")
    err = _error(["explain", "solo", "--plan", str(plan), "--policy", str(policy)], capsys)
    assert "made from other inputs (policy changed; inputs_sha256 differs); give the --policy file" in err
    err = _error(["map", "--plan", str(plan), "--cluster", str(cluster), "--workloads", str(work),
                  "--policy", str(policy), "--out", str(tmp_path / "m.svg")], capsys)  # fmt: skip
    assert "made from other inputs (policy changed" in err


# --- waiting work is named ----------------------------------------------------------------------------

#: One 8-GPU node whose GPUs are time-sliced (fractions only), and a policy that keeps modes as they are:
#: 16 GPUs fit no node whatever its mode (NEVER_FITS); one whole GPU would fit n1 but for its mode
#: (SHARING_MODE: the policy keeps the mode, the fleet could host it).
MODED = """nodes:
- {name: n1, cpu_milli: 64000, memory_mib: 262144, topology: dgx-h100, sharing: {time-slicing: {replicas: 4}}}
"""
MODED_WORK = """workloads:
- {id: big-16, team: ml, gpus: 16}
- {id: one-whole, team: ml, gpus: 1, replicas: 2}
- {id: frac, team: ml, gpu_milli: 500}
"""


def test_the_summary_names_waiting_work_and_reasons_carry_only_clauses_that_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster, work, policy, out = (tmp_path / n for n in ("c.yaml", "w.yaml", "p.yaml", "plan.json"))
    cluster.write_text(MODED)
    work.write_text(MODED_WORK)
    policy.write_text("sharing: {allow_change: false}\n")
    argv = ["plan", "--cluster", str(cluster), "--workloads", str(work), "--policy", str(policy)]
    assert (
        main([*argv, "--solver", "greedy-fgd", "--out", str(out), "--now", "2026-12-01T00:00:00+00:00"]) == 0
    )
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("waiting: 2 SHARING_MODE, 1 NEVER_FITS")
    assert lines[at + 1 : at + 3] == ["  SHARING_MODE: one-whole (2 replicas)", "  NEVER_FITS: big-16"]
    reasons = {u.workload: u.reason for u in load_plan(out).unplaced}
    mode = "the sharing mode of n1 does not offer it"
    assert mode not in reasons["big-16"]  # 16 GPUs fit no 8-GPU node, whatever its mode
    assert mode in reasons["one-whole"]  # one whole GPU would fit n1 but for its mode


def test_the_summary_counts_the_waiting_workloads_it_does_not_name() -> None:
    unplaced = [Unplaced(workload=f"w{i}", replica=0, code="QUOTA", reason="over quota") for i in range(5)]
    unplaced.append(Unplaced(workload="g", replica=0, code="GANG", reason="part of the gang"))
    plan = Plan(status=PlanStatus.FEASIBLE, solver=SolverReport(name="greedy-fgd"), unplaced=tuple(unplaced))
    shown = summary.waiting_lines(plan)
    assert shown == ["waiting: 5 QUOTA, 1 GANG", "  QUOTA: w0, w1, w2 and 2 more workload(s)", "  GANG: g"]


# --- statuses and progress people can read ------------------------------------------------------------


def _report(name: str, objective: float, bound: float, **terms: float) -> SolverReport:
    gap = (objective - bound) / max(1.0, objective)
    return SolverReport(name=name, objective=objective, best_bound=bound, gap=gap, terms=terms)


def test_a_zero_gap_plan_not_called_optimal_says_why() -> None:
    plan = Plan(status=PlanStatus.FEASIBLE, solver=_report("greedy-fgd", 40800, 40800))
    assert summary.status_lines(plan) == [
        "gap 0: the objective meets the bound (no plan has a lower objective), but it is not called OPTIMAL: "
        "greedy-fgd is a heuristic (only a proof by the exact model is called OPTIMAL)"
    ]
    fixed = Plan(status=PlanStatus.FEASIBLE, solver=_report("cpsat", 40800, 40800, sharing_modes_fixed=2))
    assert summary.status_lines(fixed)[0].endswith(
        "not called OPTIMAL: the pre-pass fixed the sharing modes of 2 node(s) whose mode could change"
    )
    later = _report(
        "cpsat", 100, 50, timeline_changed=1, stage_queue_optimal=1, stage_fragmentation_optimal=0
    )
    assert summary.status_lines(Plan(status=PlanStatus.FEASIBLE, solver=later)) == [
        "not proved optimal: the predicted-start pass changed the plan after the solve; "
        "the time limit stopped stage fragmentation before a proof"
    ]
    cut = _report(
        "cpsat", 100, 50, stage_queue_optimal=0, stage_fragmentation_optimal=0, stage_disruption_optimal=1
    )
    assert summary.status_lines(Plan(status=PlanStatus.FEASIBLE, solver=cut)) == [
        "not proved optimal: the time limit stopped stages queue, fragmentation before a proof"
    ]
    assert summary.status_lines(Plan(status=PlanStatus.OPTIMAL, solver=_report("cpsat", 7, 7))) == []


def test_the_plan_summary_says_which_part_was_restricted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Default policy: n1 runs nothing, so its mode could change; the pre-pass fixes it before the solve.
    cluster, work = tmp_path / "c.yaml", tmp_path / "w.yaml"
    cluster.write_text(MODED)
    work.write_text(MODED_WORK)
    argv = ["plan", "--cluster", str(cluster), "--workloads", str(work), "--time-limit", "5"]
    assert main([*argv, "--now", "2026-12-01T00:00:00+00:00"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("status: FEASIBLE")
    assert "the pre-pass fixed the sharing modes of 1 node(s) whose mode could change" in lines[2]


def test_no_gap_is_printed_against_a_zero_or_negative_incumbent_or_a_negative_bound() -> None:
    assert gap_text(100, 50) == "gap 50.00%"
    assert gap_text(100, 100) == "gap 0.00%"
    assert gap_text(0, -832668) == ""
    assert gap_text(-5, -10) == ""
    assert gap_text(100, -1) == ""
    assert gap_text(100, None) == ""


def test_progress_lines_name_their_phase() -> None:
    stream = io.StringIO()
    progress = TerminalProgress(stream, time.monotonic(), interval_s=0.0)
    log = logging.getLogger(CPSAT_LOGGER)
    with reporting(progress):
        log.debug("#1 0.10s best:120 next:[60,120]")
        with phase("capacity gap"):
            log.debug("#2 0.20s best:0 next:[-832668,0]")
        log.debug("#3 0.30s best:100 next:[60,100]")
    lines = [re.sub(r"^progress +[\d.]+ s  ", "", line) for line in stream.getvalue().splitlines()]
    assert lines == [
        "solve: incumbent 120  bound 60  gap 50.00%",
        "capacity gap: incumbent 0  bound -832668",
        "solve: incumbent 100  bound 60  gap 40.00%",
    ]
