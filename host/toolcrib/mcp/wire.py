"""The stdio wire, as bytes: claiming fd 0/1, reading lines (capped) and writing them."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import threading
from typing import Any, BinaryIO

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from toolcrib.pipes import write_all

MAX_LINE_BYTES = 4 * 1024 * 1024  # the same cap the SDK puts on an HTTP request body


class Wire:
    """A stdio server's wire: ``lines`` read from ``stdin`` (None for a line over the cap), bytes written to
    ``stdout``.

    Where the wire is a pipe or a socket (as an MCP client starts a server), it is read and written on the event
    loop, non-blocking, with no thread hop per message; its blocking mode is put back by ``close``. A terminal or a
    file (``toolcrib serve < requests.jsonl``) is read by a thread of its own and written through a worker thread:
    a terminal is shared with the shell, which must not find it non-blocking, and a file cannot be waited on."""

    def __init__(self, stdin: BinaryIO, stdout: BinaryIO) -> None:
        self.stdin, self.stdout = stdin, stdout
        self.in_fd, self.out_fd = pollable(stdin), pollable(stdout)
        stdout.flush()  # (nothing written through the file object is left behind what is written to its descriptor)
        self._send, self.lines = anyio.create_memory_object_stream[bytes | None](1)

    async def read(self) -> None:
        """Read lines into ``lines`` until end of input, then close it; a task for as long as the wire is read (a
        terminal's or a file's thread reads on, as a daemon, and this returns at once)."""
        if self.in_fd is not None:
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):  # nobody reads any more
                await read_fd_lines(self.in_fd, self._send)
        else:
            # Lines are read by a daemon thread of its own: one blocked on a stdin that never closes must not keep
            # the process from exiting when the operator stops it.
            threading.Thread(target=read_lines, args=(self.stdin, self._send, anyio.lowlevel.current_token()),
                             name="toolcrib-stdin", daemon=True).start()

    async def write(self, data: bytes) -> None:
        if self.out_fd is not None:
            await write_all(self.out_fd, data)
        else:
            await anyio.to_thread.run_sync(write_file, self.stdout, data)

    def close(self) -> None:
        """Put the descriptors' blocking mode back (once nothing reads them any more)."""
        for fd in (self.in_fd, self.out_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.set_blocking(fd, True)


def pollable(stream: BinaryIO) -> int | None:
    """The descriptor of ``stream``, made non-blocking, when it is a pipe or a socket; else None."""
    try:
        fd = stream.fileno()
        kind = os.fstat(fd).st_mode
    except (OSError, ValueError, AttributeError):  # (io.UnsupportedOperation is an OSError and a ValueError)
        return None
    if not (stat.S_ISFIFO(kind) or stat.S_ISSOCK(kind)):
        return None
    os.set_blocking(fd, False)
    return fd


async def read_fd_lines(fd: int, send: Any) -> None:
    """Read a non-blocking descriptor line by line into ``send`` (None for a line over ``MAX_LINE_BYTES``, which is
    skipped without being held), until end of input; then ``send`` is closed."""
    async with send:
        buffer = bytearray()
        searched = 0  # the buffer holds no newline before this
        skipping = False  # the rest of a line too long is being skipped
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            except OSError:
                return
            if not chunk:  # end of input: a last line without its newline counts, as readline reads it
                if buffer and not skipping:
                    await send.send(bytes(buffer))
                return
            buffer += chunk
            while True:
                end = buffer.find(b"\n", searched)
                if end < 0:
                    searched = len(buffer)
                    if len(buffer) > MAX_LINE_BYTES:
                        if not skipping:
                            await send.send(None)
                        skipping, buffer, searched = True, bytearray(), 0
                    break
                line = bytes(buffer[:end + 1])
                del buffer[:end + 1]
                searched = 0
                if skipping:
                    skipping = False
                elif len(line) > MAX_LINE_BYTES + 1:
                    await send.send(None)
                else:
                    await send.send(line)


def write_file(stream: BinaryIO, data: bytes) -> None:
    stream.write(data)
    stream.flush()


def read_lines(stdin: BinaryIO, send: Any, token: Any) -> None:
    """Read stdin line by line into ``send`` (None for a line over ``MAX_LINE_BYTES``, which is skipped without
    being held), until end of input or until the event loop is gone."""
    try:
        while True:
            line = stdin.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                _skip_line(stdin)
                anyio.from_thread.run(send.send, None, token=token)
                continue
            anyio.from_thread.run(send.send, line, token=token)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError, OSError, ValueError):
        pass  # the server is gone (or stdin closed under us): nothing to read for
    # End of input: closed on the event loop's thread, so that a reader already waiting is woken (a stream closed
    # from another thread leaves its waiter asleep, and the server with it).
    with contextlib.suppress(RuntimeError):
        anyio.from_thread.run_sync(send.close, token=token)


def _skip_line(stream: BinaryIO) -> None:
    while True:
        chunk = stream.readline(MAX_LINE_BYTES)
        if not chunk or chunk.endswith(b"\n"):
            return


def claim_stdio() -> tuple[BinaryIO, BinaryIO, Any]:
    """Private duplicates of fd 0/1 for the wire, and a function that puts them back; fd 0 -> /dev/null and fd 1 ->
    stderr meanwhile, so that whatever anything in the process (or a child it starts, from any thread) writes to
    stdout goes to stderr, never onto the wire."""
    sys.stdout.flush()
    wire_in = os.dup(0)
    wire_out = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)

    def restore() -> None:
        sys.stdout.flush()
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)

    return os.fdopen(wire_in, "rb"), os.fdopen(wire_out, "wb"), restore
