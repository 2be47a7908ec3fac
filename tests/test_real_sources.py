"""Real third-party sources, as operators use them: @modelcontextprotocol/server-everything and server-filesystem
(npm, pinned, on Node 22 from the npm registry), mcp-server-time (PyPI), and the llm plugins llm-tools-simpleeval,
llm-tools-quickjs and llm-tools-sqlite (PyPI; installed with the test extras). Nothing here is a stand-in."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from conftest import NPM_CACHE, config_from, npm_packages

pytestmark = pytest.mark.slow

MODULES = NPM_CACHE / "node_modules"  # pinned in tests/conftest.py
NODE = MODULES / "node" / "bin" / "node"
EVERYTHING = MODULES / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
FILESYSTEM = MODULES / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"


@pytest.fixture(scope="module")
def node_servers() -> None:
    npm_packages()


async def _host(text: str, base: Path, **kwargs: Any) -> Any:
    """A host with the config's upstream servers connected, in the caller's task group."""
    from toolcrib.host import Host
    from toolcrib.supply import supply

    loaded = config_from(text, base)
    pool_cm = supply()
    supplied = await pool_cm.__aenter__()
    sources = await supplied.sync(loaded)
    host = Host(loaded, sources=sources,
                autoload=False, plugins={}, env={}, **kwargs)
    return host, pool_cm


# What each server-everything tool is called with, and what its answer must say.
EVERYTHING_CALLS = {
    "everything__echo": ({"message": "hi"}, "Echo: hi"),
    "everything__get_annotated_message": ({"messageType": "success"}, "Operation completed successfully"),
    "everything__get_env": ({}, '"PATH"'),
    "everything__get_resource_links": ({"count": 2}, "Here are 2 resource links"),
    "everything__get_resource_reference": ({"resourceType": "Text", "resourceId": 1},
                                           "demo://resource/dynamic/text/1"),
    "everything__get_structured_content": ({"location": "Chicago"}, '"temperature"'),
    "everything__get_sum": ({"a": 2, "b": 40}, "The sum of 2 and 40 is 42."),
    "everything__get_tiny_image": ({}, "Here's the image you requested"),
    "everything__gzip_file_as_resource": ({"name": "hello.gz", "data": "data:text/plain;base64,aGVsbG8="}, ""),
    "everything__toggle_simulated_logging": ({}, "simulated, random-leveled logging"),
    "everything__toggle_subscriber_updates": ({}, "simulated resource updated notifications"),
    "everything__trigger_long_running_operation": ({"duration": 1, "steps": 2}, "Long running operation completed"),
    # a tool it runs only as a 2025-11-25 task (SEP-1686): called as a task, polled, its result asked for
    "everything__simulate_research_query": ({"topic": "tides"}, "# Research Report: tides\n"),
}


# server-everything as an upstream server, and an agent that may use all of it
EVERYTHING_CONFIG = f"""
[mcps.everything]
command = {json.dumps(str(NODE))}
args = [{json.dumps(str(EVERYTHING))}]

