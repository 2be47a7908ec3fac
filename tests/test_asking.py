"""``Context.ask``: a tool (or prompt) puts several questions to the client at once, under keys it chooses, through
the SDK's own client in both protocol eras: one 2026-07-28 round's ``inputRequests`` under those very keys (answers
carried between rounds in the sealed state), or 2025-11-25 requests one after another; and what a client that
cannot answer gets."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

import toolcrib
from conftest import make_host
from redis_server import HANG_GUARD
from toolcrib import Context, Form, Roots, Sample
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState

NAME = Form("What is your name?", {"type": "object", "properties": {"name": {"type": "string"}},
                                   "required": ["name"]})
GREETING = Sample([{"role": "user", "content": {"type": "text", "text": "Say hello"}}], max_tokens=50)


@toolcrib.tool
async def introduce(ctx: Context) -> str:
    """Ask three things at once."""
    got = await ctx.ask({"user_name": NAME, "greeting": GREETING, "client_roots": Roots()})
    return (f"{got['greeting']['content']['text']} {got['user_name'].content['name']} "
            f"({', '.join(root['uri'] for root in got['client_roots'])})")


@toolcrib.tool
async def two_steps(ctx: Context) -> str:
    """Ask, then ask again."""
    first = (await ctx.ask({"step1": NAME}))["step1"]
    second = (await ctx.ask({"step2": Form("Colour?", {"type": "object", "properties": {
        "colour": {"type": "string"}}})}))["step2"]
    return f"{first.content['name']} likes {second.content['colour']}"


@toolcrib.tool
async def what_it_can(ctx: Context) -> str:
    """Say what the client could be asked."""
    return " ".join(kind for kind, question in (("form", NAME), ("sample", GREETING), ("roots", Roots()))
                    if ctx.can_ask(question))


@toolcrib.prompt
async def briefing(ctx: Context) -> str:
    """A prompt that asks the user for its context first."""
    got = await ctx.ask({"user_context": Form("Context?", {"type": "object", "properties": {
        "context": {"type": "string"}}})})
    return f"Brief me on {got['user_context'].content['context']}."


@toolcrib.tool
async def sign_in(ctx: Context) -> str:
    """Send the user to a page."""
    return (await ctx.elicit_url("Sign in to Acme.", "https://acme.example/auth", "acme-1")).action


class Asking:
    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return [introduce, two_steps, what_it_can, sign_in]

    @toolcrib.hookimpl
    def toolcrib_prompts(self) -> list[Any]:
        return [briefing]


CONFIG = """
[agents.a]
[agents.a.permissions]
plugins = { allow = ["ask"] }
tools = { allow = ["*"] }
prompts = { allow = ["*"] }
"""

DOCS = Path(__file__).resolve().parent.parent / "docs"
ALICE = types.ElicitResult(action="accept", content={"name": "Alice"})
HELLO = types.CreateMessageResult(role="assistant", content=types.TextContent(text="Hello"), model="m")
ROOTS = types.ListRootsResult(roots=[types.Root(uri="file:///work", name="work")])


def server() -> Any:
    return build_server(ServingState(make_host(CONFIG, {"ask": Asking()})), "a")


async def on_elicit(_: Any, params: Any) -> types.ElicitResult:
    return ALICE if "name" in params.requested_schema["properties"] else types.ElicitResult(
        action="accept", content={"colour": "green", "context": "tides"})


async def on_sample(_: Any, params: Any) -> types.CreateMessageResult:
    return HELLO


async def on_roots(_: Any) -> types.ListRootsResult:
    return ROOTS


def client(mode: str = "auto", **callbacks: Any) -> Client:
    chosen = {"elicitation_callback": on_elicit, "sampling_callback": on_sample, "list_roots_callback": on_roots}
    return Client(server(), mode=mode, cache=None, **{**chosen, **callbacks})  # type: ignore[arg-type]


def wire(request: Any) -> Any:
    return request.model_dump(by_alias=True, mode="json", exclude_none=True)


def test_one_round_asks_every_question_under_the_tools_keys_and_answers_arrive_over_rounds() -> None:
    """2026-07-28: the three questions are one round's inputRequests under the tool's keys; a round that answers
    only some is asked the rest (the answers it brought are carried in the sealed state), and the call completes
    once all are answered, its handler having run to the end once."""

    async def main() -> None:
        async with client() as c:
            first = await c.session.call_tool("ask__introduce", {}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            assert {key: wire(q) for key, q in (first.input_requests or {}).items()} == {
                "user_name": {"method": "elicitation/create", "params": {
                    "mode": "form", "message": "What is your name?", "requestedSchema": {
                        "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}},
                "greeting": {"method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": "Say hello"}}],
                    "maxTokens": 50}},
                "client_roots": {"method": "roots/list"}}
            second = await c.session.call_tool("ask__introduce", {}, allow_input_required=True,
                                               input_responses={"user_name": ALICE},
                                               request_state=first.request_state)
            assert isinstance(second, types.InputRequiredResult)
            assert sorted(second.input_requests or {}) == ["client_roots", "greeting"]
            done = await c.session.call_tool("ask__introduce", {}, allow_input_required=True,
                                             input_responses={"greeting": HELLO, "client_roots": ROOTS},
                                             request_state=second.request_state)
            assert isinstance(done, types.CallToolResult)
            assert done.content == [types.TextContent(text="Hello Alice (file:///work)")]

    anyio.run(main)


def test_an_answer_of_the_wrong_kind_or_under_another_key_is_asked_again() -> None:
    """A client's answers are data like arguments: ones under keys never asked are ignored, and an answer that is
    not one to its question (roots for a form) leaves the question open, so it is asked again."""

    async def main() -> None:
        async with client() as c:
            again = await c.session.call_tool("ask__introduce", {}, allow_input_required=True, input_responses={
                "user_name": ROOTS, "greeting": HELLO, "client_roots": ROOTS, "other": ALICE})
            assert isinstance(again, types.InputRequiredResult)
            assert list(again.input_requests or {}) == ["user_name"]

    anyio.run(main)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_questions_asked_round_after_round_and_in_a_2025_session(mode: str) -> None:
    """The SDK's client answers each round by itself (2026-07-28) or each request (2025-11-25): the same result."""

    async def main() -> None:
        async with client(mode) as c:
            assert (await c.call_tool("ask__introduce", {})).content == [
                types.TextContent(text="Hello Alice (file:///work)")]
            assert (await c.call_tool("ask__two_steps", {})).content == [
                types.TextContent(text="Alice likes green")]
            got = await c.get_prompt("ask__briefing")
            assert [wire(m) for m in got.messages] == [
                {"role": "user", "content": {"type": "text", "text": "Brief me on tides."}}]

    anyio.run(main)


