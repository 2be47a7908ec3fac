"""Serving over MCP, through real clients only: the SDK's Client in-process (both eras), over a stdio subprocess,
and over HTTP to a server subprocess on a loopback port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx2
import mcp_types as types
import pydantic
import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

import toolcrib
from conftest import make_host
from packs import FILES, MISC, TALK, Pack
from serving import (
    CONFIG,
    TOKENS,
    accept,
    http_client,
    run_writer_over_http,
    start_http,
    subprocess_env,
    wait_for,
)
from toolcrib.mcp.adapter import UNVERIFIABLE, build_server
from toolcrib.mcp.roundtrip import CONFIG_CHANGED, REUSED
from toolcrib.mcp.state import ServingState

READER = ["files__read", "misc__add", "talk__chatty", "talk__noisy"]
WRITER = ["files__read", "files__touch", "files__write", "talk__chatty", "talk__noisy"]
MODES = ["auto", "legacy"]


def state() -> ServingState:
    return ServingState(make_host(CONFIG, {"files": FILES, "misc": MISC, "talk": TALK}))


def names(result: types.ListToolsResult) -> list[str]:
    return [t.name for t in result.tools]


async def unknown(client: Client, name: str) -> tuple[int, str]:
    with pytest.raises(MCPError) as info:
        await client.call_tool(name, {"path": "x"})
    return info.value.error.code, info.value.error.message


# -- in-process, both eras --------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_each_agent_lists_its_own_view(mode: str) -> None:
    s = state()

    async def main() -> None:
        for agent, expected in (("reader", READER), ("writer", WRITER), ("silent", [])):
            async with Client(build_server(s, agent), mode=mode, cache=None) as client:
                assert names(await client.list_tools()) == expected

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_tools_list_wire_shape(mode: str) -> None:
    async def main() -> None:
        async with Client(build_server(state(), "reader"), mode=mode, cache=None) as client:
            tool = (await client.list_tools()).tools[0]
            assert tool.model_dump(by_alias=True, exclude_none=True) == {
                "name": "files__read",
                "description": "Read a file.",
                "inputSchema": {"additionalProperties": False, "properties": {"path": {
                    "description": "File to read", "type": "string"}}, "required": ["path"], "type": "object"},
                "annotations": {"readOnlyHint": True},
            }

    anyio.run(main)


class Report(pydantic.BaseModel):
    """A structured answer."""

    words: int


@toolcrib.tool(title="Count words", annotations={"readOnlyHint": True, "title": "Count"})
def count(text: str) -> Report:
    """Count the words of a text."""
    return Report(words=len(text.split()))


@pytest.mark.parametrize("mode", MODES)
def test_tools_list_carries_title_and_output_schema(mode: str) -> None:
    host = make_host('[agents.a]\n[agents.a.permissions]\nplugins = { allow = ["*"] }\ntools = { allow = ["*"] }\n',
                     {"words": Pack(count)})

    async def main() -> None:
        async with Client(build_server(ServingState(host), "a"), mode=mode, cache=None) as client:
            tool = (await client.list_tools()).tools[0]
            assert tool.model_dump(by_alias=True, exclude_none=True) == {
                "name": "words__count",
                "title": "Count words",
                "description": "Count the words of a text.",
                "inputSchema": {"additionalProperties": False, "properties": {"text": {"type": "string"}},
                                "required": ["text"], "type": "object"},
                "outputSchema": {"description": "A structured answer.", "properties": {"words": {"type": "integer"}},
                                 "required": ["words"], "type": "object"},
                "annotations": {"title": "Count", "readOnlyHint": True},
            }
            result = await client.call_tool("words__count", {"text": "a b c"})
            assert result.structured_content == {"words": 3}

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_hidden_equals_unknown_at_protocol_level(mode: str) -> None:
    async def main() -> None:
        async with Client(build_server(state(), "writer"), mode=mode, cache=None) as client:
            assert await unknown(client, "files__rm") == (-32602, "Unknown tool: files__rm")  # installed, denied
            assert await unknown(client, "misc__add") == (-32602, "Unknown tool: misc__add")  # pack not allowed
            assert await unknown(client, "zz__rm") == (-32602, "Unknown tool: zz__rm")  # does not exist

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_results_and_errors(mode: str) -> None:
    async def main() -> None:
        async with Client(build_server(state(), "reader"), mode=mode, cache=None) as client:
            ok = await client.call_tool("misc__add", {"a": 2, "b": 40})
            assert (ok.is_error, ok.content[0].text) == (False, "42")  # type: ignore[union-attr]
            bad = await client.call_tool("misc__add", {"a": 2})
            assert bad.is_error
            assert bad.content[0].text == "Invalid arguments for misc__add:\n- b: required argument is missing"  # type: ignore[union-attr]

    anyio.run(main)


@pytest.mark.parametrize(("mode", "answer"), [(m, a) for m in MODES for a in ("accept", "decline")])
def test_elicitation_approves_or_declines(mode: str, answer: str) -> None:
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action=answer, content={})  # type: ignore[arg-type]

    async def main() -> None:
        async with Client(build_server(state(), "writer"), mode=mode, cache=None,
                          elicitation_callback=elicit) as client:
            result = await client.call_tool("files__write", {"path": "a.txt", "text": "hi"})
            if answer == "accept":
                assert (result.is_error, result.content[0].text) == (False, "wrote 2 characters to a.txt")  # type: ignore[union-attr]
            else:
                assert result.content[0].text == ("Permission denied: files__write needs approval (ask rule "  # type: ignore[union-attr]
                                                  "'files__write'), and the user declined.")
        assert asked == ["Agent 'writer' wants to call files__write (ask rule 'files__write'). Allow this call?"]

    anyio.run(main)


@pytest.mark.parametrize("mode", MODES)
def test_a_client_without_elicitation_gets_the_denial(mode: str) -> None:
    async def main() -> None:
        async with Client(build_server(state(), "writer"), mode=mode, cache=None) as client:
            result = await client.call_tool("files__write", {"path": "a.txt", "text": "hi"})
            assert result.is_error
            assert result.content[0].text.endswith("no approver could answer (the client does not support "  # type: ignore[union-attr]
                                                   "elicitation and no approval hook decided).")

    anyio.run(main)


def test_modern_approval_is_sealed_to_the_call() -> None:
    """A 2026-era answer carried over to a different call approves nothing."""

    async def main() -> None:
        async with Client(build_server(state(), "writer"), cache=None,
                          elicitation_callback=lambda c, p: accept()) as client:
            first = await client.session.call_tool("files__write", {"path": "a", "text": "x"},
                                                   allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            responses = {"toolcrib_approval": types.ElicitResult(action="accept", content={})}
            with pytest.raises(MCPError) as other:  # refused as the request's invalid params (SEP-2322)
                await client.session.call_tool("files__write", {"path": "/etc/passwd", "text": "x"},
                                               input_responses=responses, request_state=first.request_state)
            assert (other.value.error.code, other.value.error.message) == (-32602, UNVERIFIABLE)
            same = await client.session.call_tool("files__write", {"path": "a", "text": "x"},
                                                  input_responses=responses, request_state=first.request_state)
            assert same.content[0].text == "wrote 1 characters to a"  # type: ignore[union-attr]

    anyio.run(main)


def test_a_modern_approval_runs_its_call_once() -> None:
    """The round that carries the user's yes runs the call; the same round sent again runs nothing."""

    async def main() -> None:
        async with Client(build_server(state(), "writer"), cache=None,
                          elicitation_callback=lambda c, p: accept()) as client:
            args = {"path": "a", "text": "x"}
            first = await client.session.call_tool("files__write", args, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            responses = {"toolcrib_approval": types.ElicitResult(action="accept", content={})}
            ran = await client.session.call_tool("files__write", args, input_responses=responses,
                                                 request_state=first.request_state)
            assert (ran.is_error, ran.content[0].text) == (False, "wrote 1 characters to a")  # type: ignore[union-attr]
            again = await client.session.call_tool("files__write", args, input_responses=responses,
                                                   request_state=first.request_state)
            assert (again.is_error, again.content[0].text) == (True, REUSED)  # type: ignore[union-attr]
            declined = await client.session.call_tool("files__write", args, allow_input_required=True)
            assert isinstance(declined, types.InputRequiredResult)
            no = {"toolcrib_approval": types.ElicitResult(action="decline", content={})}
            refused = await client.session.call_tool("files__write", args, input_responses=no,
                                                     request_state=declined.request_state)
            assert refused.content[0].text.endswith("and the user declined.")  # type: ignore[union-attr]
            late_yes = await client.session.call_tool("files__write", args, input_responses=responses,
                                                      request_state=declined.request_state)
            assert late_yes.content[0].text == REUSED  # a no, then a yes in the same state: still used  # type: ignore[union-attr]

    anyio.run(main)


def test_an_approval_given_before_the_config_changed_runs_nothing(tmp_path: Path) -> None:
    """An approval is bound to the config it was given under: after a reload that changes the config it is
    refused, and for a tool the new config hides the answer is that of a tool that does not exist."""
    config = tmp_path / "toolcrib.toml"
    config.write_text(CONFIG)
    from toolcrib.config import load_config
    from toolcrib.host import Host

    def make() -> Host:
        return Host(load_config(config, {}), plugins={"files": FILES, "misc": MISC, "talk": TALK}, autoload=False,
                    env={})

    s = ServingState(make(), make_host=make)
    yes = {"toolcrib_approval": types.ElicitResult(action="accept", content={})}

    async def main() -> None:
        async with Client(build_server(s, "writer"), cache=None,
                          elicitation_callback=lambda c, p: accept()) as client:
            args = {"path": "a", "text": "x"}
            asked = [await client.session.call_tool("files__write", args, allow_input_required=True)
                     for _ in range(2)]
            assert all(isinstance(first, types.InputRequiredResult) for first in asked)
            config.write_text(CONFIG.replace('ask = ["files__write"]', 'ask = ["files__write", "files__touch"]'))
            assert await s.reload() is True
            stale = await client.session.call_tool("files__write", args, input_responses=yes,
                                                   request_state=asked[0].request_state)  # type: ignore[union-attr]
            assert (stale.is_error, stale.content[0].text) == (True, CONFIG_CHANGED)  # type: ignore[union-attr]
            config.write_text(CONFIG.replace('deny = ["files__rm"]', 'deny = ["files__rm", "files__write"]'))
            assert await s.reload() is True
            with pytest.raises(MCPError) as hidden:
                await client.session.call_tool("files__write", args, input_responses=yes,
                                               request_state=asked[1].request_state)  # type: ignore[union-attr]
            assert (hidden.value.error.code, hidden.value.error.message) == (-32602, "Unknown tool: files__write")

    anyio.run(main)


@pytest.mark.parametrize("shared", [True, False])
def test_replicas_accept_each_others_rounds_only_with_one_secret(shared: bool) -> None:
    """Behind a balancer, a call's next round may reach another replica: with one $TOOLCRIB_STATE_SECRET it
    carries on there; with a random key per replica the call ends with an error that says why (never granted,
    never started over)."""
    secret = b"0123456789abcdef0123456789abcdef"

    async def main() -> Any:
        first_replica = build_server(ServingState(state().host, secret=secret), "writer")
        other_replica = build_server(ServingState(state().host, secret=secret if shared else None), "writer")
        async with Client(first_replica, cache=None, elicitation_callback=lambda c, p: accept()) as one, \
                Client(other_replica, cache=None, elicitation_callback=lambda c, p: accept()) as two:
            args = {"path": "a", "text": "x"}
            first = await one.session.call_tool("files__write", args, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            responses = {"toolcrib_approval": types.ElicitResult(action="accept", content={})}
            try:
                return await two.session.call_tool("files__write", args, input_responses=responses,
                                                   request_state=first.request_state)
            except MCPError as exc:
                return exc.error.code, exc.error.message

    result = anyio.run(main)
    if shared:
        assert (result.is_error, result.content[0].text) == (False, "wrote 1 characters to a")
    else:  # the request's params refused (SEP-2322): nothing ran, nothing was granted
        assert result == (-32602, UNVERIFIABLE)


def test_a_short_state_secret_is_refused_before_serving(config_file: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "reader", "--config",
                           str(config_file)], capture_output=True, text=True, timeout=60,
                          env=subprocess_env(TOOLCRIB_STATE_SECRET="short"))
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == ("error: TOOLCRIB_STATE_SECRET: must be at least 32 characters (it seals what clients "
                           "carry between the rounds of a call), or a comma-separated list of such secrets, each once "
                           "(the first seals, all open: rotation); make one with: python3 -c 'import secrets; "
                           "print(secrets.token_urlsafe(32))'\n")





@pytest.mark.parametrize("mode", MODES)
def test_progress_and_logging_reach_the_client(mode: str) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    logs: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async def main() -> None:
        async with Client(build_server(state(), "reader"), mode=mode, cache=None, logging_callback=on_log,
                          log_level="info") as client:
            result = await client.call_tool("talk__chatty", {"steps": 2}, progress_callback=on_progress)
            assert result.content[0].text == "done"  # type: ignore[union-attr]

    anyio.run(main)
    assert progress == [(1, 2, "step 1"), (2, 2, "step 2")]
    assert logs == ["halfway there"]


@pytest.mark.parametrize(("serves", "built"), [(None, ["a", "b"]), (["b", "nobody"], ["b"]), ([], [])])
def test_each_host_is_built_with_the_lists_of_the_agents_it_serves(
        tmp_path: Path, serves: list[str] | None, built: list[str]) -> None:
    """What ``serve`` answers first (tools/list) is made in the worker thread that builds the host, at start and at
    each reload: every agent's over HTTP, one agent's on stdio, none for the console (or in an isolated pack's
    process). The other lists wait for their first request."""
    from toolcrib.mcp.state import serving_state

    (tmp_path / "greet").mkdir()  # a tool folder: the pack greet
    (tmp_path / "greet" / "hello.py").write_text(
        "import toolcrib\n\n\n@toolcrib.tool\ndef hello(name: str) -> str:\n    \"\"\"Say hello.\"\"\"\n"
        "    return f'hello {name}'\n")
    agent = ("[agents.{0}]\n[agents.{0}.permissions]\nplugins = {{ allow = ['greet'] }}\n"
             "tools = {{ allow = ['*'] }}\n")
    config = tmp_path / "toolcrib.toml"
    config.write_text('[host]\ntool_dirs = ["greet"]\n' + agent.format("a") + agent.format("b"))
    lists = ["listed_tools", "mcp_prompts", "mcp_resources", "mcp_templates", "mcp_tools"]

    def made(host: Any) -> dict[str, list[str]]:
        """The views ``host`` holds, and the lists each has made (what is there before anything asked)."""
        return {name: sorted(key for key in vars(view) if key in lists) for name, view in host._views.items()}

    async def main() -> tuple[dict[str, list[str]], dict[str, list[str]], list[str]]:
        async with serving_state(config, serves=serves) as state:
            first = made(state.host)
            replaced = state.host
            assert await state.reload() and state.host is not replaced
            return first, made(state.host), state.view("a").names

    first, reloaded, names = anyio.run(main)
    assert names == ["greet__hello"]
    assert first == {name: ["listed_tools", "mcp_tools"] for name in built}
    # a reload checks the new host as `toolcrib check` does (every agent's view, in a worker thread), and compares
    # the lists, old and new, of the agents served (building the rest of theirs on the way, on the event loop):
    # none of an agent that is not served here and has no clients here
    assert reloaded == {name: lists if name in built else [] for name in ("a", "b")}


def test_a_reload_checks_the_new_host_in_a_worker_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What `toolcrib check` says of the new host is logged at each reload, and found away from the event loop: it
    builds every tool's models and schemas (about 1 ms a tool), which held the loop for 1 s at 1,000 tools."""
    from toolcrib.config import load_config
    from toolcrib.host import Host

    config = tmp_path / "toolcrib.toml"
    config.write_text(CONFIG)
    checked: list[int] = []
    problems = Host.problems

    def noting(self: Host, *args: Any, **kwargs: Any) -> Any:
        checked.append(threading.get_ident())
        return problems(self, *args, **kwargs)

    monkeypatch.setattr(Host, "problems", noting)

    def make() -> Host:
        return Host(load_config(config, {}), plugins={"files": FILES, "misc": MISC, "talk": TALK}, autoload=False,
                    env={})

    async def main() -> int:
        state = ServingState(make(), make_host=make)
        assert await state.reload() is True
        return threading.get_ident()

    loop_thread = anyio.run(main)
    assert len(checked) == 1 and checked[0] != loop_thread


@pytest.mark.parametrize("serves", [None, ["writer"]])
def test_reload_notifies_legacy_sessions_and_modern_listeners(tmp_path: Path, serves: list[str] | None) -> None:
    """Both kinds of client hear that their agent's tools changed: also when the process serves other agents (as
    built with the host), since these clients are here."""
    config = tmp_path / "toolcrib.toml"
    config.write_text(CONFIG)
    plugins = {"files": FILES, "misc": MISC, "talk": TALK}
    from toolcrib.config import load_config
    from toolcrib.host import Host

    def make() -> Host:
        return Host(load_config(config, {}), plugins=plugins, autoload=False, env={})

    s = ServingState(make(), make_host=make)
    s.serves = serves
    notes: list[str] = []

    async def handler(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            notes.append("legacy")

    async def main() -> None:
        async with Client(build_server(s, "reader"), mode="legacy", cache=None, message_handler=handler) as legacy, \
                Client(build_server(s, "reader"), cache=None) as modern:
            assert names(await legacy.list_tools()) == READER
            async with modern.listen(tools_list_changed=True) as events:
                config.write_text(CONFIG.replace('tools = { allow = ["*"] }', 'tools = { allow = ["misc__*"] }', 1))
                assert await s.reload() is True
                with anyio.fail_after(5):
                    async for event in events:
                        notes.append(type(event).__name__)
                        break
            assert names(await legacy.list_tools()) == ["misc__add"]
            assert names(await modern.list_tools()) == ["misc__add"]
            config.write_text(CONFIG + "\n[agents.broken]\nmode = 'auto'\n")
            assert await s.reload() is False  # rejected: the old config keeps serving
            assert names(await legacy.list_tools()) == ["misc__add"]

    anyio.run(main)
    assert "ToolsListChanged" in notes and "legacy" in notes


@pytest.mark.parametrize("ttl", [None, 0, 7.5])
def test_a_modern_client_keeps_a_list_for_list_ttl_unless_it_hears_of_a_change(tmp_path: Path,
                                                                               ttl: float | None) -> None:
    """Lists change only at a reload: a 2026-07-28 client (the SDK's, its cache on) may keep one ``[host]
    list_ttl`` seconds (60 by default; private: the list is the credential's), and one that listens drops it when
    it hears of the reload. Reads are never kept. The clock is the cache's own, moved by hand."""
    config = tmp_path / "toolcrib.toml"
    config.write_text(("" if ttl is None else f"[host]\nlist_ttl = {ttl}\n") + CONFIG)
    plugins = {"files": FILES, "misc": MISC, "talk": TALK}
    from mcp.client.caching import CacheConfig

    from toolcrib.config import load_config
    from toolcrib.host import Host

    def make() -> Host:
        return Host(load_config(config, {}), plugins=plugins, autoload=False, env={})

    s = ServingState(make(), make_host=make)
    now = [1_000_000.0]
    expected_ms = 60_000 if ttl is None else round(ttl * 1000)

    async def main() -> None:
        cache = CacheConfig(clock=lambda: now[0])
        async with Client(build_server(s, "reader"), cache=cache) as quiet, \
                Client(build_server(s, "reader"), cache=CacheConfig(clock=lambda: now[0])) as listening:
            first = await quiet.list_tools()
            assert (first.ttl_ms, first.cache_scope) == (expected_ms, "private")
            for listed in (await quiet.list_resources(), await quiet.list_resource_templates(),
                           await quiet.list_prompts()):
                assert (listed.ttl_ms, listed.cache_scope) == (expected_ms, "private")
            assert names(await listening.list_tools()) == READER
            async with listening.listen(tools_list_changed=True) as events:
                config.write_text(config.read_text().replace('tools = { allow = ["*"] }',
                                                             'tools = { allow = ["misc__*"] }', 1))
                assert await s.reload() is True
                with anyio.fail_after(5):
                    async for _ in events:
                        break
                assert names(await listening.list_tools()) == ["misc__add"]  # told: asked again
            kept = names(await quiet.list_tools())  # not told: kept for the ttl
            assert kept == (READER if expected_ms else ["misc__add"])
            now[0] += expected_ms / 1000 + 0.001
            assert names(await quiet.list_tools()) == ["misc__add"]

    anyio.run(main)


# -- stdio subprocess -----------------------------------------------------------------------------------------


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "toolcrib.toml"
    path.write_text(CONFIG)
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_stdio_serves_one_agent_and_keeps_the_wire_clean(config_file: Path, mode: str) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "toolcrib.cli", "serve", "--agent", "reader",
                                                                 "--config", str(config_file)],
                                   env=subprocess_env())

    async def main() -> None:
        async with Client(params, mode=mode, cache=None) as client:
            assert names(await client.list_tools()) == READER
            noisy = await client.call_tool("talk__noisy", {})
            assert noisy.content[0].text == "quiet on the wire"  # type: ignore[union-attr]
            assert (await client.call_tool("misc__add", {"a": 1, "b": 2})).content[0].text == "3"  # type: ignore[union-attr]
            assert await unknown(client, "files__write") == (-32602, "Unknown tool: files__write")

    anyio.run(main)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_stdio_a_sub_agent_runs_on_the_clients_model(config_file: Path, mode: str) -> None:
    """Over stdio the model's turns travel the same pipe as the calls: pushed requests (2025-11-25) or round trips
    (2026-07-28). The model is scripted: it cannot run here."""
    params = StdioServerParameters(command=sys.executable, args=["-m", "toolcrib.cli", "serve", "--agent", "runner",
                                                                 "--config", str(config_file)], env=subprocess_env())
    script = [[types.ToolUseContent(id="w1", name="files__read", input={"path": "notes"})],
              [types.TextContent(text="notes say: contents of notes")]]

    async def sampling(context: Any, request: types.CreateMessageRequestParams) -> Any:
        return types.CreateMessageResultWithTools(role="assistant", model="scripted", content=script.pop(0))

    async def main() -> types.CallToolResult:
        async with Client(params, mode=mode, cache=None, sampling_callback=sampling,
                          sampling_capabilities=types.SamplingCapability(tools=types.SamplingToolsCapability())
                          ) as client:
            return await client.call_tool("toolcrib__run_agent", {"agent": "writer", "task": "Read the notes."})

    result = anyio.run(main)
    assert (result.is_error, result.content) == (False, [types.TextContent(text="notes say: contents of notes")])
    assert script == []


