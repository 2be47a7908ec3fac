"""Pipes to and from other processes, from the event loop: writing, which the stdio transport, an isolated pack's
calls lane and a long-lived hook process share, reading an answer expected soon (a long-lived hook's), waking the
process that answers it on the writer's CPU, and taking turns at a process that answers one question at a time."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import math
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

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


async def read_answer(fd: int, size: int, deadline: float = math.inf, look: bool = True) -> bytes:
    """Up to ``size`` bytes from the non-blocking descriptor ``fd``, where another process's answer to what was
    just written to it is expected soon: looked for for up to ``SPIN_SECONDS`` between turns of the event loop
    (every other task runs meanwhile; the process stays awake), then waited for asleep, until ``deadline``
    (``time.monotonic()``'s; then ``TimeoutError``). ``b""`` at end of input; an ``OSError`` is the caller's.

    ``look=False`` waits asleep at once: for an answer from a process woken on this thread's CPU (``Nearby``),
    which runs there while this thread sleeps, and wakes it there as cheaply as it would be found awake (and a
    thread looking for it could hold the CPU it needs, where the kernel does not let a woken process in first)."""
    spin_ends = 0.0
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            pass
        if SPINS and look:
            now = time.perf_counter()
            if not spin_ends:
                spin_ends = now + SPIN_SECONDS
            if now < spin_ends:
                await anyio.lowlevel.checkpoint()
                continue
        await _until(deadline, anyio.wait_readable, fd)


class Nearby:
    """Has the kernel wake ``pid``, a process asleep reading what this thread is about to write to it (a long-lived
    hook), on this thread's CPU, and then lets it run on any of its CPUs again. Woken on a CPU that was idle, it
    answers late: a line to a process that answers at once, and its answer back, took 35-40 us on the machine of
    docs/benchmarks.md that way and 4 us woken on the writer's CPU (where the writer then waits for the answer
    asleep, so that the process has the CPU at once). Only a wake-up is placed: once the line is written the
    process may run on every CPU it could before (only a program it starts in the microseconds between keeps the
    one CPU), and one that is kept on one CPU (``taskset``), or cannot run on this one, is left as it is. ::

        allowed = nearby.wake_here()
        os.write(its_input, line)
        nearby.release(allowed)
        answer = await read_answer(its_output, 65536, deadline, look=allowed is None)

    Nothing is done with one CPU, or without Linux's calls for it."""

    __slots__ = ("pid",)

    def __init__(self, pid: int) -> None:
        self.pid: int | None = pid if _sched_getcpu() is not None else None

    def wake_here(self) -> set[int] | None:
        """Place its next wake-up on this thread's CPU; the CPUs it may run on, for ``release``, or None when it is
        left as it was."""
        current_cpu = _sched_getcpu()
        if self.pid is None or current_cpu is None:
            return None
        try:
            allowed = os.sched_getaffinity(self.pid)
            cpu = current_cpu()
            if len(allowed) < 2 or cpu not in allowed:
                return None
            os.sched_setaffinity(self.pid, (cpu,))
        except OSError:  # gone (its call says so), or not ours to place: never again
            self.pid = None
            return None
        return allowed

    def release(self, allowed: set[int] | None) -> None:
        """Let it run on ``allowed`` again (what ``wake_here`` answered)."""
        if allowed is not None and self.pid is not None:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(self.pid, allowed)


@functools.cache  # (looked up by the first long-lived hook, not at every start)
def _sched_getcpu() -> Callable[[], int] | None:
    """libc's ``sched_getcpu`` (the CPU the calling thread runs on), where a process's CPUs can be chosen (Linux)
    and there is more than one."""
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        return None
    try:
        current: Callable[[], int] = ctypes.CDLL(None, use_errno=True).sched_getcpu
    except (OSError, AttributeError):
        return None
    current.restype = ctypes.c_int  # type: ignore[attr-defined]
    current.argtypes = ()  # type: ignore[attr-defined]
    return current if current() >= 0 else None



async def _until(deadline: float, wait: Callable[[int], Awaitable[None]], fd: int) -> None:
    """``await wait(fd)``, given up with ``TimeoutError`` at ``deadline``. The deadline is a number rather than a
    cancel scope around the caller's whole exchange because a scope costs (20 us to enter and leave one on the
    machine of docs/benchmarks.md), and an answer that comes at once never waits here."""
    if deadline == math.inf:
        await wait(fd)
        return
    with anyio.fail_after(max(0.0, deadline - time.monotonic())):
        await wait(fd)


class Turns:
    """One holder at a time, from any task, event loop or thread; the others wait, first come first served, each
    asleep on its own loop. Taking a turn nobody holds costs one non-blocking lock (no checkpoint, no loop lookup:
    a per-loop ``anyio.Lock`` cost 7-15 us a call on the machine of docs/benchmarks.md). ::

        await turns.take()
        try:
            ...
        finally:
            turns.give()
    """

    __slots__ = ("_guard", "_held", "_waiting")

    def __init__(self) -> None:
        self._held = threading.Lock()  # held by whoever has the turn, and handed on to a waiter without a release
        self._guard = threading.Lock()  # over the waiters and the hand-overs
        self._waiting: deque[tuple[anyio.lowlevel.EventLoopToken, anyio.Event]] = deque()

    async def take(self) -> None:
        """Wait for the turn (cancellable while waiting: a cancelled waiter takes nothing)."""
        if self._held.acquire(blocking=False):  # (free means nobody waits: a turn given up with waiters is handed on)
            return
        token, woken = anyio.lowlevel.current_token(), anyio.Event()
        with self._guard:
            if self._held.acquire(blocking=False):
                return
            self._waiting.append((token, woken))
        try:
            await woken.wait()
        except BaseException:
            with self._guard:
                handed = (token, woken) not in self._waiting
                if not handed:
                    self._waiting.remove((token, woken))
            if handed:  # it was handed the turn as it was cancelled: the next one has it
                self.give()
            raise

    def give(self) -> None:
        """Give the turn up: to the first waiter (woken on its own loop), or to whoever comes next."""
        while True:
            with self._guard:
                if not self._waiting:
                    self._held.release()
                    return
                token, woken = self._waiting.popleft()
            try:
                _soon(token, woken.set)
                return
            except Exception:  # its loop has ended (and it with it): the next one
                continue


def _soon(token: anyio.lowlevel.EventLoopToken, call: Callable[[], object]) -> None:
    """Have ``token``'s event loop run ``call`` soon, from any thread, that loop's own or another's, without waiting
    for it. anyio's own way (``AsyncBackend.run_sync_soon``) is in anyio 4.16 only, and ``from_thread.run_sync``
    waits and refuses to run in a trio thread: asyncio's loop and trio's token each have the call that does it."""
    native: Any = token.native_token
    schedule = getattr(native, "call_soon_threadsafe", None) or native.run_sync_soon  # asyncio's loop | trio's token
    schedule(call)


__all__ = ["SPINS", "SPIN_SECONDS", "Nearby", "Turns", "read_answer", "write_all"]
