"""Independent tasks run in parallel: the one place that knows where they run.

Every task is ``fn(shared, item)``: ``shared`` is what all tasks read (the classes being priced, the parts
of a split fleet, the options of a what-if run), ``item`` what one task is about. Two back-ends:

* the **local process pool** (the default): worker processes forked from this one, so that they inherit
  ``shared`` instead of unpickling it for every task (spawned, with ``shared`` pickled once per worker,
  where fork is unavailable); with fewer than two processes, or inside a task already, the tasks run
  here one after the other;
* **Ray** (``ray``: ``local`` starts a Ray instance on this machine, otherwise the address of a running
  cluster, ``HOST:PORT`` or ``ray://HOST:PORT``): ``shared`` goes to the object store once, each item
  is one Ray task of one CPU. Ray is imported here only, when first asked for.

Results come back in the order of the items whatever the back-end, and a task's result depends only on
``shared`` and its item: where the tasks ran never changes a plan. Time limits are sent to tasks as
seconds (or wall-clock times), never as this process's monotonic clock readings, which mean nothing on
another machine.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from types import TracebackType
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

S = TypeVar("S")
T = TypeVar("T")
R = TypeVar("R")

#: ``--ray`` value that starts a Ray instance on this machine.
LOCAL = "local"
#: Seconds to wait for a cluster's address to accept a connection before calling it unreachable
#: (``ray.init`` itself retries an unreachable address for minutes).
CONNECT_TIMEOUT_S = 5.0
#: Environment variables of this process that Ray workers get too (the user catalog, settings).
ENV_PREFIX = "GPUPLAN_"

#: What the tasks of this process's pool read (set in each worker process by the pool's initializer).
_SHARED: list[Any] = []
#: Whether this process runs a task: nested maps then run in it serially, never fork a pool of a pool.
_IN_TASK: list[bool] = [False]
#: The Ray remote function that runs a task (made once per process, on first use).
_RAY_TASK: list[Any] = []


class ParallelUnavailable(RuntimeError):
    """The Ray back-end cannot be used: Ray is not installed, or the address is not a reachable cluster."""


def _enter_worker(shared: object) -> None:
    """Pool worker initializer: keep ``shared`` and mark the process as running tasks."""
    _SHARED[:] = [shared]
    _IN_TASK[0] = True


def _timed(fn: Callable[[S, T], R], shared: S, item: T) -> tuple[R, float]:
    """``fn(shared, item)`` and the seconds it took."""
    t0 = time.perf_counter()
    return fn(shared, item), time.perf_counter() - t0


def _pool_task(fn: Callable[[Any, T], R], item: T) -> tuple[R, float]:
    """One task in a pool worker, on the worker's ``shared``."""
    return _timed(fn, _SHARED[0], item)


def _ray_task(fn: Callable[[S, T], R], shared: S, item: T) -> tuple[R, float]:
    """One Ray task (marks its worker process as running tasks)."""
    _IN_TASK[0] = True
    return _timed(fn, shared, item)


def _address(value: str) -> tuple[str, int]:
    """Host and port of a cluster address (``HOST:PORT`` or ``ray://HOST:PORT``)."""
    host, sep, port = value.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ParallelUnavailable(f"'{value}' is not '{LOCAL}', HOST:PORT or ray://HOST:PORT")
    return host, int(port)