@pytest.mark.slow
def test_stdio_answers_malformed_lines_and_survives(config_file: Path) -> None:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        "this is not json",
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        [1, 2],
        {"jsonrpc": "2.0", "id": 7, "method": 7},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "misc__add", "arguments": {"a": 1,
                                                                                                          "b": 1}}},
    ]
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    proc = subprocess.run([sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "reader", "--config",
                           str(config_file)], input=text, capture_output=True, text=True, env=subprocess_env(),
                          timeout=60)
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    # Errors for unreadable lines are written by the reader as it meets them, so they may overtake the answer to an
    # earlier request: compare them in order among themselves, and the answers by id.
    anonymous = [r["error"] for r in replies if r.get("id") is None]
    by_id = {r["id"]: r for r in replies if r.get("id") is not None}
    assert anonymous == [{"code": -32700, "message": "Parse error: the line is not valid JSON"},
                         {"code": -32600, "message": "Invalid request: JSON-RPC batches are not supported"}]
    assert sorted(by_id) == [1, 2, 7]
    assert by_id[1]["result"]["serverInfo"]["name"] == "toolcrib"
    assert by_id[7]["error"] == {"code": -32600, "message": "Invalid request: not a JSON-RPC 2.0 message"}
    assert by_id[2]["result"]["content"] == [{"type": "text", "text": "2"}]
    assert proc.returncode == 0


