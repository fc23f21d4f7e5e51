"""The solver process: receives one job at a time over a pipe, plans it and sends progress and the plan.

Solves run here, never in the server's event loop, so that ``DELETE`` can stop one at once by ending the
process. Progress is read from what the planner logs (``planner/presentation/progress.py``): the phase, and
the CP-SAT search log's incumbent objective and bound of the current lexicographic stage.

The process caps its address space (``solver_memory_mib``): a job beyond it ends with a ``memory`` error
and the process exits, so the server starts a clean one. It never outlives the server: it is a child of
the multiprocessing fork server, which exits when the server dies, and the kernel then kills it
(``PR_SET_PDEATHSIG``); a watcher thread also ends it when its parent or the server is gone.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import resource
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuplan.api.reviews import KINDS
from gpuplan.models.base import InputError
from gpuplan.models.capacity import CapacityGap, NodeTypeCatalog
from gpuplan.models.catalog import default_catalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan, PlanStatus
from gpuplan.planner.capacity.gap import capacity_gap
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.explain.reasons import explain_workload
from gpuplan.planner.planning import make_plan
from gpuplan.planner.presentation.progress import (
    CPSAT_LOGGER,
    PLANNING_LOGGER,
    SearchLine,
    SolveProgress,
    reporting,
    stdout_silenced,
)
from gpuplan.planner.validation.errors import InvalidPlanError
from gpuplan.solvers.base import EXACT_SOLVERS

log = logging.getLogger(__name__)

#: At most this many progress messages a second reach the server.
PROGRESS_INTERVAL_S = 0.2


#: How often the watcher thread checks that the server is still there.
WATCH_INTERVAL_S = 0.5
#: ``prctl`` option: the signal the kernel sends when the parent dies (``<linux/prctl.h>``).
_PR_SET_PDEATHSIG = 1
#: The error code of a job that ran out of memory (the runner then replaces the process).
OUT_OF_MEMORY = "memory"


def out_of_memory(memory_mib: int) -> str:
    """The error of a job that ran out of memory under a cap of ``memory_mib``."""
    return f"solver process ran out of memory (limit {memory_mib} MiB)"


def address_space_mib(pid: int) -> float | None:
    """The address space process ``pid`` holds (what the cap limits), or None where ``/proc`` cannot tell."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) / 1024
    return None


@dataclass
class Progress:
    """What the solve has shown so far; sent to the server as a dict."""

    phase: str = "compiling"
    stage: int = 1
    incumbent: float | None = None
    bound: float | None = None
    started: float = field(default_factory=time.monotonic)

    def as_dict(self) -> dict[str, Any]:
        """The JSON form: phase, stage, incumbent objective, bound and elapsed seconds."""
        return {
            "phase": self.phase,
            "stage": self.stage,
            "incumbent": self.incumbent,
            "bound": self.bound,
            "elapsed_s": round(time.monotonic() - self.started, 3),
        }


