"""Outputs obey the decision: what a tool, a prompt or a read hands an agent never refers to a resource the agent's
view hides (SPEC 4; docs/security.md "Results"). The same decision as resources/list and resources/read, on normal
URIs; what refers to a hidden resource is taken out, as if it had not been sent, and named in the audit record."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

import toolcrib
from conftest import config_from, make_host, offered
from docs_pack import CONFIG as DOCS_CONFIG
from docs_pack import Docs
from toolcrib import EmbeddedResource, Message, ResourceLink, Text, ToolResult
from toolcrib.host import Host
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState
from toolcrib.supply import supply

# every way a result can point at docs://secret and docs://pages/internal (agent b may see neither), a resource
# b sees, a URI no source serves, and text
LINKS = [
    ResourceLink("docs://secret", "secret"),
    ResourceLink("DOCS://%73ecret", "secret, spelt otherwise"),
    EmbeddedResource("docs://pages/internal", text="Staff only."),
    ResourceLink("docs://pages/intro", "intro"),
    EmbeddedResource("docs://readme", text="# Readme"),
    ResourceLink("https://example.com/page", "a web page"),
    Text("That is all."),
]
SEEN_BY_B = [
    {"type": "resource_link", "uri": "docs://pages/intro", "name": "intro"},
    {"type": "resource", "resource": {"uri": "docs://readme", "text": "# Readme"}},
    {"type": "resource_link", "uri": "https://example.com/page", "name": "a web page"},
    {"type": "text", "text": "That is all."},
]
WITHHELD_FROM_B = ["docs://secret", "DOCS://%73ecret", "docs://pages/internal"]


@toolcrib.tool(annotations={"readOnlyHint": True})
def links() -> list[Any]:
    """Point at the docs."""
    return LINKS


@toolcrib.tool(annotations={"readOnlyHint": True})
def plain() -> str:
    """Say nothing of the docs; a post-tool-use hook adds a link to the secret."""
    return "plain"


@toolcrib.prompt
def cite() -> list[Message]:
    """Quote the secret and the readme."""
    return [Message("user", EmbeddedResource("docs://secret", text="s3cret")),
            Message("user", ResourceLink("docs://readme", "readme")), Message("assistant", "Quoted.")]


class Leaky:
    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return [links, plain]

    @toolcrib.hookimpl
    def toolcrib_prompts(self) -> list[Any]:
        return [cite]

    @toolcrib.hookimpl
    def toolcrib_post_tool_use(self, tool: str, result: ToolResult) -> ToolResult | None:
        if tool != "leaky__plain":
            return None
        return ToolResult((*result.content, ResourceLink("docs://pages/internal", "internal").to_wire()))

    @toolcrib.hookimpl
    def toolcrib_audit(self, record: Any) -> None:
        AUDIT.append(dict(record))


AUDIT: list[dict[str, Any]] = []

CONFIG = DOCS_CONFIG.replace('prompts = { allow = ["docs__review"] }',
                             'prompts = { allow = ["docs__review", "leaky__*"] }')


def host() -> Host:
    AUDIT.clear()
    return make_host(CONFIG, {"docs": Docs(), "leaky": Leaky()})


def test_a_tools_result_loses_what_refers_to_a_resource_the_agent_may_not_see() -> None:
    served = host()

    async def main() -> None:
        async with Client(build_server(ServingState(served), "b"), mode="legacy", cache=None) as client:
            result = await client.call_tool("leaky__links", {})
            assert [block.model_dump(mode="json", exclude_none=True, by_alias=True) for block in result.content] == \
                SEEN_BY_B
            assert result.is_error is False
            added = await client.call_tool("leaky__plain", {})  # what a post-tool-use hook adds is checked too
            assert [(block.type, getattr(block, "text", None)) for block in added.content] == [("text", "plain")]
        async with Client(build_server(ServingState(served), "a"), mode="legacy", cache=None) as client:
            result = await client.call_tool("leaky__links", {})
            assert len(result.content) == len(LINKS)  # a sees every one of them

    anyio.run(main)
    notes = [(r["agent"], r["tool"], r.get("notes")) for r in AUDIT if r["kind"] == "tool"]
    assert notes == [("b", "leaky__links", {"toolcrib.withheld": WITHHELD_FROM_B}),
                     ("b", "leaky__plain", {"toolcrib.withheld": ["docs://pages/internal"]}),
                     ("a", "leaky__links", None)]


def test_the_python_api_withholds_alike() -> None:
    served = host()

    async def main() -> None:
        view = served.view("b")
        assert list((await view.call("leaky__links")).content) == SEEN_BY_B

    anyio.run(main)


def test_a_prompts_messages_that_refer_to_a_hidden_resource_are_taken_out() -> None:
    served = host()

    async def main() -> None:
        b = await served.view("b").get_prompt("leaky__cite")
        assert b["messages"] == [
            {"role": "user", "content": {"type": "resource_link", "uri": "docs://readme", "name": "readme"}},
            {"role": "assistant", "content": {"type": "text", "text": "Quoted."}}]
        a = await served.view("a").get_prompt("leaky__cite")
        assert len(a["messages"]) == 3

    anyio.run(main)
    assert [(r["agent"], r.get("notes")) for r in AUDIT if r["kind"] == "prompt"] == [
        ("b", {"toolcrib.withheld": ["docs://secret"]}), ("a", None)]


def test_what_decides_is_the_view_of_resources_list_and_read() -> None:
    view = host().view("b")
    hidden = {"docs://secret", "docs://%73ecret", "DOCS://secret", "docs://pages/internal", "docs://pages/./internal"}
    shown = {"docs://readme", "docs://pages/intro", "docs://pages/nowhere", "https://example.com/", "notes://x",
             "not a uri"}
    assert {uri for uri in hidden | shown if view.hides_uri(uri)} == hidden
    for uri in hidden:
        assert view.resource(uri) is None
    # a URI no source serves is hidden when a rule names it: a deny rule of resources, a scope the token lacks
    denying = make_host(CONFIG.replace('"docs://pages/internal"]', '"docs://pages/internal", "files://secret/*"]'),
                        {"docs": Docs(), "leaky": Leaky()}).view("b")
    assert (denying.hides_uri("files://secret/a"), denying.hides_uri("files://public/a")) == (True, False)
    # an agent whose rules allow no resource at all: every served one is withheld, nothing else
    none = host().view("none")
    assert {uri for uri in ("docs://readme", "docs://pages/intro", "https://example.com/") if none.hides_uri(uri)} \
        == {"docs://readme", "docs://pages/intro"}


# -- an upstream server's results, reads and prompts ---------------------------------------------------------------

SERVER = str(Path(__file__).parent / "upstream_server.py")
UPSTREAM = f"""
[mcps.up]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}]
env = {{ LINKS = "1" }}