[agents.a.permissions]
mcps = {{ allow = ["everything"] }}
tools = {{ allow = ["*"] }}
resources = {{ allow = ["*"] }}
prompts = {{ allow = ["*"] }}
"""

ASKING = ["everything__trigger_elicitation_request", "everything__trigger_sampling_request",
          "everything__trigger_url_elicitation"]


def test_every_tool_of_server_everything_is_served_and_callable(node_servers: None, tmp_path: Path) -> None:
    text = EVERYTHING_CONFIG

    async def main() -> None:
        host, pool = await _host(text, tmp_path)
        try:
            view = host.view("a")
            # 12 names with hyphens, served mapped; and, as toolcrib's client can ask the agent's client, the three
            # that ask a user or a model (test_a_real_server_s_questions_and_sampling_reach_the_agent_s_client)
            assert view.names == sorted([*EVERYTHING_CALLS, *ASKING])
            echo = view.lookup("everything__echo")
            assert echo is not None and echo.to_mcp().get("_meta") is None
            sum_tool = view.lookup("everything__get_sum")
            assert sum_tool is not None and sum_tool.to_mcp()["_meta"] == {"io.toolcrib/source-name": "get-sum"}
            for name, (arguments, says) in EVERYTHING_CALLS.items():
                result = await view.call(name, arguments)
                assert not result.is_error, (name, result.text)
                assert says in result.text, (name, result.to_wire())
            assert host.catalog.record("everything").error is None
            research = view.lookup("everything__simulate_research_query")
            assert research is not None and research.tool.task == "optional"  # toolcrib's clients may have a task
            # its prompts and resources pass through, names mapped too
            assert [p["name"] for p in view.mcp_prompts] == [
                "everything__args_prompt", "everything__completable_prompt", "everything__resource_prompt",
                "everything__simple_prompt"]
            got = await view.get_prompt("everything__simple_prompt")
            assert got["messages"][0]["content"]["type"] == "text"
            contents = await view.read("demo://resource/dynamic/text/1")
            assert contents[0]["uri"] == "demo://resource/dynamic/text/1"
        finally:
            host.close()
            await pool.__aexit__(None, None, None)

    anyio.run(main)


def test_server_filesystem_and_mcp_server_time(node_servers: None, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("remember the milk\n")
    text = f"""
[mcps.files]
command = {json.dumps(str(NODE))}
args = [{json.dumps(str(FILESYSTEM))}, {json.dumps(str(shared))}]

[mcps.time]
command = {json.dumps(sys.executable)}
args = ["-m", "mcp_server_time", "--local-timezone", "UTC"]

[agents.a.permissions]
mcps = {{ allow = ["*"] }}
tools = {{ allow = ["files__read_text_file", "files__list_allowed_directories", "time__*"] }}
"""

    async def main() -> None:
        host, pool = await _host(text, tmp_path)
        try:
            view = host.view("a")
            assert view.names == ["files__list_allowed_directories", "files__read_text_file",
                                  "time__convert_time", "time__get_current_time"]
            read = await view.call("files__read_text_file", {"path": str(shared / "notes.txt")})
            assert (read.is_error, read.text) == (False, "remember the milk\n")
            now = await view.call("time__get_current_time", {"timezone": "UTC"})
            assert not now.is_error and json.loads(now.text)["timezone"] == "UTC"
        finally:
            host.close()
            await pool.__aexit__(None, None, None)

    anyio.run(main)


LLM_CONFIG = """
[agents.calc.permissions]
plugins = { allow = ["llm"] }
tools = { allow = ["llm__*"] }

[agents.nocalc.permissions]
plugins = { deny = ["llm-tools-simpleeval"] }
tools = { allow = ["llm__*"] }

[agents.db.permissions]
plugins = { allow = ["llm-tools-sqlite"] }
tools = { allow = ["llm__*"] }

