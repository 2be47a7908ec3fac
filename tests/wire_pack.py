"""The wire tests' pack: tools answering text, structured content, pictures, errors and garbled results, prompts, and
what a client asks of them. A helper module for the wire and exchange tests."""

from __future__ import annotations

from typing import Any

from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

import toolcrib


@toolcrib.tool(annotations={"readOnlyHint": True})
def text(word: str) -> str:
    """Say a word."""
    return word


@toolcrib.tool
def order(order_id: int) -> dict[str, Any]:
    """An order as structured content."""
    return {"id": order_id, "items": ["tea", "cake"], "note": "ünïcode"}


@toolcrib.tool
def total(a: int, b: int) -> int:
    """A number, so the output schema wraps it."""
    return a + b


@toolcrib.tool
def picture() -> list[Any]:
    """Text and an image."""
    return [toolcrib.Text("a dot"), toolcrib.Image(b"\x89PNG\r\n\x1a\n", "image/png"),
            toolcrib.ResourceLink("file:///x.txt", "x.txt", "text/plain")]


@toolcrib.tool
def missing(order_id: int) -> str:
    """Fail the way a handler tells the model something."""
    raise toolcrib.ToolError(f"order {order_id} not found")


@toolcrib.tool
def crash() -> str:
    """Fail unexpectedly."""
    raise RuntimeError("/secret/path exploded")


@toolcrib.tool
def garbled() -> str:
    """Its result is replaced by a hook with content the protocol cannot carry."""
    return "fine"


@toolcrib.tool
def hand_built() -> toolcrib.ToolResult:
    """Return a hand-built result whose content is not MCP content."""
    return toolcrib.ToolResult(content=({"type": "text", "txt": "typo"},))


@toolcrib.prompt(inline=True)
def greet(name: str, times: int = 1) -> str:
    """Greet someone."""
    return f"Say hello to {name}" + "!" * times


@toolcrib.prompt
def shown() -> list[toolcrib.Message]:
    """A picture, then a question."""
    return [toolcrib.Message("user", toolcrib.Image(b"\x89PNG\r\n\x1a\n", "image/png")),
            toolcrib.Message("assistant", "What is in it?")]


@toolcrib.prompt
def broken() -> str:
    """Fail."""
    raise RuntimeError("/secret/path exploded")


class Prompts:
    @toolcrib.hookimpl
    def toolcrib_prompts(self) -> list[Any]:
        return [greet, shown, broken]


class Garble:
    @toolcrib.hookimpl
    def toolcrib_post_tool_use(self, agent: str, tool: str, arguments: Any,
                               result: toolcrib.ToolResult) -> toolcrib.ToolResult | None:
        if tool == "w__garbled":
            return toolcrib.ToolResult(content=({"type": "image", "data": 7},))
        return None


REQUESTS: list[tuple[str, dict[str, Any] | None]] = [
    ("tools/list", None),
    ("tools/list", {"cursor": "x"}),
    ("tools/call", {"name": "w__text", "arguments": {"word": "hello"}}),
    ("tools/call", {"name": "w__order", "arguments": {"order_id": 7}}),
    ("tools/call", {"name": "w__total", "arguments": {"a": 2, "b": 3}}),
    ("tools/call", {"name": "w__picture"}),
    ("tools/call", {"name": "w__missing", "arguments": {"order_id": 9}}),
    ("tools/call", {"name": "w__crash", "arguments": {}}),
    ("tools/call", {"name": "w__text", "arguments": {"word": 5, "extra": True}}),
    ("tools/call", {"name": "w__nope", "arguments": {}}),
    ("tools/call", {"name": "w__garbled", "arguments": {}}),
    ("tools/call", {"name": "w__text", "arguments": [1, 2]}),
    ("tools/call", {"name": "w__hand_built"}),
    ("tools/call", {"name": 7, "arguments": {}}),
    ("tools/call", {"arguments": {}}),
    ("tools/call", {"name": "w__text", "arguments": {"word": "hi"}, "task": {"ttl": 5}}),
    ("prompts/get", {"name": "p__greet", "arguments": {"name": "Ada", "times": "3"}}),
    ("prompts/get", {"name": "p__greet", "arguments": {"name": "Ada"}}),
    ("prompts/get", {"name": "p__greet", "arguments": {"times": "x"}}),
    ("prompts/get", {"name": "p__greet", "arguments": {"name": 5}}),
    ("prompts/get", {"name": "p__shown"}),
    ("prompts/get", {"name": "p__broken", "arguments": {}}),
    ("prompts/get", {"name": "p__nope"}),
    ("prompts/get", {"name": "p__greet", "arguments": {"name": "Ada"}, "extra": 1}),
    ("prompts/get", {"arguments": {}}),
]


def _route(arguments: dict[str, Any]) -> str:
    return f"routed to {arguments['region']}"


routed = toolcrib.tool("route", "Route by region.", {
    "type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    "required": ["region"]}, _route)


META = {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_INFO_META_KEY: {"name": "t", "version": "1"},
        CLIENT_CAPABILITIES_META_KEY: {}}
