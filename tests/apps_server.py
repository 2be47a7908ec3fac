"""An MCP App as the mcp SDK builds one (``mcp.server.apps``, the io.modelcontextprotocol/ui extension): a clock
whose page is a ``ui://`` resource, a tool the model and the page both call, one only the page calls, and a plain
tool. Run over stdio as an upstream server (tests/test_outputs.py)."""

from __future__ import annotations

import mcp_types as types
from mcp.server.apps import Apps, ResourceCsp
from mcp.server.mcpserver import MCPServer

PAGE = "<!doctype html><title>Clock</title><p id=time></p>"

apps = Apps()


@apps.tool(resource_uri="ui://clock/app.html", description="Show the time on the clock's page.")
def show_time() -> str:
    return "12:00"


@apps.tool(resource_uri="ui://clock/app.html", visibility=["app"], description="Refresh the clock's page.")
def refresh_time() -> str:
    return "12:01"


apps.add_html_resource("ui://clock/app.html", PAGE, name="clock", description="The clock's page.",
                       csp=ResourceCsp(connect_domains=["https://time.example"]))

server = MCPServer("clock", extensions=[apps], icons=[  # the server's icon; one toolcrib drops (http:)
    types.Icon(src="https://example.com/clock.png", mime_type="image/png"), types.Icon(src="http://example.com/x.png")])


@server.tool(description="Say the time as text.")
def plain_time() -> str:
    return "noon"


if __name__ == "__main__":
    server.run("stdio")
