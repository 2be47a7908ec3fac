"""The MCP surface beyond tools, through the SDK's own client in both protocol eras: resources, resource templates,
subscriptions, prompts, completion, logging levels and elicitation, each behind the agent's permissions, where a
hidden item answers exactly like one that does not exist."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

import toolcrib
from conftest import cli, make_host
from docs_pack import CONFIG, PNG, Docs, review
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState

MODES = ["auto", "legacy"]
# logging/setLevel and resources/subscribe are deprecated on 2026-07-28; the handshake era still has them
pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")


DOCS = Docs()



def state() -> ServingState:
    return ServingState(make_host(CONFIG, {"docs": Docs()}))


def run(agent: str, mode: str, body: Any, **kwargs: Any) -> None:
    async def main() -> None:
        async with Client(build_server(state(), agent), mode=mode, cache=None, **kwargs) as client:
            await body(client)

    anyio.run(main)


async def refused(call: Any) -> tuple[int, str]:
    with pytest.raises(MCPError) as info:
        await call
    return info.value.error.code, info.value.error.message


def dump(model: Any) -> Any:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


# -- resources ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_resources_and_templates_are_listed_as_declared(mode: str) -> None:
    async def body(client: Client) -> None:
        assert [dump(r) for r in (await client.list_resources()).resources] == [
            {"name": "docs__logo", "title": "Logo", "uri": "docs://logo", "description": "The logo.",
             "mimeType": "image/png"},
            {"name": "docs__readme", "uri": "docs://readme", "description": "The project's readme.",
             "mimeType": "text/markdown"},
            {"name": "docs__secret", "uri": "docs://secret", "description": "Kept from agent b."},
        ]
        assert [dump(t) for t in (await client.list_resource_templates()).resource_templates] == [
            {"name": "docs__page", "uriTemplate": "docs://pages/{slug}",
             "description": "A page of the docs, by its slug.", "mimeType": "text/plain"}]

    run("a", mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_reading_text_binary_and_templated_resources(mode: str) -> None:
    async def body(client: Client) -> None:
        assert [dump(c) for c in (await client.read_resource("docs://readme")).contents] == [
            {"uri": "docs://readme", "mimeType": "text/markdown", "text": "# Readme"}]
        assert [dump(c) for c in (await client.read_resource("docs://logo")).contents] == [
            {"uri": "docs://logo", "mimeType": "image/png", "blob": base64.b64encode(PNG).decode()}]
        assert [dump(c) for c in (await client.read_resource("docs://pages/install")).contents] == [
            {"uri": "docs://pages/install", "mimeType": "text/plain", "text": "pip install it."}]
        assert await refused(client.read_resource("docs://pages/nope")) == (
            -32603, "There is no page 'nope'.")

    run("a", mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_a_hidden_resource_answers_like_one_that_does_not_exist(mode: str) -> None:
    async def body(client: Client) -> None:
        assert [r.uri for r in (await client.list_resources()).resources] == ["docs://logo", "docs://readme"]
        # the template stays, but the URI a deny rule names is not readable through it
        assert [t.uri_template for t in (await client.list_resource_templates()).resource_templates] == [
            "docs://pages/{slug}"]
        assert (await client.read_resource("docs://pages/intro")).contents[0].text == "Welcome."  # type: ignore[union-attr]
        code = -32002 if mode == "legacy" else -32602  # 2025-11-25's own code; 2026-07-28's (SEP-2164)
        for uri in ("docs://secret", "docs://pages/internal", "docs://nothing"):
            assert await refused(client.read_resource(uri)) == (code, f"Unknown resource: {uri}")

    run("b", mode, body)


def test_subscriptions_on_a_2025_11_25_session_hear_only_of_what_the_agent_may_read() -> None:
    updated: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))

    async def body(client: Client) -> None:
        for uri in ("docs://secret", "docs://pages/internal", "docs://nothing"):
            assert await refused(client.subscribe_resource(uri)) == (-32002, f"Unknown resource: {uri}")
        await client.subscribe_resource("docs://readme")
        await client.subscribe_resource("docs://logo")
        await client.unsubscribe_resource("docs://logo")
        for uri in ("docs://secret", "docs://logo", "docs://readme"):
            toolcrib.resource_updated(uri)
        await client.send_ping()  # the updates went out before the ping's answer came back
        with anyio.fail_after(10):
            while not updated:
                await anyio.sleep(0.01)

    run("b", "legacy", body, message_handler=on_message)
    assert updated == ["docs://readme"]


def test_subscriptions_on_2026_07_28_listen_hear_only_of_what_the_agent_may_read() -> None:
    async def body(client: Client) -> None:
        async with client.listen(resource_subscriptions=["docs://secret", "docs://readme"]) as subscription:
            for uri in ("docs://secret", "docs://logo", "docs://readme"):
                toolcrib.resource_updated(uri)
            with anyio.fail_after(10):
                event = await subscription.__anext__()
            assert (type(event).__name__, event.uri) == ("ResourceUpdated", "docs://readme")  # type: ignore[attr-defined]

    run("b", "auto", body)


@pytest.mark.parametrize("mode", MODES)
def test_an_agent_without_the_dimensions_sees_no_resources_or_prompts(mode: str) -> None:
    async def body(client: Client) -> None:
        assert (await client.list_resources()).resources == []
        assert (await client.list_resource_templates()).resource_templates == []
        assert (await client.list_prompts()).prompts == []
        assert await refused(client.read_resource("docs://readme")) == (
            -32002 if mode == "legacy" else -32602, "Unknown resource: docs://readme")
        assert await refused(client.get_prompt("docs__review", {"topic": "x"})) == (
            -32602, "Unknown prompt: docs__review")
        assert [t.name for t in (await client.list_tools()).tools] == ["docs__ask_name", "docs__chatty"]

    run("none", mode, body)


# -- prompts and completion --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_prompts_are_listed_and_got_with_validated_arguments(mode: str) -> None:
    async def body(client: Client) -> None:
        assert [dump(p) for p in (await client.list_prompts()).prompts] == [
            {"name": "docs__review", "description": "Ask for a review.", "arguments": [
                {"name": "topic", "description": "What to look at", "required": True},
                {"name": "strict", "required": False}]},
            {"name": "docs__show_logo", "title": "Show the logo", "description": "A prompt with an image.",
             "arguments": []},
        ]
        got = await client.get_prompt("docs__review", {"topic": "tests", "strict": "true"})
        assert {k: v for k, v in dump(got).items() if k in ("description", "messages")} == {
            "description": "Ask for a review.", "messages": [
            {"role": "user", "content": {"type": "text", "text": "Review the tests strictly."}}]}
        image = await client.get_prompt("docs__show_logo")
        assert dump(image)["messages"] == [
            {"role": "user", "content": {"type": "image", "data": base64.b64encode(PNG).decode(),
                                         "mimeType": "image/png"}},
            {"role": "assistant", "content": {"type": "text", "text": "A fine logo."}}]
        assert await refused(client.get_prompt("docs__review", {})) == (
            -32602, "Invalid arguments for docs__review:\n- topic: required argument is missing")

    run("a", mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_completion_of_prompt_arguments_and_template_parameters(mode: str) -> None:
    async def body(client: Client) -> None:
        prompt = types.PromptReference(name="docs__review")
        template = types.ResourceTemplateReference(uri="docs://pages/{slug}")
        assert dump((await client.complete(prompt, {"name": "topic", "value": "t"})).completion) == {
            "values": ["tests", "types"], "total": 2, "hasMore": False}
        assert (await client.complete(template, {"name": "slug", "value": "in"})).completion.values == [
            "intro", "install", "internal"]
        assert (await client.complete(prompt, {"name": "strict", "value": ""})).completion.values == []

    run("a", mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_a_hidden_prompt_answers_like_one_that_does_not_exist(mode: str) -> None:
    async def body(client: Client) -> None:
        assert [p.name for p in (await client.list_prompts()).prompts] == ["docs__review"]
        for name in ("docs__show_logo", "docs__nothing"):
            assert await refused(client.get_prompt(name)) == (-32602, f"Unknown prompt: {name}")
            completion = await client.complete(types.PromptReference(name=name), {"name": "x", "value": ""})
            assert dump(completion.completion) == {"values": [], "total": 0, "hasMore": False}

    run("b", mode, body)


@pytest.mark.parametrize("mode", MODES)
def test_bare_names_serve_prompts_under_their_own_names(mode: str) -> None:
    async def body(client: Client) -> None:
        assert [p.name for p in (await client.list_prompts()).prompts] == ["many", "review", "show_logo"]
        assert (await client.get_prompt("review", {"topic": "docs"})).messages[0].content.text == (  # type: ignore[union-attr]
            "Review the docs.")
        assert (await client.get_prompt("docs__review", {"topic": "docs"})).messages[0].content.text == (  # type: ignore[union-attr]
            "Review the docs.")

    run("bare", mode, body)


# -- logging and elicitation -------------------------------------------------------------------------------------


def test_logging_set_level_filters_what_a_tool_logs() -> None:
    received: list[tuple[str, Any]] = []

    async def logged(params: types.LoggingMessageNotificationParams) -> None:
        received.append((params.level, params.data))

    async def body(client: Client) -> None:
        await client.set_logging_level("info")
        assert (await client.call_tool("docs__chatty", {})).content[0].text == "done"  # type: ignore[union-attr]
        await client.set_logging_level("warning")
        await client.call_tool("docs__chatty", {})

    run("a", "legacy", body, logging_callback=logged)
    assert received == [("info", "some news"), ("warning", "a concern"), ("warning", "a concern")]


def test_on_2026_07_28_log_messages_go_to_requests_that_opt_in() -> None:
    received: list[tuple[str, Any]] = []

    async def logged(params: types.LoggingMessageNotificationParams) -> None:
        received.append((params.level, params.data))

    async def body(client: Client) -> None:
        await client.call_tool("docs__chatty", {})

    run("a", "auto", body, logging_callback=logged)
    assert received == []  # no opt-in, no messages
    run("a", "auto", body, logging_callback=logged, log_level="info")
    assert received == [("info", "some news"), ("warning", "a concern")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["accept", "decline", "cancel"])
def test_a_tool_asks_the_user_in_both_eras(mode: str, action: str) -> None:
    asked: list[dict[str, Any]] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(dump(params))
        return types.ElicitResult(action=action, content={"name": "Grace"} if action == "accept" else None)  # type: ignore[arg-type]

    async def body(client: Client) -> None:
        result = await client.call_tool("docs__ask_name", {})
        expected = "accept {'name': 'Grace'}" if action == "accept" else f"{action} None"
        assert (result.is_error, result.content[0].text) == (False, expected)  # type: ignore[union-attr]

    run("a", mode, body, elicitation_callback=elicit)
    assert len(asked) == 1
    assert {k: v for k, v in asked[0].items() if k != "_meta"} == {
        "mode": "form", "message": "Who are you?", "requestedSchema": {
            "type": "object", "properties": {"name": {"type": "string", "default": "Ada"}}, "required": ["name"]}}


@pytest.mark.parametrize("mode", MODES)
def test_a_client_that_cannot_elicit_gets_a_clear_error(mode: str) -> None:
    """2025-11-25: the call's error result says why; 2026-07-28: the protocol's missing-capability error (SEP-2575)
    names the capability."""
    why = "This needs the user's answer, and the client cannot ask for one (it does not support MCP elicitation)."

    async def body(client: Client) -> None:
        if mode == "legacy":
            result = await client.call_tool("docs__ask_name", {})
            assert (result.is_error, result.content[0].text) == (True, why)  # type: ignore[union-attr]
            return
        with pytest.raises(MCPError) as info:
            await client.call_tool("docs__ask_name", {})
        assert (info.value.error.code, info.value.error.message, info.value.error.data) == (
            -32021, why, {"requiredCapabilities": {"elicitation": {"form": {}}}})

    run("a", mode, body)


# -- the Python API ----------------------------------------------------------------------------------------------


def test_the_python_api_reads_gets_and_completes_as_the_agent() -> None:
    host = make_host(CONFIG.replace('prompts = { deny = ["docs__many"] }', 'prompts = { allow = ["*"] }'),
                     {"docs": Docs()})
    view = host.view("a")
    assert [e.name for e in view.resources] == ["docs__logo", "docs__readme", "docs__secret"]
    assert [e.name for e in view.templates] == ["docs__page"]
    assert [e.name for e in view.prompts] == ["docs__many", "docs__review", "docs__show_logo"]

    async def main() -> None:
        assert await view.read("docs://pages/intro") == [
            {"uri": "docs://pages/intro", "text": "Welcome.", "mimeType": "text/plain"}]
        assert await view.get_prompt("docs__review", {"topic": "types"}) == {
            "description": "Ask for a review.",
            "messages": [{"role": "user", "content": {"type": "text", "text": "Review the types."}}]}
        ref = {"type": "ref/prompt", "name": "docs__many"}
        endless = await view.complete(ref, "name", "")
        assert (len(endless), endless[:3], endless.total, endless.has_more) == (100, ["n0", "n1", "n2"], 10_000, True)
        assert await view.complete(ref, "other", "") == []  # a str is not a list of values: logged, nothing offered
        assert await view.complete(ref, "broken", "") == []  # a completer that raises: logged, nothing offered
        with pytest.raises(toolcrib.UnknownResourceError, match=r"^Unknown resource: docs://nothing$"):
            await view.read("docs://nothing")
        with pytest.raises(toolcrib.UnknownPromptError, match=r"^Unknown prompt: docs__nothing$"):
            await view.get_prompt("docs__nothing")

    anyio.run(main)


# -- stateless replicas ------------------------------------------------------------------------------------------


class Alternating(httpx2.AsyncBaseTransport):
    """An HTTP transport that sends each request to the next of several replicas, as a balancer may."""

    def __init__(self, ports: list[int]) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.ports = ports
        self.sent: list[int] = []

    async def handle_async_request(self, request: Any) -> Any:
        port = self.ports[len(self.sent) % len(self.ports)]
        self.sent.append(port)
        request.url = request.url.copy_with(port=port)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.slow
def test_elicitation_round_trips_across_stateless_replicas(tmp_path: Path) -> None:
    from mcp.client.streamable_http import streamable_http_client

    from conformance_pack import CONFIG as JUDGE
    from conformance_pack import TOKEN
    from serving import start_http

    config = tmp_path / "toolcrib.toml"
    config.write_text(JUDGE)
    env = {"TOOLCRIB_PLUGINS": "conformance=conformance_pack:PACK", "TOK_JUDGE": TOKEN,
           "TOOLCRIB_STATE_SECRET": "a-secret-all-replicas-share-0123456789"}
    replicas = [start_http(config, "--stateless", env=env) for _ in range(2)]
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

    async def main() -> None:
        transport = Alternating([int(base.rsplit(":", 1)[1]) for _, base, _ in replicas])
        http = httpx2.AsyncClient(transport=transport, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        url = f"{replicas[0][1]}/agents/judge/mcp"
        async with http, Client(streamable_http_client(url, http_client=http), mode="auto", cache=None,
                                elicitation_callback=elicit) as client:
            result = await client.call_tool("test_elicitation", {"message": "Who are you?"})
            assert (result.is_error, result.content[0].text) == (False, (  # type: ignore[union-attr]
                'User response: action=accept, content={"username": "ada", "email": "ada@example.com"}'))
        assert set(transport.sent) == set(transport.ports)  # both replicas served a part of it

    try:
        anyio.run(main)
    finally:
        for proc, _, _ in replicas:
            proc.terminate()
            proc.wait(timeout=20)
    assert asked == ["Who are you?"]


# -- the CLI -----------------------------------------------------------------------------------------------------


def test_the_cli_lists_reads_and_gets(cli_config: Any) -> None:
    config = cli_config(CONFIG, "docs=test_surface:DOCS")
    assert cli("resources", "--agent", "b", "--config", config) == (0, (
        "docs://logo          docs__logo    The logo.\n"
        "docs://readme        docs__readme  The project's readme.\n"
        "docs://pages/{slug}  docs__page    A page of the docs, by its slug.\n"), "")
    code, out, _ = cli("resources", "--agent", "b", "--json", "--config", config)
    assert (code, json.loads(out)["resourceTemplates"]) == (0, [
        {"name": "docs__page", "uriTemplate": "docs://pages/{slug}", "description": "A page of the docs, by its slug.",
         "mimeType": "text/plain"}])
    assert cli("read", "--agent", "b", "docs://pages/intro", "--config", config) == (0, "Welcome.\n", "")
    assert cli("read", "--agent", "b", "docs://logo", "--config", config) == (
        0, "[binary content of docs://logo, 8 bytes, image/png]\n", "")
    code, out, _ = cli("read", "--agent", "b", "docs://readme", "--json", "--config", config)
    assert (code, json.loads(out)) == (0, {"contents": [
        {"uri": "docs://readme", "text": "# Readme", "mimeType": "text/markdown"}]})
    for uri in ("docs://secret", "docs://nothing"):  # hidden and nonexistent alike
        assert cli("read", "--agent", "b", uri, "--config", config) == (2, "", f"error: Unknown resource: {uri}\n")
    assert cli("read", "--agent", "b", "docs://pages/nope", "--config", config) == (
        1, "", "error: There is no page 'nope'.\n")
    assert cli("prompts", "--agent", "a", "--config", config) == (0, (
        "docs__review topic [strict]  Ask for a review.\n"
        "docs__show_logo  A prompt with an image.\n"), "")
    assert cli("prompt", "--agent", "a", "docs__review", "--args", '{"topic": "docs"}', "--config", config) == (
        0, "user: Review the docs.\n", "")
    assert cli("prompt", "--agent", "a", "docs__show_logo", "--config", config) == (
        0, "user: [image content]\nassistant: A fine logo.\n", "")
    code, out, _ = cli("prompt", "--agent", "a", "docs__review", "--args", '{"topic": "x"}', "--json",
                       "--config", config)
    assert json.loads(out)["messages"] == [{"role": "user", "content": {"type": "text", "text": "Review the x."}}]
    assert cli("prompt", "--agent", "a", "docs__many", "--args", '{"name": "x"}', "--config", config) == (
        2, "", "error: Unknown prompt: docs__many\n")
    assert cli("prompt", "--agent", "a", "docs__review", "--config", config) == (
        1, "", "error: Invalid arguments for docs__review:\n- topic: required argument is missing\n")
    code, _, err = cli("prompt", "--agent", "a", "docs__review", "--args", "[1]", "--config", config)
    assert (code, err.splitlines()[-1]) == (2, "error: Invalid value for --args: must be a JSON object, such as "
                                               "'{\"path\": \"README.md\"}'")
    assert cli("prompts", "--agent", "none", "--config", config) == (0, "", "agent 'none' may get no prompts\n")
    code, out, _ = cli("schema", "--agent", "b", "--format", "mcp-all", "--config", config)
    surface = json.loads(out)
    assert (code, sorted(surface)) == (0, ["prompts", "resourceTemplates", "resources", "tools"])
    assert ([t["name"] for t in surface["tools"]], [r["uri"] for r in surface["resources"]],
            [t["uriTemplate"] for t in surface["resourceTemplates"]], [p["name"] for p in surface["prompts"]]) == (
        ["docs__ask_name", "docs__chatty"], ["docs://logo", "docs://readme"], ["docs://pages/{slug}"],
        ["docs__review"])


# -- explain and check -------------------------------------------------------------------------------------------


def test_explain_covers_prompts_and_resources_by_name_uri_and_template() -> None:
    host = make_host(CONFIG, {"docs": Docs()})
    prompt = host.explain("b", "docs__show_logo")
    assert prompt is not None
    assert (prompt.kind, prompt.visible, [(c.name, c.passed, c.detail) for c in prompt.checks]) == (
        "prompt", False, [
            ("source", True, "pack 'docs': allowed by agents.b.permissions.plugins.allow '*'"),
            ("prompts", False, "not matched by any pattern of agents.b.permissions.prompts.allow"),
            ("available", True, "no availability check")])
    by_uri = host.explain("b", "docs://secret")
    assert by_uri is not None and (by_uri.kind, by_uri.name, by_uri.visible, by_uri.reason) == (
        "resource", "docs__secret", False, "denied by agents.b.permissions.resources.deny 'docs://secret'")
    assert host.explain("b", "docs__readme").visible is True  # type: ignore[union-attr]
    fits = host.explain("b", "docs://pages/internal")
    assert fits is not None and (fits.kind, fits.name, fits.visible) == ("template", "docs://pages/internal", False)
    assert (fits.checks[-1].name, fits.checks[-1].detail) == ("uri", (
        "'docs://pages/internal' fits the template 'docs://pages/{slug}'; denied by "
        "agents.b.permissions.resources.deny 'docs://pages/internal'"))
    intro = host.explain("b", "docs://pages/intro")
    assert intro is not None and intro.visible and intro.checks[-1].detail == (
        "'docs://pages/intro' fits the template 'docs://pages/{slug}'")
    assert host.explain("b", "docs://elsewhere") is None
    assert host.similar("docs__reveiw") == ["docs__review"]


def test_a_scope_the_token_lacks_hides_resources_by_name_or_uri_and_prompts_as_explain_says() -> None:
    host = make_host(CONFIG + """