[packs.llm]
plugins = ["llm-tools-simpleeval", "llm-tools-quickjs", "llm-tools-sqlite"]
[packs.llm.toolboxes.SQLite]
path = "reports.db"
"""


def test_real_llm_plugins_are_plugins_and_the_sqlite_toolbox_answers_over_mcp(tmp_path: Path) -> None:
    pytest.importorskip("llm_tools_sqlite", reason="the test extras install the real llm plugins")
    import toolcrib_llm
    from mcp import Client

    from toolcrib.host import Host
    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    with sqlite3.connect(tmp_path / "reports.db") as db:
        db.execute("create table sales (region text, total integer)")
        db.executemany("insert into sales values (?, ?)", [("eu", 120), ("us", 80)])
    host = Host(config_from(LLM_CONFIG.replace('"reports.db"', json.dumps(str(tmp_path / "reports.db"))), tmp_path),
                plugins={"llm": toolcrib_llm}, autoload=False, env={})
    rows = {r.name: r for r in host.records}
    assert {name: (rows[name].kind, rows[name].tool_count) for name in
            ("llm-tools-simpleeval", "llm-tools-quickjs", "llm-tools-sqlite")} == {
        "llm-tools-simpleeval": ("llm", 1), "llm-tools-quickjs": ("llm", 1), "llm-tools-sqlite": ("llm", 2)}
    assert host.view("calc").names == ["llm__SQLite_query", "llm__SQLite_schema", "llm__quickjs", "llm__simple_eval"]
    assert "llm__simple_eval" not in host.view("nocalc").names  # denied by its distribution's name
    assert host.view("db").names == ["llm__SQLite_query", "llm__SQLite_schema"]
    assert anyio.run(lambda: host.call("calc", "llm__simple_eval", {"expression": "6 * 7"})).text == "42"

    async def over_mcp() -> str:
        async with Client(build_server(ServingState(host), "db"), cache=None) as client:
            result = await client.call_tool("llm__SQLite_query", {"sql": "select region, total from sales order by 1"})
            return result.content[0].text  # type: ignore[union-attr]

    # the toolbox's sqlite3 connection was made on its own thread, and every call runs there
    assert json.loads(anyio.run(over_mcp)) == [{"region": "eu", "total": 120}, {"region": "us", "total": 80}]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_real_server_s_questions_and_sampling_reach_the_agent_s_client(node_servers: None, tmp_path: Path,
                                                                        mode: str) -> None:
    """server-everything asks the user (elicitation) and the model (sampling) in the middle of a call, as a
    handshake-era server does: toolcrib puts each to the calling agent's own MCP client, with its checks of the
    form, and the answer goes back to the server."""
    import mcp_types as types
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    text = EVERYTHING_CONFIG
    asked: list[Any] = []

    async def on_elicit(context: Any, params: Any) -> Any:
        asked.append(("elicit", params.message))
        return types.ElicitResult(action="accept", content={"name": "Ann Example"})

    async def on_sample(context: Any, params: Any) -> Any:
        asked.append(("sample", params.messages[0].content.text))
        asked.append(("asked with", params.max_tokens, params.temperature, params.include_context, params.meta))
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="sampled words"),
                                         model="the-agent-s-model")

    async def main() -> tuple[Any, Any]:
        host, pool = await _host(text, tmp_path)
        try:
            async with Client(build_server(ServingState(host), "a"), mode=mode, cache=None,
                              elicitation_callback=on_elicit, sampling_callback=on_sample) as client:
                elicited = await client.call_tool("everything__trigger_elicitation_request", {})
                sampled = await client.call_tool("everything__trigger_sampling_request",
                                                 {"prompt": "say hi", "maxTokens": 20})
                return ((elicited.is_error, "\n".join(c.text for c in elicited.content if c.type == "text")),
                        (sampled.is_error, "\n".join(c.text for c in sampled.content if c.type == "text")))
        finally:
            host.close()
            await pool.__aexit__(None, None, None)

    (elicit_failed, elicited), (sample_failed, sampled) = anyio.run(main)
    if mode == "auto":  # 2026-07-28 between client and host: a question in the middle of a call cannot be put
        from toolcrib.supply.mcp.runners import MID_CALL

        assert (elicit_failed, elicited) == (sample_failed, sampled) == (True, f"MCP error -32600: {MID_CALL}")
        assert asked == []
        return
    assert not elicit_failed and not sample_failed
    assert ("elicit", "[upstream server 'everything'] Please provide inputs for the following fields:") in asked
    assert "User provided the requested information!" in elicited and "Ann Example" in elicited
    assert ("sample", "Resource trigger-sampling-request context: say hi") in asked
    # every field as the server asked it (its temperature), and _meta naming the server (its own: its hop's)
    assert ("asked with", 20, 0.7, None, {"io.toolcrib/asked-by": "everything"}) in asked
    assert '"text": "sampled words"' in sampled and '"model": "the-agent-s-model"' in sampled


def test_a_real_servers_questions_and_sampling_are_refused_to_it_where_its_forward_leaves_them_out(
        node_servers: None, tmp_path: Path) -> None:
    """[mcps.everything] forward = ["progress", "log"]: server-everything's question and its request for a turn of
    the model are refused to it, saying why, and the agent's client is never asked."""
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    text = EVERYTHING_CONFIG.replace("args = [", 'forward = ["progress", "log"]\nargs = [', 1)
    asked: list[str] = []

    async def on_ask(context: Any, params: Any) -> Any:
        asked.append(type(params).__name__)
        raise AssertionError("the agent's client is never asked")

    async def main() -> list[str]:
        host, pool = await _host(text, tmp_path)
        try:
            async with Client(build_server(ServingState(host), "a"), mode="legacy", cache=None,
                              elicitation_callback=on_ask, sampling_callback=on_ask) as client:
                answers = [await client.call_tool("everything__trigger_elicitation_request", {}),
                           await client.call_tool("everything__trigger_sampling_request",
                                                  {"prompt": "say hi", "maxTokens": 20})]
                return ["\n".join(c.text for c in a.content if c.type == "text") for a in answers]
        finally:
            host.close()
            await pool.__aexit__(None, None, None)

    elicited, sampled = anyio.run(main)
    assert asked == []
    assert ("toolcrib does not forward questions to the user from upstream server 'everything' to the agent's "
            "client ([mcps.everything] forward)") in elicited
    assert ("toolcrib does not forward requests for a model's turn from upstream server 'everything' to the "
            "agent's client ([mcps.everything] forward)") in sampled


