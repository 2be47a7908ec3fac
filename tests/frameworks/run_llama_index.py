"""llama-index-tools-mcp (0.6) against toolcrib, no model: each transport's tools as llama-index FunctionTools,
their argument models as llama-index builds them, a call and an error result through them, a resource and a
prompt. Prints JSON."""

import asyncio
import json
import sys

from llama_index.tools.mcp import BasicMCPClient, McpToolSpec


async def observe(client):
    tools = {tool.metadata.name: tool for tool in await McpToolSpec(client=client).to_tool_list_async()}
    call = await tools["kit__plain"].acall(text="hi", count=2)
    nested = await tools["kit__order"].acall(color="green", address={"street": "Main St"})
    error = await tools["kit__fail"].acall(reason="no")
    resource = await client.read_resource("notes://today")
    prompt = await client.get_prompt("kit__greet", {"name": "Ada"})
    return {
        "tools": sorted(name for name in tools if name.startswith("kit__")),
        "order": tools["kit__order"].metadata.fn_schema.model_json_schema(),
        # what the tool object reports, and the MCP result it carries (raw_output)
        "call": [call.is_error, call.raw_output.is_error, call.raw_output.content[0].text],
        "nested": [nested.is_error, nested.raw_output.is_error, nested.raw_output.content[0].text],
        "error": [error.is_error, error.raw_output.is_error, error.raw_output.content[0].text],
        "resource": resource.contents[0].text,
        "prompt": prompt[0].content,
    }


async def main(served):
    command, args, env, url, token = (served[k] for k in ("command", "args", "env", "url", "token"))
    # snippet
    stdio = BasicMCPClient(command, args=args, env=env)
    http = BasicMCPClient(url, headers={"Authorization": f"Bearer {token}"})
    # end of snippet
    print(json.dumps({"stdio": await observe(stdio), "http": await observe(http)}, default=str))


asyncio.run(main(json.loads(sys.argv[1])))
