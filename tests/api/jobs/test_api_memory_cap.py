"""The runner's view of a solver process's memory cap, on real processes: one that filled its address
space up to the cap (its allocations fail) counts as at the cap, one well below it does not."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import resource
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from gpuplan.api.runner import Slot
from gpuplan.api.solver_process import address_space_mib

#: Room the process is given above the address space it holds when it starts.
ROOM_MIB = 256


def _held_mib() -> int:
    """This process's address space, read from ``/proc/self/statm`` (pages)."""
    pages = int(Path("/proc/self/statm").read_text().split()[0])
    return pages * resource.getpagesize() // 2**20


def _fill(conn: Connection, fill: bool) -> None:
    """Cap the address space :data:`ROOM_MIB` above what the process holds and send the cap, then (with
    ``fill``) allocate 1 MiB blocks until an allocation fails; stay alive holding what was allocated."""
    cap_mib = _held_mib() + ROOM_MIB
    resource.setrlimit(resource.RLIMIT_AS, (cap_mib * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1]))
    held = []
    with contextlib.suppress(MemoryError):
        while fill:
            held.append(bytearray(1 << 20))
    conn.send(cap_mib)
    while True:
        time.sleep(1)


@pytest.fixture(params=[True, False], ids=["filled", "below"])
def slot(request: pytest.FixtureRequest) -> Iterator[tuple[Slot, bool]]:
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=_fill, args=(child, request.param), daemon=True)
    process.start()
    assert parent.poll(60)
    s = Slot(0, parent.recv())
    s.process = process
    try:
        yield s, request.param
    finally:
        process.kill()
        process.join()


def test_a_process_that_filled_its_address_space_is_at_its_cap(slot: tuple[Slot, bool]) -> None:
    s, filled = slot
    assert s.at_memory_cap() is filled


def test_the_address_space_is_the_kernels_count() -> None:
    """``VmSize`` of ``/proc/PID/status`` against the first field of ``/proc/self/statm`` (pages)."""
    held = address_space_mib(os.getpid())
    assert held is not None
    assert abs(held - _held_mib()) < 64
