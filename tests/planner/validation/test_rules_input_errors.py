"""An input error many objects share is one short line with their count and a few names, in the model,
the CLI (exit 2) and the API (422)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from pydantic import ValidationError

from gpuplan.api import create_app
from gpuplan.api.settings import Settings
from gpuplan.cli import main
from gpuplan.models import Cluster, PlanningInput, Policy, Workload
from gpuplan.models.base import GROUP_NAMED, MAX_ERRORS, grouped_errors
from tests._api import KEYS, PLANNER, auth, tiny_body

#: Workloads naming the unknown team.
N = 300
#: Far below the ~20 KB that N repeated errors took.
SHORT = 300


def _workloads(n: int = N) -> list[dict[str, Any]]:
    return [{"id": f"pod-{i:04d}", "team": "ghost", "gpu_milli": 100} for i in range(n)]


def test_many_workloads_with_one_unknown_team_give_one_short_error() -> None:
    with pytest.raises(ValidationError) as caught:
        PlanningInput(
            cluster=Cluster(nodes=()),
            workloads=tuple(Workload.model_validate(w) for w in _workloads()),
            policy=Policy(teams=("ml",)),
        )
    msg = str(caught.value.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
    assert msg == "field team: unknown team 'ghost' (300 workloads: pod-0000, pod-0001, pod-0002, ...)"


def test_grouping_keeps_single_errors_and_counts_the_kinds_beyond_the_limit() -> None:
    errors = [("a", "field team: unknown team 'x'"), ("b", "field tier: unknown tier 'y'")]
    errors += [("c", "field team: unknown team 'x'")]
    assert grouped_errors("workload", errors) == [
        "field team: unknown team 'x' (2 workloads: a, c)",
        "workload 'b' field tier: unknown tier 'y'",
    ]
    many = [(f"w{i}", f"field team: unknown team 't{i}'") for i in range(MAX_ERRORS + 5)]
    lines = grouped_errors("workload", many)
    assert len(lines) == MAX_ERRORS + 1 and lines[-1] == "and 5 more workload error(s)"
    assert lines[0] == "workload 'w0' field team: unknown team 't0'"
    exactly = [(f"w{i}", "same") for i in range(GROUP_NAMED)]
    assert grouped_errors("workload", exactly) == ["same (3 workloads: w0, w1, w2)"]


def test_the_cli_says_it_in_one_short_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = {"nodes": [{"name": "n1", "cpu_milli": 1000, "memory_mib": 1024, "gpus": []}]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump({"workloads": _workloads()}))
    (tmp_path / "policy.yaml").write_text(yaml.safe_dump({"teams": ["ml"]}))
    argv = [
        "plan",
        "--cluster",
        str(tmp_path / "cluster.yaml"),
        "--workloads",
        str(tmp_path / "workloads.yaml"),
    ]
    code = main([*argv, "--policy", str(tmp_path / "policy.yaml"), "--solver", "first-fit"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and len(err) < SHORT, err
    assert "unknown team 'ghost' (300 workloads: pod-0000, pod-0001, pod-0002, ...)" in err


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(database=str(tmp_path / "api.db"), api_keys=KEYS, prestart_solvers=False)
    with TestClient(create_app(settings), headers=auth(PLANNER)) as c:
        yield c


def test_the_api_answers_422_with_the_same_short_message(client: TestClient) -> None:
    body = tiny_body()
    body["workloads"] = _workloads()
    body["policy"] = {"teams": ["ml"]}
    r = client.post("/v1/plans", content=json.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    msgs = [d["msg"] for d in r.json()["detail"]]
    assert len(msgs) == 1 and len(msgs[0]) < SHORT, msgs
    assert "unknown team 'ghost' (300 workloads: pod-0000, pod-0001, pod-0002, ...)" in msgs[0]
