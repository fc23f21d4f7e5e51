"""The first hour of a newcomer: every message read is true, specific and calm (help, request bodies,
errors that suggest, explain by gang name, named waiting work, readable statuses and progress)."""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

import pytest

from gpuplan.api.schemas import PlanRequest
from gpuplan.models.catalog import data_dir
from gpuplan.planner.cli import COMMAND_GROUPS, build_parser, main

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
