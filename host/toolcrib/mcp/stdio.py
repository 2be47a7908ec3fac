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

import json
import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState
from toolcrib.mcp.wire import MAX_LINE_BYTES, Wire, claim_stdio
from toolcrib.supply.mcp.isolated import ISOLATED_ENV
from toolcrib.supply.mcp.pack_calls import LANE_ENV, serve_lane
from toolcrib.supply.mcp.pack_checks import CHECKS_ENV, follow_checks, serve_checks

if TYPE_CHECKING:
    from toolcrib.view import AgentView

__all__ = ["MAX_LINE_BYTES", "announce_serving", "claim_stdio", "serve_stdio", "stdio_transport"]

log = logging.getLogger("toolcrib.serve")

DRAIN_GRACE = 5.0  # seconds beyond the call timeout that answers to requests read before EOF are awaited
_OPEN_ENDED = frozenset({"subscriptions/listen"})  # requests answered only when cancelled: never awaited


def announce_serving(agent: str, view: AgentView) -> None:
    """Say on stderr what is served (stdout is the wire)."""
    print(f"toolcrib: serving agent {agent!r} over stdio ({len(view)} tools, "
          f"{len(view.resources) + len(view.templates)} resources, {len(view.prompts)} prompts); an MCP client "
          "talks to it on stdin and stdout; stop it with Ctrl-C or by closing stdin (Ctrl-D)",
          file=sys.stderr, flush=True)


async def serve_stdio(state: ServingState, agent: str, watch: Path | None = None,
                      wire: tuple[BinaryIO, BinaryIO] | None = None, announce: bool = False) -> None:
    """Serve ``agent`` on this process's stdin/stdout until the client closes stdin.

    ``wire`` is stdin/stdout as ``claim_stdio`` took them (the CLI claims them before any pack is imported, so
    nothing a pack prints at import reaches the wire); without it they are claimed here. With ``watch``, the config
    file is reloaded when it changes (and on SIGHUP). ``announce`` says on stderr what is served.
    """
    isolated = os.environ.get(ISOLATED_ENV)
    checks = os.environ.pop(CHECKS_ENV, None) if isolated else None
    if isolated:  # the process of an isolated pack (toolcrib.supply.mcp.isolated): a pack that failed ends it,
        # saying why
        record = next((r for r in state.host.records if r.name == isolated and r.kind == "pack"), None)
        if record is None or record.state != "loaded":
            why = record.error if record is not None else "no installed distribution offers it"
            print(f"toolcrib: the isolated pack {isolated!r} failed: {why}", file=sys.stderr, flush=True)
            return  # before any protocol: the host's client sees the process end, and these last words
        if checks:  # its availability checks run for the host's agents, asked over a line of their own
            serve_checks(follow_checks(state, agent), checks)
    view = state.view(agent)  # an unknown agent fails here, before any protocol
    if announce:
        announce_serving(agent, view)
    server = build_server(state, agent)
    options = server.create_initialization_options()
    drain = state.host.loaded.config.host.call_timeout + DRAIN_GRACE
    stdin, stdout = wire if wire is not None else (None, None)
    async with stdio_transport(stdin, stdout, drain=drain) as (read_stream, write_stream), \
            anyio.create_task_group() as tg:
        if watch is not None:
            tg.start_soon(state.watch, watch)
        lane = os.environ.pop(LANE_ENV, None) if isolated else None
        if lane:  # the pack's tool calls come on a lane of their own (toolcrib.supply.mcp.pack_calls)
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
    wire = Wire(stdin, stdout)
    to_server_send, to_server = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    from_server, from_server_receive = anyio.create_memory_object_stream[SessionMessage](16)
    write_lock = anyio.Lock()
    unanswered: set[types.RequestId] = set()  # requests read and not yet answered (open-ended ones excluded)
    asked_client = False

    async def write(message: types.JSONRPCMessage) -> None:
        data = message.model_dump_json(by_alias=True, exclude_unset=True).encode() + b"\n"
        async with write_lock:
            await wire.write(data)

    async def read(line: bytes | None) -> None:
        if line is None:
            await write(_error(None, types.INVALID_REQUEST,
                               f"Request too large: a message may be at most {MAX_LINE_BYTES} bytes"))
            return
        if not line.strip():
            return
        try:
            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValidationError as exc:
            await write(_invalid(line, exc))
            return
        track_incoming(message)
        await to_server_send.send(SessionMessage(message))

    async def reader() -> None:
        async with to_server_send, wire.lines:
            async for line in wire.lines:
                await read(line)
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
            async with anyio.create_task_group() as lines_tg:
                lines_tg.start_soon(wire.read)
                await reader()
                lines_tg.cancel_scope.cancel()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_until_cancelled)
            tg.start_soon(writer)  # ends once the server's stream is closed and everything in it is written
            async with from_server:
                yield to_server, from_server
            reading.cancel()
    finally:
        wire.close()
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
    except (ValueError, RecursionError):
        pass
    return _error(request_id, types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message")


def _error(request_id: Any, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message))

