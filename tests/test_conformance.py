"""The official MCP conformance suite (@modelcontextprotocol/conformance, pinned, from the npm registry) as the
judge of ``toolcrib serve --http``: every server scenario, against an agent that serves the suite's fixtures (an
ordinary pack, tests/conformance_pack.py) under their own names.

The suite sends no credentials, and toolcrib serves no agent without them, so the suite talks to a loopback relay
that adds the agent's bearer token to each request and passes everything else (Host and Origin included, so the
DNS-rebinding scenario judges toolcrib's own checks) through unchanged, byte for byte.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance_pack import CONFIG, TASKS_CONFIG, TOKEN
from conftest import npm_packages
from serving import start_http

pytestmark = pytest.mark.slow


SCENARIOS = {
    "server-initialize", "ping", "logging-set-level", "completion-complete", "tools-list", "json-schema-2020-12",
    "tools-call-simple-text", "tools-call-image", "tools-call-audio", "tools-call-embedded-resource",
    "tools-call-mixed-content", "tools-call-with-logging", "tools-call-error", "tools-call-with-progress",
    "tools-call-sampling", "tools-call-elicitation", "elicitation-sep1034-defaults", "elicitation-sep1330-enums",
    "resources-list", "resources-read-text", "resources-read-binary", "resources-templates-read",
    "resources-subscribe", "resources-unsubscribe", "prompts-list", "prompts-get-simple", "prompts-get-with-args",
    "prompts-get-embedded-resource", "prompts-get-with-image", "server-sse-polling", "server-sse-multiple-streams",
    "dns-rebinding-protection",
}


@pytest.fixture(scope="module")
def suite() -> tuple[Path, Path]:
    """(node, the suite's CLI script), installed once (tests/conftest.py pins them)."""
    modules = npm_packages()
    return modules / "node" / "bin" / "node", modules / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"


class TokenRelay:
    """A loopback TCP relay that adds ``Authorization: Bearer <token>`` to every HTTP request it passes on.

    Requests are read head by head (their bodies by Content-Length; the suite sends no chunked bodies, and one
    would fail the scenario loudly rather than pass it wrongly); responses, SSE streams included, flow back as
    they come.
    """

    def __init__(self, target: tuple[str, int], token: str) -> None:
        self.target = target
        self.header = f"Authorization: Bearer {token}\r\n".encode()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with client, socket.create_connection(self.target) as upstream:
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()
            buffered = b""
            try:
                while True:
                    while b"\r\n\r\n" not in buffered:
                        chunk = client.recv(65536)
                        if not chunk:
                            return
                        buffered += chunk
                    head, _, buffered = buffered.partition(b"\r\n\r\n")
                    request_line, _, headers = head.partition(b"\r\n")
                    length = 0
                    for line in headers.split(b"\r\n"):
                        name, _, value = line.partition(b":")
                        if name.strip().lower() == b"content-length":
                            length = int(value.strip())
                        assert name.strip().lower() != b"transfer-encoding", "chunked request bodies are not relayed"
                    while len(buffered) < length:
                        chunk = client.recv(65536)
                        if not chunk:
                            return
                        buffered += chunk
                    body, buffered = buffered[:length], buffered[length:]
                    upstream.sendall(request_line + b"\r\n" + self.header + headers + b"\r\n\r\n" + body)
            except OSError:
                return
            finally:  # the client went: so does the server's side (close alone would wait for the other thread)
                with contextlib.suppress(OSError):
                    upstream.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.listener.close()


class NameMapper:
    """A loopback HTTP relay for an agent served with full names (``conformance__test_simple_text``) to a client
    that knows only the pack's own names: it adds the namespace to the names a request carries (tools/call,
    prompts/get, completion of a prompt) and takes it off the names tools/list and prompts/list answer, and adds
    the bearer token. Everything else (Host and Origin included) passes as it is; SSE streams line by line."""

    PREFIX = "conformance__"

    def __init__(self, target: str, token: str) -> None:
        import uvicorn

        self.target = target
        self.token = token
        sock = socket.create_server(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off", interface="asgi3"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()

    @classmethod
    def _map(cls, data: bytes, outgoing: bool) -> bytes:
        try:
            message = json.loads(data)
        except ValueError:
            return data
        for one in message if isinstance(message, list) else [message]:
            if not isinstance(one, dict):
                continue
            params, result = one.get("params") or {}, one.get("result") or {}
            if outgoing and one.get("method") in ("tools/call", "prompts/get"):
                params["name"] = cls.PREFIX + params["name"]
            elif outgoing and one.get("method") == "completion/complete" and params["ref"].get("type") == "ref/prompt":
                params["ref"]["name"] = cls.PREFIX + params["ref"]["name"]
            for key in ("tools", "prompts"):
                for item in result.get(key, []) if not outgoing else []:
                    item["name"] = item["name"].removeprefix(cls.PREFIX)
        return json.dumps(message).encode()

    async def app(self, scope: dict, receive: Any, send: Any) -> None:  # type: ignore[type-arg]
        import anyio
        import httpx2

        body, more = b"", True
        while more:
            event = await receive()
            body += event.get("body", b"")
            more = event.get("more_body", False)
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"content-length", b"authorization")]
        headers.append((b"authorization", f"Bearer {self.token}".encode()))
        url = self.target + scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        async with httpx2.AsyncClient(timeout=None) as client:
            request = client.build_request(scope["method"], url, headers=headers,
                                           content=self._map(body, True) if body else None)
            response = await client.send(request, stream=True)
            kept = [(k.encode(), v.encode()) for k, v in response.headers.items()
                    if k.lower() not in ("content-length", "transfer-encoding", "content-encoding", "connection")]
            await send({"type": "http.response.start", "status": response.status_code, "headers": kept})
            async with anyio.create_task_group() as tg:

                async def until_the_client_goes() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    tg.cancel_scope.cancel()

                tg.start_soon(until_the_client_goes)
                if "text/event-stream" in response.headers.get("content-type", ""):
                    async for line in response.aiter_lines():
                        if line.startswith("data:"):
                            line = "data: " + self._map(line[5:].encode(), False).decode()
                        await send({"type": "http.response.body", "body": (line + "\n").encode(), "more_body": True})
                else:
                    data = await response.aread()
                    await send({"type": "http.response.body", "body": self._map(data, False) if data else b"",
                                "more_body": True})
                await send({"type": "http.response.body", "body": b""})
                tg.cancel_scope.cancel()
            await response.aclose()

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(params=["bare names", "full names", "bare names, [cluster]"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The agent with bare_names (through a relay that only adds the token), with full names (through one that
    also maps the names), and with bare names on a replica whose sessions and events are on Redis."""
    config = tmp_path / "toolcrib.toml"
    text = CONFIG if request.param.startswith("bare names") else CONFIG.replace("bare_names = true\n", "")
    if request.param.endswith("[cluster]"):
        text = f'[cluster]\nredis_url = "{request.getfixturevalue("redis_url")}"\n' + text
    config.write_text(text)
    env = {"TOOLCRIB_PLUGINS": "conformance=conformance_pack:PACK", "TOK_JUDGE": TOKEN}
    proc, base, log = start_http(config, env=env)
    port = int(base.rsplit(":", 1)[1])
    relay = TokenRelay(("127.0.0.1", port), TOKEN) if request.param.startswith("bare names") else \
        NameMapper(base, TOKEN)
    try:
        yield f"http://127.0.0.1:{relay.port}/agents/judge/mcp"
    finally:
        relay.close()
        proc.terminate()
        proc.wait(timeout=20)
        print(log.read_text()[-4000:])  # shown when a scenario fails


def test_every_server_scenario_of_the_official_suite_passes(suite: tuple[Path, Path], served: str,
                                                            tmp_path: Path) -> None:
    node, script = suite
    out = tmp_path / "results"
    proc = subprocess.run([str(node), str(script), "server", "--url", served, "--suite", "all", "-o", str(out)],
                          capture_output=True, text=True, timeout=900, env={**os.environ, "NO_COLOR": "1"})
    checks: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for path in sorted(out.rglob("checks.json")):  # results/server-<scenario>-<timestamp>/checks.json
        checks[re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name)] = json.loads(path.read_text())
    assert checks, proc.stdout[-3000:] + proc.stderr[-3000:]
    failures = {scenario: [(c["id"], c.get("errorMessage")) for c in found if c["status"] == "FAILURE"]
                for scenario, found in checks.items()}
    assert {k: v for k, v in failures.items() if v} == {}, proc.stdout[-3000:]
    assert set(checks) == SCENARIOS  # every one ran
    warnings = {scenario: sorted(c["id"] for c in found if c["status"] == "WARNING")
                for scenario, found in checks.items()}
    assert {k: v for k, v in warnings.items() if v} == {}  # the SSE polling SHOULDs (SEP-1699) included
    polling = {c["id"]: c["status"] for c in checks["server-sse-polling"] if c["id"].startswith("server-sse-")}
    assert polling == {"server-sse-priming-event": "SUCCESS", "server-sse-retry-field": "SUCCESS",
                       "server-sse-disconnect-resume": "SUCCESS"}
    assert proc.returncode == 0, proc.stdout[-3000:]


# The tasks extension's scenarios (conformance 0.2's; the suite itself lists them as pending). Where toolcrib parts
# from the suite's fixture, and why:
# - protocol_error_job is to fail at the protocol level, and a toolcrib pack cannot: whatever a handler raises is the
#   tool's error result, so its task ends "completed" with isError (toolcrib fails a task only when its call cannot
#   run: its tool gone from the agent's view after a reload).
# - test_tool_with_task is to ask its question by MRTR before it makes a task; toolcrib makes the task at once and
#   asks through the task's inputRequests (SEP-2663 allows both; it does not serve that fixture).
# The status notifications scenario is skipped by the suite itself (its harness awaits a rewrite).
TASK_SCENARIOS = ["tasks-lifecycle", "tasks-capability-negotiation", "tasks-wire-fields",
                  "tasks-request-state-removal", "tasks-mrtr-input", "tasks-request-headers",
                  "tasks-dispatch-and-envelope", "tasks-status-notifications", "tasks-required-task-error",
                  "tasks-mrtr-composition"]
PARTED = {"tasks-lifecycle": ["sep-2663-tasks-get-status-failed"],
          "tasks-mrtr-composition": ["sep-2663-mrtr-synchronous-before-task-creation"]}


@pytest.mark.parametrize("where", ["one process", "[cluster]"])
def test_the_tasks_scenarios_of_the_suite_pass_but_where_toolcrib_parts_from_its_fixtures(
        tmp_path: Path, where: str, request: pytest.FixtureRequest) -> None:
    modules = npm_packages()
    node, script = modules / "node" / "bin" / "node", modules / "conformance-next" / "dist" / "index.js"
    config = tmp_path / "toolcrib.toml"
    shared = f'[cluster]\nredis_url = "{request.getfixturevalue("redis_url")}"\n' if where == "[cluster]" else ""
    config.write_text(shared + TASKS_CONFIG)
    proc, base, log = start_http(config, env={"TOOLCRIB_PLUGINS": "tasks=conformance_pack:TASKS", "TOK_JUDGE": TOKEN},
                                 said=None)
    relay = TokenRelay(("127.0.0.1", int(base.rsplit(":", 1)[1])), TOKEN)
    out = tmp_path / "results"
    try:
        for scenario in TASK_SCENARIOS:
            subprocess.run([str(node), str(script), "server", "--url", f"http://127.0.0.1:{relay.port}/agents/judge/mcp",
                            "--scenario", scenario, "-o", str(out)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "NO_COLOR": "1"})
    finally:
        relay.close()
        proc.terminate()
        proc.wait(timeout=20)
    checks: dict[str, list[dict]] = {}  # type: ignore[type-arg]
    for path in sorted(out.rglob("checks.json")):
        checks[re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name)] = json.loads(path.read_text())
    assert sorted(checks) == sorted(TASK_SCENARIOS), log.read_text()[-3000:]
    failures = {scenario: sorted(c["id"] for c in found if c["status"] not in ("SUCCESS", "SKIPPED"))
                for scenario, found in checks.items()}
    assert {k: v for k, v in failures.items() if v} == PARTED, log.read_text()[-3000:]
    assert [c["status"] for c in checks["tasks-status-notifications"]] == ["SKIPPED"]
    assert sum(c["status"] == "SUCCESS" for found in checks.values() for c in found) >= 40