class Channel:
    """The pipe to the server; sends are serialised because CP-SAT logs from its own threads."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.lock = threading.Lock()

    def send(self, message: tuple[Any, ...]) -> None:
        """Send one message."""
        with self.lock:
            self.conn.send(message)


class JobProgress(SolveProgress):
    """Sends a job's progress to the server: a phase or stage change at once, new incumbents and bounds
    at most every ``PROGRESS_INTERVAL_S`` (from a ticker thread)."""

    def __init__(self, channel: Channel) -> None:
        super().__init__()
        self.channel = channel
        self.progress = Progress()
        self.dirty = False
        threading.Thread(target=self._tick, name="progress", daemon=True).start()

    def reset(self) -> None:
        """Start the progress of a new job."""
        self.progress = Progress()
        self.send()

    def send(self) -> None:
        """Send the progress now."""
        self.dirty = False
        self.channel.send(("progress", self.progress.as_dict()))

    def _tick(self) -> None:
        while True:
            time.sleep(PROGRESS_INTERVAL_S)
            if self.dirty:
                self.send()

    def solving(self) -> None:
        """The solver starts: send the phase."""
        self.progress.phase = "solving"
        self.send()

    def searched(self, line: SearchLine) -> None:
        """Record the new incumbent and bound (sent by the ticker)."""
        self.progress.incumbent = line.incumbent
        self.progress.bound = line.lower
        self.dirty = True

    def stage_ended(self) -> None:
        """The next lexicographic stage starts without an incumbent or bound: send that."""
        p = self.progress
        p.stage += 1
        p.incumbent = p.bound = None
        self.send()


def outcome(plan: Plan, time_limit_s: float) -> str:
    """A label saying what kind of plan this is, in particular one cut short by the time limit."""
    name = plan.solver.name
    if plan.status is PlanStatus.OPTIMAL:
        return "optimal"
    if plan.status is PlanStatus.FALLBACK:
        return "time limit reached: the exact solver found no plan in time; greedy (FGD) plan returned"
    # The solve gets a share of the job's limit (the rest goes to the passes after it).
    solve_limit = float(plan.provenance.get("solve_time_limit_s", time_limit_s))
    if name in EXACT_SOLVERS and plan.solver.wall_s >= 0.9 * solve_limit:
        return "time limit reached: best plan found, not proven optimal"
    if name in EXACT_SOLVERS:
        return "feasible, not proven optimal"
    return f"heuristic plan ({name})"


def gap_outcome(gap: CapacityGap) -> str:
    """A one-line summary of a capacity gap."""
    if not gap.demand_replicas:
        return "no waiting demand: nothing to add"
    text = f"{gap.nodes_added} nodes / {gap.gpus_added} GPUs to add for {gap.cost:g} {gap.currency}"
    if gap.unservable:
        text += f"; {len(gap.unservable)} replica(s) no node type can serve"
    if gap.cut_short:
        text += f"; cut short by the time limit: {', '.join(gap.cut_short)}"
    return text


def solve(input_json: str, options: dict[str, Any]) -> tuple[str, str, str]:
    """Plan (or find the capacity gap of, or review the policy of: ``api.reviews``) one stored input;
    returns (result JSON, status, outcome label)."""
    review = KINDS.get(str(options.get("kind")))
    if review is not None:
        return review.run(input_json, options)
    catalog = default_catalog()
    inp = PlanningInput.model_validate_json(input_json, context={"catalog": catalog})
    now_text = options.get("now")
    now = datetime.fromisoformat(now_text) if isinstance(now_text, str) else None
    time_limit = float(options["time_limit_s"])
    seed = int(options.get("seed", 0))
    workers = int(options.get("num_workers", 1))
    if options.get("kind") == "explain":
        found = explain_workload(
            inp,
            Plan.model_validate_json(options["plan"]),
            str(options["workload"]),
            catalog=catalog,
            counterfactuals=int(options.get("counterfactuals", 3)),
            solver=str(options["solver"]),
            time_limit_s=time_limit,
        )
        text = json.dumps([e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in found])
        return text, "OK", f"{len(found)} explanation(s)"
    if options.get("kind") == "capacity-gap":
        raw_types = options.get("node_types")
        types = (
            NodeTypeCatalog.model_validate(raw_types, context={"catalog": catalog})
            if raw_types
            else load_node_types(None, catalog)
        )
        gap_options = GapOptions(
            solver=str(options["solver"]),
            time_limit_s=time_limit,
            milp_time_limit_s=time_limit,
            seed=seed,
            num_workers=workers,
            now=now,
        )
        gap = capacity_gap(inp, types, gap_options, catalog=catalog)
        status = "UNSERVABLE" if gap.unservable else "OK"
        return gap.model_dump_json(by_alias=True, exclude_none=True), status, gap_outcome(gap)
    plan = make_plan(
        inp,
        solver=str(options["solver"]),
        catalog=catalog,
        now=now,
        time_limit_s=time_limit,
        seed=seed,
        num_workers=workers,
        deterministic=bool(options.get("deterministic", False)),
    )
    text = plan.model_dump_json(by_alias=True, exclude_none=True)
    return text, plan.status.value, outcome(plan, time_limit)


def _server_alive(server_pid: int) -> bool:
    """False once process ``server_pid`` has ended (gone, or a zombie its parent has not reaped)."""
    try:
        os.kill(server_pid, 0)
        stat = Path(f"/proc/{server_pid}/stat").read_text()
        return stat.rpartition(")")[2].split()[0] not in "ZX"
    except ProcessLookupError:
        return False
    except OSError:  # no /proc (not Linux): the signal check above is all there is
        return True


def _watch(parent_pid: int, server_pid: int) -> None:
    """End this process when its parent (the fork server) or the server is gone."""
    while os.getppid() == parent_pid and _server_alive(server_pid):
        time.sleep(WATCH_INTERVAL_S)
    os._exit(1)


def _die_with_server(server_pid: int) -> None:
    """Never outlive the server: the kernel kills this process when its parent, the fork server (which
    exits with the server), dies; a thread checks the parent and the server as well."""
    parent = os.getppid()
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    threading.Thread(target=_watch, args=(parent, server_pid), name="watch-server", daemon=True).start()


def _limit_memory(memory_mib: int) -> None:
    """Cap the address space: an allocation beyond it raises ``MemoryError`` in the job."""
    limit = memory_mib * 1024 * 1024
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def main(conn: Connection, server_pid: int, memory_mib: int) -> None:
    """Serve jobs from ``conn`` until the server closes it (or a job runs out of memory)."""
    _die_with_server(server_pid)
    _limit_memory(memory_mib)
    channel = Channel(conn)
    handler = JobProgress(channel)
    # CP-SAT also prints its search log to stdout; the progress is read through logging instead.
    with stdout_silenced(), reporting(handler, (PLANNING_LOGGER, CPSAT_LOGGER)):
        default_catalog()
        channel.send(("ready",))
        while True:
            try:
                _serve_one(conn, channel, handler)
            except (EOFError, OSError):  # the server closed the pipe
                return
            except MemoryError:
                break  # leaving the handler drops the traceback, and with it what the job had allocated
    channel.send(("error", OUT_OF_MEMORY, out_of_memory(memory_mib)))


def _serve_one(conn: Connection, channel: Channel, handler: JobProgress) -> None:
    """Receive one job, solve it and send the result or error; ``MemoryError`` when it ran out of memory
    (the process then ends: what a failed allocation left half-built is not worth keeping)."""
    message: dict[str, Any] = conn.recv()
    handler.reset()
    _run(message, channel)


def _run(message: dict[str, Any], channel: Channel) -> None:
    """Solve one job and send its result or error (``MemoryError`` goes to the caller)."""
    try:
        plan_json, status, label = solve(message["input"], message["options"])
    except MemoryError:
        raise
    except (InputError, ValidationError, KeyError, ValueError) as exc:
        channel.send(("error", "input", str(exc)))
    except InvalidPlanError as exc:
        channel.send(("error", "invalid-plan", str(exc)))
    except Exception as exc:
        log.exception("job %s failed", message.get("job"))
        channel.send(("error", "internal", f"{type(exc).__name__}: {exc}"))
    else:
        channel.send(("done", plan_json, status, label))