@pytest.mark.parametrize("forward", ["default", "url_elicitation"])
def test_a_real_servers_url_elicitation_reaches_the_agents_client_only_where_its_forward_lets_it(
        node_servers: None, tmp_path: Path, forward: str) -> None:
    """server-everything sends the user to a page (URL elicitation): refused to it by default, since the page is
    the server's; with url_elicitation in its forward, put to the agent's client naming the server, under an id
    namespaced by the server, https only (an http page is refused to the server, the client never asked)."""
    import mcp_types as types
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    text = EVERYTHING_CONFIG
    if forward != "default":
        text = text.replace("args = [", 'forward = ["elicitation", "url_elicitation"]\nargs = [', 1)
    asked: list[Any] = []

    async def on_elicit(context: Any, params: Any) -> Any:
        asked.append((params.mode, params.message, params.url, params.elicitation_id))
        return types.ElicitResult(action="accept")

    async def main() -> list[str]:
        host, pool = await _host(text, tmp_path)
        try:
            async with Client(build_server(ServingState(host), "a"), mode="legacy", cache=None,
                              elicitation_callback=on_elicit) as client:
                said = []
                for url in ("https://example.com/sign-in", "http://example.com/sign-in"):
                    answer = await client.call_tool("everything__trigger_url_elicitation", {
                        "url": url, "message": "Sign in, please.", "elicitationId": "e-1"})
                    said.append("\n".join(c.text for c in answer.content if c.type == "text"))
                return said
        finally:
            host.close()
            await pool.__aexit__(None, None, None)

    secure, plain = anyio.run(main)
    if forward == "default":
        assert asked == []
        assert ("toolcrib does not forward pages to send the user to from upstream server 'everything' to the "
                "agent's client ([mcps.everything] forward)") in secure
        return
    assert asked == [("url", "[upstream server 'everything'] Sign in, please.", "https://example.com/sign-in",
                      "everything:e-1")]
    assert "User completed the URL elicitation flow." in secure and "Elicitation ID: e-1" in secure
    assert "toolcrib sends the agent's user only to https: pages" in plain