@pytest.mark.slow
@pytest.mark.parametrize("given", ["", "\n", "\n\n   \n"])
def test_stdio_ends_when_a_client_closes_stdin_having_sent_nothing(config_file: Path, given: str) -> None:
    # A blank line, then end of input: the reader thread once closed its stream from its own thread, which left the
    # waiting reader (and the server with it) asleep forever.
    proc = subprocess.run([sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "reader", "--config",
                           str(config_file)], input=given, capture_output=True, text=True, env=subprocess_env(),
                          timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "")


@pytest.mark.slow
def test_stdio_answers_every_request_read_before_stdin_closes(config_file: Path) -> None:
    """``cat requests | toolcrib serve``: the client closes stdin at once, and calls still running (async and sync)
    are answered, not cancelled. A cancelled request is not waited for, and nothing else is answered twice."""
    def call(request_id: int, tool: str, seconds: float = 0.5) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": tool, "arguments": {"seconds": seconds}}}

    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        call(2, "misc__slow"), call(3, "misc__slow_sync"), call(4, "misc__slow", seconds=20),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}},
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    proc = subprocess.run([sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "runner", "--config",
                           str(config_file)], input=text, capture_output=True, text=True, env=subprocess_env(),
                          timeout=60)
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["id"] for r in replies][:1] == [1] and sorted(r["id"] for r in replies) == [1, 2, 3]
    by_id = {r["id"]: r for r in replies}
    assert by_id[2]["result"]["content"] == [{"type": "text", "text": "done"}]
    assert by_id[3]["result"]["content"] == [{"type": "text", "text": "done"}]
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
def test_stdio_stops_waiting_when_only_the_gone_client_could_answer(config_file: Path) -> None:
    """An asked call pushes an elicitation after stdin closed: nobody can answer it, so the session ends at once
    rather than after the call timeout (the subprocess guard of 60 s is shorter than that wait of 65 s). The
    server numbers its own requests, so the elicitation also has id 1."""
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "t", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "files__write", "arguments": {"path": "a", "text": "b"}}},
    ]
    text = "".join(json.dumps(line) + "\n" for line in lines)
    proc = subprocess.run([sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "writer", "--config",
                           str(config_file)], input=text, capture_output=True, text=True, env=subprocess_env(),
                          timeout=60)
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r.get("id"), r.get("method")) for r in replies] == [(1, None), (1, "elicitation/create")]
    assert proc.returncode == 0, proc.stderr


