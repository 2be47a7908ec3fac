"""FastMCP's client (4.2) against toolcrib: each transport's tools, a call and an error result, a resource and a
prompt. Prints JSON."""

import asyncio
import json
import sys

from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from fastmcp.exceptions import ToolError


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


async def main(served):
    command, args, env, url, token = (served[k] for k in ("command", "args", "env", "url", "token"))
    # snippet
    stdio = Client(StdioTransport(command, args, env=env))
    http = Client(StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"}))
    # end of snippet
    print(json.dumps({"stdio": await observe(stdio), "http": await observe(http)}, default=str))


asyncio.run(main(json.loads(sys.argv[1])))
