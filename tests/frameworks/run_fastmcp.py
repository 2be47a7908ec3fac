"""FastMCP (4.2) against toolcrib: its client over each transport (tools, a call and an error result, a resource and
a prompt), and a FastMCP server that proxies toolcrib, mounted under a namespace in another (what a client of that
one sees and calls). Prints JSON."""

import asyncio
import json
import sys

from fastmcp import Client, FastMCP
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from fastmcp.exceptions import ToolError
from fastmcp.server import create_proxy


async def observe(client):
    async with client:
        tools = {tool.name: tool for tool in await client.list_tools()}
        call = await client.call_tool("kit__plain", {"text": "hi", "count": 2})
        nested = await client.call_tool("kit__order", {"color": "green", "address": {"street": "Main St"}})
        try:
            await client.call_tool("kit__fail", {"reason": "no"})
            error = "no error"
        except ToolError as exc:
            error = f"ToolError: {exc}"
        resource = await client.read_resource("notes://today")
        prompt = await client.get_prompt("kit__greet", {"name": "Ada"})
        return {
            "tools": sorted(tools),
            "order": tools["kit__order"].inputSchema,
            "call": call.content[0].text,
            "nested": nested.content[0].text,
            "error": error,
            "resource": resource[0].text,
            "prompt": prompt.messages[0].content.text,
        }


async def mounted(client):
    """A FastMCP app with toolcrib's agent proxied and mounted as "tc": what its own client sees and gets."""
    app = FastMCP("front")
    app.mount(create_proxy(client), namespace="tc")
    async with Client(app) as front:
        tools = sorted(tool.name for tool in await front.list_tools())
        call = await front.call_tool("tc_kit__plain", {"text": "hi", "count": 2})
        return {"tools": tools, "call": call.content[0].text}


async def main(served):
    command, args, env, url, token = (served[k] for k in ("command", "args", "env", "url", "token"))
    # snippet
    stdio = Client(StdioTransport(command, args, env=env))
    http = Client(StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"}))
    # end of snippet
    seen = {"stdio": await observe(stdio), "http": await observe(http)}
    proxied = Client(StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"}))
    seen["stdio"]["mounted"] = seen["http"]["mounted"] = await mounted(proxied)
    print(json.dumps(seen, default=str))


asyncio.run(main(json.loads(sys.argv[1])))
