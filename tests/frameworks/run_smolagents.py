"""smolagents (1.26, through mcpadapt, on mcp 1.x: its MCP support does not import with mcp 2) against toolcrib, no
model: each transport's tools as smolagents Tools, their inputs as smolagents reads them, a call and an error
result through them. smolagents reads no resources or prompts. Prints JSON."""

import json
import sys

from mcp import StdioServerParameters
from smolagents import ToolCollection


def observe(parameters):
    with ToolCollection.from_mcp(parameters, trust_remote_code=True) as collection:
        tools = {tool.name: tool for tool in collection.tools}

        def call(name, **arguments):
            try:
                return str(tools[name](**arguments))
            except Exception as exc:  # how an error result reaches the agent, if it does
                return f"{type(exc).__name__}: {exc}"

        return {
            "tools": sorted(tools),
            "order": tools["kit__order"].inputs,
            "call": call("kit__plain", text="hi", count=2),
            "nested": call("kit__order", color="green", address={"street": "Main St"}),
            "error": call("kit__fail", reason="no"),
        }


def main(served):
    command, args, env, url, token = (served[k] for k in ("command", "args", "env", "url", "token"))
    # snippet
    stdio = StdioServerParameters(command=command, args=args, env=env)
    http = {"url": url, "transport": "streamable-http", "headers": {"Authorization": f"Bearer {token}"}}
    # end of snippet
    print(json.dumps({"stdio": observe(stdio), "http": observe(http)}, default=str))


main(json.loads(sys.argv[1]))
