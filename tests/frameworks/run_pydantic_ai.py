"""pydantic-ai (2.68, MCPToolset) against toolcrib: each transport's tools through an Agent, run by pydantic-ai's own
TestModel (a model cannot run here: TestModel stands in for one, calling the tool named with arguments it makes
from the tool's schema), the tool definitions the model was given, a call and an error result, a resource and a
prompt. Prints JSON."""

import asyncio
import json
import sys

from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.models.test import TestModel


async def observe(toolset):
    async with toolset:
        model = TestModel(call_tools=["kit__plain"])
        run = await Agent(model, toolsets=[toolset]).run("Repeat a text.")
        given = {tool.name: tool for tool in model.last_model_request_parameters.function_tools}
        try:
            error = await toolset.direct_call_tool("kit__fail", {"reason": "no"})
        except Exception as exc:  # how an error result reaches the agent
            error = f"{type(exc).__name__}: {exc}"
        prompt = await toolset.get_prompt("kit__greet", {"name": "Ada"})
        return {
            "tools": sorted(given),
            "order": given["kit__order"].parameters_json_schema,
            "run": run.output,
            "call": await toolset.direct_call_tool("kit__plain", {"text": "hi", "count": 2}),
            "nested": await toolset.direct_call_tool("kit__order", {"color": "green",
                                                                    "address": {"street": "Main St"}}),
            "error": error,
            "resource": await toolset.read_resource("notes://today"),
            "prompt": prompt.messages[0].content.content,
        }


async def main(served):
    command, args, env, url, token = (served[k] for k in ("command", "args", "env", "url", "token"))
    # snippet
    stdio = MCPToolset(Client(StdioTransport(command, args, env=env)))
    http = MCPToolset(Client(StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"})))
    # end of snippet
    print(json.dumps({"stdio": await observe(stdio), "http": await observe(http)}, default=str))


asyncio.run(main(json.loads(sys.argv[1])))
