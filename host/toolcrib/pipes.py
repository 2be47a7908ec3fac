"""Writing to a non-blocking pipe from the event loop: what the stdio transport, an isolated pack's calls lane and a
long-lived hook process share."""

from __future__ import annotations

import os

import anyio


async def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to the non-blocking descriptor ``fd``: at once while the pipe has room (nothing
    suspends then), waiting for room while it is full. An ``OSError`` (the reader gone: ``BrokenPipeError``) is
    the caller's to word."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view):]
        except BlockingIOError:
            await anyio.wait_writable(fd)


__all__ = ["write_all"]