def test_stdio_unknown_agent_is_a_clear_error(config_file: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "ghost", "--config",
                           str(config_file)], capture_output=True, text=True, env=subprocess_env(), timeout=60)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "error: unknown agent 'ghost' (configured agents: reader, runner, silent, writer)\n"


# -- HTTP subprocess --------------------------------------------------------------------------------------------

@pytest.fixture
def http_server(config_file: Path) -> Iterator[tuple[str, Path, Path]]:
    proc, base, log = start_http(config_file)
    try:
        yield base, config_file, log
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_http_each_token_sees_its_agent(http_server: tuple[str, Path, Path], mode: str) -> None:
    base, _, _ = http_server

    async def main() -> None:
        for agent, token, expected in (("reader", TOKENS["TOK_READER"], READER),
                                       ("writer", TOKENS["TOK_WRITER"], WRITER)):
            http, client = await http_client(f"{base}/agents/{agent}/mcp", token, mode)
            async with http, client:
                assert names(await client.list_tools()) == expected
                assert await unknown(client, "files__rm") == (-32602, "Unknown tool: files__rm")
        http, client = await http_client(f"{base}/agents/reader/mcp", TOKENS["TOK_READER"], mode)
        async with http, client:
            assert (await client.call_tool("misc__add", {"a": 20, "b": 22})).content[0].text == "42"

    anyio.run(main)


