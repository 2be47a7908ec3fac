"""What the approval tests serve: an agent with a tool that waits for an operator's answer, its operator, their tokens
and config, a session, and toolcrib serve --http on a free port. A helper module: the approval, console and HTTP
attack tests import it."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2

import toolcrib
from conftest import config_from, sse_messages
from toolcrib import Host

AGENT_TOKEN = "a" * 32
OPERATOR_TOKEN = "o" * 32
ENV = {"TOK_A": AGENT_TOKEN, "TOK_OP": OPERATOR_TOKEN}


@toolcrib.tool
def deploy(target: str) -> str:
    """Deploy the service to a target."""
    return f"deployed to {target}"


@toolcrib.tool(annotations={"readOnlyHint": True})
def status() -> str:
    """The service's status."""
    return "all good"


PACK = type("Pack", (), {"toolcrib_tools": toolcrib.hookimpl(lambda self: [deploy, status])})()

CONFIG = """
[operator]
token_env = "TOK_OP"
url = "http://127.0.0.1:8000"
{operator}
[agents.a]
token_env = "TOK_A"
approvals = "{approvals}"
approval_timeout = {timeout}
[agents.a.permissions]
plugins = {{ allow = ["t"] }}
tools = {{ allow = ["*"] }}
ask = ["t__deploy"]
"""
AGENT = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         "Authorization": f"Bearer {AGENT_TOKEN}"}


INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "no-elicitation", "version": "1"}}}


async def open_session(http: Any) -> Any:
    """A 2025-11-25 session of agent a (its client declares no elicitation); a function that calls a tool in it."""
    opened = await http.post("/agents/a/mcp", json=INITIALIZE, headers=AGENT)
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-11-25"}
    await http.post("/agents/a/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                    headers={**AGENT, **session})

    ids = itertools.count(1)

    async def call(name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        answer = await http.post("/agents/a/mcp", headers={**AGENT, **session}, json={
            "jsonrpc": "2.0", "id": next(ids), "method": "tools/call", "params": {"name": name,
                                                                                  "arguments": arguments}})
        result = sse_messages(answer.text)[0]["result"]
        return result.get("isError", False), result["content"][0]["text"]

    return call


def serve_http(config: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str, Path]:
    log = config.parent / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "toolcrib.cli", "serve", "--http", "--port", "0", "--config",
                                 str(config)], stderr=err, env=env)
    deadline = time.monotonic() + 60  # a hang guard
    while proc.poll() is None and time.monotonic() < deadline:
        match = re.search(r"at (http://127\.0\.0\.1:\d+)/agents/<name>/mcp", log.read_text())
        if match:
            return proc, match.group(1), log
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(log.read_text())


CONSOLE = CONFIG.format(approvals="operator", timeout=60, operator="console = true") + """
[agents.b]
token_env = "TOK_B"
mode = "plan"
[agents.b.permissions]
plugins = { allow = ["t"] }
tools = { allow = ["*"] }
"""


def app_of(tmp_path: Path, text: str = CONSOLE) -> Any:
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    state = ServingState(Host(config_from(text, tmp_path), plugins={"t": PACK}, autoload=False, env={}))
    return HttpApp(state, HttpOptions(), env={**ENV, "TOK_B": "b" * 32})


def client_of(app: Any) -> Any:
    return httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000", timeout=60)


async def signed_in(http: Any) -> str:
    answer = await http.post("/console/login", data={"token": OPERATOR_TOKEN})
    assert answer.status_code == 303 and answer.headers["location"] == "/console/"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert "Max-Age=43200" in cookie and ("Secure" in cookie) == (http.base_url.scheme == "https")
    assert OPERATOR_TOKEN not in cookie
    return str(re.search(r'name="csrf" value="([0-9a-f]+)"', (await http.get("/console/")).text).group(1))
