"""toolcrib serve --agent: the first requests of a 2026-07-28 client answered while the MCP SDK is imported
(toolcrib.mcp.early). Each early answer is held to the bytes the SDK's server writes for the same line, and every
line the early answers leave reaches the SDK, in order."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

import toolcrib
from conftest import config_from, make_host, traced
from test_serve import CONFIG, READER, config_file, subprocess_env  # noqa: F401  (config_file: a fixture)
from toolcrib._version import __version__
from toolcrib.limits import LimitBook
from toolcrib.mcp import early
from toolcrib.mcp.early import (
    CLIENT_CAPABILITIES_KEY,
    CLIENT_INFO_KEY,
    PROTOCOL_KEY,
    EarlyAnswers,
    answer_early,
    eligible,
    observer,
)
from toolcrib.mcp.state import ServingState, serving_state
from toolcrib.mcp.stdio import serve_stdio
from toolcrib.mcp.wire import Wire


@toolcrib.tool(annotations={"readOnlyHint": True})
def greet(name: str, times: int = 1, ratio: float = 0.5) -> str:
    """Grüße — say "hello" </script> to someone\u2028, in tabs\tand ✓ marks."""
    return name * times


class Pack:
    tools = [greet]

    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return self.tools


def _filler(i: int) -> Any:
    def fill(text: str) -> str:
        return text

    fill.__name__, fill.__doc__ = f"fill_{i:04d}", f"Filler number {i}, with a description long enough to fill a pipe."
    return toolcrib.tool(fill)


class Many:
    tools = [_filler(i) for i in range(2000)]

    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return self.tools


AGENT_CONFIG = """
[agents.a]
[agents.a.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
"""

ENVELOPE = {PROTOCOL_KEY: "2026-07-28", CLIENT_INFO_KEY: {"name": "mcp", "version": "0.1.0"},
            CLIENT_CAPABILITIES_KEY: {}}


def request(request_id: Any, method: str, meta: dict[str, Any] | None = None, **params: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method,
                       "params": {"_meta": ENVELOPE if meta is None else meta, **params}},
                      ensure_ascii=False).encode() + b"\n"


def sdk_answers(host: Any, agent: str, lines: list[bytes]) -> list[bytes]:
    """What the SDK's server (toolcrib's, on the SDK) writes for ``lines``, read through real pipes."""
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    os.write(in_write, b"".join(lines))
    os.close(in_write)

    async def main() -> None:
        with os.fdopen(in_read, "rb") as stdin, os.fdopen(out_write, "wb") as stdout:
            await serve_stdio(ServingState(host), agent, wire=(stdin, stdout))

    anyio.run(main)
    with os.fdopen(out_read, "rb") as out:
        return out.read().splitlines(keepends=True)


def host() -> Any:
    return make_host(AGENT_CONFIG, plugins={"p": Pack()})


CAPABILITIES = [{}, {"roots": {}}, {"roots": {"listChanged": True}}, {"roots": {"listChanged": False}},
                {"sampling": {}, "elicitation": {}}, {"experimental": {}}]


@pytest.mark.parametrize("request_id", [1, 0, -7, 2**63 - 1, -2**63, "abc", "ünï \"quoted\"", ""])
def test_early_answers_are_the_sdk_s_bytes(request_id: Any) -> None:
    served = host()
    lines = [request(request_id, "server/discover"), request(request_id, "tools/list")]
    answers = EarlyAnswers(served.view("a"), __version__)
    early = [answers.answer(line) for line in lines]
    assert early == sdk_answers(served, "a", lines)
    listed = json.loads(early[1])["result"]  # (the tool's description is the one with escapes and non-ASCII)
    assert listed["tools"][0]["description"].startswith("Grüße — say \"hello\" </script>")
    assert [tool["name"] for tool in listed["tools"]] == ["p__greet"]


@pytest.mark.parametrize("capabilities", CAPABILITIES)
@pytest.mark.parametrize("info", [{"name": "c", "version": "1"}, {"name": "c", "version": "1", "title": "C"}, None])
def test_early_discover_of_each_plain_envelope_is_the_sdk_s(capabilities: dict[str, Any],
                                                            info: dict[str, Any] | None) -> None:
    served = host()
    meta = {PROTOCOL_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: capabilities,
            **({CLIENT_INFO_KEY: info} if info is not None else {})}
    lines = [request(5, "server/discover", meta), request(6, "tools/list", meta)]
    answers = EarlyAnswers(served.view("a"), __version__)
    early = [answers.answer(line) for line in lines]
    assert None not in early
    assert early == sdk_answers(served, "a", lines)


def test_what_the_sdk_reads_past_is_read_past_alike() -> None:
    """The JSON parser is the SDK transport's: what it takes in a line (NaN where nothing reads it, a key given
    twice, spaces), the early answers take, and answer alike."""
    served = host()
    lines = [b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"x":NaN,'
             b'"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}\n',
             b'{"jsonrpc":"2.0","id":2,"id":3,"method":"tools/list","params":{"_meta":{'
             b'"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}\n',
             b'  { "jsonrpc" : "2.0", "id" : 4, "method" : "server/discover", "params" : { "_meta" : {'
             b'"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}\n']
    answers = EarlyAnswers(served.view("a"), __version__)
    early = [answers.answer(line) for line in lines]
    assert None not in early
    assert early == sdk_answers(served, "a", lines)


REFUSED = {
    "handshake era": b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",'
                     b'"capabilities":{},"clientInfo":{"name":"t","version":"1"}}}\n',
    "another method": request(1, "tools/call", name="p__greet", arguments={"name": "x"}),
    "an older version": request(1, "tools/list", {**ENVELOPE, PROTOCOL_KEY: "2025-11-25"}),
    "no capabilities": request(1, "tools/list", {PROTOCOL_KEY: "2026-07-28"}),
    "a cursor": request(1, "tools/list", cursor="x"),
    "no params": b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}\n',
    "a notification": b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
    "not JSON": b"tools/list\n",
    "a batch": b"[" + request(1, "tools/list").strip() + b"]\n",
    "a float id": request(1.0, "tools/list"),
    "a bool id": request(True, "tools/list"),
    "a null id": request(None, "tools/list"),
    "an id past int64": request(2**63, "tools/list"),
    "an id below int64": request(-2**63 - 1, "tools/list"),
    "another jsonrpc": request(1, "tools/list").replace(b'"2.0"', b'"1.0"', 1),
    "a key more": request(1, "tools/list").replace(b'{"jsonrpc"', b'{"x":1,"jsonrpc"', 1),
    "a line over the cap": None,
    "discover, capabilities the SDK looks into": request(1, "server/discover", {
        **ENVELOPE, CLIENT_CAPABILITIES_KEY: {"roots": {"listChanged": {}}}}),
    "discover, a capability not an object": request(1, "server/discover", {
        **ENVELOPE, CLIENT_CAPABILITIES_KEY: {"roots": 5}}),
    "discover, client info not an object": request(1, "server/discover", {**ENVELOPE, CLIENT_INFO_KEY: 5}),
    "discover, client info null": request(1, "server/discover", {**ENVELOPE, CLIENT_INFO_KEY: None}),
    "discover, client info with icons": request(1, "server/discover", {
        **ENVELOPE, CLIENT_INFO_KEY: {"name": "c", "version": "1", "icons": 5}}),
    "discover, client info without a version": request(1, "server/discover", {
        **ENVELOPE, CLIENT_INFO_KEY: {"name": "c"}}),
    "discover, another envelope key": request(1, "server/discover", {**ENVELOPE, "progressToken": 3}),
    "discover, a trace context not a string": request(1, "server/discover", {**ENVELOPE, "traceparent": 5}),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_is_not_plain_is_left_to_the_sdk(case: str) -> None:
    assert EarlyAnswers(host().view("a"), __version__).answer(REFUSED[case]) is None


TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACED = {**ENVELOPE, "traceparent": TRACEPARENT, "tracestate": "congo=t61rcWkgMzE", "baggage": "turn=7"}


def test_a_traced_client_s_requests_are_answered_early_as_the_sdk_answers_them() -> None:
    """The SDK's client puts a W3C trace context in every request's _meta when its process traces."""
    served = host()
    lines = [request(1, "server/discover", TRACED), request(2, "tools/list", TRACED)]
    early = [EarlyAnswers(served.view("a"), __version__).answer(line) for line in lines]
    assert None not in early
    assert early == sdk_answers(served, "a", lines)


def early_answers(served: Any, agent: str, lines: list[bytes]) -> tuple[int, list[bytes]]:
    """How many of ``lines`` the early answers take, and what they write, through real pipes."""
    answered, written, _ = early_run(served, agent, lines)
    return answered, written


def early_run(served: Any, agent: str, lines: list[bytes]) -> tuple[int, list[bytes], list[bytes | None]]:
    """``early_answers``, and the lines they left pending for the SDK."""
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    os.write(in_write, b"".join(lines))
    os.close(in_write)

    async def main() -> tuple[int, list[bytes | None]]:
        with os.fdopen(in_read, "rb") as stdin, os.fdopen(out_write, "wb") as stdout:
            wire = Wire(stdin, stdout)
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(wire.read)
                    answered = await answer_early(wire, EarlyAnswers(served.view(agent), __version__),
                                                  anyio.Event(), observer(agent))
                    tg.cancel_scope.cancel()
                    return answered, wire.pending
            finally:
                wire.close()

    answered, pending = anyio.run(main)
    with os.fdopen(out_read, "rb") as out:
        return answered, out.read().splitlines(keepends=True), pending


def test_the_first_line_not_answered_early_is_left_pending_with_everything_after_it() -> None:
    served = host()
    call = request(3, "tools/call", name="p__greet", arguments={"name": "x"})
    lines = [request(1, "server/discover"), request(2, "tools/list"), call, request(4, "tools/list")]
    answered, written, pending = early_run(served, "a", lines)
    assert answered == 2
    assert written == sdk_answers(served, "a", lines[:2])
    assert pending == [call]  # (the list after it stays on the wire, for the SDK's transport to read next)


def test_an_answer_being_written_when_the_sdk_is_ready_is_written_whole() -> None:
    """The SDK is imported while a long list is half written (the client reads slowly): the rest is written
    before the SDK's transport writes anything, never cut short."""
    served = make_host(AGENT_CONFIG, plugins={"p": Many()})
    answers = EarlyAnswers(served.view("a"), __version__)
    expected = answers.answer(request(1, "tools/list"))
    assert expected is not None and len(expected) > 4 * 65536  # (more than a pipe holds)
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    os.write(in_write, request(1, "tools/list"))

    async def main() -> bytes:
        ready = anyio.Event()
        with os.fdopen(in_read, "rb") as stdin, os.fdopen(out_write, "wb") as stdout:
            wire = Wire(stdin, stdout)
            os.set_blocking(out_read, False)
            received = bytearray()
            async with anyio.create_task_group() as tg:
                async def answering() -> None:
                    await answer_early(wire, answers, ready)
                    stdout.close()  # (what the test reads ends here)

                tg.start_soon(wire.read)
                tg.start_soon(answering)
                await anyio.wait_readable(out_read)  # the answer is being written, and the pipe is full
                ready.set()
                while True:
                    try:
                        chunk = os.read(out_read, 65536)
                    except BlockingIOError:
                        await anyio.wait_readable(out_read)
                        continue
                    if not chunk:
                        break
                    received += chunk
                tg.cancel_scope.cancel()
            os.close(in_write)
            os.close(out_read)
            return bytes(received)

    assert anyio.run(main) == expected


