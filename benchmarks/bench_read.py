"""A realistic call: reading a 10 KB text file in the workspace. toolcrib serves the fs pack's ``fs__read_file``
(confined to the workspace, binary sniffing, line selection); the SDK's low-level server (no middleware) serves a
hand-written ``read_file`` that resolves the path, checks it stays in the workspace and reads it inline in its async
handler. In memory (the SDK's client on the same loop) and over stdio (each server a process of its own), medians
of rounds in which the two take turns of 20 calls, ratio toolcrib / low-level.

    .venv/bin/python benchmarks/bench_read.py [--calls N] [--rounds N] [--no-stdio]
    python benchmarks/bench_read.py serve {toolcrib,lowlevel} WORKSPACE     # a stdio server (used by the above)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from turns import medians_in_turns

TEXT = "".join(f"line {i:04d}: the quick brown fox jumps over the lazy dog, again and again\n" for i in range(142))
CONFIG = """
[host]
workspace = "{workspace}"

[agents.bench.permissions]
plugins = {{ allow = ["fs"] }}
tools = {{ allow = ["*"] }}
"""


def toolcrib_state(workspace: Path) -> Any:
    import toolcrib_fs

    from toolcrib import Host
    from toolcrib.config import parse_config
    from toolcrib.mcp.state import ServingState

    config = parse_config(CONFIG.format(workspace=workspace), "bench", workspace)
    return ServingState(Host(config, plugins={"fs": toolcrib_fs}, autoload=False, env={}))


def toolcrib_server(workspace: Path) -> Any:
    from toolcrib.mcp.adapter import build_server

    return build_server(toolcrib_state(workspace), "bench")


def lowlevel_server(workspace: Path) -> Any:
    from mcp.server import Server
    from mcp.types import CallToolResult, ListToolsResult, TextContent, Tool

    root = os.path.realpath(workspace)
    tools = [Tool(name="read_file", description="Read a text file in the workspace.",
                  input_schema={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})]

    async def on_list_tools(ctx: Any, params: Any) -> ListToolsResult:
        return ListToolsResult(tools=tools)

    async def on_call_tool(ctx: Any, params: Any) -> CallToolResult:
        path = (params.arguments or {}).get("path")
        if params.name != "read_file" or not isinstance(path, str):
            return CallToolResult(content=[TextContent(text="bad call")], is_error=True)
        full = os.path.realpath(os.path.join(root, path))
        if not full.startswith(root + os.sep):  # a hand-written minimal confinement
            return CallToolResult(content=[TextContent(text="outside the workspace")], is_error=True)
        with open(full, "rb") as f:
            return CallToolResult(content=[TextContent(text=f.read().decode("utf-8", errors="replace"))])

    server = Server("lowlevel", version="0", on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    server.middleware.clear()
    return server


BUILDERS = {"toolcrib": toolcrib_server, "lowlevel": lowlevel_server}
TOOL = {"toolcrib": "fs__read_file", "lowlevel": "read_file"}


def call_of(client: Any, peer: str) -> Any:
    return lambda: client.call_tool(TOOL[peer], {"path": "notes.txt"})


def _checked(peer: str, result: Any) -> None:
    assert result.content[0].text == TEXT, (peer, result)


async def measure(clients: dict[str, Any], calls: int, rounds: int) -> dict[str, list[float]]:
    """Each side's median call in every round, the sides taking turns of 20 calls (``turns.medians_in_turns``:
    what the machine does meanwhile falls on both alike), each round starting with the other side."""
    import gc

    ops = {peer: call_of(client, peer) for peer, client in clients.items()}
    for peer, op in ops.items():
        for _ in range(20):
            _checked(peer, await op())  # warm
    gc.collect()
    gc.freeze()  # what is alive now is no collection's work (as run.py does): each side's times are its own
    found: dict[str, list[float]] = {peer: [] for peer in clients}
    names = list(clients)
    for turn in range(rounds):
        order = names[turn % len(names):] + names[:turn % len(names)]
        for peer, median in (await medians_in_turns(ops, order, calls, _checked)).items():
            found[peer].append(median)
    return found


def report(label: str, found: dict[str, list[float]]) -> None:
    ours, theirs = statistics.median(found["toolcrib"]), statistics.median(found["lowlevel"])
    ratios = [a / b for a, b in zip(found["toolcrib"], found["lowlevel"], strict=True)]
    print(f"| {label} | {ours * 1e6:.1f} us | {theirs * 1e6:.1f} us | {ours / theirs:.2f}x (rounds "
          f"{min(ratios):.2f}-{max(ratios):.2f}x) |")


@contextlib.asynccontextmanager
async def memory_clients(workspace: Path) -> AsyncIterator[dict[str, Any]]:
    async with contextlib.AsyncExitStack() as stack:
        yield {peer: await stack.enter_async_context(Client(build(workspace), cache=None))
               for peer, build in BUILDERS.items()}


@contextlib.asynccontextmanager
async def stdio_clients(workspace: Path) -> AsyncIterator[dict[str, Any]]:
    from mcp.client.stdio import stdio_client

    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for peer in BUILDERS:
            params = StdioServerParameters(command=sys.executable, args=[__file__, "serve", peer, str(workspace)],
                                           env={**os.environ, "TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1"})
            clients[peer] = await stack.enter_async_context(Client(stdio_client(params), cache=None))
        yield clients


async def in_memory(workspace: Path, calls: int, rounds: int) -> None:
    async with memory_clients(workspace) as clients:
        report("fs__read_file, 10 KB, in memory", await measure(clients, calls, rounds))


async def stdio(workspace: Path, calls: int, rounds: int) -> None:
    async with stdio_clients(workspace) as clients:
        report("fs__read_file, 10 KB, stdio", await measure(clients, calls, rounds))


def serve(peer: str, workspace: Path) -> None:
    if peer == "toolcrib":
        from toolcrib.mcp.stdio import serve_stdio

        anyio.run(serve_stdio, toolcrib_state(workspace), "bench")
        return
    from mcp.server import NotificationOptions
    from mcp.server.stdio import stdio_server

    server = lowlevel_server(workspace)

    async def run() -> None:
        async with stdio_server() as (r, w):
            await server.run(r, w, server.create_initialization_options(NotificationOptions()))

    anyio.run(run)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        serve(sys.argv[2], Path(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-stdio", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder).resolve()
        (workspace / "notes.txt").write_text(TEXT)
        assert 10_000 < len(TEXT.encode()) < 11_000
        print(f"load before: {os.getloadavg()[0]:.2f}")
        print("| measure | toolcrib | SDK low-level, no middleware | ratio |")
        print("|---|---|---|---|")
        anyio.run(in_memory, workspace, args.calls, args.rounds)
        if not args.no_stdio:
            anyio.run(stdio, workspace, args.calls, args.rounds)
        print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
