"""Serving toolcrib for the tests that talk to it as a client does: the config and tokens of the serving tests'
agents, the environment a ``toolcrib`` subprocess gets, ``toolcrib serve --http`` started on a free port, and an
HTTP client with a bearer token. A helper module, not a test module: the test modules that serve import it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TESTS = Path(__file__).parent
PACKS_ENV = "files=packs:FILES,misc=packs:MISC,talk=packs:TALK"

CONFIG = """
[agents.reader]
mode = "plan"
token_env = "TOK_READER"
[agents.reader.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }

[agents.writer]
token_env = "TOK_WRITER"
[agents.writer.permissions]
plugins = { allow = ["files", "talk"] }
tools = { deny = ["files__rm"] }
ask = ["files__write"]

[agents.silent]

[agents.runner]
token_env = "TOK_RUNNER"
[agents.runner.permissions]
plugins = { allow = ["misc"] }
tools = { allow = ["misc__slow*", "toolcrib__run_agent"] }
subagents = { allow = ["writer"] }
"""


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update({"TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": PACKS_ENV,
                "PYTHONPATH": str(TESTS) + os.pathsep + env.get("PYTHONPATH", "")})
    env.update(extra)
    return env


TOKENS = {"TOK_READER": "reader-token-0123456789", "TOK_WRITER": "writer-token-0123456789",
          "TOK_RUNNER": "runner-token-0123456789"}


def start_http(config_file: Path, *extra: str, env: dict[str, str] | None = None,
               said: str | None = "agent 'silent' is not served over HTTP: it has no token_env"
               ) -> tuple[subprocess.Popen[bytes], str, Path]:
    """Start ``toolcrib serve --http`` on a free port; its stderr goes to a file (a pipe nobody drains could
    fill up and stall the server). Once it listens, its log must hold ``said`` (this module's config's)."""
    log = config_file.parent / f"serve-{time.monotonic_ns()}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "toolcrib.cli", "serve", "--http", "--port", "0",
                                 "--config", str(config_file), *extra], stderr=err,
                                env=subprocess_env(**TOKENS, **(env or {})))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        text = log.read_text()
        match = re.search(r"at (http://127\.0\.0\.1:\d+)/agents/<name>/mcp", text)
        if match:
            assert said is None or said in text
            return proc, match.group(1), log
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(log.read_text())


def wait_for(log: Path, text: str) -> None:
    deadline = time.monotonic() + 60
    while text not in log.read_text():
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)


async def http_client(url: str, token: str | None, mode: str = "auto", **kwargs: Any) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=30)
    return http, Client(streamable_http_client(url, http_client=http), mode=mode, cache=None, **kwargs)


async def accept() -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={})


async def run_writer_over_http(base: str, mode: str) -> types.CallToolResult:
    """runner hands writer a task over HTTP; the client's model (scripted: it cannot run here) reads a file
    through writer's tools, then answers."""
    script = [[types.ToolUseContent(id="w1", name="files__read", input={"path": "notes"})],
              [types.TextContent(text="notes say: contents of notes")]]

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> Any:
        return types.CreateMessageResultWithTools(role="assistant", model="scripted", content=script.pop(0))

    http, client = await http_client(f"{base}/agents/runner/mcp", TOKENS["TOK_RUNNER"], mode,
                                     sampling_callback=sampling,
                                     sampling_capabilities=types.SamplingCapability(
                                         tools=types.SamplingToolsCapability()))
    async with http, client:
        return await client.call_tool("toolcrib__run_agent", {"agent": "writer", "task": "What do the notes say?"})