[agents.a.permissions]
mcps = {{ allow = ["up"] }}
tools = {{ allow = ["*"] }}
resources = {{ deny = ["notes://private/*", "ui://app/secret"] }}
prompts = {{ allow = ["*"] }}

[agents.b.permissions]
mcps = {{ allow = ["up"] }}
tools = {{ deny = ["up__app*"] }}
resources = {{ allow = ["*"] }}
"""


@pytest.mark.slow
def test_an_upstream_servers_links_reads_and_prompts_obey_the_agents_view() -> None:
    async def main() -> None:
        loaded = config_from(UPSTREAM)
        async with supply() as supplied:
            sources = await supplied.sync(loaded)
            assert [r.state for r in offered(sources)[0]] == ["loaded"]
            served = Host(loaded, sources=sources, plugins={}, autoload=False, env={})
            view = served.view("a")
            result = await view.call("up__links")
            assert [(b["type"], b.get("uri") or b.get("resource", {}).get("uri") or b.get("text"))
                    for b in result.content] == [("resource_link", "notes://public/readme"),
                                                 ("text", "Two notes.")]
            # a result's _meta passes on but what would speak for toolcrib, and an App's hidden ui:// resource
            assert result.to_wire()["_meta"] == {"vendor/y": "hi"}
            app = await view.call("up__app")
            assert app.to_wire()["_meta"] == {"ui": {"resourceUri": "ui://app/main"}, "vendor/y": "hi"}
            assert app.content == ({"type": "text", "text": "app", "_meta": {"vendor/c": 1}},)  # (a block's too)
            wires = {w["name"]: w.get("_meta") for w in view.mcp_tools}
            assert (wires["up__links"], wires["up__app"]) == (
                {"vendor/x": 1}, {"ui": {"resourceUri": "ui://app/main"}, "vendor/note": "shown"})
            # icons: https: and raster data: only (no http:, no SVG, no script)
            icons = {w["name"]: w.get("icons") for w in [*view.mcp_tools, *view.mcp_prompts]}
            assert (icons["up__app"], icons["up__cite"], icons["up__links"]) == (
                [{"src": "https://example.com/app.png", "mimeType": "image/png", "sizes": ["48x48"]},
                 {"src": "data:image/png;base64,iVBORw0KGgo=", "theme": "dark"}],
                [{"src": "https://example.com/cite.png"}], None)
            # a tool an App keeps for itself: listed for the client's App host, left out of what a model is given
            assert "up__app_only" in [w["name"] for w in view.mcp_tools]
            for format in ("openai", "openai-responses", "anthropic"):
                exported = [t.get("name") or t.get("function", {}).get("name") for t in view.export(format)]
                assert "up__app" in exported and "up__app_only" not in exported, format
            assert "up__app_only" not in [found["name"] for found in view.search("refresh the App's page", 20)]
            assert "up__app" in [found["name"] for found in view.search("an MCP App", 20)]
            assert (await view.call("up__app_only")).text == "refreshed"  # the App's host calls it
            # an App's page is its tools': an agent that sees none of them does not see it either
            b = served.view("b")
            assert [r["uri"] for r in b.mcp_resources] == ["notes://private/key", "notes://public/readme"]
            with pytest.raises(toolcrib.UnknownResourceError):
                await b.read("ui://app/main")
            decision = served.explain("b", "ui://app/main")
            assert decision is not None and (decision.visible, decision.checks[-1].detail) == (
                False, "the MCP App of up__app, up__app_only, which the agent does not see")
            assert [(r["uri"], r.get("icons")) for r in view.mcp_resources] == [
                ("ui://app/main", [{"src": "https://example.com/page.png"}]), ("notes://public/readme", None)]
            contents = await view.read("notes://all")
            assert [item["uri"] for item in contents] == ["notes://public/readme"]
            prompt = await view.get_prompt("up__cite")
            assert [m["content"]["type"] for m in prompt["messages"]] == ["text"]

    anyio.run(main)


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


APPS = f"""
[mcps.clock]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(Path(__file__).parent / "apps_server.py"))}]

