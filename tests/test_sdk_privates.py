"""Each private part of the mcp SDK that toolcrib relies on (toolcrib/mcp/sdk.py says why) is where toolcrib reads
it, on the SDK's real objects: an SDK upgrade that moves one fails here, not in a user's server."""

from __future__ import annotations

from typing import Any

import anyio
from mcp import Client
from mcp.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from toolcrib.mcp.sdk import connection_of, open_sessions, server_info_stamp_source


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


def test_the_identity_stamp_and_the_session_count_are_where_toolcrib_reads_them() -> None:
    server = Server("probe", version="1.2")
    assert server_info_stamp_source(server) == server.server_info_stamp
    assert server_info_stamp_source(server)["name"] == "probe"
    assert open_sessions(StreamableHTTPSessionManager(app=server)) == 0
    assert isinstance(StreamableHTTPSessionManager(app=server)._server_instances, dict)
