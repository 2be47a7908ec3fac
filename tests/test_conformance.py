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

from conformance_pack import CONFIG, TOKEN
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

    @staticmethod
    def _named(body: bytes) -> bool:
        """Whether a request names a tool or a prompt (whose Mcp-Name header, if any, then names it too)."""
        try:
            message = json.loads(body) if body else None
        except ValueError:
            return False
        return isinstance(message, dict) and message.get("method") in ("tools/call", "prompts/get")

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
        if self._named(body):  # SEP-2243's Mcp-Name header mirrors the name in the body: mapped alike
            headers = [(k, self.PREFIX.encode() + v if k == b"mcp-name" else v) for k, v in headers]
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


# Conformance 0.2 (the `conformance-next` alias, pinned in tests/conftest.py) runs what each revision requires,
# frozen at its release: every scenario of 2025-11-25 and of 2026-07-28 (MRTR's input-required rounds, the
# stateless surface, SEP-2243's headers, the tasks extension), against one agent that serves the conformance pack
# with the tasks extension's fixtures. Where toolcrib parts from the suite, and why:
# - protocol_error_job is to fail at the protocol level, and a toolcrib pack cannot: whatever a handler raises is the
#   tool's error result, so its task ends "completed" with isError (toolcrib fails a task only when its call cannot
#   run: its tool gone from the agent's view after a reload).
# - test_tool_with_task is to ask its question by MRTR before it makes a task; toolcrib makes the task at once and
#   asks through the task's inputRequests (SEP-2663 allows both; it does not serve that fixture).
REVISIONS = {
    "2025-11-25": {
        "completion-complete", "dns-rebinding-protection", "elicitation-sep1034-defaults", "elicitation-sep1330-enums",
        "json-schema-2020-12", "logging-set-level", "ping", "prompts-get-embedded-resource", "prompts-get-simple",
        "prompts-get-with-args", "prompts-get-with-image", "prompts-list", "resources-list", "resources-read-binary",
        "resources-read-text", "resources-subscribe", "resources-templates-read", "resources-unsubscribe",
        "server-initialize", "server-session-lifecycle", "server-sse-multiple-streams", "server-sse-polling",
        "tools-call-audio", "tools-call-elicitation", "tools-call-embedded-resource", "tools-call-error",
        "tools-call-image", "tools-call-mixed-content", "tools-call-sampling", "tools-call-simple-text",
        "tools-call-with-logging", "tools-call-with-progress", "tools-list"},
    "2026-07-28": {
        "caching", "completion-complete", "dns-rebinding-protection", "http-custom-header-server-validation",
        "http-header-validation", "input-required-result-basic-elicitation", "input-required-result-basic-list-roots",
        "input-required-result-basic-sampling", "input-required-result-capability-check",
        "input-required-result-ignore-extra-params", "input-required-result-missing-input-response",
        "input-required-result-multi-round", "input-required-result-multiple-input-requests",
        "input-required-result-non-tool-request", "input-required-result-request-state",
        "input-required-result-result-type", "input-required-result-tampered-state",
        "input-required-result-unsupported-methods", "input-required-result-validate-input", "json-schema-2020-12",
        "prompts-get-embedded-resource", "prompts-get-simple", "prompts-get-with-args", "prompts-get-with-image",
        "prompts-list", "resources-list", "resources-read-binary", "resources-read-text", "resources-templates-read",
        "sep-2164-resource-not-found", "server-sse-multiple-streams", "server-stateless",
        "tasks-capability-negotiation", "tasks-dispatch-and-envelope", "tasks-lifecycle", "tasks-mrtr-composition",
        "tasks-mrtr-input", "tasks-request-headers", "tasks-request-state-removal", "tasks-required-task-error",
        "tasks-status-notifications", "tasks-wire-fields", "tools-call-audio", "tools-call-embedded-resource",
        "tools-call-error", "tools-call-image", "tools-call-mixed-content", "tools-call-simple-text",
        "tools-call-with-progress", "tools-list"},
}
PARTED = {"2025-11-25": {},
          "2026-07-28": {"tasks-lifecycle": ["sep-2663-tasks-get-status-failed"],
                         "tasks-mrtr-composition": ["sep-2663-mrtr-synchronous-before-task-creation"]}}


@pytest.mark.parametrize("where", ["bare names", "full names", "bare names, [cluster]"])
def test_every_scenario_each_revision_requires_of_a_server_passes_but_where_toolcrib_parts_from_its_fixtures(
        tmp_path: Path, where: str, request: pytest.FixtureRequest) -> None:
    modules = npm_packages()
    node, script = modules / "node" / "bin" / "node", modules / "conformance-next" / "dist" / "index.js"
    config = tmp_path / "toolcrib.toml"
    shared = f'[cluster]\nredis_url = "{request.getfixturevalue("redis_url")}"\n' if where.endswith("]") else ""
    config.write_text(shared + (CONFIG if where.startswith("bare") else CONFIG.replace("bare_names = true\n", "")))
    proc, base, log = start_http(config, env={"TOOLCRIB_PLUGINS": "conformance=conformance_pack:ALL",
                                              "TOK_JUDGE": TOKEN})
    relay = TokenRelay(("127.0.0.1", int(base.rsplit(":", 1)[1])), TOKEN) if where.startswith("bare") else \
        NameMapper(base, TOKEN)
    checks: dict[str, dict[str, list[dict]]] = {}  # type: ignore[type-arg]
    try:
        for revision in REVISIONS:
            out = tmp_path / revision
            subprocess.run([str(node), str(script), "server", "--url", f"http://127.0.0.1:{relay.port}/agents/judge/mcp",
                            "--requirements", revision, "-o", str(out)], capture_output=True, text=True, timeout=600,
                           env={**os.environ, "NO_COLOR": "1"})
            checks[revision] = {re.sub(r"^server-|-\d{4}-\d\d-\d\dT[\d-]+Z$", "", path.parent.name):
                                json.loads(path.read_text()) for path in sorted(out.rglob("checks.json"))}
    finally:
        relay.close()
        proc.terminate()
        proc.wait(timeout=20)
    for revision, found in checks.items():
        assert set(found) == REVISIONS[revision], log.read_text()[-3000:]  # every scenario ran
        parted = {scenario: sorted(c["id"] for c in ran if c["status"] not in ("SUCCESS", "SKIPPED", "INFO"))
                  for scenario, ran in found.items()}
        assert {k: v for k, v in parted.items() if v} == PARTED[revision], log.read_text()[-3000:]
    assert [c["status"] for c in checks["2026-07-28"]["tasks-status-notifications"]] == ["SKIPPED"]
    passed = {revision: sum(c["status"] == "SUCCESS" for ran in found.values() for c in ran)
              for revision, found in checks.items()}
    assert passed["2026-07-28"] >= 194 and passed["2025-11-25"] >= 80, passed
