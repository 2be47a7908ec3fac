"""Pipes to and from other processes, from the event loop: writing, which the stdio transport, an isolated pack's
calls lane and a long-lived hook process share, and reading an answer expected soon (a long-lived hook's)."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

# How long a reader that expects an answer soon (another process's, to what it just wrote) looks for it between
# turns of the event loop before it sleeps until the pipe is readable. Waking a process that slept costs: a line to
# a Python process answering at once, and its answer back, took 62-88 us asleep and 11 us awake (the median of
# 2,500, on the 2-core machine of docs/benchmarks.md); and what runs after a wake-up runs slower.
SPIN_SECONDS = 200e-6
# Looking for it takes a CPU the other process may need: only where there is another one.
SPINS = len(os.sched_getaffinity(0)) > 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) > 1


async def write_all(fd: int, data: bytes | memoryview, deadline: float = math.inf) -> None:
    """Write all of ``data`` to the non-blocking descriptor ``fd``: at once while the pipe has room (nothing
    suspends then), waiting for room while it is full, until ``deadline`` (``time.monotonic()``'s; then
    ``TimeoutError``). An ``OSError`` (the reader gone: ``BrokenPipeError``) is the caller's to word."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            await _until(deadline, anyio.wait_writable, fd)


async def read_answer(fd: int, size: int, deadline: float = math.inf) -> bytes:
    """Up to ``size`` bytes from the non-blocking descriptor ``fd``, where another process's answer to what was
    just written to it is expected soon: looked for for up to ``SPIN_SECONDS`` between turns of the event loop
    (every other task runs meanwhile; the process stays awake), then waited for asleep, until ``deadline``
    (``time.monotonic()``'s; then ``TimeoutError``). ``b""`` at end of input; an ``OSError`` is the caller's."""
    spin_ends = 0.0
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            pass
        if SPINS:
            now = time.perf_counter()
            if not spin_ends:
                spin_ends = now + SPIN_SECONDS
            if now < spin_ends:
                await anyio.lowlevel.checkpoint()
                continue
        await _until(deadline, anyio.wait_readable, fd)


async def _until(deadline: float, wait: Callable[[int], Awaitable[None]], fd: int) -> None:
    """``await wait(fd)``, given up with ``TimeoutError`` at ``deadline``. The deadline is a number rather than a
    cancel scope around the caller's whole exchange because a scope costs (20 us to enter and leave one on the
    machine of docs/benchmarks.md), and an answer that comes at once never waits here."""
    if deadline == math.inf:
        await wait(fd)
        return
    with anyio.fail_after(max(0.0, deadline - time.monotonic())):
        await wait(fd)


__all__ = ["SPINS", "SPIN_SECONDS", "read_answer", "write_all"]
