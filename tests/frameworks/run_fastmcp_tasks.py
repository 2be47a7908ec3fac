"""FastMCP's client with fastmcp-tasks (the client half of the MCP tasks extension) against toolcrib over streamable
HTTP: calls of tools toolcrib runs as tasks, polled to their end by FastMCP, one answering the task's questions
through FastMCP's elicitation handler. Prints JSON."""

import asyncio
import json
import sys

import fastmcp_tasks  # noqa: F401  (registers task support with every FastMCP Client)
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport

ASKED = []


async def elicit(message, response_type, params, context):
    ASKED.append(message)
    field = next(iter(params.requested_schema["properties"]))
    return {field: "Ada" if field == "name" else "Rome"}


async def main(served):
    url, token = served["url"], served["token"]
    client = Client(StreamableHttpTransport(url, headers={"Authorization": f"Bearer {token}"}),
                    elicitation_handler=elicit)
    async with client:
        only = await client.call_tool("jobs__only", {"x": 3})  # runs only as a task
        asked = await client.call_tool("jobs__ask", {})
        print(json.dumps({"protocol": client.protocol_version, "only": only.content[0].text,
                          "asked": asked.content[0].text, "questions": ASKED}))


asyncio.run(main(json.loads(sys.argv[1])))
