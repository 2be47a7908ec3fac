"""``toolcrib serve --agent NAME``: one agent over stdio. Nothing but protocol ever reaches stdout.

The transport is toolcrib's own rather than the SDK's ``stdio_server`` for two things the SDK does not do: a
line that is not JSON-RPC gets a JSON-RPC error (-32700 parse error, -32600 invalid request) and the session
goes on, a line longer than ``MAX_LINE_BYTES`` is refused without being held in memory, and when the client
closes stdin the requests already read are still answered before the session ends (so ``cat requests | toolcrib
serve`` gets every answer). Like the SDK's, it points fd 0 at the null device and fd 1 at stderr while serving,
so a handler's stray ``print`` (or a child process's output) cannot corrupt the wire; the CLI does so before
any pack is imported.

Where the wire is a pipe or a socket (as an MCP client starts a server), it is read and written on the event loop,
non-blocking, with no thread hop per message (the SDK's transport takes one each way); its blocking mode is put
back when serving ends. A terminal or a file (``toolcrib serve < requests.jsonl``) is read by a thread of its own
and written through a worker thread, as the SDK does: a terminal is shared with the shell, which must not find it
non-blocking, and a file cannot be waited on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, BinaryIO

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from toolcrib.isolation import ISOLATED_ENV
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.checks import CHECKS_ENV, follow_checks, serve_checks
from toolcrib.mcp.lane import LANE_ENV, serve_lane
from toolcrib.mcp.state import ServingState
from toolcrib.pipes import write_all

log = logging.getLogger("toolcrib.serve")

MAX_LINE_BYTES = 4 * 1024 * 1024  # the same cap the SDK puts on an HTTP request body
DRAIN_GRACE = 5.0  # seconds beyond the call timeout that answers to requests read before EOF are awaited
_OPEN_ENDED = frozenset({"subscriptions/listen"})  # requests answered only when cancelled: never awaited


async def serve_stdio(state: ServingState, agent: str, watch: Path | None = None,
                      wire: tuple[BinaryIO, BinaryIO] | None = None, announce: bool = False) -> None:
    """Serve ``agent`` on this process's stdin/stdout until the client closes stdin.

    ``wire`` is stdin/stdout as ``claim_stdio`` took them (the CLI claims them before any pack is imported, so
    nothing a pack prints at import reaches the wire); without it they are claimed here. With ``watch``, the config
    file is reloaded when it changes (and on SIGHUP). ``announce`` says on stderr what is served.
    """
    isolated = os.environ.get(ISOLATED_ENV)
    checks = os.environ.pop(CHECKS_ENV, None) if isolated else None
    if isolated:  # the process of an isolated pack (toolcrib.isolation): a pack that failed ends it, saying why
        record = next((r for r in state.host.records if r.name == isolated and r.kind == "pack"), None)
        if record is None or record.state != "loaded":
            why = record.error if record is not None else "no installed distribution offers it"
            print(f"toolcrib: the isolated pack {isolated!r} failed: {why}", file=sys.stderr, flush=True)
            return  # before any protocol: the host's client sees the process end, and these last words
        if checks:  # its availability checks run for the host's agents, asked over a line of their own
            serve_checks(follow_checks(state, agent), checks)
    view = state.view(agent)  # an unknown agent fails here, before any protocol
    if announce:
        print(f"toolcrib: serving agent {agent!r} over stdio ({len(view)} tools, "
              f"{len(view.resources) + len(view.templates)} resources, {len(view.prompts)} prompts); an MCP client "
              "talks to it on stdin and stdout; stop it with Ctrl-C or by closing stdin (Ctrl-D)",
              file=sys.stderr, flush=True)
    server = build_server(state, agent)
    options = server.create_initialization_options()
    drain = state.host.loaded.config.host.call_timeout + DRAIN_GRACE
    stdin, stdout = wire if wire is not None else (None, None)
    async with stdio_transport(stdin, stdout, drain=drain) as (read_stream, write_stream), \
            anyio.create_task_group() as tg:
        if watch is not None:
            tg.start_soon(state.watch, watch)
        lane = os.environ.pop(LANE_ENV, None) if isolated else None
        if lane:  # the pack's tool calls come on a lane of their own (toolcrib.mcp.lane)
            tg.start_soon(serve_lane, lambda: state.view(agent), lane)
        await server.run(read_stream, write_stream, options)
        tg.cancel_scope.cancel()


@asynccontextmanager
async def stdio_transport(
    stdin: BinaryIO | None = None, stdout: BinaryIO | None = None, drain: float = 60.0 + DRAIN_GRACE
) -> AsyncIterator[tuple[Any, Any]]:
    """Message streams over stdin/stdout (or the given binary files, which are then not diverted).

    At end of input the server's stream stays open until every request read so far is answered, at most ``drain``
    seconds. Waiting stops early when the server asks the client something (nobody is left to answer it).
    """
    restore = None
    if stdin is None or stdout is None:
        stdin, stdout, restore = claim_stdio()
    to_server_send, to_server = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    from_server, from_server_receive = anyio.create_memory_object_stream[SessionMessage](16)
    write_lock = anyio.Lock()
    unanswered: set[types.RequestId] = set()  # requests read and not yet answered (open-ended ones excluded)
    asked_client = False

    in_fd, out_fd = _pollable(stdin), _pollable(stdout)
    stdout.flush()  # (nothing written through the file object is left behind what is written to its descriptor)

    async def write(message: types.JSONRPCMessage) -> None:
        data = message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
        async with write_lock:
            if out_fd is not None:
                await write_all(out_fd, data)
            else:
                await anyio.to_thread.run_sync(_write_all, stdout, data)

    lines_send, lines = anyio.create_memory_object_stream[bytes | None](1)
    if in_fd is None:
        # Lines are read by a daemon thread of its own: one blocked on a stdin that never closes must not keep the
        # process from exiting when the operator stops it.
        threading.Thread(target=_read_lines, args=(stdin, lines_send, anyio.lowlevel.current_token()),
                         name="toolcrib-stdin", daemon=True).start()

    async def reader() -> None:
        async with to_server_send, lines:
            async for line in lines:
                if line is None:
                    await write(_error(None, types.INVALID_REQUEST,
                                       f"Request too large: a message may be at most {MAX_LINE_BYTES} bytes"))
                    continue
                if not line.strip():
                    continue
                try:
                    message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                except ValidationError as exc:
                    await write(_invalid(line, exc))
                    continue
                track_incoming(message)
                await to_server_send.send(SessionMessage(message))
            await finish_answering()  # end of input

    def track_incoming(message: types.JSONRPCMessage) -> None:
        if isinstance(message, types.JSONRPCRequest) and message.method not in _OPEN_ENDED:
            unanswered.add(message.id)
        elif isinstance(message, types.JSONRPCNotification) and message.method == "notifications/cancelled":
            unanswered.discard((message.params or {}).get("requestId"))  # a cancelled request gets no answer

    async def finish_answering() -> None:
        with anyio.move_on_after(drain):
            while unanswered and not asked_client:
                await anyio.sleep(0.01)

    async def writer() -> None:
        nonlocal asked_client
        async with from_server_receive:
            async for session_message in from_server_receive:
                message = session_message.message
                if isinstance(message, types.JSONRPCRequest):
                    asked_client = True
                await write(message)
                if isinstance(message, types.JSONRPCResponse | types.JSONRPCError):
                    unanswered.discard(message.id)

    reading = anyio.CancelScope()

    async def read_until_cancelled() -> None:
        with reading:
            if in_fd is not None:
                async with anyio.create_task_group() as lines_tg:
                    lines_tg.start_soon(_read_fd_lines, in_fd, lines_send)
                    await reader()
                    lines_tg.cancel_scope.cancel()
            else:
                await reader()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_until_cancelled)
            tg.start_soon(writer)  # ends once the server's stream is closed and everything in it is written
            async with from_server:
                yield to_server, from_server
            reading.cancel()
    finally:
        for fd in (in_fd, out_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.set_blocking(fd, True)
        if restore is not None:
            restore()


def _invalid(line: bytes, exc: ValidationError) -> types.JSONRPCError:
    if any(err["type"] == "json_invalid" for err in exc.errors()):
        return _error(None, types.PARSE_ERROR, "Parse error: the line is not valid JSON")
    request_id = None
    try:
        raw = json.loads(line)
        if isinstance(raw, dict) and isinstance(raw.get("id"), str | int) and not isinstance(raw.get("id"), bool):
            request_id = raw["id"]
        if isinstance(raw, list):
            return _error(None, types.INVALID_REQUEST, "Invalid request: JSON-RPC batches are not supported")
    except ValueError:
        pass
    return _error(request_id, types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message")


def _error(request_id: Any, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))


def _pollable(stream: BinaryIO) -> int | None:
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


async def _read_fd_lines(fd: int, send: Any) -> None:
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


def _write_all(stream: BinaryIO, data: bytes) -> None:
    stream.write(data)
    stream.flush()


def _read_lines(stdin: BinaryIO, send: Any, token: Any) -> None:
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