def test_a_prompt_asks_in_rounds_of_its_own() -> None:
    """prompts/get answers input_required too (SEP-2322), its state bound to the prompt (a tool's will not do)."""

    async def main() -> None:
        async with client() as c:
            first = await c.session.get_prompt("ask__briefing", allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult)
            assert list(first.input_requests or {}) == ["user_context"]
            context = types.ElicitResult(action="accept", content={"context": "tides"})
            with pytest.raises(MCPError) as refused:
                await c.session.call_tool("ask__two_steps", {}, input_responses={"step1": ALICE},
                                          request_state=first.request_state)
            assert refused.value.error.code == -32602
            done = await c.session.get_prompt("ask__briefing", input_responses={"user_context": context},
                                              request_state=first.request_state)
            assert isinstance(done, types.GetPromptResult)
            assert done.messages[0].content == types.TextContent(text="Brief me on tides.")

    anyio.run(main)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_question_the_client_cannot_answer(mode: str) -> None:
    """A client that declared no roots: ``can_ask`` says so, and asking anyway fails the call, on 2026-07-28 with
    the protocol's missing-capability error (SEP-2575) naming the capability, on 2025-11-25 with a tool error."""
    why = "This needs the client's roots, and the client shares none (it does not support MCP roots)."

    async def main() -> None:
        async with client(mode, list_roots_callback=None) as c:
            assert (await c.call_tool("ask__what_it_can", {})).content == [types.TextContent(text="form sample")]
            if mode == "legacy":
                result = await c.call_tool("ask__introduce", {})
                assert (result.is_error, result.content) == (True, [types.TextContent(text=why)])
                return
            with pytest.raises(MCPError) as refused:
                await c.call_tool("ask__introduce", {})
            assert (refused.value.error.code, refused.value.error.message, refused.value.error.data) == (
                -32021, why, {"requiredCapabilities": {"roots": {}}})

    anyio.run(main)


