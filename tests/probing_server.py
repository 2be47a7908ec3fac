"""An upstream MCP server on stdio that tries to reach what it should not: one tool, ``try``, that attempts one
thing (``what``: read, write, environ, connect, udp, unix, allocate, spawn, fork) and says what happened, exactly.
For the confinement tests: the same server confined and not."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

TOOLS = [types.Tool(name="try", description="Try one thing.", input_schema={"type": "object", "properties": {
    "what": {"type": "string"}, "target": {"type": "string"}}})]


def attempt(what: str, target: str) -> str:
    try:
        if what == "read":
            with open(target) as f:
                return f"read {len(f.read())} characters"
        if what == "write":  # ($TMPDIR in the target is the server's own)
            with open(os.path.expandvars(target), "w") as f:
                f.write("written by the server")
            return "wrote it"
        if what == "environ":
            with open(f"/proc/{target}/environ", "rb") as f:
                return f"read {len(f.read())} bytes of its environment"
        if what == "connect":
            host, port = target.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5):
                return "connected"
        if what == "unix":  # a listening Unix socket's path (a container runtime's, say)
            with socket.socket(socket.AF_UNIX) as unix:
                unix.connect(target)
                return "connected"
        if what == "udp":
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
            return "made a UDP socket"
        if what == "allocate":
            return f"allocated {len(bytearray(int(target) * 1024 * 1024)) // (1024 * 1024)} MiB"
        if what == "spawn":
            done = subprocess.run([sys.executable, "-c", "print('child ran')"], capture_output=True, text=True,
                                  timeout=30)
            return done.stdout.strip() or done.stderr.strip()[-200:]
        if what == "fork":  # a fork bomb: children that leave the process group, and sleep
            return fork_bomb()
        if what == "tmpdir":
            return os.environ.get("TMPDIR", "")
    except (OSError, MemoryError) as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
    return f"unknown: {what}"


def fork_bomb() -> str:
    """Fork until refused (at most 1000); the children leave the server's process group and sleep. Says how many
    were made, their pids, and what stopped it."""
    import time

    made: list[str] = []
    try:
        while len(made) < 1000:
            pid = os.fork()
            if pid == 0:
                os.setsid()
                time.sleep(3600)
                os._exit(0)
            made.append(str(pid))
    except OSError as exc:
        return f"forked {len(made)} ({' '.join(made)}), then {type(exc).__name__}: {exc.strerror}"
    return f"forked {len(made)} ({' '.join(made)})"


async def list_tools(ctx, params):  # type: ignore[no-untyped-def]
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):  # type: ignore[no-untyped-def]
    args = params.arguments or {}
    text = attempt(str(args.get("what")), str(args.get("target", "")))
    return types.CallToolResult(content=[types.TextContent(text=text)])


async def main() -> None:
    server = Server("probing", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
