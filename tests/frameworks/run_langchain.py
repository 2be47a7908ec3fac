"""langchain-mcp-adapters (0.3.2, on mcp 1.x) against toolcrib, no model: each transport's tools as LangChain tools,
their argument schemas as LangChain reads them, a call and an error result through them, a resource and a prompt.
Prints JSON."""

import asyncio
import json
import sys

from langchain_mcp_adapters.client import MultiServerMCPClient


def texts(blocks):
    return [block["text"] for block in blocks]  # (without the ids LangChain gives each block)


async def observe(client):
    tools = {tool.name: tool for tool in await client.get_tools()}
    error = await tools["kit__fail"].ainvoke({"type": "tool_call", "id": "call_1", "name": "kit__fail",
                                              "args": {"reason": "no"}})
    resources = await client.get_resources("toolcrib", uris="notes://today")
    prompt = await client.get_prompt("toolcrib", "kit__greet", arguments={"name": "Ada"})
    return {
        "tools": sorted(tools),
        "order": tools["kit__order"].args_schema,
        "call": texts(await tools["kit__plain"].ainvoke({"text": "hi", "count": 2})),
        "nested": texts(await tools["kit__order"].ainvoke({"color": "green", "address": {"street": "Main St"}})),
        "error": [error.status, texts(error.content)],
        "resource": resources[0].as_string(),
        "prompt": prompt[0].content,
    }


async def main(served):
    command, args, env, url, token = (served[k] for k in ("command", "args", "env", "url", "token"))
    # snippet
    stdio = MultiServerMCPClient({"toolcrib": {"transport": "stdio", "command": command, "args": args, "env": env}})
    http = MultiServerMCPClient({"toolcrib": {"transport": "streamable_http", "url": url,
                                              "headers": {"Authorization": f"Bearer {token}"}}})
    # end of snippet
    print(json.dumps({"stdio": await observe(stdio), "http": await observe(http)}, default=str))


asyncio.run(main(json.loads(sys.argv[1])))
