"""2026-07-28 requests over HTTP, answered without the SDK's HTTP entry around them.

A 2026-07-28 POST is one JSON-RPC request in and one response out. Around each, the SDK's entry
(``handle_modern_request``) makes a Starlette request, a pydantic model of the envelope, a listing of every tool
(to check ``Mcp-Param-*`` headers against the called one's schema: a whole tools/list per call), and a task group
of two tasks with a memory stream, standing ready for a stream of events. This path answers the same request with
the same checks, made with the SDK's own functions, and hands it to the SDK's own request runner
(``ServerRunner``, as its ``serve_one`` does), so that handlers, middleware, validation and the mapping of errors
stay the SDK's. What it does differently:

- the body is read and parsed once; the envelope is checked by hand, as strictly as the SDK's model;
- ``Mcp-Param-*`` headers are checked against the called tool's schema in the caller's own view (a lookup): a
  tool the caller does not see has no schema, so its headers are not checked, as the SDK's listing does not;
- the answer is ``application/json`` unless the handler sends a notification (progress, a log message), which
  commits ``text/event-stream`` there and then, as the SDK does;
- nothing waits beside a call until it has run ``WATCH_AFTER`` seconds: then a watcher ends it when the client
  goes (on this protocol, closing the response is how a client cancels) and, from ``PING_SECONDS`` on, keeps the
  stream alive with a comment line, as the SDK's does.

Anything else goes to the SDK's entry with the body replayed (``replayed``), so every refusal is the SDK's word
for word: a notification, a batch, a body that is not JSON or over the cap, an envelope or a routing header that
does not match, a version this SDK does not serve, an ``Accept`` without both JSON and events, a Host, Origin or
Content-Type the transport refuses, and ``subscriptions/listen`` (a stream by nature). tests/test_exchange.py
holds both paths to the same bytes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.runner import ServerRunner, aclose_shielded, modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import (
    ERROR_CODE_HTTP_STATUS,
    MCP_PARAM_HEADER_PREFIX,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
    validate_mcp_param_headers,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import ErrorData
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

WATCH_AFTER = 0.05  # seconds a call runs before a watcher looks for its client leaving (a shorter one ends anyway)
PING_SECONDS = 15.0  # a stream's keep-alive comment, as the SDK's entry sends it (behind a proxy's idle timeout)

_MODERN = frozenset(version.encode() for version in MODERN_PROTOCOL_VERSIONS)
_VERSION_HEADER = b"mcp-protocol-version"
_PARAM_PREFIX = MCP_PARAM_HEADER_PREFIX.lower()
_ENVELOPE = frozenset({"jsonrpc", "id", "method", "params"})
_JSON_HEADERS = b"application/json"
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform"),
                (b"connection", b"keep-alive"), (b"x-accel-buffering", b"no")]

SchemaOf = Callable[[Scope, str], Mapping[str, Any] | None]  # a tool's input schema as the request's caller sees it


def is_modern(scope: Scope) -> bool:
    """A POST that names a 2026-07-28 protocol version: one this path may answer."""
    if scope["method"] != "POST":
        return False
    return any(key == _VERSION_HEADER and value in _MODERN for key, value in scope["headers"])


async def answer(server: Server[Any], lifespan_state: Any, guard: TransportSecurityMiddleware, max_body: int,
                 schema_of: SchemaOf, sdk: Callable[[Scope, Receive, Send], Awaitable[None]],
                 scope: Scope, receive: Receive, send: Send) -> None:
    """Answer one 2026-07-28 POST (``is_modern``), or hand it to ``sdk`` with its body replayed."""
    request = Request(scope, receive)
    if await guard.validate_request(request, is_post=True) is not None:
        await sdk(scope, receive, send)  # the transport's refusal (Host, Origin, Content-Type), in its words
        return
    has_json, has_sse = check_accept_headers(request)
    headers = request.headers
    declared = headers.get("content-length")
    if not (has_json and has_sse) or (declared is not None and not _within(declared, max_body)):
        await sdk(scope, receive, send)  # (a length that is no number or too long: the SDK's word on it)
        return
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left (or the body's deadline passed): nothing to answer
            return
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if size > max_body:
            await sdk(scope, replayed(chunks, True, receive), send)
            return
        if not message.get("more_body", False):
            break
    body = b"".join(chunks)
    decoded = one_request(body)
    route = None
    if decoded is not None and find_duplicated_routing_header(headers.items()) is None:
        found = classify_inbound_request(decoded, headers=dict(headers))
        route = found if isinstance(found, InboundModernRoute) else None
    if route is None or decoded is None:
        await sdk(scope, replayed([body], False, receive), send)
        return
    request_id, method, params = decoded["id"], decoded["method"], decoded.get("params")
    if method == "tools/call":
        refused = _param_headers_refused(schema_of, scope, params, headers)
        if refused is not None:
            await _write_json(send, {"jsonrpc": "2.0", "id": request_id, "error": refused[1]}, refused[0])
            return
    exchange = _Exchange(send, receive, request_id, progress_token_from_params(params),
                         TransportContext(kind="streamable-http", can_send_request=False, headers=headers),
                         ServerMessageMetadata(request_context=request))
    connection = Connection.from_envelope(route.protocol_version, route.client_info, route.client_capabilities)
    await exchange.run(_serve_one(server, exchange, method, params, connection, lifespan_state))


async def _serve_one(server: Server[Any], exchange: _Exchange, method: str, params: Mapping[str, Any] | None,
                     connection: Connection, lifespan_state: Any) -> dict[str, Any]:
    """The SDK's ``serve_one``, but for how the connection's exit stack is closed: the SDK closes it in a shielded,
    bounded scope after every request (10 us of a 100 us request); here that scope is kept for a request that
    failed or was cancelled, and a request that ended well closes the stack plainly (nothing toolcrib serves
    registers anything on it; whatever does is still closed, in order)."""
    runner = ServerRunner(server, connection, lifespan_state)
    try:
        result = await runner.on_request(exchange, method, params)
    except BaseException:
        await aclose_shielded(connection)
        raise
    await connection.exit_stack.aclose()
    return result


def _within(declared: str, max_body: int) -> bool:
    """Whether a Content-Length is a number of ASCII digits no greater than ``max_body``."""
    return declared.isascii() and declared.isdigit() and len(declared) <= 12 and int(declared) <= max_body


def one_request(body: bytes) -> dict[str, Any] | None:
    """The body as one JSON-RPC request this path answers, or None (the SDK's entry answers the rest)."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if type(decoded) is not dict or not decoded.keys() <= _ENVELOPE or decoded.get("jsonrpc") != "2.0":
        return None
    request_id, method, params = decoded.get("id"), decoded.get("method"), decoded.get("params")
    if type(request_id) not in (int, str) or type(method) is not str or method == "subscriptions/listen":
        return None
    if params is not None and type(params) is not dict:
        return None
    return decoded


def _param_headers_refused(schema_of: SchemaOf, scope: Scope, params: Mapping[str, Any] | None,
                           headers: Mapping[str, str]) -> tuple[int, dict[str, Any]] | None:
    """The refusal (status, error) of ``Mcp-Param-*`` headers that disagree with the called tool's arguments."""
    name = (params or {}).get("name")
    arguments = (params or {}).get("arguments")
    if type(name) is not str or (arguments is not None and not isinstance(arguments, Mapping)):
        return None
    arguments = arguments or {}
    if not arguments and not any(key.startswith(_PARAM_PREFIX) for key in headers):
        return None
    schema = schema_of(scope, name)
    if schema is None:
        return None
    refused = validate_mcp_param_headers(schema, arguments, headers)
    if refused is None:
        return None
    error = ErrorData(code=refused.code, message=refused.message, data=refused.data)  # as the SDK writes it
    return ERROR_CODE_HTTP_STATUS.get(refused.code, 400), error.model_dump(mode="json", exclude_none=True)


def progress_params(token: int | str, progress: float, total: float | None, message: str | None) -> dict[str, Any]:
    """A progress notification's params, as the SDK's dispatch contexts make them (what is not given left out)."""
    params: dict[str, Any] = {"progressToken": token, "progress": progress}
    if total is not None:
        params["total"] = total
    if message is not None:
        params["message"] = message
    return params


def replayed(chunks: list[bytes], more: bool, receive: Receive) -> Receive:
    """``receive`` giving the body read so far once more (as one message), then whatever comes after it."""
    pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": more}]

    async def again() -> Message:
        return pending.pop() if pending else await receive()

    return again


async def _write_json(send: Send, message: dict[str, Any], status: int) -> None:
    """``message`` as one JSON body. A client that left is nobody to answer: an ASGI server may raise ``OSError``
    for a write to a closed connection (as the ASGI spec asks; uvicorn drops the write instead)."""
    body = json.dumps(message, separators=(",", ":")).encode()
    try:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", _JSON_HEADERS)]})
        await send({"type": "http.response.body", "body": body})
    except OSError:
        pass


def _event(message: dict[str, Any]) -> bytes:
    return b"event: message\r\ndata: " + json.dumps(message, separators=(",", ":")).encode() + b"\r\n\r\n"


class _Exchange:
    """One request's dispatch context (the SDK's ``DispatchContext``): no back-channel (2026-07-28 servers ask the
    client nothing), notifications onto this request's response, which they turn into a stream of events."""

    can_send_request = False

    def __init__(self, send: Send, receive: Receive, request_id: int | str, progress_token: int | str | None,
                 transport: TransportContext, metadata: ServerMessageMetadata) -> None:
        self._send = send
        self._receive = receive
        self.request_id = request_id
        self.progress_token = progress_token
        self.transport = transport
        self.message_metadata = metadata
        self._cancel_requested: anyio.Event | None = None
        self._streaming = False  # text/event-stream is committed
        self._lock: anyio.Lock | None = None  # made when a second task may send (the watcher)
        self._gone = False  # the client left, or the answer is written: nothing more goes onto the response

    @property
    def cancel_requested(self) -> anyio.Event:
        """Never set (a 2026-07-28 client cancels by leaving, and the watcher ends the call): made when asked."""
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> Any:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self._stream(_event(message))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.progress_token is not None:
            await self.notify("notifications/progress", progress_params(self.progress_token, progress, total, message))

    async def _stream(self, data: bytes, last: bool = False) -> None:
        """One event (or ping) onto the response, committing it to a stream of events first."""
        if self._gone:
            return
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            try:
                if not self._streaming:
                    self._streaming = True
                    await self._send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
                await self._send({"type": "http.response.body", "body": data, "more_body": not last})
            except OSError:  # the client went while we wrote: the watcher (or the call's end) sees to the rest
                self._gone = True

    async def run(self, call: Awaitable[dict[str, Any]]) -> None:
        """Run the request's handler here, in the request's own task, and write its answer."""
        loop = asyncio.get_running_loop()
        watcher: asyncio.Task[None] | None = None
        with anyio.CancelScope() as scope:

            def watch() -> None:
                nonlocal watcher
                watcher = loop.create_task(self._watch(scope))

            timer = loop.call_later(WATCH_AFTER, watch)
            try:
                try:
                    reply: dict[str, Any] = {"jsonrpc": "2.0", "id": self.request_id, "result": await call}
                    status = 200
                except Exception as exc:
                    error = modern_error_data(exc)
                    status = ERROR_CODE_HTTP_STATUS.get(error.code, 200)
                    reply = {"jsonrpc": "2.0", "id": self.request_id,
                             "error": error.model_dump(mode="json", by_alias=True, exclude_none=True)}
            finally:
                timer.cancel()
                if watcher is not None:
                    watcher.cancel()
        if scope.cancelled_caught or self._gone:
            return  # the client left: nobody to answer
        if self._streaming:
            await self._stream(_event(reply), last=True)
        else:
            await _write_json(self._send, reply, status)
        self._gone = True  # a notification sent after the answer (by a task the handler left behind) is dropped

    async def _watch(self, scope: anyio.CancelScope) -> None:
        """Beside a call that runs on: end it when its client goes, and keep its stream alive."""
        waited = WATCH_AFTER
        while True:
            with anyio.move_on_after(max(PING_SECONDS - waited, 0.0)):
                while (await self._receive())["type"] != "http.disconnect":
                    pass
                self._gone = True
                scope.cancel()
                return
            waited = 0.0  # the next one a whole PING_SECONDS later (not at once, again and again)
            await self._stream(b": ping\r\n\r\n")