[agents.a.permissions]
mcps = {{ allow = ["clock"] }}
tools = {{ allow = ["*"] }}
resources = {{ allow = ["*"] }}

[agents.b.permissions]
mcps = {{ allow = ["clock"] }}
tools = {{ allow = ["clock__plain_time"] }}
resources = {{ allow = ["*"] }}
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_real_mcp_app_is_served_through_whole_and_under_the_decision(mode: str) -> None:
    """An MCP App the mcp SDK builds (mcp.server.apps): through toolcrib to an MCP client its tools keep _meta.ui,
    the page is served as the App's (ui:// kept, its MIME type and CSP as the server gave them) and read whole, the
    tool only the page calls is listed for the client's App host and callable, yet left out of what a model is
    given; an agent that sees none of the App's tools neither lists nor reads its page, as if it did not exist."""

    async def main() -> None:
        loaded = config_from(APPS)
        async with supply() as supplied:
            sources = await supplied.sync(loaded)
            served = Host(loaded, sources=sources, plugins={}, autoload=False, env={})
            state = ServingState(served)
            async with Client(build_server(state, "a"), mode=mode, cache=None) as client:
                listed = (await client.list_tools()).tools
                # (tools without icons of their own show their server's: toolcrib serves many servers as one)
                assert {t.name: [dump(i) for i in t.icons or []] for t in listed} == {
                    name: [{"src": "https://example.com/clock.png", "mimeType": "image/png"}]
                    for name in ("clock__plain_time", "clock__refresh_time", "clock__show_time")}
                tools = {t.name: t.meta for t in listed}
                assert tools == {
                    "clock__plain_time": None,
                    "clock__refresh_time": {"ui": {"resourceUri": "ui://clock/app.html", "visibility": ["app"]}},
                    "clock__show_time": {"ui": {"resourceUri": "ui://clock/app.html"}}}
                page = [r for r in (await client.list_resources()).resources if r.uri == "ui://clock/app.html"]
                assert [(r.mime_type, r.meta) for r in page] == [
                    ("text/html;profile=mcp-app", {"ui": {"csp": {"connectDomains": ["https://time.example"]}}})]
                read = (await client.read_resource("ui://clock/app.html")).contents
                assert [(c.uri, c.mime_type, c.text, c.meta) for c in read] == [  # type: ignore[union-attr]
                    ("ui://clock/app.html", "text/html;profile=mcp-app",
                     "<!doctype html><title>Clock</title><p id=time></p>",
                     {"ui": {"csp": {"connectDomains": ["https://time.example"]}}})]
                assert (await client.call_tool("clock__refresh_time", {})).content == [
                    types.TextContent(text="12:01")]  # the App's host calls it on the agent's behalf
            view = served.view("a")
            assert [t["name"] for t in view.export("openai-responses")] == ["clock__plain_time", "clock__show_time"]
            async with Client(build_server(state, "b"), mode=mode, cache=None) as client:
                assert [r.uri for r in (await client.list_resources()).resources] == []
                with pytest.raises(MCPError) as hidden:
                    await client.read_resource("ui://clock/app.html")
                assert (hidden.value.error.code, hidden.value.error.message) == (
                    -32602 if mode == "auto" else -32002, "Unknown resource: ui://clock/app.html")

    anyio.run(main)