def connect(ray_address: str) -> None:
    """Connect this process to Ray (once: later calls, and calls inside Ray tasks, do nothing).

    ``local`` starts a Ray instance here; an address must accept a connection within
    :data:`CONNECT_TIMEOUT_S`. Raises :class:`ParallelUnavailable` with a one-line reason.
    """
    try:
        import ray
    except ImportError:
        raise ParallelUnavailable("Ray is not installed: pip install 'gpuplan[ray]'") from None
    if ray.is_initialized():
        return
    env = {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIX)}
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    if ray_address == LOCAL:
        ray.init(address=LOCAL, include_dashboard=False, runtime_env={"env_vars": env}, **options)
        return
    host, port = _address(ray_address)
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ParallelUnavailable(f"no Ray cluster answers at {host}:{port} ({reason})") from None
    try:
        ray.init(address=ray_address, runtime_env={"env_vars": env}, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ParallelUnavailable(f"cannot connect to Ray at {ray_address}: {first}") from None


def _forks(processes: int) -> bool:
    """Whether a local map may use a pool of ``processes`` (not inside a task, nor in a daemon process,
    which may not have children)."""
    return processes > 1 and not _IN_TASK[0] and not multiprocessing.current_process().daemon


def slots(processes: int, ray: str | None = None) -> int:
    """How many tasks run at once: the Ray cluster's CPUs, else ``processes`` where a pool may start,
    else 1 (callers size the time each task gets by it)."""
    if ray is None:
        return processes if _forks(processes) else 1
    connect(ray)
    import ray as ray_module

    cpus: dict[str, float] = ray_module.cluster_resources()  # type: ignore[no-untyped-call]
    return max(1, int(cpus.get("CPU", 1)))


class TaskPool(Generic[S]):
    """Maps tasks over ``shared`` with up to ``processes`` local processes, or on Ray when ``ray`` is
    given (then Ray decides how many run at once). Use it as a context manager; one pool serves many
    maps (the rounds of a column generation)."""

    def __init__(self, shared: S, *, processes: int, ray: str | None = None) -> None:
        self.shared = shared
        self.ray = ray
        self.processes = processes
        self.pool: ProcessPoolExecutor | None = None
        self._ref: Any = None
        self._remote: Any = None
        if ray is not None:
            connect(ray)
            import ray as ray_module

            if not _RAY_TASK:
                _RAY_TASK.append(ray_module.remote(num_cpus=1)(_ray_task))
            self._ref = ray_module.put(shared)
            self._remote = _RAY_TASK[0]
            return
        if _forks(processes):
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            self.pool = ProcessPoolExecutor(
                max_workers=processes,
                mp_context=multiprocessing.get_context(method),
                initializer=_enter_worker,
                initargs=(shared,),
            )

    @property
    def slots(self) -> int:
        """How many of this pool's tasks run at once (see :func:`slots`)."""
        return slots(self.processes, self.ray) if self.ray is not None or self.pool is not None else 1

    @property
    def backend(self) -> str:
        """Where the tasks run: ``ray``, ``processes`` or ``serial``."""
        return "ray" if self.ray is not None else "processes" if self.pool is not None else "serial"

    def __enter__(self) -> TaskPool[S]:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
            self.pool = None
        self._ref = None

    def map(self, fn: Callable[[S, T], R], items: Sequence[T], name: str | None = None) -> list[R]:
        """``fn(shared, item)`` for every item, results in the items' order. ``fn`` must be a module-level
        function (workers import it by name); ``name`` names the tasks in the log (default ``fn``'s)."""
        t0 = time.perf_counter()
        timed: list[tuple[R, float]]
        if self._remote is not None:
            import ray

            try:
                timed = ray.get([self._remote.remote(fn, self._ref, i) for i in items])
            except ray.exceptions.RayTaskError as exc:
                raise exc.as_instanceof_cause() from None  # type: ignore[no-untyped-call]
        elif self.pool is not None:
            futures = [self.pool.submit(_pool_task, fn, i) for i in items]
            timed = [f.result() for f in futures]
        else:
            timed = [_timed(fn, self.shared, i) for i in items]
        wall = time.perf_counter() - t0
        seconds = [s for _, s in timed]
        if seconds and log.isEnabledFor(logging.DEBUG):
            log.debug(
                "%d tasks of %s on %s: %.3f s, task seconds median %.3f, max %.3f",
                len(items), name or fn.__name__, self.backend, wall,
                statistics.median(seconds), max(seconds),
                extra={"parallel": {
                    "backend": self.backend, "slots": self.slots, "wall_s": wall, "task_s": seconds,
                }},
            )  # fmt: skip
        return [r for r, _ in timed]


def _batch_item(batch: tuple[Callable[[S, T], R], S, Sequence[T]], i: int) -> R:
    """Task ``i`` of a one-shot map whose items the forked workers inherit."""
    fn, shared, items = batch
    return fn(shared, items[i])


def run_tasks(
    fn: Callable[[S, T], R], shared: S, items: Sequence[T], *, processes: int, ray: str | None = None
) -> list[R]:
    """One map of ``fn`` over ``items`` (see :class:`TaskPool`), in at most ``len(items)`` processes.
    Forked workers inherit the items too (nothing is pickled on the way in); on Ray each task gets only
    its own item."""
    if ray is not None:
        with TaskPool(shared, processes=processes, ray=ray) as pool:
            return pool.map(fn, items)
    with TaskPool((fn, shared, items), processes=min(processes, len(items))) as batch:
        return batch.map(_batch_item, range(len(items)), name=fn.__name__)
