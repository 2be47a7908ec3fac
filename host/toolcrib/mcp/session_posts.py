"""2025-11-25 session requests over HTTP, answered in their POST's own task.

The SDK's stateful transport hands each request of a session to the session's reader task through a memory stream,
which runs it in a task of its own; the answer goes back through two more streams to sse-starlette's response (a
task group of its own, with a ping task and a disconnect watcher): about 0.5 ms of every POST here, none of it the
handler's. ``SessionTransport`` is the SDK's transport answering a plain request of an established session where
its POST came in, as ``toolcrib.mcp.exchange`` answers a 2026-07-28 one: with the session's own connection, runner
(handlers, middleware, validation and the mapping of errors stay the SDK's) and dispatcher, and what the SDK's
answer has:

- an answer that comes before anything else is sent is one ``application/json`` body, as the SDK's JSON-response
  mode writes it (the protocol lets a server answer a request either way, and a client must take both): a client
  reads it in a fraction of the time it takes to read a stream of events, and there is no stream to resume;
- otherwise the SDK's stream of events: a request that sends something (progress, a log message, a request to the
  client) or runs ``WATCH_AFTER`` seconds opens it with a priming event (stored in the session's events, with
  the time to retry), then each message of the request stored and sent with its event id, the answer last; a
  client that loses the stream resumes it with ``Last-Event-ID``; from ``PING_SECONDS`` on a silent stream is kept
  alive with a comment line, as sse-starlette's is;
- requests to the client (elicitation, sampling, roots) go out through the session's dispatcher onto this request's
  stream, and their answers come back as before (a POST of their own);
- the request is registered with the dispatcher as its own in-flight ones are, so ``notifications/cancelled`` ends
  it, and it is answered "Request cancelled" as the SDK's transport answers; the session's end ends it too;
- a client that leaves does not end the request (on this protocol it may come back for the rest), and
  ``close_sse_stream`` (``[host] http_stream_seconds``) ends its stream so that the client polls for the rest.

Anything else goes to the SDK's own path, body and all (Starlette keeps the body read): ``initialize``, a
notification or a response, a batch, a body that is not one well-formed request, an ``Accept``, ``Content-Type`` or
session header the transport refuses, a session not initialized yet, a request id already in flight, JSON-response
mode. tests/test_session_posts.py holds this path to the SDK's bytes: its JSON answers to those of the SDK's
JSON-response mode, its streams to those of its streaming mode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.runner import ServerRunner
from mcp.server.streamable_http import (
    MCP_SESSION_ID_HEADER,
    REQUEST_CANCELLED,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
    check_accept_headers,
)
from mcp.shared.dispatcher import coerce_request_id
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp.shared.jsonrpc_dispatcher import (
    JSONRPCDispatcher,
    _InFlight,
    handler_exception_to_error_data,
    progress_token_from_params,
)
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types.version import is_version_at_least
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from toolcrib.mcp.exchange import PING_SECONDS, WATCH_AFTER, one_request, progress_params

log = logging.getLogger("toolcrib.serve")

_TRANSPORT = TransportContext(kind="jsonrpc", can_send_request=True)  # what the session's dispatcher builds


@dataclass
class Session:
    """What a session's requests are answered with: its connection, its runner and the dispatcher that carries
    its requests to the client."""

    connection: Connection
    runner: ServerRunner[Any]
    dispatcher: JSONRPCDispatcher[Any]


class SessionTransport(StreamableHTTPServerTransport):
    """The SDK's transport for one session, answering its plain requests in their POSTs (the module's docstring).
    ``session`` is set once the session's dispatcher runs; until then every request takes the SDK's path."""

    session: Session | None = None

    async def _handle_post_request(self, scope: Scope, request: Request, receive: Receive, send: Send) -> None:
        answer = await self._answer_of(request, receive, send)
        if answer is None:
            await super()._handle_post_request(scope, request, receive, send)
        else:
            await answer.run()

    async def _answer_of(self, request: Request, receive: Receive, send: Send) -> _Answer | None:
        """The answer this path gives the POST, or None: the SDK's path answers it."""
        session, events = self.session, self._event_store
        if session is None or events is None or self.is_json_response_enabled:
            return None  # (toolcrib's sessions all keep their events)
        headers = request.headers
        has_json, has_sse = check_accept_headers(request)
        if not (has_json and has_sse and self._check_content_type(request)) or \
                headers.get(MCP_SESSION_ID_HEADER) != self.mcp_session_id:
            return None
        try:
            body = await request.body()
        except Exception:  # (a client gone mid-body): the SDK's path says what it says of it
            return None
        decoded = one_request(body)
        if decoded is None or decoded["method"] == "initialize":
            return None
        if str(decoded["id"]) in self._request_streams:  # (from its POST until its stream ends, on either path)
            return None  # an id already in flight: what the SDK does with it is the SDK's
        version = headers.get(MCP_PROTOCOL_VERSION_HEADER, types.DEFAULT_NEGOTIATED_VERSION)
        return _Answer(self, session, events, request, receive, send, decoded,
                       primed=is_version_at_least(version, "2025-11-25"))