@pytest.mark.slow
def test_http_refuses_every_bad_credential_alike(http_server: tuple[str, Path, Path]) -> None:
    base, _, _ = http_server
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    cases = {
        "no token": ("/agents/reader/mcp", {}),
        "wrong token": ("/agents/reader/mcp", {"Authorization": "Bearer nope"}),
        "other agent's token": ("/agents/reader/mcp", {"Authorization": f"Bearer {TOKENS['TOK_WRITER']}"}),
        "unknown agent": ("/agents/ghost/mcp", {"Authorization": f"Bearer {TOKENS['TOK_READER']}"}),
        "agent without token": ("/agents/silent/mcp", {"Authorization": "Bearer x"}),
        "token in query": (f"/agents/reader/mcp?access_token={TOKENS['TOK_READER']}", {}),
        "basic auth": ("/agents/reader/mcp", {"Authorization": "Basic cmVhZGVyOng="}),
    }
    with httpx2.Client(base_url=base, timeout=30) as http:
        for case, (path, extra) in cases.items():
            response = http.post(path, json=body, headers={**headers, **extra})
            assert response.status_code == 401, case
            assert response.headers["www-authenticate"].startswith('Bearer realm="toolcrib"'), case
            assert TOKENS["TOK_READER"] not in response.text and "reader" not in response.text, case
        wrong = http.post("/agents/reader/mcp", json=body, headers={**headers, "Authorization": "Bearer nope"})
        ghost = http.post("/agents/ghost/mcp", json=body, headers={**headers, "Authorization": "Bearer nope"})
        assert (wrong.text, wrong.headers["www-authenticate"]) == (ghost.text, ghost.headers["www-authenticate"])
        auth = {"Authorization": f"Bearer {TOKENS['TOK_READER']}"}
        origin = http.post("/agents/reader/mcp", json=body, headers={**headers, **auth,
                                                                      "Origin": "http://evil.example"})
        assert origin.status_code == 403
        rebound = http.post("/agents/reader/mcp", json=body, headers={**headers, **auth,
                                                                       "Host": "attacker.example:8000"})
        assert rebound.status_code == 421
        big = http.post("/agents/reader/mcp", content=b"x" * (4 * 1024 * 1024 + 1), headers={**headers, **auth})
        assert big.status_code == 413


