"""The job runner: solver processes that take jobs from the store's queue, driven from the event loop.

Jobs wait in the job table (``api.queue``), which every server and worker on a PostgreSQL database
shares. Each slot owns one solver process (``api.solver_process``); an idle slot claims the oldest queued
job under a lease, runs it and ends it ``done``, ``failed`` or ``cancelled``, and while it runs a
heartbeat renews the lease. A job whose process or server dies is queued again by whoever sees its lease
run out (and run from its stored input), until it has run out ``max_lease_expiries`` times. Cancelling
kills the process of a job held here at once; a job held elsewhere is cancelled in its row, and its holder's
next heartbeat finds that and kills its process. The slots supervise their processes: one that dies
(killed, crashed, out of memory) is noticed at once from its pipe, its job fails with the reason, and
the slot starts a new process; while no process is up the runner is not ready. Explanations are not
stored: they wait here for a slot of this server.

On a SQLite file (one server, see ``api.startup``) the jobs still queued or running when the server
starts or stops are marked ``interrupted``; on PostgreSQL a stopping runner hands its jobs back to the
queue for the other servers. The store is written from worker threads so the event loop never waits on
the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import multiprocessing
import os
import signal
import socket
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any, TypeVar

from sqlalchemy.exc import SQLAlchemyError

from gpuplan.api import solver_process
from gpuplan.api.metrics import ApiMetrics, read_fleet
from gpuplan.api.outage import Outage, unreachable
from gpuplan.api.queue import JobQueue
from gpuplan.api.settings import Settings
from gpuplan.api.store import Store
from gpuplan.api.store.records import ACTIVE
from gpuplan.planner.store.db import driver_reason
from gpuplan.planner.store.records import PLAN_KIND, JobRecord, JobStatus

log = logging.getLogger(__name__)
T = TypeVar("T")

_CTX: ForkServerContext = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["gpuplan.api.solver_process"])

#: Solves whose mean wall time estimates how long a queued job waits (``mean_solve_s``).
RECENT_SOLVES = 20

#: How long to wait for a dead or killed process's exit status.
_REAP_S = 5.0
#: The longest time between two heartbeats of a running job (a quarter of the lease if that is shorter):
#: how soon a cancellation on another server stops the solve, and how often leases are checked.
HEARTBEAT_S = 2.0
#: How often an idle slot looks at the queue for jobs stored by other servers.
POLL_S = 1.0
#: How often a running job's process is checked for being at its memory cap, and for how many checks
#: in a row it may stay there silent before it is ended. At the cap every allocation fails; CPython 3.11
#: can then loop for ever unwinding the ``MemoryError`` (pushing an exception handler allocates), without
#: releasing the GIL, so the process can neither report it nor notice that its server is gone.
MEMORY_CHECK_S = 0.5
MEMORY_CAP_CHECKS = 4
#: Within this much of its cap a process's address space counts as at the cap (an allocation is refused
#: as soon as it would cross the cap, so the space held stops just below it).
MEMORY_CAP_MARGIN_MIB = 8.0
#: How often ``wait`` reads the state of a job not held here.
WAIT_POLL_S = 0.2


def _owner() -> str:
    """This runner's name in the leases it holds: host, process id and a random part (a pid is reused)."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _budget(options: dict[str, Any]) -> float:
    """A job's budget of solve seconds (several solves for some kinds), before the grace period."""
    return float(options.get("budget_s", options["time_limit_s"]))


def exit_reason(exitcode: int | None) -> str:
    """How a solver process ended, for a job's error: ``signal 9 (SIGKILL)``, ``exit code 1``."""
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            return f"signal {-exitcode} ({signal.Signals(-exitcode).name})"
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


@dataclass
class Job:
    """A job the runner holds: a stored job it claimed, or an explanation waiting or running here."""

    id: str
    input_json: str
    options: dict[str, Any]
    time_limit_s: float
    done: asyncio.Event = field(default_factory=asyncio.Event)
    progress: dict[str, Any] | None = None
    cancelled: bool = False
    stored: bool = True
    reply: tuple[Any, ...] | None = None
    #: When its solver process took it (``time.monotonic``); None while it waits.
    started: float | None = None

    def left_s(self) -> float:
        """Seconds until its time limit ends (all of it while it waits)."""
        spent = 0.0 if self.started is None else time.monotonic() - self.started
        return max(0.0, self.time_limit_s - spent)