def _event(message: types.JSONRPCMessage, event_id: str) -> bytes:
    """One message as sse-starlette writes it (``ServerSentEvent.encode``)."""
    data = message.model_dump_json(by_alias=True, exclude_unset=True)
    return f"id: {event_id}\r\nevent: message\r\ndata: {data}\r\n\r\n".encode()


class _Answer:
    """One request's answer, and its dispatch context (the SDK's ``DispatchContext``)."""

    transport = _TRANSPORT

    def __init__(self, owner: SessionTransport, session: Session, events: EventStore, request: Request,
                 receive: Receive, send: Send, decoded: dict[str, Any], *, primed: bool) -> None:
        self._owner = owner
        self._session = session
        self._events = events
        self._receive = receive
        self._send = send
        self.request_id: int | str = decoded["id"]
        self._method: str = decoded["method"]
        self._params: Mapping[str, Any] | None = decoded.get("params")
        self.progress_token = progress_token_from_params(self._params)
        self._stream_id = str(self.request_id)
        self._primed = primed  # a client of 2025-11-25 or later: its stream opens with a priming event
        self._cancel_requested: anyio.Event | None = None
        self._closed = False  # the handler is done: it sends nothing more
        self._started = False  # the response is a stream of events, opened
        self._gone = False  # the response ended (answered, closed for polling, or the client left)
        self._session_ended = False
        self._lock = asyncio.Lock()  # the handler's task, the watcher and the transport's router may each write
        self._scope = anyio.CancelScope()
        self._closing: asyncio.Task[None] | None = None
        # what toolcrib's handlers read of it: the HTTP request, and how to close the call's stream for polling
        # (only a client that got a priming event can come back)
        self.message_metadata = ServerMessageMetadata(request_context=request,
                                                      close_sse_stream=self.close_stream if primed else None)

    # -- the dispatch context -------------------------------------------------------------------------------------

    @property
    def cancel_requested(self) -> anyio.Event:
        """Set by the dispatcher when the client cancels the request (made when first asked for)."""
        if self._cancel_requested is None:
            self._cancel_requested = anyio.Event()
        return self._cancel_requested

    @property
    def can_send_request(self) -> bool:
        return not self._closed

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> Any:
        if self._closed:
            raise NoBackChannelError(method)
        await self._open()  # the priming event is stored before the router stores the request
        return await self._session.dispatcher.send_raw_request(method, params, opts,
                                                               _related_request_id=self.request_id)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: Any = None) -> None:
        if self._closed:
            log.debug("dropped %s: its request is answered", method)
            return
        unset = {} if params is None else {"params": dict(params)}  # no ``"params": null`` (JSON-RPC forbids it)
        await self._out(types.JSONRPCNotification(jsonrpc="2.0", method=method, **unset))

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.progress_token is not None:
            await self.notify("notifications/progress", progress_params(self.progress_token, progress, total, message))

    # -- what the transport's router and its callbacks reach ---------------------------------------------------

    async def send(self, item: EventMessage) -> None:
        """A message the session's router sends on this request's stream (a request to the client, or the
        courtesy cancel of one), stored: never the answer, which is this request's own. (The stream is open
        already when the message came through ``send_raw_request``; one routed here some other way opens it, its
        priming event stored after the message.)"""
        await self._open()
        await self._write(_event(item.message, str(item.event_id)))

    def close(self) -> None:
        """The transport's ``close_sse_stream`` for this request: end the stream (the request goes on). Called
        once for each end the transport registered (both are this)."""
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self.close_stream())

    async def aclose(self) -> None:
        """The session ends: so does the request (the SDK's dispatcher cancels its own when it ends)."""
        self._session_ended = True
        self._scope.cancel()

    async def close_stream(self) -> None:
        """End this request's stream (opened first, so that the client has a priming event to come back with):
        the client polls for the rest."""
        await self._open()
        await self._write(b"", last=True)

    async def _unanswered(self) -> None:
        await self._finish(types.JSONRPCError(jsonrpc="2.0", id=self.request_id, error=types.ErrorData(
            code=REQUEST_CANCELLED, message="Request cancelled")))

    # -- the request -----------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Run the request here and write its answer, as the dispatcher and the transport would."""
        owner, dispatcher = self._owner, self._session.dispatcher
        key = coerce_request_id(self.request_id)
        dispatcher._in_flight[key] = in_flight = _InFlight(scope=self._scope, dctx=self)  # type: ignore[arg-type]
        owner._request_streams[self._stream_id] = (self, self)  # type: ignore[assignment]
        loop = asyncio.get_running_loop()
        watcher: asyncio.Task[None] | None = None

        def watch() -> None:
            nonlocal watcher
            watcher = loop.create_task(self._watch())

        timer = loop.call_later(WATCH_AFTER, watch)
        reply: types.JSONRPCMessage | None = None
        try:
            with self._scope:
                try:
                    result = await self._session.runner.on_request(self, self._method, self._params)
                finally:
                    self._closed = True
                    if dispatcher._in_flight.get(key) is in_flight:
                        del dispatcher._in_flight[key]
                reply = types.JSONRPCResponse(jsonrpc="2.0", id=self.request_id, result=result)
        except Exception as exc:
            error = handler_exception_to_error_data(exc)
            if error is None:
                log.exception("handler for %r raised", self._method)
                error = types.ErrorData(code=0, message=str(exc))  # as the SDK's dispatcher words it
            reply = types.JSONRPCError(jsonrpc="2.0", id=self.request_id, error=error)
        finally:
            timer.cancel()
            if watcher is not None:
                watcher.cancel()
            streams: dict[str, Any] = owner._request_streams  # type: ignore[assignment]
            if streams.get(self._stream_id, (None,))[0] is self:
                del streams[self._stream_id]
        if self._session_ended:
            return  # nothing more goes out: the session manager ends the response
        if reply is None or self.cancel_requested.is_set():
            await self._unanswered()  # the 2025-era wire ends a cancelled request's stream with an error
        else:
            await self._finish(reply)

    async def _finish(self, reply: types.JSONRPCMessage) -> None:
        """The answer: onto the stream if it is open, else as one JSON body (as the SDK's JSON-response mode has
        it: status 200, errors included)."""
        if self._started:
            await self._out(reply, last=True)
            return
        body = reply.model_dump_json(by_alias=True, exclude_unset=True).encode()
        async with self._lock:
            if self._gone:
                return
            self._gone = True
            try:
                await self._send({"type": "http.response.start", "status": 200, "headers": [
                    (b"content-type", b"application/json"), (b"mcp-session-id", self._session_id()),
                    (b"content-length", str(len(body)).encode())]})
                await self._send({"type": "http.response.body", "body": body})
            except OSError:  # the client left (an ASGI server may raise for a closed connection): nobody to answer
                pass

    async def _out(self, message: types.JSONRPCMessage, last: bool = False) -> None:
        """One message of this request's stream: opened first, the message stored, then written with its id."""
        await self._open()
        await self._write(_event(message, await self._events.store_event(self._stream_id, message)), last)

    async def _open(self) -> None:
        """Make the response a stream of events, as the SDK's transport opens one: its head, then the priming
        event, stored before anything else of the request is. Shielded: a watcher ended while it opens the stream
        must not leave a head without its first event."""
        async with self._lock:
            if self._started:
                return
            self._started = True
            with anyio.CancelScope(shield=True):
                head = b""
                if self._primed:  # (toolcrib's sessions all say when to retry)
                    priming = await self._events.store_event(self._stream_id, None)
                    head = f"id: {priming}\r\ndata: \r\nretry: {self._owner._retry_interval}\r\n\r\n".encode()
                if self._gone:
                    return
                try:
                    await self._send({"type": "http.response.start", "status": 200, "headers": [
                        (b"cache-control", b"no-cache, no-transform"), (b"connection", b"keep-alive"),
                        (b"content-type", b"text/event-stream"), (b"mcp-session-id", self._session_id()),
                        (b"x-accel-buffering", b"no")]})
                    if head:
                        await self._send({"type": "http.response.body", "body": head, "more_body": True})
                except OSError:  # the client left
                    self._gone = True

    async def _write(self, data: bytes, last: bool = False) -> None:
        """Write onto the open stream. Nothing is written once it ended (what is sent after is stored, for a
        client that comes back)."""
        async with self._lock:
            if self._gone:
                return
            try:
                await self._send({"type": "http.response.body", "body": data, "more_body": not last})
            except OSError:  # the client left while we wrote
                self._gone = True
            if last:
                self._gone = True

    def _session_id(self) -> bytes:
        return str(self._owner.mcp_session_id).encode()

    async def _watch(self) -> None:
        """Beside a request that runs on: open its stream (so the client can resume it), keep it alive, and stop
        writing when the client leaves (the request goes on)."""
        await self._open()
        waited = WATCH_AFTER
        while not self._gone:
            with anyio.move_on_after(max(PING_SECONDS - waited, 0.0)):
                while (await self._receive())["type"] != "http.disconnect":
                    pass
                self._gone = True
                return
            waited = 0.0  # the next one a whole PING_SECONDS later (not at once, again and again)
            await self._write(f": ping - {datetime.now(UTC)}\r\n\r\n".encode())
