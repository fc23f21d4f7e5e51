"""The job runner: a queue and a pool of solver processes, driven from the server's event loop.

Each slot owns one process (``api.worker``). A job waits in the queue, runs in a free slot and ends
``done``, ``failed`` or ``cancelled``; cancelling a running job kills its process and the slot starts a
fresh one. The store is written from worker threads so the event loop never waits on the database.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
import uuid
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from typing import Any

from gpuplan.api import worker
from gpuplan.api.metrics import ApiMetrics
from gpuplan.api.store import JobStatus, Store

log = logging.getLogger(__name__)

_CTX: ForkServerContext = multiprocessing.get_context("forkserver")
_CTX.set_forkserver_preload(["gpuplan.api.worker"])


@dataclass
class Job:
    """A job the runner holds: queued or running."""

    id: str
    input_json: str
    options: dict[str, Any]
    time_limit_s: float
    done: asyncio.Event = field(default_factory=asyncio.Event)
    progress: dict[str, Any] | None = None
    cancelled: bool = False
    stored: bool = True
    reply: tuple[Any, ...] | None = None


class Slot:
    """One solver process and the messages it sends."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.process: BaseProcess | None = None
        self.conn: Connection | None = None
        self.inbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self.ready = False
        self.job: Job | None = None

    def _spawn(self) -> tuple[BaseProcess, Connection]:
        parent, child = _CTX.Pipe()
        process = _CTX.Process(target=worker.main, args=(child,), name=f"gpuplan-solver-{self.number}")
        process.daemon = True
        process.start()
        child.close()
        return process, parent

    async def start(self) -> None:
        """Start the process (in a thread: the first start also starts the fork server)."""
        if self.conn is not None:
            self.conn.close()
        self.process, conn = await asyncio.to_thread(self._spawn)
        self.conn = conn
        self.inbox = asyncio.Queue()
        asyncio.get_running_loop().add_reader(conn.fileno(), self._readable, conn, self.inbox)
        message = await self.inbox.get()
        self.ready = message[0] == "ready"
        if not self.ready:
            log.error("solver process %d did not start: %s", self.number, message)

    def _readable(self, conn: Connection, inbox: asyncio.Queue[tuple[Any, ...]]) -> None:
        try:
            while conn.poll():
                inbox.put_nowait(conn.recv())
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(conn.fileno())
            inbox.put_nowait(("exit",))

    def send(self, message: dict[str, Any]) -> None:
        """Hand a job to the process."""
        assert self.conn is not None
        self.conn.send(message)

    def kill(self) -> None:
        """End the process now; its pipe then reports ``exit``."""
        if self.process is not None and self.process.is_alive():
            self.process.kill()

    async def stop(self) -> None:
        """Kill the process and release the pipe."""
        self.ready = False
        self.kill()
        if self.conn is not None:
            asyncio.get_running_loop().remove_reader(self.conn.fileno())
            self.conn.close()
        if self.process is not None:
            await asyncio.to_thread(self.process.join, 5)