[oauth]
issuer = "https://issuer.example"
audience = "https://toolcrib.example/mcp"
[agents.s.identity]
claims = { sub = "*" }
[agents.s.identity.needs_scope.docs]
resources = ["docs://readme", "docs__secret"]
prompts = ["docs__review"]
[agents.s.identity.needs_scope.admin]
tools = ["docs__chatty"]
[agents.s.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
resources = { allow = ["*"] }
prompts = { allow = ["*"] }
""", {"docs": Docs()})
    lacking = frozenset({"docs"})
    view = host.view("s", lacking)
    assert ([r["uri"] for r in view.mcp_resources], [p["name"] for p in view.mcp_prompts],
            [t["name"] for t in view.mcp_tools]) == (
        ["docs://logo"], ["docs__many", "docs__show_logo"], ["docs__ask_name", "docs__chatty"])
    full = host.view("s")
    assert ([r["uri"] for r in full.mcp_resources], [p["name"] for p in full.mcp_prompts]) == (
        ["docs://logo", "docs://readme", "docs://secret"], ["docs__many", "docs__review", "docs__show_logo"])

    def scope_check(name: str, scopes: frozenset[str] = lacking) -> tuple[bool, str]:
        decision = host.explain("s", name, scopes)
        assert decision is not None
        found = [(c.passed, c.detail) for c in decision.checks if c.name == "scope"]
        assert len(found) == 1 and decision.visible is found[0][0], decision
        return found[0]

    assert scope_check("docs__readme") == (False, "needs scope 'docs' (identity.needs_scope: 'docs://readme'), "
                                                  "which the request's token does not carry")
    assert scope_check("docs://secret") == (False, "needs scope 'docs' (identity.needs_scope: 'docs__secret'), "
                                                   "which the request's token does not carry")
    assert scope_check("docs__review") == (False, "needs scope 'docs' (identity.needs_scope: 'docs__review'), "
                                                  "which the request's token does not carry")
    assert scope_check("docs__logo") == (True, "the token carries every scope it needs")
    assert scope_check("docs__chatty", frozenset({"admin"})) == (
        False, "needs scope 'admin' (identity.needs_scope: 'docs__chatty'), which the request's token does not carry")
    unscoped = host.explain("s", "docs__readme")
    assert unscoped is not None and unscoped.visible and "scope" not in [c.name for c in unscoped.checks]


def test_check_reports_dead_rules_empty_dimensions_and_kept_full_names() -> None:
    text = CONFIG + """
[agents.empty.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
resources = { allow = ["nothing://*", "docs__nothing"] }
prompts = { allow = ["docs__review"] }
"""

    class Twin:
        @toolcrib.hookimpl
        def toolcrib_prompts(self) -> list[Any]:
            return [review]

    host = make_host(text.replace('[agents.bare.permissions]', '[agents.bare.permissions]\ntools = { allow = ["*"] }'),
                     {"docs": Docs(), "twin": Twin()})
    warnings = [str(p).removeprefix("warning: toolcrib.toml: ") for p in host.problems() if p.severity == "warning"]
    assert warnings == [
        "agents.bare.bare_names: docs__review, twin__review keep their full names: another of the agent's prompts has "
        "the same name without its namespace",
        "agents.bare.permissions: agent 'bare' sees 'docs''s tools but none of its 4 resources: no rule permits them "
        '(add resources = { allow = ["docs__*"] } if it should have them)',
        "agents.empty.permissions.resources.allow[0]: 'nothing://*' matches no installed resource (by name or URI)",
        "agents.empty.permissions.resources.allow[1]: 'docs__nothing' matches no installed resource (by name or URI)",
        "agents.empty.permissions.resources: the agent is given resources, yet sees none (`toolcrib explain --agent "
        "empty NAME` says why for each)",
        "agents.none.permissions: agent 'none' sees 'docs''s tools but none of its 4 resources and 3 prompts: no rule "
        'permits them (add resources = { allow = ["docs__*"] } and prompts = { allow = ["docs__*"] } if it should '
        "have them)",
    ]
    view = host.view("bare")
    assert [p["name"] for p in view.mcp_prompts] == ["many", "docs__review", "show_logo", "twin__review"]


def test_reads_and_prompts_are_audited_like_calls(tmp_path: Path) -> None:
    host = make_host('[host]\naudit_log = "audit.jsonl"\naudit_arguments = true\n' + CONFIG, {"docs": Docs()},
                     base_dir=tmp_path)
    view = host.view("b")

    async def main() -> None:
        await view.read("docs://pages/intro")
        await view.get_prompt("docs__review", {"topic": "x"})
        for uri in ("docs://secret", "docs://pages/nope"):
            with pytest.raises((toolcrib.UnknownResourceError, toolcrib.ToolError)):
                await view.read(uri)
        with pytest.raises(toolcrib.UnknownPromptError):
            await view.get_prompt("docs__show_logo")

    anyio.run(main)
    host.close()
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [{k: v for k, v in r.items() if k not in ("time", "duration_ms")} for r in records] == [
        {"agent": "b", "kind": "resource", "resource": "docs://pages/intro", "decision": "allowed", "by": "rules",
         "is_error": False, "arguments": {"slug": "intro"}},
        {"agent": "b", "kind": "prompt", "prompt": "docs__review", "decision": "allowed", "by": "rules",
         "is_error": False, "arguments": {"topic": "x"}},
        {"agent": "b", "kind": "resource", "resource": "docs://secret", "decision": "unknown",
         "by": "no such resource in the agent's view", "is_error": True},
        {"agent": "b", "kind": "resource", "resource": "docs://pages/nope", "decision": "allowed", "by": "rules",
         "is_error": True, "arguments": {"slug": "nope"}},
        {"agent": "b", "kind": "prompt", "prompt": "docs__show_logo", "decision": "unknown",
         "by": "no such prompt in the agent's view", "is_error": True},
    ]


# -- conflicts, reloads, transports ------------------------------------------------------------------------------


def test_a_uri_two_sources_declare_is_served_by_neither() -> None:
    @toolcrib.resource("docs://readme")
    def impostor() -> str:
        """Another readme, from another pack."""
        return "mine"

    class Other:
        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [impostor]

    host = make_host(CONFIG, {"docs": Docs(), "other": Other()})
    assert [e.uri for e in host.view("a").resources] == ["docs://logo", "docs://secret"]
    assert "error: resource 'docs://readme': declared by more than one source (docs, other); neither is served" in [
        str(p) for p in host.problems()]


@pytest.mark.parametrize("mode", MODES)
def test_a_reload_tells_clients_which_lists_changed(mode: str) -> None:
    first = make_host(CONFIG, {"docs": Docs()})
    second = make_host(CONFIG.replace('prompts = { deny = ["docs__many"] }', 'prompts = { deny = ["docs__*"] }'),
                       {"docs": Docs()})
    s = ServingState(first, make_host=lambda: second)
    heard: list[str] = []

    async def on_message(message: Any) -> None:
        heard.append(type(message).__name__)

    async def main() -> None:
        async with Client(build_server(s, "a"), mode=mode, cache=None, message_handler=on_message) as client:
            assert len((await client.list_prompts()).prompts) == 2
            if mode == "legacy":
                assert await s.reload()
                await client.send_ping()
                with anyio.fail_after(10):
                    while not heard:
                        await anyio.sleep(0.01)
                assert heard == ["PromptListChangedNotification"]
            else:
                async with client.listen(prompts_list_changed=True, tools_list_changed=True,
                                         resources_list_changed=True) as subscription:
                    assert await s.reload()
                    with anyio.fail_after(10):
                        event = await subscription.__anext__()
                    assert type(event).__name__ == "PromptsListChanged"
            assert (await client.list_prompts()).prompts == []

    anyio.run(main)


@pytest.mark.slow
def test_stdio_and_http_serve_the_same_surface_with_the_same_capabilities(tmp_path: Path) -> None:
    from mcp import StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    from conformance_pack import CONFIG as JUDGE
    from conformance_pack import TOKEN
    from serving import start_http, subprocess_env

    config = tmp_path / "toolcrib.toml"
    config.write_text(JUDGE)
    env = {"TOOLCRIB_PLUGINS": "conformance=conformance_pack:PACK", "TOK_JUDGE": TOKEN}
    proc, base, _ = start_http(config, env=env)

    async def surface(client: Client) -> tuple[Any, ...]:
        capabilities = client.server_capabilities.model_dump(by_alias=True, exclude_none=True)
        read = await client.read_resource("test://template/7/data")
        got = await client.get_prompt("test_prompt_with_arguments", {"arg1": "a", "arg2": "b"})
        return (capabilities, [r.uri for r in (await client.list_resources()).resources],
                [p.name for p in (await client.list_prompts()).prompts], dump(read.contents[0]),
                dump(got.messages[0]))

    async def main() -> None:
        stdio = StdioServerParameters(command=sys.executable, args=[
            "-m", "toolcrib.cli", "serve", "--agent", "judge", "--config", str(config)], env=subprocess_env(**env))
        async with Client(stdio, cache=None) as client:
            over_stdio = await surface(client)
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        async with http, Client(streamable_http_client(f"{base}/agents/judge/mcp", http_client=http),
                                cache=None) as client:
            over_http = await surface(client)
        assert over_stdio == over_http
        capabilities, resources, prompts, read, message = over_stdio
        assert {k: v for k, v in capabilities.items() if k != "experimental"} == {
            "logging": {}, "prompts": {"listChanged": True}, "resources": {"subscribe": True, "listChanged": True},
            "tools": {"listChanged": True}, "completions": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}}
        assert resources == ["test://static-binary", "test://static-text", "test://watched-resource"]
        assert prompts == ["test_input_required_result_prompt", "test_prompt_with_arguments",
                           "test_prompt_with_embedded_resource", "test_prompt_with_image", "test_simple_prompt"]
        assert read == {"uri": "test://template/7/data", "mimeType": "application/json",
                        "text": '{"id":"7","templateTest":true,"data":"Data for ID: 7"}'}
        assert message == {"role": "user", "content": {"type": "text", "text": "Prompt with arguments: arg1='a', "
                                                                              "arg2='b'"}}

    try:
        anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_item_availability_is_asked_once_per_view_and_only_where_the_rules_permit() -> None:
    asked: list[str] = []

    def only_for_a(ctx: toolcrib.AvailabilityContext) -> bool | str:
        asked.append(ctx.agent)
        return True if ctx.agent == "a" else "not for this agent"

    @toolcrib.resource("gated://note", is_available=only_for_a)
    def gated() -> str:
        """A note some agents may read."""
        return "note"

    class Gated:
        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [gated]

    host = make_host(CONFIG, {"gated": Gated()})
    assert [e.uri for e in host.view("a").resources] == ["gated://note"]
    assert host.view("b").resources == ()  # b's rule permits it (deny names others): asked, and said no
    assert host.view("none").resources == ()  # no resources rule: never asked
    assert asked == ["a", "b"]
    explained = host.explain("b", "gated://note")
    assert explained is not None and (explained.agent, explained.kind, explained.visible) == ("b", "resource", False)
    assert [(c.name, c.passed, c.detail) for c in explained.checks] == [
        ("source", True, "pack 'gated': allowed by agents.b.permissions.plugins.allow '*'"),
        ("resources", True, "not matched by agents.b.permissions.resources.deny"),
        ("available", False, "not available: not for this agent"),
    ]


def test_a_skill_prompt_is_the_hosts_own_and_says_so(tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "pdf"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: pdf\ndescription: Fill in PDF forms.\n---\nUse pdftk.\n")
    text = '[skills.pdf]\npath = "skills/pdf"\n[agents.s.permissions]\nskills = { allow = ["pdf"] }\n' \
           'prompts = { allow = ["*"] }\n'
    host = make_host(text, {}, base_dir=tmp_path)
    explained = host.explain("s", "toolcrib__pdf")
    assert explained is not None and explained.visible
    assert [(c.name, c.passed, c.detail) for c in explained.checks] == [
        ("source", True, "the host's own: it is offered by what it serves (see available)"),
        ("prompts", True, "allowed by agents.s.permissions.prompts.allow '*'"),
        ("available", True, "is_available said yes"),
    ]
