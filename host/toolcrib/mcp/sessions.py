"""2025-11-25 sessions over streamable HTTP: resumable, and with ``[cluster]`` served by every replica.

The SDK's session manager keeps a session in the process that made it and keeps none of its events.
``SessionManager`` is the SDK's with its stateful path replaced, so that each session has

- **an event store of its own** (``MemoryEvents``; with ``[cluster]``, ``toolcrib.mcp.fleet.RedisEvents``): each SSE
  stream opens with a priming event and tells the client when to retry, and a client whose stream dropped
  reconnects with ``Last-Event-ID`` and gets what it missed, then the rest as it comes. One store per session, so a
  ``Last-Event-ID`` names a place in that session's events only, never another's;
- **with ``[cluster]``, a record every replica reads** (``toolcrib.mcp.fleet.RedisSessions``): whose the session is
  (the principal that opened it), what its handshake settled (protocol version, the client's info and
  capabilities) and what the client set since (subscriptions, log level). A replica given a session it does not
  hold takes it up from the record: a connection born initialized, with that state, and the session's events.
  Only the principal that opened a session can use it, on any replica: anyone else gets the 404 of a session that
  does not exist. Records expire after ``[host] http_session_idle`` without a request, and an agent has at most
  ``[host] http_max_sessions`` of them in the whole fleet;
- **one replica that tells it of changes** (``list_changed``, resource updates): the one whose stream the client
  last opened (``listening``), so a client hears each change once, whichever replicas hold its session.

A ``DELETE`` ends the session everywhere. Without ``[cluster]`` (``LocalSessions``) a session lives in its replica,
as with the SDK. Each session's requests are answered by the SDK's transport, as it answers them.
"""

from __future__ import annotations

import collections
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable
from uuid import uuid4

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, authorization_context
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    LAST_EVENT_ID_HEADER,
    MCP_SESSION_ID_HEADER,
    EventCallback,
    EventMessage,
    EventStore,
    StreamableHTTPServerTransport,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from toolcrib.context import LOG_LEVELS
from toolcrib.mcp.sdk import listening_stream_made

log = logging.getLogger("toolcrib.serve")

RETRY_MS = 1000  # what an SSE stream tells the client to wait before it reconnects
EVENTS_PER_SESSION = 1000  # the newest events of a session kept for replay (older ones cannot be resumed from)
SUBSCRIPTIONS = "toolcrib_subscriptions"  # in a connection's state: the URIs its client subscribed to
LOG_LEVEL = "toolcrib_log_level"  # in a connection's state: the level the client set (logging/setLevel)

MESSAGE: TypeAdapter[types.JSONRPCMessage] = TypeAdapter(types.JSONRPCMessage)


def ends(message: Any, stream: str) -> bool:
    """Whether ``message`` (a wire dict) is the response that ends the SSE stream of request ``stream``."""
    return isinstance(message, dict) and ("result" in message or "error" in message) and \
        stream != GET_STREAM_KEY and str(message.get("id")) == stream


class MemoryEvents(EventStore):
    """One session's events, in this process: its newest ``EVENTS_PER_SESSION``. Event ids count from 1."""

    def __init__(self, size: int = EVENTS_PER_SESSION) -> None:
        self._events: collections.deque[tuple[int, str, types.JSONRPCMessage | None]] = collections.deque(
            maxlen=size)
        self._last = 0
        self._stored = anyio.Event()  # set (and replaced) whenever an event is stored
        self.closed = False

    async def store_event(self, stream_id: str, message: types.JSONRPCMessage | None) -> str:
        self._last += 1
        if not self.closed:
            self._events.append((self._last, stream_id, message))
            self._stored.set()
            self._stored = anyio.Event()
        return str(self._last)

    def close(self) -> None:
        self.closed = True
        self._events.clear()
        self._stored.set()

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        """What the stream of ``last_event_id`` got after it, then the rest as it comes: until its response (a
        request's stream), the session's end, or the client leaving (the standalone stream). None: the stream is
        over, or the event is unknown (the client starts afresh)."""
        if not last_event_id.isdigit() or len(last_event_id) > 20:
            return None
        cursor = int(last_event_id)
        stream = next((s for n, s, _ in self._events if n == cursor), None)
        if stream is None:
            return None
        while not self.closed:
            stored = self._stored
            for number, stream_id, message in list(self._events):
                if number <= cursor:
                    continue
                cursor = number
                if stream_id == stream and message is not None:
                    await send_callback(EventMessage(message, str(number)))
                    if ends(message.model_dump(by_alias=True, exclude_unset=True), stream):
                        return None
            await stored.wait()
        return None


