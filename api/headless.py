"""``gpuplan worker``: the job runner of a server without its HTTP side, so that solver capacity grows
apart from web capacity. It claims jobs from the queue of a PostgreSQL database that servers share
(``api.queue``) until SIGTERM or SIGINT, then hands the jobs it holds back to the queue."""

from __future__ import annotations

import asyncio
import logging
import signal

from gpuplan.api.metrics import ApiMetrics
from gpuplan.api.runner import Runner
from gpuplan.api.settings import Settings
from gpuplan.api.store import Store

log = logging.getLogger(__name__)


async def work(settings: Settings) -> None:
    """Run jobs from the queue of ``settings.database`` in ``settings.solver_processes`` processes until
    the process is asked to stop."""
    store = Store.open(settings.database, settings.database_timeout_s)
    runner = Runner.of(settings, store, ApiMetrics())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await runner.start()
    try:
        await stop.wait()
        log.info("stopping: the jobs running here go back to the queue")
    finally:
        await runner.stop()
        store.close()