# -- what an upstream server sends the agent's client during a call: forwarded, or not ([mcps.x] forward) -----------

FORWARDING = f"""
[mcps.up]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}]
env = {{ LINKS = "1" }}

[mcps.quiet]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}]
env = {{ LINKS = "1" }}
forward = ["progress", "elicitation", "sampling"]

[agents.a.permissions]
mcps = {{ allow = ["*"] }}
tools = {{ allow = ["*"] }}
"""


@pytest.mark.slow
def test_an_upstream_servers_log_messages_reach_the_agents_client_unless_its_forward_leaves_them_out() -> None:
    """(A server's questions and requests for a model's turn, forwarded or refused: tests/test_real_sources.py, with
    server-everything, which asks them in the middle of its calls. A request for a model's turn names its server:
    up's ``ponder`` sends one whose ``_meta`` claims to be toolcrib's and carries its own progress token.)"""
    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    logs: list[tuple[str, str | None, Any]] = []
    sampled: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append((params.level, params.logger, params.data))

    async def on_sample(context: Any, params: Any) -> Any:
        sampled.append((params.messages[0].content.text, params.max_tokens, params.meta))
        return types.CreateMessageResult(role="assistant", content=types.TextContent(text="yes"), model="m")

    async def main() -> None:
        loaded = config_from(FORWARDING)
        async with supply() as supplied:
            sources = await supplied.sync(loaded)
            served = Host(loaded, sources=sources, plugins={}, autoload=False, env={})
            async with Client(build_server(ServingState(served), "a"), mode="legacy", cache=None,
                              logging_callback=on_log, sampling_callback=on_sample) as client:
                await client.set_logging_level("info")
                for name in ("up__chatty", "quiet__chatty"):
                    assert (await client.call_tool(name, {})).content[0].text == "said"  # type: ignore[union-attr]
                for name in ("up__ponder", "quiet__ponder"):
                    assert (await client.call_tool(name, {})).content[0].text == "yes"  # type: ignore[union-attr]

    anyio.run(main)
    assert logs == [("info", "toolcrib.pack.up", "upstream says hi")]  # (the debug one: below the client's level)
    assert sampled == [("Say yes.", 5, {"io.toolcrib/asked-by": "up"}),
                       ("Say yes.", 5, {"io.toolcrib/asked-by": "quiet"})]