def test_early_answers_leave_the_request_lines_and_spans_of_the_sdk_s_path(
        caplog: pytest.LogCaptureFixture) -> None:
    served = host()
    lines = [request(1, "server/discover", TRACED), request(2, "tools/list", TRACED)]
    caplog.set_level(logging.INFO, logger="toolcrib.requests")

    def seen(answer: Any) -> tuple[list[bytes], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        caplog.clear()
        with traced() as exporter:
            written = answer()
        lines = [r for r in caplog.records if r.name == "toolcrib.requests"]
        records = [(r.getMessage().rsplit(" ", 2)[0], r.agent, r.method, r.target, r.outcome, r.session)  # type: ignore[attr-defined]
                   for r in lines]
        finished = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "toolcrib"]
        spans = [(s.name, s.kind.name, dict(s.attributes or {}), s.context.trace_id, s.parent and s.parent.span_id)
                 for s in finished]
        # a span starts when its request is read, before the answer is written and its line logged
        assert [s.start_time < int(r.created * 1e9) - 1000 for s, r in zip(finished, lines, strict=True)] == [True] * 2
        return written, records, spans

    answered: list[int] = []

    def early() -> list[bytes]:
        count, written = early_answers(served, "a", lines)
        answered.append(count)
        return written

    mine, theirs = seen(early), seen(lambda: sdk_answers(served, "a", lines))
    assert answered == [2]
    assert mine == theirs
    written, records, spans = mine
    assert [json.loads(line)["id"] for line in written] == [1, 2]
    assert records == [("a server/discover ok", "a", "server/discover", None, "ok", None),
                       ("a tools/list ok", "a", "tools/list", None, "ok", None)]
    attributes = {"mcp.method.name": "server/discover", "toolcrib.agent": "a", "toolcrib.outcome": "ok"}
    assert spans == [("server/discover", "SERVER", attributes, 0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331),
                     ("tools/list", "SERVER", {**attributes, "mcp.method.name": "tools/list"},
                      0x0af7651916cd43dd8448eb211c80319c, 0xb7ad6b7169203331)]