@pytest.mark.parametrize("forward", ["default", "url_elicitation"])
def test_a_real_servers_pages_first_error_reaches_the_agents_client_only_where_its_forward_lets_it(
        node_servers: None, tmp_path: Path, forward: str) -> None:
    """server-everything refuses a call until the user opens a page (-32042, URLElicitationRequired): with
    url_elicitation in its forward, the agent's client gets that error, the page's message naming the server and
    its id namespaced, and the call made again goes on; by default, the call's error result says the server refused."""
    import mcp_types as types
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    text = EVERYTHING_CONFIG
    if forward != "default":
        text = text.replace("args = [", 'forward = ["elicitation", "url_elicitation"]\nargs = [', 1)
    arguments = {"url": "https://example.com/sign-in", "message": "Sign in, please.", "elicitationId": "e-2",
                 "errorPath": True}

    async def on_elicit(context: Any, params: Any) -> Any:
        return types.ElicitResult(action="accept")

    async def main() -> Any:
        host, pool = await _host(text, tmp_path)
        try:
            async with Client(build_server(ServingState(host), "a"), mode="legacy", cache=None,
                              elicitation_callback=on_elicit) as client:
                try:
                    first = await client.call_tool("everything__trigger_url_elicitation", arguments)
                except MCPError as exc:
                    first = exc.error
                again = await client.call_tool("everything__trigger_url_elicitation", arguments)
                return first, "\n".join(c.text for c in again.content if c.type == "text")
        finally:
            host.close()
            await pool.__aexit__(None, None, None)

    first, again = anyio.run(main)
    if forward == "default":
        assert first.is_error and first.content[0].text.startswith(
            "upstream server 'everything' refused the call: ")
        return
    assert (first.code, first.message) == (-32042, "[upstream server 'everything'] MCP error -32042: This request "
                                                   "requires browser-based authorization.")  # (as it says it)
    [page] = first.data["elicitations"]
    assert (page["mode"], page["message"], page["url"]) == (
        "url", "[upstream server 'everything'] Open this link to satisfy the prerequisite, then retry the request.",
        "https://modelcontextprotocol.io")
    assert re.fullmatch(r"everything:[0-9a-f-]{36}", page["elicitationId"])
    assert "User completed the URL elicitation flow." in again


def test_an_llm_toolbox_not_configured_is_listed_with_why_and_logs_nothing(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("llm_tools_sqlite", reason="the test extras install the real llm plugins")
    from conftest import cli

    config = tmp_path / "toolcrib.toml"
    config.write_text('[packs.llm]\nplugins = ["llm-tools-quickjs", "llm-tools-sqlite"]\n')
    code, out, err = cli("plugins", "--config", str(config))
    lines = out.splitlines()
    sqlite = next(i for i, line in enumerate(lines) if line.startswith("llm-tools-sqlite "))
    assert (code, lines[sqlite].split()[:4], lines[sqlite + 1]) == (
        0, ["llm-tools-sqlite", "llm", "not", "served"], "    note: toolbox SQLite not configured: to serve it, add "
        "[packs.llm.toolboxes.SQLite] with its constructor's arguments")
    quickjs = next(i for i, line in enumerate(lines) if line.startswith("llm-tools-quickjs "))
    assert lines[quickjs + 1] == ("    note: toolbox QuickJS not configured: to serve it, add "
                                  "[packs.llm.toolboxes.QuickJS] with its constructor's arguments")
    assert "registers the toolbox" not in err + capfd.readouterr().err  # no INFO line on every command


def test_a_2025_task_s_question_reaches_the_agent_s_client_and_its_answer_the_task(node_servers: None,
                                                                                   tmp_path: Path) -> None:
    """server-everything's research task, asked to be ambiguous, stops for the user's choice (SEP-1686's
    input_required): the question comes while toolcrib waits for the task's result, goes to the agent's client
    (a 2025-11-25 session), and the answer shapes the report."""
    import mcp_types as types
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    asked: list[str] = []

    async def on_elicit(context: Any, params: Any) -> Any:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"interpretation": "programming"})

    async def main() -> Any:
        host, pool = await _host(EVERYTHING_CONFIG, tmp_path)
        try:
            async with Client(build_server(ServingState(host), "a"), mode="legacy", cache=None,
                              elicitation_callback=on_elicit) as client:
                return await client.call_tool("everything__simulate_research_query",
                                              {"topic": "python", "ambiguous": True})
        finally:
            host.close()
            await pool.__aexit__(None, None, None)

    result = anyio.run(main)
    assert not result.is_error
    assert result.content[0].text.startswith("# Research Report: python (programming)\n")
    assert asked == ["[upstream server 'everything'] The research query \"python\" could have multiple "
                     "interpretations. Please clarify what you're looking for:"]