def test_keys_are_the_tools_and_never_the_hosts(tmp_path: Path) -> None:
    ctx = Context("a", "t", None, tmp_path, logging.getLogger("t"))
    for key in ("toolcrib_approval", ""):
        with pytest.raises(ValueError, match="a question's key must be a non-empty string not starting 'toolcrib'"):
            anyio.run(ctx.ask, {key: Roots()})
    assert anyio.run(ctx.ask, {}) == {}
    with pytest.raises(toolcrib.ToolError, match="This needs the client's roots, and there is no MCP client"):
        anyio.run(ctx.ask, {"r": Roots()})
    assert not ctx.can_ask(Roots()) and not ctx.can_ask(NAME)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("model", [True, False])
def test_the_docs_example_asks_what_the_client_can_answer(mode: str, model: bool) -> None:
    block = next(b for b in re.findall(r"```python\n(.*?)```", (DOCS / "writing-packs.md").read_text(), flags=re.S)
                 if "def plan_trip" in b)
    scope: dict[str, Any] = {"toolcrib": toolcrib}
    exec(block, scope)

    class Trips:
        @toolcrib.hookimpl
        def toolcrib_tools(self) -> list[Any]:
            return [scope["plan_trip"]]

    host = make_host(CONFIG.replace('allow = ["ask"]', 'allow = ["trips"]'), {"trips": Trips()})

    async def main() -> None:
        async with Client(build_server(ServingState(host), "a"), mode=mode, cache=None, elicitation_callback=on_elicit,
                          list_roots_callback=on_roots, sampling_callback=on_sample if model else None) as c:
            assert (await c.call_tool("trips__plan_trip", {})).content == [types.TextContent(
                text=f"{'Hello' if model else 'Bon voyage'}, Alice: plans go in file:///work")]

    anyio.run(main)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_tool_sends_the_user_to_a_page_in_both_eras(mode: str) -> None:
    """``ctx.elicit_url``: a 2026-07-28 round's URL-mode question, or a 2025-11-25 request; a client that cannot send
    its user to a page gets -32021 naming URL elicitation (2026-07-28) or the call's error (2025-11-25)."""
    pages: list[Any] = []

    async def on_page(_: Any, params: Any) -> types.ElicitResult:
        pages.append(wire(params))
        return types.ElicitResult(action="accept")

    async def main() -> None:
        async with client(mode, elicitation_callback=on_page) as c:
            if mode == "auto":
                first = await c.session.call_tool("ask__sign_in", {}, allow_input_required=True)
                assert isinstance(first, types.InputRequiredResult)
                assert {k: wire(q) for k, q in (first.input_requests or {}).items()} == {"toolcrib_elicit": {
                    "method": "elicitation/create", "params": {"mode": "url", "message": "Sign in to Acme.",
                                                               "url": "https://acme.example/auth",
                                                               "elicitationId": "acme-1"}}}
            assert (await c.call_tool("ask__sign_in", {})).content == [types.TextContent(text="accept")]
        async with client(mode, elicitation_callback=None) as c:
            if mode == "legacy":
                result = await c.call_tool("ask__sign_in", {})
                assert result.content == [types.TextContent(text=URL_LACKING)] and result.is_error
                return
            with pytest.raises(MCPError) as refused:
                await c.call_tool("ask__sign_in", {})
            assert (refused.value.error.code, refused.value.error.message, refused.value.error.data) == (
                -32021, URL_LACKING, {"requiredCapabilities": {"elicitation": {"url": {}}}})

    anyio.run(main)
    assert pages == [{"mode": "url", "message": "Sign in to Acme.", "url": "https://acme.example/auth",
                      "elicitationId": "acme-1"}]


