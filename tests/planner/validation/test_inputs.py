"""Input that used to fail late (a 500 from the export or the store, an invalid plan, a null in the stored
input) is refused when it is submitted: 422 naming the field over the API, exit 2 with one line from the
command line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.settings import Settings
from gpuplan.cli import main
from tests._api import KEYS, PLANNER, auth, tiny_body


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """The app in-process on a real SQLite store, with the default limits."""
    db = tmp_path_factory.mktemp("inputs") / "gpuplan.db"
    settings = Settings(database=str(db), api_keys=KEYS, prestart_solvers=False)
    with TestClient(create_app(settings), headers=auth(PLANNER)) as c:
        yield c


def _rejected(r: httpx.Response) -> tuple[list[Any], str]:
    """The field path and message of a 422."""
    assert r.status_code == 422, r.text
    first = r.json()["detail"][0]
    return first["loc"], first["msg"]


def _post(client: TestClient, body: dict[str, Any]) -> httpx.Response:
    """POST the body as Python's json writes it (``Infinity`` and ``NaN`` as bare words); an accepted job
    is planned with first-fit and waited for."""
    body = {**body, "options": {**body["options"], "solver": "first-fit"}}
    r: httpx.Response = client.post(
        "/v1/plans",
        params={"wait": 60},
        content=json.dumps(body),
        headers={"content-type": "application/json"},
    )
    return r


@pytest.mark.parametrize(
    ("index", "field", "value"), [(0, "id", "train\x07"), (1, "team", "ml\n"), (0, "gang", "g\x00")]
)
def test_control_characters_in_names(client: TestClient, index: int, field: str, value: str) -> None:
    """A control character in an id or team made every export of the plan a 500."""
    body = tiny_body()
    body["workloads"][index][field] = value
    loc, msg = _rejected(_post(client, body))
    assert loc == ["body", "workloads", index, field] and "control character" in msg


def test_control_characters_in_node_names_and_labels(client: TestClient) -> None:
    body = tiny_body()
    body["cluster"]["nodes"][1] = {**body["cluster"]["nodes"][1], "name": "n2\x1b[31m"}
    loc, _ = _rejected(_post(client, body))
    assert loc == ["body", "cluster", "nodes", 1, "name"]
    body = tiny_body()
    body["cluster"]["nodes"][0] = {**body["cluster"]["nodes"][0], "labels": {"rack": "a\x7f"}}
    loc, _ = _rejected(_post(client, body))
    assert loc[:5] == ["body", "cluster", "nodes", 0, "labels"]


def test_long_team_from_the_workloads(client: TestClient) -> None:
    """A 250-character team became the job's team and a PostgreSQL ``DataError`` (500): the store keeps
    200 characters."""
    loc, msg = _rejected(_post(client, tiny_body(team="t" * 250)))
    assert loc == ["body", "workloads", 0, "team"] and "200 characters" in msg
    assert _post(client, tiny_body(team="t" * 200)).status_code == 200


@pytest.mark.parametrize("number", [float("inf"), float("nan"), 1e308])
def test_numbers_must_be_finite_and_bounded(client: TestClient, number: float) -> None:
    """``Infinity``, ``NaN`` and ``1e308`` were accepted and stored as null."""
    body = tiny_body()
    body["workloads"][0]["duration_s"] = number
    loc, _ = _rejected(_post(client, body))
    assert loc == ["body", "workloads", 0, "duration_s"]
    body = tiny_body()
    body["policy"] = {"quotas": [{"team": "ml", "gpus": number}]}
    loc, _ = _rejected(_post(client, body))
    assert loc == ["body", "policy", "quotas", 0, "gpus"]
    body = tiny_body()
    body["policy"] = {"tiers": [{"name": "standard", "weight": 1, "target_wait_s": number}]}
    loc, _ = _rejected(_post(client, body))
    assert loc == ["body", "policy", "tiers", 0, "target_wait_s"]
    body = tiny_body()
    body["options"]["time_limit_s"] = number
    if number == 1e308:
        assert _post(client, body).json()["limit"] == "max_time_limit_s"
    else:
        loc, _ = _rejected(_post(client, body))
        assert loc == ["body", "options", "time_limit_s"]


def _running(*places: str) -> dict[str, Any]:
    """The tiny body with one running workload per placement (``running_on`` syntax), MIG on n2's GPU 0."""
    body = tiny_body()
    mig = {"instances": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]}
    h100 = [{"index": 0, "model": "H100-80GB", "mig": mig}, {"index": 1, "model": "H100-80GB"}]
    body["cluster"]["nodes"][1] = {**body["cluster"]["nodes"][1], "gpus": h100}
    body["workloads"] = [
        {"id": f"run{i}", "team": "ml", "replicas": 1, "running_on": place, "started_at": 0}
        | (
            {"mig_profile": "3g.40gb"}
            if "/" in place
            else {"gpu_milli": 600}
            if "=" in place
            else {"gpus": 1}
        )
        for i, place in enumerate(places)
    ]
    return body


