"""Authentication and roles on every endpoint: 401 without a valid key, 403 outside the role."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from gpuplan.api import create_app
from gpuplan.api.auth import Role, parse_role
from gpuplan.api.settings import Settings
from gpuplan.cli import main
from tests._api import ADMIN, PLANNER, VIEWER_ML, VIEWER_WEB, Server, auth, live, tiny_body

__all__ = ["live"]

MISSING = "0" * 32


@pytest.fixture(scope="module")
def jobs(live: Server) -> dict[str, str]:
    """A finished job of team ml and one of team web."""
    with live.client(PLANNER) as c:
        return {
            team: c.post(
                "/v1/plans", params={"wait": 30}, json=tiny_body(team=team, solver="first-fit")
            ).json()["job"]["id"]
            for team in ("ml", "web")
        }


def _endpoints(job: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    body = tiny_body(solver="first-fit")
    return [
        ("POST", "/v1/plans", body),
        ("POST", "/v1/capacity-gap", body),
        ("GET", "/v1/plans", None),
        ("GET", f"/v1/plans/{job}", None),
        ("GET", f"/v1/plans/{job}/result", None),
        ("GET", f"/v1/plans/{job}/audit", None),
        ("GET", f"/v1/plans/{job}/export.xlsx", None),
        ("GET", f"/v1/plans/{job}/export.csv", None),
        ("GET", f"/v1/plans/{job}/explain/train?counterfactuals=0&time_limit_s=0.5", None),
        ("DELETE", f"/v1/plans/{job}", None),
        ("POST", f"/v1/plans/{job}/resubmit", None),
        (
            "POST",
            "/v1/validate",
            {"cluster": body["cluster"], "plan": {"status": "OPTIMAL", "solver": {"name": "x"}}},
        ),
    ]


@pytest.mark.parametrize(
    "header", [None, auth("not-a-key-not-a-key"), {"X-API-Key": "wrong-wrong-wrong-wrong"}]
)
def test_every_endpoint_needs_a_valid_key(
    live: Server, jobs: dict[str, str], header: dict[str, str] | None
) -> None:
    for method, path, body in _endpoints(jobs["ml"]):
        r = httpx.request(method, live.url + path, json=body, headers=header)
        assert r.status_code == 401, (method, path, r.text)
        assert r.headers["www-authenticate"] == "Bearer"


def test_viewer_may_only_read_its_team(live: Server, jobs: dict[str, str]) -> None:
    writes = {("POST", "/v1/plans"), ("DELETE", "{job}"), ("POST", "resubmit"), ("POST", "/v1/validate")}
    for method, path, body in _endpoints(jobs["ml"]):
        r = httpx.request(method, live.url + path, json=body, headers=auth(VIEWER_ML))
        write = method in ("POST", "DELETE")
        assert r.status_code == (403 if write else 200), (method, path, r.text)
    for method, path, body in _endpoints(jobs["ml"]):
        if method == "GET" and path != "/v1/plans":
            r = httpx.request(method, live.url + path, json=body, headers=auth(VIEWER_WEB))
            assert r.status_code == 403, (method, path)
    assert writes


def test_planner_and_admin_may_do_everything(live: Server, jobs: dict[str, str]) -> None:
    for key in (PLANNER, ADMIN):
        with live.client(key) as c:
            assert c.get(f"/v1/plans/{jobs['web']}/result").status_code == 200
            assert c.get("/v1/plans", params={"team": "web"}).json()["total"] >= 1
            # a finished job cannot be cancelled (409), an unknown one is 404: never 401/403
            assert c.delete(f"/v1/plans/{jobs['web']}").status_code == 409
            assert c.get(f"/v1/plans/{MISSING}").status_code == 404
            assert c.post(f"/v1/plans/{MISSING}/resubmit").status_code == 404


def test_health_and_metrics_are_anonymous(live: Server) -> None:
    for path in ("/healthz", "/readyz", "/metrics"):
        assert httpx.get(live.url + path).status_code in (200, 503)


def test_no_keys_means_nothing_served_but_health(tmp_path: Path) -> None:
    settings = Settings(database=str(tmp_path / "a.db"), api_keys={}, prestart_solvers=False)
    with TestClient(create_app(settings)) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/metrics").status_code == 200
        assert client.get("/v1/plans").status_code == 401
        assert client.post("/v1/plans", json=tiny_body()).status_code == 401
        assert client.get("/v1/plans", headers=auth(ADMIN)).status_code == 401


def test_first_admin_key_from_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "keys.db")
    assert main(["serve", "--database", db, "--create-admin-key"]) == 0
    admin = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["serve", "--database", db, "--create-key", "viewer:ml"]) == 0
    viewer = capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["serve", "--database", db, "--create-key", "boss"]) == 2
    settings = Settings(database=db, api_keys={}, prestart_solvers=False)
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/plans", headers=auth(admin)).status_code == 200
        assert client.get("/v1/plans", headers={"X-API-Key": viewer}).status_code == 200
        assert client.post("/v1/plans", json=tiny_body(), headers=auth(viewer)).status_code == 403


def test_roles_parse() -> None:
    assert parse_role("viewer:ml") == (Role.VIEWER, "ml")
    assert parse_role("admin") == (Role.ADMIN, None)
    for bad in ("viewer", "viewer: ", "admin:x", "root", "viewer:a\x00b", "viewer:" + "t" * 200):
        with pytest.raises(ValueError, match="role"):
            parse_role(bad)
    with pytest.raises(ValueError, match="16 characters"):
        Settings(api_keys={"short": "admin"})


def test_serve_refuses_bad_settings(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--database", "postgresql://nobody@127.0.0.1:1/x"]) == 2
    assert "connection" in capsys.readouterr().err
    monkeypatch.setenv("GPUPLAN_API_KEYS", json.dumps({"a" * 20: "root"}))
    assert main(["serve", "--database", "x.db"]) == 2
    assert "unknown role 'root'" in capsys.readouterr().err