@runtime_checkable
class Closable(Protocol):
    """An event store that can be told its session ended here."""

    def close(self) -> None: ...


@dataclass
class SessionRecord:
    """What any replica needs to serve a session it did not open."""

    owner: str  # the principal that opened it (``owner_of``)
    version: str  # the protocol version its handshake settled
    params: str  # its client's initialize params (JSON)
    state: dict[str, Any] = field(default_factory=dict)  # what its client set: subscriptions, log level
    home: str = ""  # the replica whose stream the client last opened
    newest_event: str = ""  # the id of its newest event when the record was read


class Sessions(Protocol):
    """Where sessions are kept beyond one replica (``toolcrib.mcp.fleet.RedisSessions``), or not (``LocalSessions``).
    Every method but ``events`` may find the store unreachable: it then says so in the log and the session goes
    on in this replica only."""

    replica: str

    def events(self, agent: str, session: str, after: str = "") -> EventStore: ...  # ``after``: its newest event

    async def reserve(self, agent: str, session: str) -> bool: ...  # room for one more of the agent's sessions?

    async def opened(self, agent: str, session: str, record: SessionRecord) -> None: ...

    async def find(self, agent: str, session: str) -> SessionRecord | None: ...

    async def touch(self, agent: str, session: str) -> None: ...  # a request came: it is not idle

    async def save_state(self, agent: str, session: str, state: dict[str, Any]) -> None: ...

    async def listening(self, agent: str, session: str) -> None: ...  # its client's stream is on this replica

    async def ended(self, agent: str, session: str) -> None: ...

    def tells(self, agent: str, session: str) -> bool: ...  # does this replica tell the session of changes?

    def heard(self, kind: str, digest: str) -> None: ...  # another replica's ``listening`` or ``session_ended``


class LocalSessions:
    """Sessions that live in their replica, each with its events in memory."""

    replica = ""

    def events(self, agent: str, session: str, after: str = "") -> EventStore:
        return MemoryEvents()

    async def reserve(self, agent: str, session: str) -> bool:
        return True  # the session manager counts this replica's own

    async def opened(self, agent: str, session: str, record: SessionRecord) -> None:
        return None

    async def find(self, agent: str, session: str) -> SessionRecord | None:
        return None

    async def touch(self, agent: str, session: str) -> None:
        return None

    async def save_state(self, agent: str, session: str, state: dict[str, Any]) -> None:
        return None

    async def listening(self, agent: str, session: str) -> None:
        return None

    async def ended(self, agent: str, session: str) -> None:
        return None

    def tells(self, agent: str, session: str) -> bool:
        return True

    def heard(self, kind: str, digest: str) -> None:
        return None


def owner_of(scope: Scope) -> str:
    """The principal a request comes from, as a session is bound to it: the OAuth client, issuer and subject the
    SDK compares (``""`` for the agent's static token, which is the agent itself)."""
    user = scope.get("user")
    if not isinstance(user, AuthenticatedUser):
        return ""
    return json.dumps(authorization_context(user), sort_keys=True)


def shared_state(connection: Connection) -> dict[str, Any]:
    """What a client set on its session that another replica must know to serve it alike."""
    state: dict[str, Any] = {"subscriptions": sorted(connection.state.get(SUBSCRIPTIONS, ()))}
    if connection.state.get(LOG_LEVEL) is not None:
        state["log_level"] = connection.state[LOG_LEVEL]
    return state


class SessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager for one agent, with sessions that resume and (with ``[cluster]``) move: the
    stateless and 2026-07-28 paths are the SDK's own; the stateful one is below. ``connected(connection)`` and
    ``disconnected(connection)`` are told of every session's connection on this replica (to tell it of
    changes)."""

    def __init__(self, *, agent: str, sessions: Sessions, connected: Callable[[Connection], None],
                 disconnected: Callable[[Connection], None], **options: Any) -> None:
        super().__init__(retry_interval=RETRY_MS, **options)
        self.agent = agent
        self.sessions = sessions
        self._connected = connected
        self._disconnected = disconnected
        self._owners: dict[str, str] = {}  # the principal each session here is bound to
        self._events: dict[str, Any] = {}  # each session's event store (some can be closed)
        self._connections: dict[str, Connection] = {}

    async def _handle_stateful_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.lower(): v for k, v in scope["headers"]}
        session = headers.get(MCP_SESSION_ID_HEADER.encode())
        owner = owner_of(scope)
        if session is None:
            await self._open(owner, scope, receive, send)
            return
        sid = session.decode("latin-1")
        transport = self._server_instances.get(sid)
        if transport is not None and self._owners.get(sid) != owner:
            transport = None  # another principal's: as if there were none
        elif transport is None and len(sid) <= 64:
            transport = await self._take_up(sid, owner)
        if transport is None:
            log.info("agent %r: a request for an unknown or expired session (or another principal's) was refused",
                     self.agent)
            await _not_found(scope, receive, send)
            return
        connection = self._connections.get(sid)
        if connection is not None and connection.initialize_accepted:
            _negotiated(scope, connection.protocol_version)
        listening = scope["method"] == "GET" and LAST_EVENT_ID_HEADER.encode() not in headers
        if listening:
            await self.sessions.listening(self.agent, sid)
        else:
            await self.sessions.touch(self.agent, sid)
        answer = _Answer(send, transport if listening else None)
        try:
            await transport.handle_request(scope, receive, answer.send)
        except Exception:
            if not transport.is_terminated:
                raise
        if transport.is_terminated and not answer.complete:
            # the session ended while this request was being served (a DELETE, here or on another replica)
            if answer.status is None:
                await _not_found(scope, receive, send)
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if transport.is_terminated and scope["method"] == "DELETE":  # the client ended it: everywhere
            await self._forget(sid, transport)
            await self.sessions.ended(self.agent, sid)

    # -- a new session ----------------------------------------------------------------------------------------

    async def _open(self, owner: str, scope: Scope, receive: Receive, send: Send) -> None:
        sid = uuid4().hex
        async with self._session_creation_lock:
            full = self.max_sessions is not None and len(self._server_instances) >= self.max_sessions
            if not full and not await self.sessions.reserve(self.agent, sid):
                full = True
            transport = None if full else self._transport(sid, owner)
        if transport is None:
            log.warning("agent %r: a new session was refused: the agent has as many open as it may", self.agent)
            await _error(503, "Too many open sessions", types.INTERNAL_ERROR)(scope, receive, send)
            return
        connections: list[Connection] = []
        recorded = False

        async def record_then_send(message: Message) -> None:
            """The session's record is written before its client hears that it is open: its next request may
            reach another replica at once."""
            nonlocal recorded
            connection = connections[0] if connections else None
            if not recorded and message["type"] == "http.response.body" and connection is not None and \
                    connection.client_params is not None:
                recorded = True
                params = connection.client_params.model_dump_json(by_alias=True, exclude_none=True)
                await self.sessions.opened(self.agent, sid, SessionRecord(
                    owner=owner, version=connection.protocol_version, params=params, home=self.sessions.replica))
            await send(message)

        established = False
        try:
            await self._tasks().start(self._run, sid, transport, None, connections)
            status = await _answered(transport.handle_request, scope, receive, record_then_send)
            established = recorded and status is not None and status < 400
        finally:
            if not established:
                await self._forget(sid, transport)
                await self.sessions.ended(self.agent, sid)

    # -- a session another replica opened -----------------------------------------------------------------------

    async def _take_up(self, sid: str, owner: str) -> StreamableHTTPServerTransport | None:
        record = await self.sessions.find(self.agent, sid)
        if record is None or record.owner != owner:
            return None
        try:
            params = types.InitializeRequestParams.model_validate_json(record.params)
        except ValidationError:
            log.warning("agent %r: a shared session's record is not well formed; refused", self.agent)
            return None
        async with self._session_creation_lock:
            if sid in self._server_instances:  # another request of it came first
                return self._server_instances[sid] if self._owners.get(sid) == owner else None
            transport = self._transport(sid, owner, record.newest_event)
            await self._tasks().start(self._run, sid, transport, (record, params), [])
        log.info("agent %r: took up a session another replica opened", self.agent)
        return transport

    # -- both ------------------------------------------------------------------------------------------------

    def _tasks(self) -> TaskGroup:
        tasks: TaskGroup | None = getattr(self, "_task_group", None)  # set while the manager runs
        if tasks is None:
            raise RuntimeError("the session manager is not running")
        return tasks

    def _transport(self, sid: str, owner: str, newest_event: str = "") -> StreamableHTTPServerTransport:
        events = self.sessions.events(self.agent, sid, newest_event)
        transport = StreamableHTTPServerTransport(
            mcp_session_id=sid, is_json_response_enabled=self.json_response, event_store=events,
            security_settings=self.security_settings, retry_interval=self.retry_interval,
            idle_timeout=self.session_idle_timeout)
        self._server_instances[sid] = transport
        self._owners[sid] = owner
        self._events[sid] = events
        return transport

    async def _run(self, sid: str, transport: StreamableHTTPServerTransport,
                   taken: tuple[SessionRecord, types.InitializeRequestParams] | None, connections: list[Connection],
                   *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve one session until it ends: new (its handshake to come), or ``taken`` up from its record."""
        async with transport.connect() as (read_stream, write_stream):
            dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read_stream, write_stream,
                                                                  inline_methods=frozenset({"initialize"}))
            connection = Connection.for_loop(dispatcher, session_id=sid)
            if taken is not None:
                record, params = taken
                connection.protocol_version = record.version
                connection.client_params = params
                connection.initialized.set()
                _apply(connection, record.state)
            connections.append(connection)
            self._connections[sid] = connection
            self._connected(connection)
            task_status.started()
            idle = transport.idle_scope or anyio.CancelScope()
            try:
                with idle:
                    await serve_connection(self.app, dispatcher, connection=connection,
                                           lifespan_state=self._lifespan_state)
            except Exception:
                log.exception("agent %r: a session failed", self.agent)
            finally:
                self._disconnected(connection)
                if self._connections.get(sid) is connection:
                    del self._connections[sid]
                await self._forget(sid, transport)

    async def _forget(self, sid: str, transport: StreamableHTTPServerTransport) -> None:
        """Stop serving a session here (its record stays, for the other replicas): its id answers 404 from now
        on, and its transport refuses what still reaches it."""
        if self._server_instances.get(sid) is transport:
            del self._server_instances[sid]
            self._owners.pop(sid, None)
            events = self._events.pop(sid, None)
            if isinstance(events, Closable):
                events.close()  # what is sent on it now is not kept (it would outlive the session)
        if not transport.is_terminated:
            with anyio.CancelScope(shield=True):
                await transport.terminate()

    async def refresh(self, sid: str) -> None:
        """Read again what the client set on its session (another replica changed it)."""
        connection = self._connections.get(sid)
        record = await self.sessions.find(self.agent, sid) if connection is not None else None
        if connection is not None and record is not None:
            _apply(connection, record.state)

    async def end(self, sid: str) -> None:
        """Another replica ended this session (its client sent DELETE there)."""
        transport = self._server_instances.get(sid)
        if transport is not None:
            await self._forget(sid, transport)