def test_early_answers_leave_the_request_lines_of_the_sdk_s_path_without_a_tracer(
        caplog: pytest.LogCaptureFixture) -> None:
    served = host()
    lines = [request(1, "server/discover"), request(2, "tools/list")]
    caplog.set_level(logging.INFO, logger="toolcrib.requests")

    def logged() -> list[tuple[Any, ...]]:
        found = [(r.getMessage().rsplit(" ", 2)[0], r.agent, r.method, r.target, r.outcome, r.session,  # type: ignore[attr-defined]
                  type(r.duration_ms)) for r in caplog.records if r.name == "toolcrib.requests"]  # type: ignore[attr-defined]
        caplog.clear()
        return found

    assert early_answers(served, "a", lines)[0] == 2
    mine = logged()
    sdk_answers(served, "a", lines)
    assert mine == logged() == [("a server/discover ok", "a", "server/discover", None, "ok", None, float),
                                ("a tools/list ok", "a", "tools/list", None, "ok", None, float)]


def test_without_a_request_log_or_a_tracer_early_answers_leave_no_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="toolcrib.requests")
    assert observer("a") is None  # (nothing is done a request)
    assert early_answers(host(), "a", [request(1, "server/discover")])[0] == 1
    assert [r for r in caplog.records if r.name == "toolcrib.requests"] == []


