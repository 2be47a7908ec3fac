"""openai-agents (0.24) against toolcrib, no model: each transport's tools as the SDK's function tools (strict
where it can make them), a call and an error result through them, a resource and a prompt. Prints JSON."""

import asyncio
import json
import sys

from agents import Agent, RunContextWrapper
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp, MCPUtil
from agents.tool_context import ToolContext


async def observe(server):
    async with server:
        agent = Agent(name="assistant", mcp_servers=[server])
        tools = await MCPUtil.get_function_tools(server, True, RunContextWrapper(context=None), agent)
        by_name = {tool.name: tool for tool in tools}

        async def call(name, arguments):
            context = ToolContext(context=None, tool_name=name, tool_call_id="call_1",
                                  tool_arguments=json.dumps(arguments))
            return await by_name[name].on_invoke_tool(context, json.dumps(arguments))

        resource = await server.read_resource("notes://today")
        prompt = await server.get_prompt("kit__greet", {"name": "Ada"})
        return {
            "tools": sorted(by_name),
            "strict": {name: tool.strict_json_schema for name, tool in sorted(by_name.items())},
            "order": by_name["kit__order"].params_json_schema,
            "plain": by_name["kit__plain"].params_json_schema,
            "call": await call("kit__plain", {"text": "hi", "count": 2}),
            "nested": await call("kit__order", {"color": "green", "address": {"street": "Main St", "city": None},
                                                "size": None, "notes": None}),
            "error": await call("kit__fail", {"reason": "no"}),
            "resource": resource.contents[0].text,
            "prompt": prompt.messages[0].content.text,
        }


async def main(served):
    command, args, env, url, token = (served[k] for k in ("command", "args", "env", "url", "token"))
    # snippet
    stdio = MCPServerStdio({"command": command, "args": args, "env": env}, client_session_timeout_seconds=60)
    http = MCPServerStreamableHttp({"url": url, "headers": {"Authorization": f"Bearer {token}"}},
                                   client_session_timeout_seconds=60)
    # end of snippet
    print(json.dumps({"stdio": await observe(stdio), "http": await observe(http)}))


asyncio.run(main(json.loads(sys.argv[1])))