def _apply(connection: Connection, state: dict[str, Any]) -> None:
    """What a client set on its session (``shared_state``), on this replica's connection of it."""
    subscriptions = state.get("subscriptions", ())
    connection.state[SUBSCRIPTIONS] = {uri for uri in subscriptions if isinstance(uri, str)} \
        if isinstance(subscriptions, list) else set()
    level = state.get("log_level")
    if level in LOG_LEVELS:
        connection.state[LOG_LEVEL] = level
    else:
        connection.state.pop(LOG_LEVEL, None)


def _negotiated(scope: Scope, version: str) -> None:
    """Have a request on a session speak the version its handshake settled: a client that names another one in
    its ``MCP-Protocol-Version`` header (as the conformance suite's do) still gets what its session agreed on,
    priming events and resumable streams included."""
    header = b"mcp-protocol-version"
    if any(k == header and v != version.encode() for k, v in scope["headers"]):
        scope["headers"] = [(k, v) for k, v in scope["headers"] if k != header] + [(header, version.encode())]


class _Answer:
    """An ASGI ``send`` that notes how far the response got: its status (None: not started) and whether its body
    is complete. For a client's GET (``listening``: its session's transport), the stream's headers wait until the
    stream is there to hear what is sent once the client has them."""

    def __init__(self, send: Send, listening: Any = None) -> None:
        self._send = send
        self._listening = listening
        self.status: int | None = None
        self.complete = False

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            if self._listening is not None and message["status"] == 200 and \
                    not await listening_stream_made(self._listening):
                log.warning("a session's listening stream was not made within 5 s; what is sent before it is "
                            "reaches its client only if it comes back with an event id")
            self.status = message["status"]  # (once the headers go: what was sent, should the session end now)
        elif message["type"] == "http.response.body" and not message.get("more_body", False):
            self.complete = True
        await self._send(message)


async def _answered(app: Callable[[Scope, Receive, Send], Awaitable[None]], scope: Scope, receive: Receive,
                    send: Send) -> int | None:
    """Run ``app`` for one request; the HTTP status it answered with (None: it sent none)."""
    answer = _Answer(send)
    await app(scope, receive, answer.send)
    return answer.status


def _error(status: int, message: str, code: int = types.INVALID_REQUEST) -> Response:
    body = types.JSONRPCError(jsonrpc="2.0", id=None, error=types.ErrorData(code=code, message=message))
    return Response(body.model_dump_json(by_alias=True, exclude_unset=True), status_code=status,
                    media_type="application/json")


def _not_found(scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
    return _error(404, "Session not found")(scope, receive, send)


__all__ = ["LAST_EVENT_ID_HEADER", "LocalSessions", "MemoryEvents", "SessionManager", "SessionRecord", "Sessions"]
