"""Bad input to ``policy-cost`` and ``replay`` is one line naming the flag or field, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.cli import main
from tests._paths import ROOT_DIR

EXAMPLES = ROOT_DIR / "data" / "examples"
INPUTS = ["--cluster", str(EXAMPLES / "cluster.yaml"), "--workloads", str(EXAMPLES / "workloads.yaml")]


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_bad_input_is_one_line_naming_what_is_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = str(EXAMPLES / "policy.yaml")
    # The example policy has 10 rules to relax: 11 plans do not fit 5 s at 1 s each.
    line = _error(["policy-cost", *INPUTS, "--policy", policy, "--time-limit", "5"], capsys)
    assert line.startswith("gpuplan: error: --time-limit 5: 11 plans would get")
    assert "--time-limit" in _error(["policy-cost", *INPUTS, "--time-limit", "0"], capsys)
    missing = tmp_path / "nope.yaml"
    assert str(missing) in _error(["policy-cost", *INPUTS, "--policy", str(missing)], capsys)
    bad = tmp_path / "bad.yaml"
    bad.write_text("quotas: [{team: q, gpus: -1}]\n")
    assert "quotas[0].gpus" in _error(["policy-cost", *INPUTS, "--policy", str(bad)], capsys)

    db = tmp_path / "none.db"
    assert "does not exist" in _error(["replay", "--db", str(db), "--policy", policy], capsys)
    assert "--last" in _error(["replay", "--db", str(db), "--policy", policy, "--last", "0"], capsys)
    assert "quotas[0].gpus" in _error(["replay", "--db", str(db), "--policy", str(bad)], capsys)
