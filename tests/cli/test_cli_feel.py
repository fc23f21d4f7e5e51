"""How the command line feels: progress lines (elapsed, phase, incumbent, bound, gap) on a terminal, nothing
of the kind in a pipe, and stdout holding only the command's own output (no HiGHS banner, no CP-SAT log).

The commands run as the installed console script does, in a subprocess; the terminal is a pseudo-terminal
(``os.openpty``) on stderr.
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuplan.models.catalog import data_dir
from tests._paths import ROOT_DIR

ROOT = ROOT_DIR
EXAMPLES = data_dir() / "examples"
EXAMPLE_FILES = [
    "--cluster", str(EXAMPLES / "cluster.yaml"),
    "--workloads", str(EXAMPLES / "workloads.yaml"),
    "--policy", str(EXAMPLES / "policy.yaml"),
    "--now", (EXAMPLES / "now.txt").read_text().strip(),
]  # fmt: skip
#: A progress line names its phase; a gap only over a positive incumbent and a bound not below zero.
#: A progress line names its stage (``planner/presentation/progress.py``): the queue stage's value is the
#: plan's queue term, with its gap; later stages and the neighbourhood search's steps show their own value.
PROGRESS = re.compile(
    r"^progress +[\d.]+ s  solve, ("
    r"queue stage: queue term \d+  bound \d+(  gap [\d.]+%)?"
    r"|(fragmentation|disruption\+topology) stage: stage value -?\d+  bound -?\d+"
    r"(  \(queue term at most \d+\))?"
    r"|weighted stage: objective -?\d+  bound -?\d+(  gap [\d.]+%)?"
    r"|neighbourhood search: step value -?\d+  bound -?\d+"
    r")$"
)
CONSOLE = [sys.executable, "-c", "import sys; from gpuplan.cli import main; sys.exit(main())"]


def _on_terminal(args: list[str]) -> tuple[int, str, str]:
    """Run ``gpuplan ARGS`` with stderr on a pseudo-terminal: exit code, stdout, what the terminal got."""
    leader, follower = os.openpty()
    proc = subprocess.Popen(
        [*CONSOLE, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL
    )
    os.close(follower)
    seen = bytearray()
    while True:
        ready, _, _ = select.select([leader], [], [], 300)
        if not ready:
            break
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    proc.stdout.close()
    return proc.wait(timeout=60), out, seen.decode().replace("\r\n", "\n")


def _in_pipes(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CONSOLE, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.mark.slow
def test_a_plan_shows_progress_on_a_terminal_and_stays_quiet_in_a_pipe() -> None:
    args = ["plan", *EXAMPLE_FILES, "--time-limit", "30"]
    code, out, terminal = _on_terminal(args)
    assert code == 0, terminal
    lines = [line for line in terminal.splitlines() if line.startswith("progress")]
    assert lines, terminal
    assert all(PROGRESS.match(line) for line in lines), lines
    assert out.startswith("status: ") and "progress" not in out
    code, _, terminal = _on_terminal(["-q", *args[:-1], "5"])
    assert code == 0 and "progress" not in terminal and "WARNING" not in terminal, terminal
    piped = _in_pipes([*args[:-1], "5"])
    assert piped.returncode == 0, piped.stderr
    assert "progress" not in piped.stderr
    assert piped.stdout.startswith("status: ")
    assert "#Bound" not in piped.stdout and "CP-SAT" not in piped.stdout


def _small_gap_inputs(tmp_path: Path) -> list[str]:
    """Two L40S servers and more 4-GPU work than they hold: the purchase MILP runs on HiGHS."""
    gpus = [{"index": i, "model": "L40S-48GB"} for i in range(4)]
    node = {"cpu_milli": 64000, "memory_mib": 262144, "gpus": gpus}
    cluster = {"nodes": [{"name": f"n{i}", **node} for i in range(2)]}
    work = [{"id": f"w{i}", "team": "ml", "gpus": 4, "gpu_models": ["L40S-48GB"]} for i in range(4)]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "w.yaml").write_text(yaml.safe_dump({"workloads": work}))
    return ["--cluster", str(tmp_path / "c.yaml"), "--workloads", str(tmp_path / "w.yaml")]


@pytest.mark.parametrize("verbose", [[], ["-v"]])
def test_the_highs_banner_never_reaches_stdout(tmp_path: Path, verbose: list[str]) -> None:
    out = tmp_path / "gap.json"
    done = _in_pipes(
        [*verbose, "capacity-gap", *_small_gap_inputs(tmp_path), "--time-limit", "20", "--out", str(out)]
    )
    assert done.returncode == 0, done.stderr
    assert "HiGHS" not in done.stdout and "Copyright" not in done.stdout
    assert done.stdout.startswith("gap demand: ")
    assert f"capacity gap written to {out}" in done.stdout
    assert "progress" not in done.stderr
    if verbose:  # the banner was printed (the purchase MILP ran on HiGHS), to stderr
        assert "Running HiGHS" in done.stderr
