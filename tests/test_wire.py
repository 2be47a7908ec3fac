"""The adapter's fast paths (tools/list, plain tools/call and prompts/get answered without the SDK's generic
shaping) put on the wire exactly what the SDK's own path puts there, byte for byte after JSON parsing, in both
protocol eras.

Each request goes as a JSON-RPC message into two real servers built for the same agent: one as served, one with
toolcrib's middleware removed, so every request takes the SDK's path. Their replies must be equal.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

import toolcrib
from conftest import make_host
from packs import Pack
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState
from wire_pack import (
    REQUESTS,
    Garble,
    Prompts,
    crash,
    garbled,
    hand_built,
    missing,
    order,
    picture,
    text,
    total,
)

CONFIG = """
[agents.a]
[agents.a.permissions]
plugins = { allow = ["w", "garble", "p"] }
tools = { deny = ["w__total_hidden"] }
prompts = { allow = ["*"] }
"""



def _servers() -> tuple[Any, Any]:
    state = ServingState(make_host(CONFIG, {"w": Pack(text, order, total, picture, missing, crash, garbled, hand_built),
                                            "garble": Garble(), "p": Prompts()}))
    fast = build_server(state, "a")
    plain = build_server(state, "a")
    plain.middleware.clear()
    return fast, plain


def _request(request_id: int, method: str, params: dict[str, Any] | None, modern: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    params = dict(params) if params is not None else ({} if modern else None)
    if modern:
        assert params is not None
        params["_meta"] = {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_INFO_META_KEY: {"name": "t", "version": "1"},
                           CLIENT_CAPABILITIES_META_KEY: {}}
    if params is not None:
        message["params"] = params
    return message


async def _replies(server: Any, modern: bool) -> list[dict[str, Any]]:
    to_server, server_in = anyio.create_memory_object_stream[SessionMessage | Exception](16)
    server_out, from_server = anyio.create_memory_object_stream[SessionMessage](16)
    messages: list[dict[str, Any]] = []
    if not modern:
        messages += [{"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
                     {"jsonrpc": "2.0", "method": "notifications/initialized"}]
    messages += [_request(i + 1, method, params, modern) for i, (method, params) in enumerate(REQUESTS)]
    replies = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.run, server_in, server_out, server.create_initialization_options())
        for message in messages:
            await to_server.send(SessionMessage(types.jsonrpc_message_adapter.validate_python(message)))
            if "id" in message:
                reply = await from_server.receive()
                replies.append(json.loads(reply.message.model_dump_json(by_alias=True, exclude_unset=True)))
        await to_server.aclose()
        tg.cancel_scope.cancel()
    return replies


@pytest.mark.parametrize("modern", [True, False], ids=["2026-07-28", "2025-11-25"])
def test_fast_paths_answer_exactly_like_the_sdk(modern: bool) -> None:
    fast, plain = _servers()

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return await _replies(fast, modern), await _replies(plain, modern)

    fast_replies, plain_replies = anyio.run(main)
    assert len(fast_replies) == len(REQUESTS) + (0 if modern else 1)
    for got, expected in zip(fast_replies, plain_replies, strict=True):
        assert got == expected
    by_id = {r["id"]: r for r in fast_replies}
    # a few anchors, so equality cannot hold by both sides being broken the same way
    assert by_id[3]["result"]["content"] == [{"type": "text", "text": "hello"}]
    assert by_id[4]["result"]["structuredContent"] == {"id": 7, "items": ["tea", "cake"], "note": "ünïcode"}
    assert by_id[6]["result"]["content"][1] == {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    assert by_id[7]["result"] == {"content": [{"type": "text", "text": "order 9 not found"}], "isError": True,
                                  **({"resultType": "complete", "_meta": by_id[7]["result"]["_meta"]} if modern
                                     else {})}
    assert by_id[10]["error"] == {"code": -32602, "message": "Unknown tool: w__nope"}
    assert by_id[11]["result"]["content"] == [
        {"type": "text", "text": "The result of w__garbled was withheld: a post-processing check failed."}]
    assert by_id[13]["result"]["content"] == [
        {"type": "text", "text": "Tool w__hand_built returned a result that cannot be sent (it does not match its "
                                 "declared output, or is not JSON); the host's log has the details."}]
    assert by_id[17]["result"]["messages"] == [{"role": "user", "content": {"type": "text",
                                                                             "text": "Say hello to Ada!!!"}}]
    assert by_id[17]["result"]["description"] == "Greet someone."
    assert by_id[19]["error"] == {"code": -32602, "message": "Invalid arguments for p__greet:\n- name: required "
                                  "argument is missing\n- times: Input should be a valid integer, unable to parse "
                                  "string as an integer (got 'x')"}
    assert by_id[21]["result"]["messages"][0]["content"] == {"type": "image", "data": "iVBORw0KGgo=",
                                                            "mimeType": "image/png"}
    assert by_id[22]["error"] == {"code": -32603, "message": "Prompt p__broken failed with an internal error; the "
                                                             "host's log has the details."}


def test_the_identity_stamp_is_the_sdks_and_owned_by_the_caller() -> None:
    from mcp.server import Server

    from toolcrib.mcp.adapter import _Server

    server, _ = _servers()
    stamp = server.server_info_stamp
    assert stamp == Server.server_info_stamp.fget(server) == {"name": "toolcrib", "version": toolcrib.__version__}
    stamp["name"] = "changed"
    assert server.server_info_stamp["name"] == "toolcrib"
    handlers = server.middleware[-1].__self__  # fast_paths: what stamps each result
    stamp = handlers.stamp
    assert stamp == {"name": "toolcrib", "version": toolcrib.__version__} and handlers.identity is not None
    stamp["name"] = "changed"
    assert handlers.stamp["name"] == "toolcrib"
    iconic = _Server("iconic", version="1", icons=[types.Icon(src="https://example.com/i.png")])
    stamp = iconic.server_info_stamp  # nested values: the SDK's deep copy
    stamp["icons"][0]["src"] = "changed"
    assert iconic.server_info_stamp["icons"] == [{"src": "https://example.com/i.png"}]