@pytest.mark.slow
def test_http_session_of_one_agent_is_nothing_on_another(http_server: tuple[str, Path, Path]) -> None:
    base, _, _ = http_server
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    with httpx2.Client(base_url=base, timeout=30) as http:
        reader = http.post("/agents/reader/mcp", json=init,
                           headers={**headers, "Authorization": f"Bearer {TOKENS['TOK_READER']}"})
        session = reader.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        replay = http.post("/agents/writer/mcp", json=listing, headers={
            **headers, "Authorization": f"Bearer {TOKENS['TOK_WRITER']}", "mcp-session-id": session,
            "mcp-protocol-version": "2025-11-25"})
        assert replay.status_code == 404


@pytest.mark.slow
def test_http_binding_beyond_loopback_needs_a_flag(config_file: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "toolcrib.cli", "serve", "--http", "--host", "0.0.0.0", "--port",
                           "0", "--config", str(config_file)], capture_output=True, text=True,
                          env=subprocess_env(**TOKENS), timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: refusing to listen on 0.0.0.0: every agent's endpoint would be reachable "
                                  "from the network; pass --allow-remote")


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_http_a_sub_agent_runs_on_the_clients_model(http_server: tuple[str, Path, Path], mode: str) -> None:
    base, _, _ = http_server
    result = anyio.run(run_writer_over_http, base, mode)
    assert (result.is_error, result.content) == (False, [types.TextContent(text="notes say: contents of notes")])


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_http_stateless(config_file: Path, mode: str) -> None:
    proc, base, log = start_http(config_file, "--stateless")
    assert log.read_text().startswith("warning: --stateless without $TOOLCRIB_STATE_SECRET: if several replicas "
                                      "serve behind a balancer, give them all one secret")
    try:
        async def main() -> None:
            http, client = await http_client(f"{base}/agents/writer/mcp", TOKENS["TOK_WRITER"], mode,
                                             elicitation_callback=lambda c, p: accept())
            async with http, client:
                assert names(await client.list_tools()) == WRITER
                result = await client.call_tool("files__read", {"path": "x"})
                assert result.content[0].text == "contents of x"  # type: ignore[union-attr]
                asked = await client.call_tool("files__write", {"path": "x", "text": "y"})
                if mode == "auto":  # 2026-07-28: the input-required round trip needs no session
                    assert asked.content[0].text == "wrote 1 characters to x"  # type: ignore[union-attr]
                else:  # a stateless legacy session has no back-channel to ask on
                    assert asked.content[0].text.endswith("no approver could answer (the client does not "  # type: ignore[union-attr]
                                                          "support elicitation and no approval hook decided).")

        anyio.run(main)
        ran = anyio.run(run_writer_over_http, base, mode)
        if mode == "auto":  # each model turn is a round trip of the call: no session needed
            assert ran.content == [types.TextContent(text="notes say: contents of notes")]
        else:
            assert ran.content == [types.TextContent(
                text="This needs the client's model, which this connection cannot be asked for (a stateless "
                     "2025-11-25 connection has no back-channel).")]
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.slow
def test_http_reload_good_then_bad_config_while_a_session_is_open(http_server: tuple[str, Path, Path]) -> None:
    base, config_file, log = http_server
    changed: list[str] = []

    async def handler(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.append("tools")

    async def main() -> None:
        http, client = await http_client(f"{base}/agents/reader/mcp", TOKENS["TOK_READER"], "legacy",
                                         message_handler=handler)
        async with http, client:
            assert names(await client.list_tools()) == READER
            config_file.write_text(CONFIG.replace('tools = { allow = ["*"] }', 'tools = { allow = ["misc__*"] }', 1))
            with anyio.fail_after(30):
                while names(await client.list_tools()) != ["misc__add"]:
                    await anyio.sleep(0.2)
            with anyio.fail_after(30):
                while not changed:
                    await anyio.sleep(0.1)
            config_file.write_text("[agents.reader]\nmode = 'auto'\n")
            await anyio.to_thread.run_sync(wait_for, log, "reload rejected, still serving the previous config")
            assert log.read_text().count("agents.reader.mode: expected one of") == 1
            assert names(await client.list_tools()) == ["misc__add"]
            assert (await client.call_tool("misc__add", {"a": 1, "b": 1})).content[0].text == "2"  # type: ignore[union-attr]

    anyio.run(main)


def test_allowed_hosts_and_origins_extend_the_loopback_defaults() -> None:
    from toolcrib.mcp.http import HttpOptions

    security = HttpOptions(allowed_hosts=["proxy.example:8443", "api.example", "[fd00::1]"],
                           allowed_origins=["https://app.example"]).security()
    loopback = ["127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*"]
    assert security.allowed_hosts == [*loopback, "proxy.example:8443", "api.example", "api.example:*", "[fd00::1]",
                                      "[fd00::1]:*"]
    assert security.allowed_origins == ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*",
                                        "http://127.0.0.1", "http://localhost", "http://[::1]", "https://app.example"]
    assert security.enable_dns_rebinding_protection is True