def test_only_a_config_whose_host_needs_no_sdk_is_served_early(tmp_path: Path) -> None:
    assert eligible(config_from(AGENT_CONFIG))
    upstream = AGENT_CONFIG + '[mcps.clock]\ncommand = "python3"\n'
    isolated = AGENT_CONFIG + "[packs.p]\nisolate = true\n"
    cluster = AGENT_CONFIG + '[cluster]\nredis_url = "redis://127.0.0.1:6379/0"\n'
    assert [eligible(config_from(text)) for text in (upstream, isolated, cluster)] == [False, False, False]


def test_the_host_built_early_is_served_first_and_its_limits_book_kept_across_reloads(tmp_path: Path) -> None:
    path = tmp_path / "toolcrib.toml"
    path.write_text(AGENT_CONFIG)
    early = make_host(AGENT_CONFIG, plugins={"p": Pack()})
    book = LimitBook()

    async def main() -> None:
        async with serving_state(path, serves=["a"], first_host=(early, book)) as state:
            assert state.host is early
            await state.reload()
            assert state.host is not early
            assert state.host.pipeline._book is book

    anyio.run(main)


def test_the_sdk_is_imported_with_threads_switching_often_and_the_interval_put_back_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the SDK is imported in a thread, the event loop answering early gets the GIL back within
    ``SWITCH_INTERVAL`` (not Python's 5 ms) each time a request or room in the pipe wakes it."""
    (tmp_path / "imported_meanwhile.py").write_text("import sys\nINTERVAL = sys.getswitchinterval()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(early, "SERVING", "imported_meanwhile")
    monkeypatch.delitem(sys.modules, "imported_meanwhile", raising=False)
    path = tmp_path / "toolcrib.toml"
    path.write_text(AGENT_CONFIG)
    before = sys.getswitchinterval()
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    os.close(in_write)

    async def main() -> None:
        with os.fdopen(in_read, "rb") as stdin, os.fdopen(out_write, "wb") as stdout:
            async with anyio.create_task_group() as reading:
                started = await early.start_early(path, "a", stdin, stdout, reading)
                reading.cancel_scope.cancel()
            assert started is not None

    anyio.run(main)
    os.close(out_read)
    assert sys.modules["imported_meanwhile"].INTERVAL == early.SWITCH_INTERVAL == 0.0005
    assert sys.getswitchinterval() == before == 0.005
    sys.setswitchinterval(0.0001)  # a process that switches more often already keeps its interval
    lower = sys.getswitchinterval()  # (as Python keeps it: whole microseconds)
    try:
        with early.switching_often():
            assert sys.getswitchinterval() == lower < early.SWITCH_INTERVAL
    finally:
        sys.setswitchinterval(before)


# -- the served process ------------------------------------------------------------------------------------------


def serve(config: Path, agent: str, lines: list[bytes], *extra: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "toolcrib.cli", "serve", "--agent", agent, "--config", str(config),
                           "--no-reload", *extra], input=b"".join(lines), capture_output=True,
                          env=subprocess_env(), timeout=120)


@pytest.mark.slow
def test_a_piped_client_s_first_requests_are_answered_early_and_the_rest_by_the_sdk_in_order(
        config_file: Path) -> None:  # noqa: F811
    lines = [request(1, "server/discover"), request("two", "tools/list"),
             request(3, "tools/call", name="misc__add", arguments={"a": 1, "b": 2}),
             request(4, "tools/list"), request(5, "tools/call", name="files__write", arguments={})]
    proc = serve(config_file, "reader", lines, "--log-level", "debug")
    assert proc.returncode == 0, proc.stderr
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, "two", 3, 4, 5]
    assert replies[0]["result"]["supportedVersions"] == ["2026-07-28"]
    assert [t["name"] for t in replies[1]["result"]["tools"]] == READER
    assert replies[2]["result"]["content"] == [{"type": "text", "text": "3"}]
    assert replies[3]["result"] == replies[1]["result"]
    assert replies[4]["error"] == {"code": -32602, "message": "Unknown tool: files__write"}
    stderr = proc.stderr.decode()
    assert "answered 2 requests while the MCP SDK was imported" in stderr
    assert stderr.count("toolcrib: serving agent 'reader' over stdio") == 1


