"""The same tools on every side: ``add(a, b) -> {"result": a + b}`` plus filler tools up to N; and the same
resources (N text resources ``bench://doc/<i>``) and prompts (``greet(name)`` plus fillers up to 10).

toolcrib serves them from a pack; the SDK's low-level server from hand-written handlers, once without middleware
("lowlevel") and once with the SDK's default OpenTelemetry middleware as a user gets it ("lowlevel-otel"); the SDK's
bundled high-level server (MCPServer) and FastMCP from decorated functions, FastMCP once with its defaults
("fastmcp") and once without its default schema-dereferencing middleware ("fastmcp-bare"). Every side declares
the same output schema, so every client does the same validation.

toolcrib's side (its pack, host and server) lives in bench_pack.py, imported only by toolcrib's builders: a peer's
process never imports toolcrib, so that its start is its own.

Also a small CLI, so the wire and cold benchmarks can start each peer as a process of its own:

    python benchmarks/peers.py PEER {stdio,http} N [PORT]
    python benchmarks/peers.py PEER cold N        # prints {"build", "first", "warm": seconds} as JSON
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from typing_extensions import TypedDict

os.environ.setdefault("FASTMCP_LOG_LEVEL", "ERROR")
os.environ.setdefault("FASTMCP_SHOW_SERVER_BANNER", "false")
warnings.simplefilter("ignore")


IN_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
             "required": ["a", "b"], "additionalProperties": False}
OUT_SCHEMA = {"type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"]}
AGENT = "bench"


class Sum(TypedDict):
    result: int


def names(n: int) -> list[str]:
    return ["add", *(f"tool_{i:04d}" for i in range(n - 1))]


def _add_tool(name: str, sync: bool = False, sleep: float = 0.0) -> Any:
    if sleep and sync:
        import time

        def fn(a: int, b: int) -> Sum:
            time.sleep(sleep)
            return {"result": a + b}
    elif sleep:
        import anyio

        async def fn(a: int, b: int) -> Sum:  # type: ignore[misc]
            await anyio.sleep(sleep)
            return {"result": a + b}
    elif sync:
        def fn(a: int, b: int) -> Sum:  # type: ignore[misc]
            return {"result": a + b}
    else:
        async def fn(a: int, b: int) -> Sum:  # type: ignore[misc]
            return {"result": a + b}
    fn.__name__ = name
    fn.__doc__ = "Add two integers." if name == "add" else f"Filler tool {name}: adds two integers."
    return fn


PROMPTS = ["greet", *(f"prompt_{i:02d}" for i in range(9))]


def _doc(i: int) -> Any:
    def fn() -> str:
        return f"Document {i}."

    fn.__name__ = f"doc_{i:04d}"
    fn.__doc__ = f"Document number {i}."
    return fn


def _prompt(name: str) -> Any:
    def fn(name: str) -> str:
        return f"Say hello to {name}."

    fn.__name__ = name
    fn.__doc__ = "Greet someone." if name == "greet" else f"Filler prompt {name}."
    return fn


CONFIG = f"""
[agents.{AGENT}]
[agents.{AGENT}.permissions]
plugins = {{ allow = ["*"] }}
tools = {{ allow = ["*"] }}
resources = {{ allow = ["*"] }}
prompts = {{ allow = ["*"] }}
"""


def toolcrib_host(n: int, extra: list[Any] | None = None, config: str = "", **options: Any) -> Any:
    """The bench pack's host; ``config`` is TOML put before the agent's (``[host]`` keys, hooks)."""
    from bench_pack import toolcrib_host as host

    return host(n, extra, config, **options)


def toolcrib_server(n: int, config: str = "", **options: Any) -> Any:
    """The bench pack's server, built as `toolcrib serve` builds it: the host with the served agent's lists."""
    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState, build_lists

    host = toolcrib_host(n, config=config, **options)
    build_lists(host, [AGENT])
    return build_server(ServingState(host), AGENT)


def lowlevel_otel_server(n: int) -> Any:
    """The low-level server as the SDK gives it (its OpenTelemetry middleware on)."""
    from mcp.server import Server
    from mcp.types import (
        CallToolResult,
        GetPromptResult,
        ListPromptsResult,
        ListResourcesResult,
        ListToolsResult,
        Prompt,
        PromptArgument,
        PromptMessage,
        Resource,
        TextContent,
        Tool,
    )

    tools = [Tool(name=name, description=("Add two integers." if name == "add" else f"Filler tool {name}."),
                  input_schema=IN_SCHEMA, output_schema=OUT_SCHEMA) for name in names(n)]
    known = {t.name for t in tools}

    async def on_list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: Any) -> CallToolResult:
        if params.name not in known:
            return CallToolResult(content=[TextContent(text=f"unknown tool {params.name}")], is_error=True)
        args = params.arguments or {}
        a, b = args.get("a"), args.get("b")
        if type(a) is not int or type(b) is not int:  # a hand-written minimal check
            return CallToolResult(content=[TextContent(text="a and b must be integers")], is_error=True)
        return CallToolResult(content=[TextContent(text=str(a + b))], structured_content={"result": a + b})

    resources = [Resource(name=f"doc_{i:04d}", uri=f"bench://doc/{i}", description=f"Document number {i}.",
                          mime_type="text/plain") for i in range(n)]
    prompts = [Prompt(name=name, description="Greet someone.", arguments=[PromptArgument(name="name", required=True)])
               for name in PROMPTS]

    async def on_list_resources(ctx: Any, params: Any) -> ListResourcesResult:
        return ListResourcesResult(resources=resources)

    async def on_list_prompts(ctx: Any, params: Any) -> ListPromptsResult:
        return ListPromptsResult(prompts=prompts)

    async def on_get_prompt(ctx: Any, params: Any) -> GetPromptResult:
        name = (params.arguments or {}).get("name")
        if params.name not in PROMPTS or not isinstance(name, str):  # a hand-written minimal check
            raise ValueError("unknown prompt or missing name")
        return GetPromptResult(description="Greet someone.", messages=[
            PromptMessage(role="user", content=TextContent(text=f"Say hello to {name}."))])

    schemas = {t.name: t.input_schema for t in tools}

    # As MCPServer and FastMCP set it (the SDK's docs recommend it): the 2026-07-28 HTTP entry checks Mcp-Param-*
    # headers against the called tool's schema, and without it lists every tool to find that schema on each call.
    return Server("lowlevel", version="0", get_tool_input_schema=schemas.get, on_list_tools=on_list_tools,
                  on_call_tool=on_call_tool, on_list_resources=on_list_resources, on_list_prompts=on_list_prompts,
                  on_get_prompt=on_get_prompt)


def lowlevel_server(n: int) -> Any:
    server = lowlevel_otel_server(n)
    server.middleware.clear()  # the SDK's default OpenTelemetry middleware ("lowlevel-otel" keeps it)
    return server


def mcpserver_server(n: int) -> Any:
    from mcp.server import MCPServer

    server = MCPServer("mcpserver", log_level="ERROR", warn_on_duplicate_tools=False)
    for name in names(n):
        server.add_tool(_add_tool(name), name=name)
    for i in range(n):
        server.resource(f"bench://doc/{i}", name=f"doc_{i:04d}", mime_type="text/plain")(_doc(i))
    for name in PROMPTS:
        server.prompt(name)(_prompt(name))
    return server


def fastmcp_server(n: int, defaults: bool = True) -> Any:
    from fastmcp import FastMCP
    from fastmcp.tools import Tool as FTool

    server = FastMCP("fastmcp", dereference_schemas=defaults)
    for name in names(n):
        server.add_tool(FTool.from_function(_add_tool(name), name=name))
    for i in range(n):
        server.resource(f"bench://doc/{i}", name=f"doc_{i:04d}", mime_type="text/plain")(_doc(i))
    for name in PROMPTS:
        server.prompt(name=name)(_prompt(name))
    return server


def fastmcp_bare_server(n: int) -> Any:
    return fastmcp_server(n, defaults=False)


def fastmcp_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("fastmcp") is not None


def lowlevel_of(peer: str, server: Any) -> Any:
    """What to hand mcp.Client: FastMCP wraps an SDK server."""
    return server._mcp_server if peer.startswith("fastmcp") else server


BUILDERS = {"toolcrib": toolcrib_server, "lowlevel": lowlevel_server, "lowlevel-otel": lowlevel_otel_server,
            "mcpserver": mcpserver_server, "fastmcp": fastmcp_server, "fastmcp-bare": fastmcp_bare_server}


def cold(peer: str, n: int) -> dict[str, float]:
    """In a fresh process (the SDK imported): building the server with n tools (and n resources), its first
    tools/list and a warm one. (The server's memory is measured apart, in a process that serves over stdio: this one
    also holds its client's parsed answers.)"""
    import time

    import anyio
    from mcp import Client

    if peer == "toolcrib":  # its modules imported before the clock, as the SDK's are for every peer
        import importlib

        for module in ("bench_pack", "toolcrib.mcp.adapter", "toolcrib.mcp.state"):
            importlib.import_module(module)
        _serving_process()

    async def lists() -> dict[str, float]:
        start = time.perf_counter()
        server = lowlevel_of(peer, BUILDERS[peer](n))
        build = time.perf_counter() - start
        async with Client(server, cache=None) as client:
            start = time.perf_counter()
            await client.list_tools()
            first = time.perf_counter() - start
            start = time.perf_counter()
            await client.list_tools()
            warm = time.perf_counter() - start
        return {"build": build, "first": first, "warm": warm}

    return anyio.run(lists)


def _serving_process() -> None:
    """A process that serves toolcrib until it exits, as `toolcrib serve` does it: what the builds leave alive is
    frozen out of the garbage collector's scans (``toolcrib.view.freeze_builds``)."""
    from toolcrib.view import freeze_builds

    freeze_builds()


def main() -> None:
    import anyio

    peer, transport, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    port = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if transport == "cold":
        import json

        print(json.dumps(cold(peer, n)))
        return
    if peer == "toolcrib":
        _serving_process()
    server = BUILDERS[peer](n)
    if peer in ("mcpserver", "fastmcp", "fastmcp-bare"):
        if transport == "stdio":
            server.run("stdio") if peer == "mcpserver" else server.run(transport="stdio", show_banner=False)
        else:
            import uvicorn

            app = server.streamable_http_app() if peer == "mcpserver" else server.http_app(path="/mcp")
            uvicorn.run(bearer_checked(app), host="127.0.0.1", port=port, log_level="error")
        return
    if transport == "stdio":
        from mcp.server import NotificationOptions
        from mcp.server.stdio import stdio_server

        async def run() -> None:
            async with stdio_server() as (r, w):
                await server.run(r, w, server.create_initialization_options(NotificationOptions()))

        anyio.run(run)
        return
    import uvicorn

    uvicorn.run(bearer_checked(server.streamable_http_app(streamable_http_path="/mcp")), host="127.0.0.1", port=port,
                log_level="error", lifespan="on")


def bearer_checked(app: Any) -> Any:
    """``app`` behind the check toolcrib makes of every request (``Authorization: Bearer $BENCH_TOKEN``, compared
    in constant time; 401 otherwise), so that both sides of an HTTP row check a token."""
    import hmac

    expected = f"Bearer {os.environ['BENCH_TOKEN']}".encode() if os.environ.get("BENCH_TOKEN") else None

    async def checked(scope: Any, receive: Any, send: Any) -> None:
        if expected is not None and scope["type"] == "http":
            given = next((v for k, v in scope["headers"] if k == b"authorization"), b"")
            if not hmac.compare_digest(given, expected):
                await send({"type": "http.response.start", "status": 401, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
        await app(scope, receive, send)

    return checked


if __name__ == "__main__":
    main()