class Runner:
    """Queues jobs and runs them in ``size`` solver processes."""

    def __init__(
        self, store: Store, metrics: ApiMetrics, size: int, grace_s: float, *, prestart: bool = True
    ) -> None:
        self.store = store
        self.prestart = prestart
        self.metrics = metrics
        self.grace_s = grace_s
        self.slots = [Slot(i) for i in range(size)]
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.jobs: dict[str, Job] = {}
        self.tasks: list[asyncio.Task[None]] = []
        metrics.queue_depth.set_function(self.queue_depth)
        metrics.running.set_function(self.running)

    def queue_depth(self) -> int:
        """Jobs waiting for a solver process."""
        return sum(1 for j in self.jobs.values() if not j.cancelled) - self.running()

    def running(self) -> int:
        """Jobs in a solver process now."""
        return sum(1 for s in self.slots if s.job is not None)

    @property
    def active(self) -> int:
        """Stored jobs queued or running (explanations are counted apart, in ``reading``)."""
        return sum(1 for j in self.jobs.values() if j.stored and not j.cancelled)

    @property
    def reading(self) -> int:
        """Explanations (one-off tasks, not stored) queued or running."""
        return sum(1 for j in self.jobs.values() if not j.stored)

    @property
    def ready(self) -> bool:
        """At least one solver process is up (or they start on demand)."""
        return not self.prestart or any(s.ready for s in self.slots)

    async def start(self) -> None:
        """Start the solver processes and their loops."""
        self.tasks = [asyncio.create_task(self._serve(s), name=f"slot-{s.number}") for s in self.slots]

    async def stop(self) -> None:
        """Stop every loop and process (jobs still active are marked interrupted at the next start)."""
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await asyncio.gather(*(s.stop() for s in self.slots))

    def submit(self, job_id: str, input_json: str, options: dict[str, Any]) -> Job:
        """Queue a job already stored as ``queued``."""
        job = Job(job_id, input_json, options, float(options.get("budget_s", options["time_limit_s"])))
        self.jobs[job_id] = job
        self.queue.put_nowait(job)
        return job

    async def call(self, options: dict[str, Any], input_json: str, budget_s: float) -> tuple[Any, ...]:
        """Run a one-off task that is not stored (an explanation) in a solver process and return the
        worker's reply: ``("done", json, status, label)`` or ``("error", code, message)``."""
        job = Job(f"task-{uuid.uuid4().hex}", input_json, options, budget_s, stored=False)
        self.jobs[job.id] = job
        self.queue.put_nowait(job)
        await job.done.wait()
        return job.reply or ("error", "internal", "the task ended without a reply")

    def progress(self, job_id: str) -> dict[str, Any] | None:
        """The live progress of an active job."""
        job = self.jobs.get(job_id)
        return job.progress if job is not None else None

    async def wait(self, job_id: str, timeout_s: float) -> None:
        """Return when the job ends or after ``timeout_s``."""
        job = self.jobs.get(job_id)
        if job is None:
            return
        try:
            await asyncio.wait_for(job.done.wait(), timeout_s)
        except TimeoutError:
            return

    async def cancel(self, job_id: str) -> bool:
        """Cancel an active job at once (killing its process if it runs); False if it had ended."""
        closed = await asyncio.to_thread(self.store.finish, job_id, JobStatus.CANCELLED)
        job = self.jobs.pop(job_id, None)
        if job is not None:
            job.cancelled = True
            for slot in self.slots:
                if slot.job is job:
                    slot.kill()
            job.done.set()
        if closed:
            self.metrics.jobs_finished.labels(status=JobStatus.CANCELLED.value, plan_status="").inc()
        return closed

    async def _ensure(self, slot: Slot) -> bool:
        """Start the slot's process unless it runs; False after three failed tries."""
        for _ in range(3):
            if slot.ready:
                return True
            await slot.start()
            if not slot.ready:
                await asyncio.sleep(1.0)
        return slot.ready

    async def _serve(self, slot: Slot) -> None:
        while True:
            if self.prestart:
                await self._ensure(slot)
            job = await self.queue.get()
            if job.cancelled or (job.stored and not await asyncio.to_thread(self.store.mark_running, job.id)):
                self.jobs.pop(job.id, None)
                job.done.set()
                continue
            slot.job = job
            try:
                if await self._ensure(slot):
                    await self._run(slot, job)
                else:
                    await self._close(job, JobStatus.FAILED, error="no solver process could be started")
            finally:
                slot.job = None
                self.jobs.pop(job.id, None)
                job.done.set()

    async def _run(self, slot: Slot, job: Job) -> None:
        started = time.monotonic()
        slot.send({"job": job.id, "input": job.input_json, "options": job.options})
        deadline = started + job.time_limit_s + self.grace_s
        while True:
            try:
                message = await asyncio.wait_for(slot.inbox.get(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                slot.kill()
                await self._drain_exit(slot)
                await self._close(
                    job, JobStatus.FAILED, error=f"the solve ran past its time limit by {self.grace_s:g} s"
                )
                return
            kind = message[0]
            if kind == "progress":
                job.progress = message[1]
                continue
            if kind == "exit":
                slot.ready = False
                if not job.cancelled:
                    code = slot.process.exitcode if slot.process is not None else None
                    await self._close(job, JobStatus.FAILED, error=f"the solver process ended (code {code})")
                return
            wall = time.monotonic() - started
            if not job.stored:
                job.reply = message
                return
            if kind == "done":
                _, plan_json, plan_status, label = message
                self.metrics.solve_seconds.labels(solver=str(job.options["solver"])).observe(wall)
                await self._close(
                    job, JobStatus.DONE, plan_json=plan_json, plan_status=plan_status, outcome=label
                )
            else:
                _, code, text = message
                await self._close(job, JobStatus.FAILED, error=f"{code}: {text}")
            return

    async def _drain_exit(self, slot: Slot) -> None:
        while (await slot.inbox.get())[0] != "exit":
            pass
        slot.ready = False

    async def _close(self, job: Job, status: JobStatus, **fields: Any) -> None:
        if not job.stored:
            job.reply = ("error", "internal", str(fields.get("error", status.value)))
            return
        closed = await asyncio.to_thread(self.store.finish, job.id, status, **fields)
        if closed:
            self.metrics.jobs_finished.labels(
                status=status.value, plan_status=str(fields.get("plan_status") or "")
            ).inc()