@pytest.mark.slow
def test_http_accepts_an_allowed_host_and_only_that(config_file: Path) -> None:
    proc, base, _ = start_http(config_file, "--allowed-host", "proxy.example")
    try:
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
                   "Authorization": f"Bearer {TOKENS['TOK_READER']}"}
        with httpx2.Client(base_url=base, timeout=30) as http:
            port = base.rsplit(":", 1)[1]
            for host, status in (("proxy.example", 200), (f"proxy.example:{port}", 200), ("other.example", 421),
                                 (f"proxy.example.evil:{port}", 421)):
                answer = http.post("/agents/reader/mcp", json=body, headers={**headers, "Host": host})
                assert answer.status_code == status, host
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.slow
@pytest.mark.parametrize("wire", ["pipe", "file"])
def test_stdio_refuses_a_line_too_long_answers_a_last_line_without_newline_and_leaves_the_pipe_blocking(
        config_file: Path, tmp_path: Path, wire: str) -> None:
    """Over a pipe the wire is read and written on the event loop (non-blocking, put back when serving ends); from a
    file by a thread. Both read lines alike: one over MAX_LINE_BYTES is refused without being held, and the last
    line needs no newline."""
    from toolcrib.mcp.stdio import MAX_LINE_BYTES

    def request(request_id: int, **params: Any) -> str:
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})

    text = "".join([
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}) + "\n",
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n",
        request(2, name="misc__add", arguments={"a": 1, "b": "x" * (MAX_LINE_BYTES + 10)}) + "\n",  # too long
        request(3, name="misc__add", arguments={"a": 1, "b": 2}) + "\n",
        request(4, name="misc__add", arguments={"a": 1, "b": "y" * (MAX_LINE_BYTES - 300)}) + "\n",  # it fits
        request(5, name="misc__add", arguments={"a": 2, "b": 2}),  # the last, with no newline
    ])
    command = [sys.executable, "-m", "toolcrib.cli", "serve", "--agent", "reader", "--config", str(config_file)]
    if wire == "file":
        (tmp_path / "requests.jsonl").write_text(text)
        with (tmp_path / "requests.jsonl").open("rb") as given:
            proc = subprocess.run(command, stdin=given, capture_output=True, env=subprocess_env(), timeout=120)
        out = proc.stdout.decode()
    else:
        read_end, write_end = os.pipe()  # the server's stdout: a pipe of this test's, to see its mode afterwards
        with subprocess.Popen(command, stdin=subprocess.PIPE, stdout=write_end, stderr=subprocess.DEVNULL,
                              env=subprocess_env()) as server:
            assert server.stdin is not None
            server.stdin.write(text.encode())
            server.stdin.close()
            server.wait(60)  # (its few answers fit in the pipe)
        assert os.get_blocking(write_end)  # the server made it non-blocking while serving, and put it back
        os.close(write_end)
        with os.fdopen(read_end, "rb") as answers:
            out = answers.read().decode()
    replies = [json.loads(line) for line in out.splitlines()]
    anonymous = [r["error"] for r in replies if r.get("id") is None]
    by_id = {r["id"]: r for r in replies if r.get("id") is not None}
    assert anonymous == [{"code": -32600, "message": f"Request too large: a message may be at most {MAX_LINE_BYTES} "
                                                     "bytes"}]
    assert sorted(by_id) == [1, 3, 4, 5]
    assert by_id[3]["result"]["content"] == [{"type": "text", "text": "3"}]
    assert by_id[4]["result"]["content"] == [{"type": "text", "text": "Invalid arguments for misc__add: the "
                                              "arguments are larger than the limit of 1048576 bytes"}]  # (read whole)
    assert by_id[5]["result"]["content"] == [{"type": "text", "text": "4"}]