URL_LACKING = ("This needs the user to open a page, and the client cannot send its user to one (it does not support "
               "MCP URL elicitation).")


def test_a_page_must_be_https(tmp_path: Path) -> None:
    ctx = Context("a", "t", None, tmp_path, logging.getLogger("t"))
    with pytest.raises(ValueError, match=re.escape("a URL to send the user to must be https:, not 'http://acme.example'")):
        anyio.run(ctx.elicit_url, "Sign in.", "http://acme.example", "x")
    with pytest.raises(toolcrib.ToolError, match="This needs the user to open a page, and nobody can be asked"):
        anyio.run(ctx.elicit_url, "Sign in.", "https://acme.example", "x")


SHELF: set[str] = set()


@toolcrib.tool
def shelve() -> str:
    """Put a tool on the shelf, or take it off, and say so."""
    SHELF.symmetric_difference_update({"extra"})
    toolcrib.catalog_changed()
    return "changed"


@toolcrib.tool
def extra() -> str:
    """On the shelf now and then."""
    return "extra"


class Shelf:
    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return [shelve, *([extra] if "extra" in SHELF else [])]


def test_a_pack_that_says_its_catalog_changed_is_loaded_again_and_its_agents_clients_hear_of_it() -> None:
    """``toolcrib.catalog_changed()``: the serving state loads again (as on a config change) and a 2025-11-25
    session hears tools/list_changed; the next listing has the tool the pack added, then not."""
    SHELF.clear()
    make = lambda: make_host(CONFIG.replace('allow = ["ask"]', 'allow = ["shelf"]'), {"shelf": Shelf()})  # noqa: E731
    heard: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            heard.append("tools")

    async def main() -> list[list[str]]:
        state = ServingState(make(), make_host=make)
        state.watch_resources()
        listed = []
        async with Client(build_server(state, "a"), mode="legacy", cache=None, message_handler=on_message) as c:
            for expected in (1, 2):
                listed.append([t.name for t in (await c.list_tools()).tools])
                assert (await c.call_tool("shelf__shelve", {})).content == [types.TextContent(text="changed")]
                with anyio.fail_after(HANG_GUARD):
                    while len(heard) < expected:
                        await anyio.sleep(0.01)
            listed.append([t.name for t in (await c.list_tools()).tools])
        return listed

    assert anyio.run(main) == [["shelf__shelve"], ["shelf__extra", "shelf__shelve"], ["shelf__shelve"]]


def test_a_pack_that_says_its_catalog_changed_on_and_on_makes_one_reload_after_another_not_one_each() -> None:
    """An agent calling a tool that calls ``toolcrib.catalog_changed()`` in a loop: asks made before a reload
    begins, or while it runs, coalesce into it or one more, never a reload each (fifty asks made at once: one)."""
    SHELF.clear()
    made: list[int] = []

    def make() -> Any:
        made.append(1)
        return make_host(CONFIG.replace('allow = ["ask"]', 'allow = ["shelf"]'), {"shelf": Shelf()})

    async def main() -> tuple[int, list[str]]:
        state = ServingState(make(), make_host=make)
        state.watch_resources()
        for _ in range(50):
            SHELF.symmetric_difference_update({"extra"})
            toolcrib.catalog_changed()
        SHELF.clear()
        toolcrib.catalog_changed()  # the last word: no extra
        with anyio.fail_after(HANG_GUARD):
            while len(made) < 2 or state._reloading.locked():
                await anyio.sleep(0.01)
        return len(made) - 1, [vt.name for vt in state.host.view("a").tools]

    assert anyio.run(main) == (1, ["shelf__shelve"])
