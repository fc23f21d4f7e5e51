"""The exported round files through the real ``kubectl`` (Debian's kubernetes-client; ``.ci/kubectl.sh``
installs it in CI): every ``.yaml`` file passes ``kubectl apply --dry-run=client`` and ``kubectl create
--dry-run=client -o yaml`` (which gives back the same objects), and every ``.sh`` file runs as it is, its
Bindings and Evictions posted and its patches sent with the patch type they say. kubectl needs an API
server even for a client-side dry run (it maps kinds to resources by discovery), so a small fake one on
loopback answers discovery, says every object is new, and records what the scripts send. Skipped, saying
why, when ``kubectl`` is not installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.models.plan import MigMode
from gpuplan.planner.io.exporters import kubernetes
from gpuplan.planner.planning import make_plan
from tests.planner.io.test_kubernetes_ownership import MOVES, NOW, _input, _options, _state, _with

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(
    KUBECTL is None,
    reason="kubectl is not installed (Debian's kubernetes-client; .ci/kubectl.sh installs it)",
)

_V1 = [
    ("pods", "Pod", True),
    ("pods/binding", "Binding", True),
    ("pods/eviction", "Eviction", True),
    ("nodes", "Node", False),
    ("configmaps", "ConfigMap", True),
]
_GROUPS = {
    "scheduling.k8s.io/v1": [("priorityclasses", "PriorityClass", False)],
    "policy/v1": [("poddisruptionbudgets", "PodDisruptionBudget", True)],
    "scheduling.x-k8s.io/v1alpha1": [("podgroups", "PodGroup", True)],
}
_KIND = {name: kind for name, kind, _ in _V1} | {n: k for rs in _GROUPS.values() for n, k, _ in rs}


def _resources(version: str, resources: list[tuple[str, str, bool]]) -> dict[str, Any]:
    verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": version,
        "resources": [
            {"name": n, "singularName": "", "namespaced": ns, "kind": k, "verbs": verbs}
            for n, k, ns in resources
        ],
    }


class _Api(BaseHTTPRequestHandler):
    """Discovery, 404 for every object read, and a record of every write."""

    calls: list[dict[str, Any]]
    #: Whether the objects read exist (a script patches objects that exist; a dry run creates new ones).
    exist: list[bool]

    def log_message(self, *args: Any) -> None:
        """Log nothing: kubectl's requests are recorded in ``calls``."""

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/api":
            self._send(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        elif path == "/apis":
            groups = []
            for gv in _GROUPS:
                group, version = gv.split("/")
                entry = {"groupVersion": gv, "version": version}
                groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
            self._send(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        elif path == "/api/v1":
            self._send(200, _resources("v1", _V1))
        elif path.startswith("/apis/") and path[6:] in _GROUPS:
            self._send(200, _resources(path[6:], _GROUPS[path[6:]]))
        elif self.exist[0] and "/openapi" not in path and path.count("/") >= 3:
            self._object(201)
        else:
            self._send(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                             "code": 404, "message": "not found"})  # fmt: skip

    def _object(self, code: int) -> None:
        """Answer with a minimal object of the kind the path names."""
        parts = self.path.split("?")[0].strip("/").split("/")
        sub = parts[-1] in ("binding", "eviction")
        resource, name = (parts[-3], parts[-2]) if sub else (parts[-2], parts[-1])
        namespace = parts[parts.index("namespaces") + 1] if "namespaces" in parts else None
        meta = {"name": name, **({"namespace": namespace} if namespace else {})}
        self._send(code, {"apiVersion": "v1", "kind": _KIND.get(resource, "Status"), "metadata": meta})

    def _body(self) -> bytes:
        """The request body, sized or chunked (``kubectl create --raw -f -`` streams it)."""
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))
        out = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if not size:
                self.rfile.readline()
                return out
            out += self.rfile.read(size)
            self.rfile.readline()

    def _write(self) -> None:
        body = json.loads(self._body() or b"null")
        kind_of_body = self.headers.get("Content-Type")
        self.calls.append(
            {"method": self.command, "path": self.path.split("?")[0], "type": kind_of_body, "body": body}
        )
        self._object(201 if self.command == "POST" else 200)

    do_POST = do_PATCH = do_PUT = _write


