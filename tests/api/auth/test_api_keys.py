"""Key management: ``gpuplan keys create|list|revoke``, the admin-only ``/v1/keys`` endpoints, and a
revoked or expired key refused without a restart."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpuplan.api import create_app
from gpuplan.api.keys import KeyStore, key_hash, parse_expiry
from gpuplan.api.settings import Settings
from gpuplan.api.store import Store
from gpuplan.api.store.tables import audit
from gpuplan.cli import main
from gpuplan.planner.store.records import now
from tests._api import ADMIN, KEYS, PLANNER, VIEWER_ML, Server, auth, live

__all__ = ["live"]


def _create(db: str, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[str, str]:
    """Run ``gpuplan keys create``; the key's id and the key (its last line)."""
    assert main(["keys", "create", "--database", db, *extra]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    key = out[-1]
    return key_hash(key)[:12], key


def test_keys_create_list_revoke_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "keys.db")
    admin_id, admin = _create(db, capsys, "--role", "admin")
    viewer_id, viewer = _create(db, capsys, "--role", "viewer:ml", "--expires", "30d")
    assert main(["keys", "list", "--database", db]) == 0
    listing = capsys.readouterr().out
    lines = listing.strip().splitlines()
    assert lines[0].split() == ["id", "role", "created", "expires", "revoked"]
    assert admin not in listing and viewer not in listing
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {admin_id, viewer_id}
    expires = (now() + timedelta(days=30)).strftime("%Y-%m-%d")
    assert expires in rows[viewer_id] and rows[admin_id].rstrip().endswith("-")

    assert main(["keys", "revoke", viewer_id, "--database", db]) == 0
    assert f"key {viewer_id} (viewer:ml) revoked" in capsys.readouterr().out
    assert main(["keys", "list", "--database", db]) == 0
    revoked = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(viewer_id))
    assert not revoked.rstrip().endswith("-")  # the revoked column holds a time

    # Bad input: one line naming the option, exit 2.
    for argv, named in (
        (["create", "--role", "boss"], "--role: unknown role 'boss'"),
        (["create", "--role", "planner", "--expires", "soon"], "--expires: 'soon' is neither"),
        (["create", "--role", "planner", "--expires", "2001-01-01"], "--expires: '2001-01-01' is not in"),
        (["revoke", "abcdef012345"], "no stored key 'abcdef012345'"),
        (["revoke", "not-hex"], "key id 'not-hex' is not hex digits"),
    ):
        assert main(["keys", *argv, "--database", db]) == 2
        err = capsys.readouterr().err
        assert named in err and len(err.strip().splitlines()) == 1, err


def test_expiry_is_a_duration_or_an_iso_time() -> None:
    at = now()
    assert parse_expiry("12h", at) == at + timedelta(hours=12)
    assert parse_expiry("8w", at) == at + timedelta(weeks=8)
    assert parse_expiry("2999-01-02", at).isoformat() == "2999-01-02T00:00:00+00:00"
    with pytest.raises(ValueError, match="not in the future"):
        parse_expiry("0d", at)


def test_a_key_revoked_on_the_command_line_is_refused_within_a_second(
    live: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """The running server is not restarted: it reads stored keys again after at most half a second."""
    key_id, key = _create(live.database, capsys, "--role", "viewer:ml")
    with live.client(key) as c:
        assert c.get("/v1/plans").status_code == 200
        assert main(["keys", "revoke", key_id, "--database", live.database]) == 0
        time.sleep(1.0)  # the item's own bound: refused within a second of the revocation
        r = c.get("/v1/plans")
        assert r.status_code == 401, r.text


def test_an_expired_key_is_refused(live: Server) -> None:
    key = "expiring-key-0123456789abcdef"
    store = Store.open(live.database)
    try:
        KeyStore(store.engine).add(key_hash(key), "planner", now() + timedelta(seconds=2))
    finally:
        store.close()
    with live.client(key) as c:
        assert c.get("/v1/plans").status_code == 200
        time.sleep(2.5)
        assert c.get("/v1/plans").status_code == 401


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    settings = Settings(database=str(tmp_path / "api.db"), api_keys=KEYS, prestart_solvers=False)
    return TestClient(create_app(settings), headers=auth(ADMIN))


def test_admins_make_list_and_revoke_keys_over_http(client: TestClient) -> None:
    with client:
        made = client.post("/v1/keys", json={"role": "planner", "expires": "1d"})
        assert made.status_code == 201, made.text
        body = made.json()
        key, key_id = body["key"], body["id"]
        assert key_id == key_hash(key)[:12] and body["role"] == "planner" and body["revoked_at"] is None
        assert client.get("/v1/plans", headers=auth(key)).status_code == 200
        listed = client.get("/v1/keys").json()
        assert [k["id"] for k in listed] == [key_id] and "key" not in listed[0]
        assert listed[0]["expires_at"] is not None

        revoked = client.delete(f"/v1/keys/{key_id}")
        assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
        # Revoked through this server: refused at once.
        assert client.get("/v1/plans", headers=auth(key)).status_code == 401
        assert client.get("/v1/keys").json()[0]["revoked_at"] is not None
        assert client.delete("/v1/keys/0123456789ab").status_code == 404

        for body, field in (({"role": "root"}, "role"), ({"role": "planner", "expires": "later"}, "expires")):
            r = client.post("/v1/keys", json=body)
            assert r.status_code == 422, r.text
            assert r.json()["detail"][0]["loc"] == ["body", field]
        assert {"create-key", "revoke-key"} <= set(_audit(client))


def _audit(client: TestClient) -> list[str]:
    """The actions of the audit records without a job (key management)."""
    store: Store = client.app.state.store  # type: ignore[attr-defined]
    with store.engine.connect() as conn:
        return list(conn.execute(select(audit.c.action).where(audit.c.job_id.is_(None))).scalars())


def test_only_admins_manage_keys(live: Server) -> None:
    for key in (PLANNER, VIEWER_ML):
        for method, path, body in (
            ("POST", "/v1/keys", {"role": "admin"}),
            ("GET", "/v1/keys", None),
            ("DELETE", "/v1/keys/0123456789ab", None),
        ):
            r = httpx.request(method, live.url + path, json=body, headers=auth(key))
            assert r.status_code == 403, (key, method, r.text)
            assert httpx.request(method, live.url + path, json=body).status_code == 401
