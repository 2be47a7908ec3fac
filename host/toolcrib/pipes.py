"""Pipes to and from other processes, from the event loop: writing, which the stdio transport, an isolated pack's
calls lane and a long-lived hook process share, reading an answer (a long-lived hook's), and taking turns at a
process that answers one question at a time."""

from __future__ import annotations

import math
import os
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import anyio.lowlevel


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
    """Up to ``size`` bytes from the non-blocking descriptor ``fd``: at once when they are there, else once it is
    readable, until ``deadline`` (``time.monotonic()``'s; then ``TimeoutError``). ``b""`` at end of input; an
    ``OSError`` is the caller's."""
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
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


__all__ = ["Turns", "read_answer", "write_all"]