@pytest.fixture()
def api(tmp_path: Path) -> Iterator[tuple[dict[str, str], list[dict[str, Any]], list[bool]]]:
    calls: list[dict[str, Any]] = []
    exist = [False]
    handler = type("Api", (_Api,), {"calls": calls, "exist": exist})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
        "users": [{"name": "fake", "user": {}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "current-context": "fake",
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig"), "HOME": str(tmp_path)}
    try:
        yield env, calls, exist
    finally:
        server.shutdown()
        server.server_close()


def _kubectl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run([KUBECTL, *args], env=env, capture_output=True, text=True, timeout=60, check=False)


def _rounds(tmp_path: Path) -> list[Path]:
    """An export with every kind of file: the platform dump planned with a move of a bare pod (its
    PriorityClass and Pod), MIG turned off on an idle GPU, the pending pods placed (Bindings, gates)."""
    state = _state()
    inp = _input(state, {**MOVES, "mig": {"allow_repartition": True}})
    plan = make_plan(inp, solver="greedy-fgd", now=NOW).model_copy(
        update={"mig_layouts": (), "mig_modes": ()}
    )
    moved = tuple(
        a.model_copy(update={"node": "h100-c", "gpus": (a.gpus[0].model_copy(update={"index": 6}),)})
        if a.workload == "batch/sweep-0"
        else a
        for a in plan.assignments
    )
    plan = _with(plan, inp, assignments=moved, mig_modes=(MigMode(node="h100-a", gpu=7, enabled=False),))
    steps = kubernetes.steps(plan, inp, kubernetes.Images(), options=_options())
    paths = kubernetes.write_rounds(steps, tmp_path / "k8s")
    assert {p.suffix for p in paths} == {".yaml", ".sh"}
    assert {s.kind for s in steps} >= {kubernetes.SETUP, kubernetes.EVICT, kubernetes.MIG, kubernetes.PLACE}
    return paths


def test_yaml_rounds_pass_kubectl_client_dry_runs(
    api: tuple[dict[str, str], list[dict[str, Any]], list[bool]], tmp_path: Path
) -> None:
    env, calls, _ = api
    for path in (p for p in _rounds(tmp_path) if p.suffix == ".yaml"):
        applied = _kubectl(env, "apply", "--dry-run=client", "--validate=false", "-f", str(path))
        assert applied.returncode == 0, applied.stderr
        wanted = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert applied.stdout.count("(dry run)") == len(wanted), applied.stdout
        created = _kubectl(
            env, "create", "--dry-run=client", "--validate=false", "-o", "yaml", "-f", str(path)
        )
        assert created.returncode == 0, created.stderr
        back = yaml.safe_load(created.stdout)
        items = back["items"] if back.get("kind") == "List" else [back]
        assert [(d["kind"], d["metadata"]["name"]) for d in items] == [
            (d["kind"], d["metadata"]["name"]) for d in wanted
        ]
    assert not [c for c in calls if c["method"] != "GET"]  # a dry run writes nothing


def test_scripts_run_through_kubectl_and_send_what_they_say(
    api: tuple[dict[str, str], list[dict[str, Any]], list[bool]], tmp_path: Path
) -> None:
    env, calls, exist = api
    exist[0] = True
    for path in (p for p in _rounds(tmp_path) if p.suffix == ".sh"):
        done = subprocess.run(
            ["sh", str(path)], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, (path.name, done.stdout, done.stderr)
    sent = {(c["method"], c["path"], c["type"]) for c in calls}
    posted = {c["path"]: c["body"] for c in calls if c["method"] == "POST"}
    assert posted["/api/v1/namespaces/batch/pods/sweep-0/eviction"]["kind"] == "Eviction"
    assert posted["/api/v1/namespaces/ml/pods/bind-me/binding"]["kind"] == "Binding"
    # gpuplan's scheduler's pod behind gpuplan's gate is bound after its gate goes.
    assert posted["/api/v1/namespaces/ml/pods/train-ours-0/binding"]["target"]["kind"] == "Node"
    assert len(posted) == 3
    json_patch = "application/json-patch+json"
    assert (
        "PATCH",
        "/api/v1/namespaces/gpu-operator/configmaps/default-mig-parted-config",
        json_patch,
    ) in sent
    assert ("PATCH", "/api/v1/nodes/h100-a", "application/merge-patch+json") in sent
    assert ("PATCH", "/api/v1/namespaces/ml/pods/train-both-0", json_patch) in sent
    # Only h100-a is relabelled; the Kueue-gated pod and the guessed node are never written to.
    written = {c["path"] for c in calls if c["method"] != "GET"}
    assert not [p for p in written if p.endswith(("/h100-b", "/train-kueue-0", "/vgpu-0", "/frac-0"))]
    ungate = next(c for c in calls if c["path"].endswith("/train-both-0") and c["type"] == json_patch)
    assert ungate["body"] == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": "gpuplan.io/placement"},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
    ]
