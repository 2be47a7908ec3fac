"""Each private part of the mcp SDK that toolcrib relies on (toolcrib/mcp/sdk.py says why) is where toolcrib reads
it, on the SDK's real objects: an SDK upgrade that moves one fails here, not in a user's server."""

from __future__ import annotations

from typing import Any

import anyio
from mcp import Client
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from toolcrib.mcp.sdk import connection_of, open_sessions


def test_a_requests_session_has_the_lasting_connection_with_its_state() -> None:
    seen: list[Any] = []

    async def list_tools(ctx: Any, params: Any) -> Any:
        seen.append(connection_of(ctx.session))
        return {"tools": []}

    server = Server("probe", on_list_tools=list_tools)

    async def main() -> None:
        async with Client(server, mode="legacy", cache=None) as client:
            await client.list_tools()
            await client.list_tools()

    anyio.run(main)
    first, second = seen
    assert first is second  # one connection behind the sessions of two requests
    assert isinstance(first.state, dict) and first.initialize_accepted is True
    assert hasattr(first, "session_id")


def test_the_session_count_is_where_toolcrib_reads_it() -> None:
    server = Server("probe", version="1.2")
    assert open_sessions(StreamableHTTPSessionManager(app=server)) == 0
    assert isinstance(StreamableHTTPSessionManager(app=server)._server_instances, dict)


def test_the_stateful_path_toolcrib_replaces_is_where_its_session_manager_takes_it_over() -> None:
    """``toolcrib.mcp.sessions.SessionManager`` replaces the manager's stateful path and uses what it kept there."""
    import inspect

    from toolcrib.mcp.sessions import SessionManager

    manager = StreamableHTTPSessionManager(app=Server("probe"))
    source = inspect.getsource(StreamableHTTPSessionManager._handle_request)
    assert "self._handle_stateful_request(scope, receive, send)" in source  # the path toolcrib overrides
    assert SessionManager._handle_stateful_request is not StreamableHTTPSessionManager._handle_stateful_request
    for name in ("_server_instances", "_session_creation_lock", "_task_group", "_lifespan_state"):
        assert hasattr(manager, name), name
    assert inspect.signature(StreamableHTTPSessionManager.__init__).parameters.keys() >= {
        "app", "event_store", "stateless", "security_settings", "retry_interval", "session_idle_timeout",
        "max_request_body_size", "max_sessions"}


def test_a_listening_stream_is_made_where_the_wait_for_its_headers_looks() -> None:
    """``toolcrib.mcp.sdk.listening_stream_made`` waits for the transport's listening stream under
    ``GET_STREAM_KEY`` in ``_request_streams``: the GET handler puts it there (else every GET would wait its 5 s)."""
    import inspect

    from mcp.server.streamable_http import GET_STREAM_KEY, StreamableHTTPServerTransport

    handler = inspect.getsource(StreamableHTTPServerTransport._handle_get_request)
    assert "self._request_streams[GET_STREAM_KEY] = anyio.create_memory_object_stream" in handler
    assert isinstance(GET_STREAM_KEY, str)


def test_a_request_is_sent_stamped_and_its_result_read_unchecked() -> None:
    """``send_unread``: a request goes out as the session sends any (stamped for its protocol era) and its result
    comes back as the server gave it (here a method the session has no result type for)."""
    from mcp_types import RequestParams

    from toolcrib.mcp.sdk import send_unread

    async def probe(ctx: Any, params: Any) -> Any:
        return {"task": {"taskId": "t1", "status": "working"}, "seen": ctx.protocol_version}

    server = Server("probe")
    server.add_request_handler("tasks/get", RequestParams, probe)

    async def main() -> list[dict[str, Any]]:
        found = []
        for mode in ("legacy", "auto"):
            async with Client(server, mode=mode, cache=None) as client:
                found.append(await send_unread(client.session, "tasks/get", {"taskId": "t1"}))
        return found

    legacy, modern = anyio.run(main)
    assert legacy["task"] == modern["task"] == {"taskId": "t1", "status": "working"}
    assert (legacy["seen"], modern["seen"]) == ("2025-11-25", "2026-07-28")