class Slot:
    """One solver process and the messages it sends."""

    def __init__(self, number: int, memory_mib: int) -> None:
        self.number = number
        self.memory_mib = memory_mib
        self.process: BaseProcess | None = None
        self.conn: Connection | None = None
        self.inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self.ready = False
        self.died = asyncio.Event()
        self.job: Job | None = None

    def _spawn(self) -> tuple[BaseProcess, Connection]:
        parent, child = _CTX.Pipe()
        process = _CTX.Process(
            target=solver_process.main,
            args=(child, os.getpid(), self.memory_mib),
            name=f"gpuplan-solver-{self.number}",
        )
        process.daemon = True
        process.start()
        child.close()
        return process, parent

    async def start(self) -> None:
        """Start the process (in a thread: the first start also starts the fork server)."""
        self.release()
        self.died = asyncio.Event()
        self.inbox = asyncio.Queue()
        try:
            self.process, conn = await asyncio.to_thread(self._spawn)
        except (OSError, EOFError) as exc:
            log.error("solver process %d could not be started: %s", self.number, exc)
            return
        self.conn = conn
        asyncio.get_running_loop().add_reader(conn.fileno(), self._readable, conn)
        message = await self.inbox.get()
        self.ready = message[0] == "ready"
        if not self.ready:
            log.error("solver process %d did not start (%s)", self.number, await self.reap())

    def _readable(self, conn: Connection) -> None:
        try:
            while conn.poll():
                self.inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())
            self.ready = False
            self.inbox.put_nowait(("exit",))
            self.died.set()

    def send(self, message: dict[str, Any]) -> bool:
        """Hand a job to the process; False when its pipe is broken (the process has died)."""
        assert self.conn is not None
        try:
            self.conn.send(message)
        except OSError:
            return False
        return True

    def at_memory_cap(self) -> bool:
        """Whether the process holds all the address space its cap allows (its allocations fail)."""
        if self.process is None or self.process.pid is None:
            return False
        held = solver_process.address_space_mib(self.process.pid)
        return held is not None and held >= self.memory_mib - MEMORY_CAP_MARGIN_MIB

    def kill(self) -> None:
        """End the process now; its pipe then reports ``exit``."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()

    async def reap(self) -> str:
        """Wait for the ended process and say how it ended (see :func:`exit_reason`)."""
        if self.process is None:
            return exit_reason(None)
        await asyncio.to_thread(self.process.join, _REAP_S)
        return exit_reason(self.process.exitcode)

    def release(self) -> None:
        """Stop reading the pipe and close it."""
        self.ready = False
        if self.conn is not None:
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
            self.conn.close()
            self.conn = None

    async def stop(self) -> None:
        """Kill the process and release the pipe."""
        self.kill()
        self.release()
        if self.process is not None:
            await asyncio.to_thread(self.process.join, _REAP_S)


class Runner:
    """Runs jobs from the queue in ``size`` solver processes of at most ``memory_mib`` MiB each (none: a
    server that only answers HTTP), holding each under a lease of ``lease_s`` seconds."""

    def __init__(
        self,
        store: Store,
        metrics: ApiMetrics,
        size: int,
        grace_s: float,
        *,
        memory_mib: int,
        lease_s: float = 30.0,
        max_expiries: int = 3,
        prestart: bool = True,
        outage: Outage | None = None,
    ) -> None:
        self.store = store
        self.outage = outage or Outage(lease_s)
        self.prestart = prestart
        self.metrics = metrics
        self.grace_s = grace_s
        self.slots = [Slot(i, memory_mib) for i in range(size)]
        self.queue = JobQueue(store.engine, _owner(), lease_s, max_expiries)
        self.beat_s = min(HEARTBEAT_S, lease_s / 4)
        self.waiting: deque[Job] = deque()
        self.wake = asyncio.Event()
        #: Set (and replaced) whenever a slot here claims a job.
        self.new_claim = asyncio.Event()
        self.jobs: dict[str, Job] = {}
        self.tasks: list[asyncio.Task[None]] = []
        self.recent: deque[float] = deque(maxlen=RECENT_SOLVES)
        self.stopping = False
        metrics.running.set_function(self.running)

    @classmethod
    def of(
        cls, settings: Settings, store: Store, metrics: ApiMetrics, outage: Outage | None = None
    ) -> Runner:
        """The runner that ``settings`` describe, on ``store`` (noting database outages in ``outage``)."""
        return cls(
            store,
            metrics,
            settings.solver_processes,
            settings.solve_grace_s,
            memory_mib=settings.solver_memory_mib,
            lease_s=settings.lease_seconds,
            max_expiries=settings.max_lease_expiries,
            prestart=settings.prestart_solvers,
            outage=outage,
        )

    def running(self) -> int:
        """Jobs in a solver process of this runner now."""
        return sum(1 for s in self.slots if s.job is not None)

    def mean_solve_s(self) -> float | None:
        """Mean wall seconds of the last ``RECENT_SOLVES`` plans solved; None before the first."""
        return sum(self.recent) / len(self.recent) if self.recent else None

    def retry_after(self, active: int) -> int:
        """Whole seconds (at least 1) until one of ``active`` jobs is expected to end, so that a refused
        submission may be retried: with every solver process of this server busy on jobs of the recent
        mean solve time, one ends about every mean / processes seconds; 1 s before the first solve."""
        mean = self.mean_solve_s()
        if mean is None or active <= 0:
            return 1
        return max(1, math.ceil(mean / max(1, len(self.slots))))

    def read_retry_after(self) -> int:
        """Whole seconds (at least 1) until one of the explanations waiting or running here is bound to
        end: the least time limit left among them."""
        left = [j.left_s() for j in self.jobs.values() if not j.stored]
        return max(1, math.ceil(min(left))) if left else 1

    async def _db(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``call`` in a worker thread, noting in ``outage`` whether the database answered."""
        try:
            result = await asyncio.to_thread(call, *args, **kwargs)
        except SQLAlchemyError as exc:
            if unreachable(exc):
                self.outage.failed(exc)
            raise
        self.outage.succeeded()
        return result

    @staticmethod
    def _db_error(exc: SQLAlchemyError, what: str) -> None:
        """Log a database error of a loop that tries again, unless it is the outage (logged once)."""
        if not unreachable(exc):
            log.warning("%s (%s); trying again", what, driver_reason(exc))

    async def active(self) -> int:
        """Stored jobs queued or running, on every server (explanations are counted apart, in
        ``reading``)."""
        return await asyncio.to_thread(self.queue.active)

    @property
    def reading(self) -> int:
        """Explanations (one-off tasks, not stored) waiting or running here."""
        return sum(1 for j in self.jobs.values() if not j.stored)

    @property
    def ready(self) -> bool:
        """At least one solver process is up (or they start on demand)."""
        return not self.prestart or any(s.ready for s in self.slots)

    async def start(self) -> None:
        """Show the latest stored plan in the fleet gauges, start the solver processes and their loops."""
        if not self.queue.shared:
            cut = await asyncio.to_thread(self.store.interrupt_active)
            if cut:
                log.warning("%d job(s) were cut off by the last shutdown and are marked interrupted", cut)
        latest = await asyncio.to_thread(self.store.plans.latest_done, PLAN_KIND)
        if latest is not None:
            plan_json, input_json = latest.result_json, latest.input.input_json
            self.metrics.fleet.latest = await asyncio.to_thread(read_fleet, plan_json, input_json)
        self.tasks = [asyncio.create_task(self._serve(s), name=f"slot-{s.number}") for s in self.slots]
        # Every server expires leases, HTTP-only ones too (a killed worker's job is queued again even
        # while no other worker runs), and this loop also sees a database outage end.
        self.tasks.append(asyncio.create_task(self._expire(), name="lease-expiry"))
        log.info("job runner %s: %d solver process(es)", self.queue.owner, len(self.slots))

    async def stop(self) -> None:
        """Stop every loop and process; hand the jobs held here back to the queue (PostgreSQL), or mark
        every job still queued or running ``interrupted`` (SQLite: no other server will run them)."""
        # Processes first, so that no job goes on; then the loops. A cancellation can be lost in
        # Python 3.11 (``wait_for`` returning a result that came at the same moment): the loops also
        # see ``stopping``, and are waited for a bounded time.
        self.stopping = True
        for slot in self.slots:
            slot.kill()
        for t in self.tasks:
            t.cancel()
        if self.tasks:
            _, pending = await asyncio.wait(self.tasks, timeout=2 * _REAP_S)
            for t in pending:
                log.warning("solver slot loop %s did not stop; abandoned", t.get_name())
                t.cancel()
        await asyncio.gather(*(s.stop() for s in self.slots))
        try:
            if self.slots:
                await asyncio.to_thread(self.queue.leave)
            if self.queue.shared:
                n = await asyncio.to_thread(self.queue.release)
                if n:
                    log.warning("%d job(s) running here are queued again for the other servers", n)
            else:
                n = await asyncio.to_thread(self.store.interrupt_active)
                if n:
                    log.warning("%d job(s) still queued or running are marked interrupted", n)
        except SQLAlchemyError as exc:
            # Their leases run out instead, and whoever sees that queues them again.
            log.warning("the jobs held here were not handed back (%s)", driver_reason(exc))

    def queued(self) -> None:
        """A job was stored as queued: wake an idle slot to claim it (other servers find it when they
        next look at the queue)."""
        self.wake.set()

    async def call(self, options: dict[str, Any], input_json: str, budget_s: float) -> tuple[Any, ...]:
        """Run a one-off task that is not stored (an explanation) in a solver process of this server and
        return the worker's reply: ``("done", json, status, label)`` or ``("error", code, message)``."""
        if not self.slots:
            return ("error", "unavailable", "this server runs no solver processes (--no-worker)")
        job = Job(f"task-{uuid.uuid4().hex}", input_json, options, budget_s, stored=False)
        self.jobs[job.id] = job
        self.waiting.append(job)
        self.wake.set()
        await job.done.wait()
        return job.reply or ("error", "internal", "the task ended without a reply")

    async def progress(self, job: JobRecord) -> dict[str, Any] | None:
        """The live progress of a running job: from its solver process when it runs here, else as its
        holder last stored it."""
        held = self.jobs.get(job.id)
        if held is not None:
            return held.progress
        if job.status is JobStatus.RUNNING:
            return await asyncio.to_thread(self.queue.progress, job.id)
        return None

    async def wait(self, job_id: str, timeout_s: float) -> None:
        """Return when the job ends (here or on another server) or after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            held = self.jobs.get(job_id)
            if held is not None:
                try:
                    await asyncio.wait_for(held.done.wait(), left)
                except TimeoutError:
                    return
            # Not held here (yet), or ended or handed on: its row says which.
            news = self.new_claim
            job = await asyncio.to_thread(self.store.job, job_id)
            if job is None or job.status not in ACTIVE:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(news.wait(), min(max(0.0, deadline - time.monotonic()), WAIT_POLL_S))

    async def cancel(self, job_id: str) -> bool:
        """Cancel an active job at once (killing its process if it runs here; a holder elsewhere sees it
        at its next heartbeat); False if it had ended."""
        closed = await asyncio.to_thread(self.store.finish, job_id, JobStatus.CANCELLED)
        job = self.jobs.get(job_id)
        if job is not None:
            job.cancelled = True
            for slot in self.slots:
                if slot.job is job:
                    slot.kill()
        if closed:
            self.metrics.jobs_finished.labels(status=JobStatus.CANCELLED.value, plan_status="").inc()
        return closed

    async def _ensure(self, slot: Slot) -> bool:
        """Start the slot's process unless it runs; False after three failed tries."""
        for _ in range(3):
            if slot.ready or self.stopping:
                return slot.ready
            await slot.start()
            if not slot.ready:
                await asyncio.sleep(1.0)
        return slot.ready

    async def _next(self, slot: Slot) -> Job | None:
        """The next job: an explanation waiting here, else the oldest queued job, claimed; None when the
        slot's (idle) process dies first, or the runner stops."""
        while not self.stopping:
            if self.waiting:
                return self.waiting.popleft()
            self.wake.clear()
            try:
                claimed = await self._db(self.queue.claim)
            except SQLAlchemyError as exc:
                self._db_error(exc, "the job queue cannot be read")
                claimed = None
            if claimed is not None:
                data = claimed.input
                job = Job(claimed.id, data.input_json, data.options, _budget(data.options))
                self.jobs[job.id] = job
                self.new_claim.set()  # wakes the waiters (``wait``), which look for their job here again
                self.new_claim = asyncio.Event()
                return job
            if await self._idle(slot):
                return None
        return None

    async def _idle(self, slot: Slot) -> bool:
        """Wait for a wake-up, the slot's process to die, or ``POLL_S``; True when the process died."""
        waits = [asyncio.ensure_future(self.wake.wait())]
        if slot.conn is not None:
            waits.append(asyncio.ensure_future(slot.died.wait()))
        try:
            await asyncio.wait(waits, timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return slot.conn is not None and slot.died.is_set()

    async def _expire(self) -> None:
        """Every heartbeat, say that this process runs jobs (when it has solver processes: see
        :meth:`JobQueue.beat <gpuplan.api.queue.JobQueue.beat>`), and queue again (or fail) the jobs
        whose holders stopped renewing their leases;
        during a database outage and a lease's time after it only check that the database answers (see
        :meth:`Outage.expiry_paused <gpuplan.api.outage.Outage.expiry_paused>`)."""
        while not self.stopping:
            try:
                if self.slots:
                    up = sum(1 for s in self.slots if s.ready) if self.prestart else len(self.slots)
                    await self._db(self.queue.beat, len(self.slots), up)
                if self.outage.expiry_paused():
                    await self._db(self.store.ping)
                elif await self._db(self.queue.expire):
                    self.wake.set()
            except SQLAlchemyError as exc:
                self._db_error(exc, "expired leases not checked")
            await asyncio.sleep(self.beat_s)

    async def _heartbeat(self, slot: Slot, job: Job) -> None:
        """Renew the lease of the slot's job with its progress; once the job is no longer held here
        (cancelled on another server, or its lease passed on), stop its solve."""
        while True:
            await asyncio.sleep(self.beat_s)
            try:
                held = await self._db(self.queue.renew, job.id, job.progress)
            except SQLAlchemyError as exc:
                self._db_error(exc, f"job {job.id}: lease not renewed")
                continue
            if not held:
                log.info("job %s is no longer held here (cancelled, or passed on); its solve stops", job.id)
                job.cancelled = True
                slot.kill()
                return

    async def _serve(self, slot: Slot) -> None:
        """The slot's loop: keep a process up, take jobs in order and run them; never ends on an error,
        only when the runner stops."""
        while not self.stopping:
            try:
                await self._serve_one(slot)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("solver slot %d: unexpected error; its process is restarted", slot.number)
                await slot.stop()

    async def _serve_one(self, slot: Slot) -> None:
        if self.prestart:
            await self._ensure(slot)
        job = await self._next(slot)
        if self.stopping:
            return  # a job taken stays active: the runner hands it back or marks it interrupted
        if job is None:
            log.warning("solver process %d died (%s); starting a new one", slot.number, await slot.reap())
            slot.release()
            return
        slot.job = job
        beat = asyncio.create_task(self._heartbeat(slot, job)) if job.stored else None
        try:
            # A process that died unseen before taking the job (its pipe broken) is replaced once.
            for _ in range(2):
                if not await self._ensure(slot):
                    if not self.stopping:  # else the runner marks it interrupted
                        await self._close(job, JobStatus.FAILED, error="no solver process could be started")
                    break
                if await self._run(slot, job):
                    break
            else:
                await self._close(job, JobStatus.FAILED, error="the solver process could not take the job")
        except Exception:
            await self._close(job, JobStatus.FAILED, error="internal error in the job runner; resubmit it")
            raise
        finally:
            if beat is not None:
                beat.cancel()
            if not slot.ready:
                slot.release()
            slot.job = None
            self.jobs.pop(job.id, None)
            job.done.set()

    async def _run(self, slot: Slot, job: Job) -> bool:
        """Run ``job`` in the slot's process to its end; False when the process could not take it."""
        started = job.started = time.monotonic()
        if not slot.send({"job": job.id, "input": job.input_json, "options": job.options}):
            await self._drain_exit(slot)
            log.warning("solver process %d had died (%s); starting a new one", slot.number, await slot.reap())
            return False
        deadline = started + job.time_limit_s + self.grace_s
        at_cap = 0
        while True:
            left = deadline - time.monotonic()
            try:
                message = await asyncio.wait_for(slot.inbox.get(), max(0.0, min(left, MEMORY_CHECK_S)))
            except TimeoutError:
                at_cap = at_cap + 1 if slot.at_memory_cap() else 0
                if left > MEMORY_CHECK_S and at_cap < MEMORY_CAP_CHECKS:
                    continue
                slot.kill()
                await self._drain_exit(slot)
                if at_cap >= MEMORY_CAP_CHECKS:
                    log.warning("solver process %d stuck at its memory cap; ended", slot.number)
                    error = solver_process.out_of_memory(slot.memory_mib)
                else:
                    error = f"the solve ran past its time limit by {self.grace_s:g} s"
                await self._close(job, JobStatus.FAILED, error=error)
                return True
            kind = message[0]
            if kind == "progress":
                job.progress = message[1]
                continue
            if kind == "exit":
                reason = await slot.reap()
                if not job.cancelled and not self.stopping:
                    log.warning("solver process %d died (%s) running job %s", slot.number, reason, job.id)
                    error = f"solver process died ({reason}) while running this job; resubmit it"
                    await self._close(job, JobStatus.FAILED, error=error)
                return True
            wall = time.monotonic() - started
            if kind == "error" and message[1] == solver_process.OUT_OF_MEMORY:
                # Not worth keeping what a failed allocation left half-built: the slot starts anew.
                slot.kill()
                await self._drain_exit(slot)
            if not job.stored:
                job.reply = message
                return True
            if kind == "done":
                _, plan_json, plan_status, label = message
                self.metrics.solve_seconds.labels(solver=str(job.options["solver"])).observe(wall)
                self.recent.append(wall)
                await self._close(
                    job, JobStatus.DONE, plan_json=plan_json, plan_status=plan_status, outcome=label
                )
            else:
                _, code, text = message
                error = text if code == solver_process.OUT_OF_MEMORY else f"{code}: {text}"
                await self._close(job, JobStatus.FAILED, error=error)
            return True

    async def _finish(self, job: Job, status: JobStatus, fields: dict[str, Any]) -> bool:
        """Write the end of a stored job; while the database cannot be reached, keep it here and try
        again every ``POLL_S`` (the heartbeat keeps renewing the lease meanwhile) until it is written or
        the runner stops. True when this wrote it (False: the job was no longer held here)."""
        kept = False
        while True:
            try:
                return await self._db(self.store.finish, job.id, status, owner=self.queue.owner, **fields)
            except SQLAlchemyError as exc:
                if not unreachable(exc):
                    raise
            if self.stopping:
                log.warning(
                    "job %s: its end (%s) was not written: the database is down", job.id, status.value
                )
                return False
            if not kept:
                kept = True
                log.warning("job %s ended (%s); kept here until the database returns", job.id, status.value)
            await asyncio.sleep(POLL_S)

    async def _drain_exit(self, slot: Slot) -> None:
        while (await slot.inbox.get())[0] != "exit":
            pass
        slot.ready = False

    async def _close(self, job: Job, status: JobStatus, **fields: Any) -> None:
        if not job.stored:
            job.reply = ("error", "internal", str(fields.get("error", status.value)))
            return
        fleet = None
        if status is JobStatus.DONE and job.options.get("kind") == PLAN_KIND:
            # Read before the job is closed: once a client sees it done, /metrics shows its plan.
            fleet = await asyncio.to_thread(read_fleet, fields["plan_json"], job.input_json)
        closed = await self._finish(job, status, fields)
        if closed:
            self.metrics.jobs_finished.labels(
                status=status.value, plan_status=str(fields.get("plan_status") or "")
            ).inc()
            if fleet is not None:
                self.metrics.fleet.latest = fleet