@pytest.mark.parametrize(
    ("places", "fragment"),
    [
        (("n1:0", "n1:1", "n1:0"), "n1:0 is not free"),
        (("n1:3=600", "n1:3=600"), "n1:3 lacks 600 milli-GPU"),
        (("n2:0/3g.40gb@4", "n2:0/3g.40gb@4"), "MIG instance 3g.40gb@4 on n2:0 is busy"),
    ],
)
def test_running_work_that_over_commits(client: TestClient, places: tuple[str, ...], fragment: str) -> None:
    """Two running workloads on one whole GPU (or fractions over one GPU, or one MIG slice) were accepted
    and the job failed with an invalid plan."""
    body = _running(*places)
    assert _post(client, _running(*places[:-1])).status_code == 200
    loc, msg = _rejected(_post(client, body))
    last = len(places) - 1
    assert loc == ["body", "workloads", last, "running_on", 0]
    assert msg.startswith(f"workload 'run{last}' field running_on[0]: ") and fragment in msg


def _cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], body: dict[str, Any]) -> tuple[int, str]:
    """``gpuplan plan`` on the body's cluster and workloads: exit code and standard error."""
    cluster, workloads = tmp_path / "c.yaml", tmp_path / "w.json"
    cluster.write_text(yaml.safe_dump(body["cluster"]))
    workloads.write_text(json.dumps({"workloads": body["workloads"]}))
    args = ["plan", "--cluster", str(cluster), "--workloads", str(workloads), "--solver", "first-fit"]
    code = main(args)
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return code, err


def test_the_command_line_refuses_the_same(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = _running("n1:0", "n1:0")
    code, err = _cli(tmp_path, capsys, body)
    assert code == 2 and "workload 'run1' field running_on[0]: n1:0 is not free" in err
    body = tiny_body()
    body["workloads"][0]["duration_s"] = float("inf")
    code, err = _cli(tmp_path, capsys, body)
    assert code == 2 and "workloads[0] (id 'train'): duration_s: Input should be a finite number" in err
    body = tiny_body(team="t" * 201)
    code, err = _cli(tmp_path, capsys, body)
    assert code == 2 and "team: String should have at most 200 characters" in err
    body = tiny_body()
    body["cluster"]["nodes"][0]["name"] = "n\t1"
    code, err = _cli(tmp_path, capsys, body)
    assert code == 2 and "nodes[0] (n\t1).name: contains control character U+0009" in err
    body = tiny_body()
    body["cluster"]["nodes"][0] = {
        **body["cluster"]["nodes"][0],
        "gpus": [{"index": i, "model": "L4-24GB"} for i in range(1025)],
    }
    code, err = _cli(tmp_path, capsys, body)
    assert code == 2 and "nodes[0] (n1).gpus: 1025 GPUs; a node has at most 1024" in err


@pytest.mark.parametrize(
    ("running_on", "shape", "message"),
    [
        (
            [{"node": "n1", "gpus": [{"index": 0}], "alternative": 2}],
            {"alternatives": [{"gpus": 2}, {"gpus": 1}]},
            "field running_on[0].alternative: 2 names no alternative (the workload has 2)",
        ),
        (
            [{"node": "n1", "gpus": [{"index": 0}], "alternative": 0}],
            {"alternatives": [{"gpus": 2}, {"gpus": 1}]},
            "field running_on[0]: holds whole GPU 0, but alternative 0 asks for 2 whole GPU(s)",
        ),
        (
            "n1:0=300",
            {"gpus": 1},
            "field running_on[0]: holds 300 milli of GPU 0, but the workload asks for 1",
        ),
    ],
)
def test_running_gpus_that_are_not_what_the_workload_asks_for(
    client: TestClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    running_on: Any,
    shape: Any,
    message: str,
) -> None:
    """They crashed the planner (an index out of range, an invalid plan of the replica kept in place)."""
    body = tiny_body()
    body["workloads"] = [{"id": "run", "team": "ml", "replicas": 1, "running_on": running_on, **shape}]
    loc, msg = _rejected(_post(client, body))
    assert loc[:2] == ["body", "workloads"] and msg.startswith(f"workload 'run' {message}"), msg
    code, err = _cli(tmp_path, capsys, body)
    assert code == 2 and f"workload 'run' {message}" in err