@pytest.mark.slow
def test_an_upstream_servers_page_reaches_the_agents_client_where_its_forward_lets_it() -> None:
    """A URL elicitation of a server (a 2026-07-28 round of its call) whose forward has url_elicitation: the agent's
    client is asked, the server named, the id namespaced; where the forward has it not, it is refused to the server
    and the agent's client never asked."""
    asked: list[Any] = []

    async def on_elicit(_: Any, params: Any) -> Any:
        asked.append((params.mode, params.message, params.url, params.elicitation_id))
        return types.ElicitResult(action="accept")

    async def main() -> None:
        loaded = config_from(FORWARDING.replace('forward = ["progress", "elicitation", "sampling"]',
                                                'forward = ["url_elicitation"]'))
        async with supply() as supplied:
            sources = await supplied.sync(loaded)
            served = Host(loaded, sources=sources, plugins={}, autoload=False, env={})
            async with Client(build_server(ServingState(served), "a"), mode="legacy", cache=None,
                              elicitation_callback=on_elicit) as client:
                refused = await client.call_tool("up__sign_in", {})
                assert refused.is_error and "toolcrib does not forward pages to send the user to from upstream " \
                    "server 'up'" in refused.content[0].text  # type: ignore[union-attr]
                assert (await client.call_tool("quiet__sign_in", {})).content[0].text == "accept"  # type: ignore[union-attr]

    anyio.run(main)
    # (a 2026-07-28 server's URL elicitation carries no id, as that era has no completion notice: a new one, namespaced)
    assert [(mode, message, url) for mode, message, url, _ in asked] == [
        ("url", "[upstream server 'quiet'] Sign in.", "https://example.com/auth")]
    assert re.fullmatch(r"quiet:[0-9a-f]{16}", asked[0][3])


def test_a_servers_completion_of_a_page_reaches_the_client_whose_user_it_sent_there_once() -> None:
    """(2025-11-25's notifications/elicitation/complete; no server in these tests sends one, so the record of pages
    is driven here as the connection's message handler drives it.)"""
    from toolcrib.supply.mcp import runners

    told: list[str] = []

    async def tell(shown: str) -> None:
        told.append(shown)

    async def main() -> None:
        runners._PAGES[("up", "s-1")] = ("up:s-1", tell)
        for namespace, elicitation_id in (("other", "s-1"), ("up", "s-1"), ("up", "s-1"), ("up", "never")):
            await runners.elicitation_completed(namespace, elicitation_id)

    anyio.run(main)
    assert told == ["up:s-1"]


def test_check_says_what_each_upstream_server_forwards(cli_config: Any) -> None:
    from conftest import cli

    path = cli_config("""
[mcps.quiet]
command = "/no/such/program"
timeout = 10
forward = ["progress"]

[mcps.chatty]
command = "/no/such/program"
timeout = 10

[mcps.off]
command = "/no/such/program"
enabled = false
""", "")
    code, out, _ = cli("--config", path, "check")
    assert code == 1  # (the servers do not start: errors)
    assert [line for line in out.splitlines() if line.startswith("upstream server")] == [
        "upstream server 'chatty' forwards to the agents' clients: progress, log, elicitation, sampling (not "
        "url_elicitation)",
        "upstream server 'quiet' forwards to the agents' clients: progress (not log, elicitation, url_elicitation, "
        "sampling)"]
    code, out, _ = cli("--config", path, "check", "--json")
    assert code == 1 and json.loads(out)["forwarding"] == {"chatty": ["progress", "log", "elicitation", "sampling"],
                                             "quiet": ["progress"]}
