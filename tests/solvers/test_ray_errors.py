"""``--ray`` when Ray cannot be used: one line naming the option, exit 2; without ``--ray`` the solvers
need no Ray at all."""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.models.catalog import data_dir

EXAMPLES = data_dir() / "examples"
FILES = ["--cluster", str(EXAMPLES / "cluster.yaml"), "--workloads", str(EXAMPLES / "workloads.yaml")]
PLAN = ["plan", *FILES, "--time-limit", "5", "--solver", "greedy-fgd"]

#: Runs two commands in a Python where ``import ray`` fails, as without the extra, and prints their codes.
WITHOUT_RAY = """
import sys
sys.modules["ray"] = None  # import ray raises ImportError
import gpuplan.solvers.cpsat, gpuplan.solvers.fleet.engine, gpuplan.solvers.parallel
from gpuplan.cli import main
plan = {plan!r}
print(main(plan), main([*plan, "--ray", "local"]))
"""


def test_without_ray_installed_plans_run_and_ray_is_one_line(tmp_path: Path) -> None:
    script = WITHOUT_RAY.format(plan=[*PLAN, "-q", "--out", str(tmp_path / "plan.json")])
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "0 2", done.stderr
    assert done.stderr == "gpuplan: error: --ray local: Ray is not installed: pip install 'gpuplan[ray]'\n"


def _closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


needs_ray = pytest.mark.skipif(
    importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install 'gpuplan[ray]')"
)


@needs_ray
def test_an_unreachable_cluster_is_one_line_on_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """plan, replan, capacity-gap and simulate: an address nothing answers at is refused before any solve
    (``ray.init`` itself would retry it for minutes)."""
    address = f"127.0.0.1:{_closed_port()}"
    commands = [
        PLAN,
        ["replan", *FILES, "--db", str(tmp_path / "h.db"), "--time-limit", "5"],
        ["capacity-gap", *FILES, "--time-limit", "5"],
        ["simulate", "--nodes", "2", "--hours", "1", "--warmup-hours", "0.25"],
    ]
    for command in commands:
        assert main([*command, "--ray", address]) == 2, command[0]
        err = capsys.readouterr().err
        assert err.startswith(f"gpuplan: error: --ray {address}: no Ray cluster answers at {address} ("), err
        assert err.count("\n") == 1


@needs_ray
@pytest.mark.parametrize("address", ["head", "ray://head", "head:port", ":10001"])
def test_a_malformed_address_is_one_line(address: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*PLAN, "--ray", address]) == 2
    expected = f"'{address}' is not 'local', HOST:PORT or ray://HOST:PORT"
    assert capsys.readouterr().err == f"gpuplan: error: --ray {address}: {expected}\n"
