"""The few private parts of the mcp SDK toolcrib relies on, each named once here with why; everything else it uses
is the SDK's public surface. tests/test_sdk_privates.py fails when an SDK upgrade moves one of them, so the pin in
pyproject.toml (``mcp>=2.3,<2.4``) is raised knowingly.

- ``ServerSession._connection``: a handler gets a ``ServerSession`` made for its request, and only the connection
  behind it lasts. toolcrib keeps per-connection state there (subscriptions, the log level a client set, what a
  conversation has been given) and tells connections apart by it. The SDK's ``mcp.server.context.Context`` has a
  public ``connection``, but the low-level ``ServerRunner`` hands handlers a ``ServerRequestContext`` without one.
- ``StreamableHTTPSessionManager._server_instances``: the open sessions, counted for ``toolcrib_http_sessions``;
  the manager offers no count.
- ``StreamableHTTPSessionManager._handle_stateful_request`` and what it uses (``_server_instances``,
  ``_session_creation_lock``, ``_task_group``, ``_lifespan_state``): ``toolcrib.mcp.sessions.SessionManager``
  replaces the stateful path to give each session its own event store and to take up sessions another replica
  opened; the manager has no seam for either (its one ``event_store`` is shared by every session, whose stream
  ids are their own request ids, and a session lives only where it was made). ``_lifespan_state`` is also what
  ``toolcrib.mcp.exchange`` hands the SDK's ``ServerRunner`` when it answers a 2026-07-28 request itself, as the
  manager's own entry does.
- ``StreamableHTTPServerTransport._request_streams``: ``toolcrib.mcp.sessions`` reads it to hold a listening
  stream's headers until the stream is made (``listening_stream_made``): the transport offers no way to know.
- ``ClientSession._stamp`` and ``ClientSession._dispatcher.send_raw_request``: a 2025-11-25 server's tool that runs
  only as a task (SEP-1686; server-everything's ``simulate-research-query``) answers ``tools/call`` with a task,
  which the session's check of a ``tools/call`` result refuses (``send_unread``); the client has no task support
  of that revision, and no way to send a request whose result it does not check.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.lowlevel
from mcp.server.streamable_http import GET_STREAM_KEY


def connection_of(session: Any) -> Any:
    """The connection behind a request's session (it lasts while the client stays connected), or None (``Any``:
    the SDK's ``Connection``, which toolcrib reads ``state``, ``session_id`` and ``initialize_accepted`` of)."""
    return getattr(session, "_connection", None)


def open_sessions(manager: Any) -> int:
    """How many sessions a ``StreamableHTTPSessionManager`` holds open (zero when it is stateless)."""
    return len(getattr(manager, "_server_instances", {}))


def open_session_ids(manager: Any) -> list[str]:
    """The ids of the sessions a ``StreamableHTTPSessionManager`` holds open."""
    return list(getattr(manager, "_server_instances", {}))


def lifespan_state_of(manager: Any) -> Any:
    """What a running ``StreamableHTTPSessionManager``'s server lifespan yielded (its handlers' lifespan context)."""
    return getattr(manager, "_lifespan_state", None)


async def listening_stream_made(transport: Any, longest: float = 5.0) -> bool:
    """Wait until a session's transport has made its listening stream (the one a client's GET opens, where the
    session's notifications go), for up to ``longest`` seconds: whether it is there. The SDK makes it in a task
    it starts beside the one that sends the stream's headers, and drops a notification that comes before it (it
    only stores it, for a client coming back with an event id it never got); a client that has the headers may
    at once do what makes one."""
    streams = transport._request_streams
    turns = 0
    deadline = time.monotonic() + longest
    while GET_STREAM_KEY not in streams:
        if time.monotonic() > deadline:
            return False
        turns += 1
        if turns <= 10:
            await anyio.lowlevel.checkpoint()  # it is made at its task's first turn: most often after one of these
        else:
            await anyio.sleep(0.001)  # held back (a loaded machine): looked for without holding a CPU
    return True


async def send_unread(session: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """Send a request as a ``ClientSession`` sends any (its stamp: the protocol version header, and on 2026-07-28
    the envelope) and return its result as the server gave it, unchecked."""
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    result: dict[str, Any] = await session._dispatcher.send_raw_request(method, data.get("params"), opts)
    return result
