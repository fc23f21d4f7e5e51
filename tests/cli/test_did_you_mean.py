"""A newcomer's typos (issue 45 item 10): every misspelt command, flag, flag value, schema kind, tier and
CSV column is answered with one line naming the closest name, exit 2; flags are never abbreviated."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.cli import main
from tests._paths import ROOT_DIR

EXAMPLES = ROOT_DIR / "data" / "examples"
CLUSTER, WORKLOADS = str(EXAMPLES / "cluster.yaml"), str(EXAMPLES / "workloads.yaml")


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The last line ``gpuplan`` writes to stderr for ``argv``, which must exit 2."""
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["plann"], "gpuplan: error: argument COMMAND: invalid choice: 'plann' (did you mean plan?)"),
        (
            ["plan", "--cluster", CLUSTER, "--workloads", WORKLOADS, "--solver", "cp-sat"],
            "gpuplan plan: error: argument --solver: invalid choice: 'cp-sat' (did you mean cpsat?)",
        ),
        (
            ["plan", "--cluster", CLUSTER, "--workloads", WORKLOADS, "--time-limt", "3"],
            "gpuplan: error: unrecognized argument --time-limt (did you mean --time-limit?)",
        ),
        (
            ["plan", "--clustr", CLUSTER, "--workloads", WORKLOADS],
            "gpuplan plan: error: unrecognized argument --clustr (did you mean --cluster?)",
        ),
        (
            ["schema", "clustr"],
            "gpuplan schema: error: argument kind: invalid choice: 'clustr' (did you mean cluster?)",
        ),
        (
            ["capacity-gap", "--cluster", CLUSTER, "--workloads", WORKLOADS, "--allow-other-model"],
            "gpuplan: error: unrecognized argument --allow-other-model (did you mean --allow-other-models?)",
        ),
        (
            ["history", "dif"],
            "gpuplan history: error: argument history_command: invalid choice: 'dif' (did you mean diff?)",
        ),
    ],
)
def test_a_typo_on_the_command_line_names_the_closest_name(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _error(argv, capsys) == expected


def test_a_name_close_to_nothing_lists_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert _error(["xyzzy"], capsys).startswith(
        "gpuplan: error: argument COMMAND: invalid choice: 'xyzzy' (choose from 'plan', 'demo',"
    )


def test_a_misspelt_tier_and_column_name_the_closest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tier = tmp_path / "w.yaml"
    tier.write_text("workloads:\n- {id: a, gpus: 1, tier: stnadard}\n")
    assert main(["plan", "--cluster", CLUSTER, "--workloads", str(tier)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "workload 'a' field tier: unknown tier 'stnadard' (did you mean standard?) "
            "(known: background, latency-sensitive, standard)"
        )
    )
    column = tmp_path / "w.csv"
    column.write_text("id,gpus,cpu_mili\na,1,100\n")
    assert main(["plan", "--cluster", CLUSTER, "--workloads", str(column)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"gpuplan: error: {column}: unknown column 'cpu_mili' (did you mean cpu_milli or gpu_milli?)"
    )