@pytest.mark.slow
def test_a_handshake_era_client_is_answered_by_the_sdk_from_its_first_line(config_file: Path) -> None:  # noqa: F811
    lines = [REFUSED["handshake era"], b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
             b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n']
    proc = serve(config_file, "reader", lines, "--log-level", "debug")
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["id"] for r in replies] == [1, 2]
    assert replies[0]["result"]["protocolVersion"] == "2025-11-25"
    assert [t["name"] for t in replies[1]["result"]["tools"]] == READER
    assert "answered 0 requests while the MCP SDK was imported" in proc.stderr.decode()


@pytest.mark.slow
def test_a_traced_sdk_client_is_answered_early(config_file: Path, tmp_path: Path) -> None:  # noqa: F811
    """The SDK's client in a process that traces sends its trace context in every _meta: still answered early."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "toolcrib.cli", "serve", "--agent", "reader",
                                                                 "--config", str(config_file), "--log-level", "debug"],
                                   env=subprocess_env())
    errors = tmp_path / "stderr.txt"

    async def main() -> None:
        with errors.open("w") as errlog:
            async with Client(stdio_client(params, errlog=errlog), cache=None) as client:
                assert [t.name for t in (await client.list_tools()).tools] == READER

    with traced() as exporter:
        anyio.run(main)
    sent = [s for s in exporter.get_finished_spans() if s.name == "MCP send tools/list"]
    assert len(sent) == 1  # (the client traced: it sent its trace context)
    stderr = errors.read_text()
    assert "answered 2 requests while the MCP SDK was imported" in stderr
    assert stderr.count("toolcrib.requests: reader server/discover ok") == 1
    assert stderr.count("toolcrib.requests: reader tools/list ok") == 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_sdk_s_client_lists_and_calls_on_a_server_started_early(config_file: Path, mode: str) -> None:  # noqa: F811
    params = StdioServerParameters(command=sys.executable, args=["-m", "toolcrib.cli", "serve", "--agent", "reader",
                                                                 "--config", str(config_file)],
                                   env=subprocess_env())

    async def main() -> None:
        async with Client(params, mode=mode, cache=None) as client:
            assert [t.name for t in (await client.list_tools()).tools] == READER
            assert (await client.call_tool("misc__add", {"a": 1, "b": 2})).content[0].text == "3"  # type: ignore[union-attr]

    anyio.run(main)
