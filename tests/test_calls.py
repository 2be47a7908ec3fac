"""The call pipeline with real handlers, real threads and real (short) timeouts."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import anyio
import pytest
from pydantic import BaseModel, Field

import toolcrib
from conftest import cli, make_host
from packs import FILES, Pack
from toolcrib import Allow, Context, Deny, ToolError, ToolResult
from toolcrib.content import result_problem

ORDERS = {"O-1001": {"id": "O-1001", "status": "shipped"}}


@toolcrib.tool(annotations={"readOnlyHint": True})
async def lookup_order(order_id: Annotated[str, Field(description="Order ID, such as O-1001")]) -> dict:
    """Look up an order by its ID and return it as JSON."""
    order = ORDERS.get(order_id)
    if order is None:
        raise ToolError(f"Order not found: {order_id}")
    return order


@toolcrib.tool
async def fetch_user(user_id: str) -> str:
    """Fetch a user by ID."""
    raise RuntimeError("User service failed at /srv/secret/db.sqlite password=hunter2")


@toolcrib.tool
def exits() -> str:
    """A handler that calls sys.exit."""
    raise SystemExit(4)


@toolcrib.tool
def limited(count: Annotated[int, Field(ge=1, le=10)], name: str, ratio: float = 0.5) -> str:
    """Take constrained arguments."""
    return f"{count} {name} {ratio}"


class Order(BaseModel):
    id: str
    total: float


@toolcrib.tool
def typed_order(good: bool) -> Order:
    """Return a typed order (or, when good is false, something that is not one)."""
    return Order(id="O-1", total=3.5) if good else {"id": "O-1"}  # type: ignore[return-value]


class Shipment(BaseModel):
    order_id: str = Field(alias="orderId")
    shipped: datetime


@toolcrib.tool
def shipment() -> Shipment:
    """Return a shipment (a field with an alias, a date)."""
    return Shipment(orderId="O-1", shipped=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))


@toolcrib.tool
def listing() -> list[int]:
    """Return a list."""
    return [1, 2, 3]


@toolcrib.tool
def image() -> toolcrib.Image:
    """Return an image."""
    return toolcrib.Image(b"\x89PNG", "image/png")


@toolcrib.tool
def mixed() -> list[Any]:
    """Return several content blocks."""
    return [toolcrib.Text("see:"), toolcrib.ResourceLink("file:///x.txt", "x.txt", "text/plain")]


@toolcrib.tool
def huge() -> str:
    """Return a very long text."""
    return "x" * 500


@toolcrib.tool
def not_json() -> dict:
    """Return something that is not JSON."""
    return {"n": float("nan")}


@toolcrib.tool
def mentions_nan() -> dict:
    """Return JSON whose text names NaN and Infinity (words, not numbers)."""
    return {"note": "NaN ≠ Infinity", "n": 1.5}


@toolcrib.tool
async def whoami(ctx: Context, note: str = "") -> dict:
    """Say who is calling and from where."""
    return {"agent": ctx.agent, "tool": ctx.tool, "workspace": str(ctx.workspace), "settings": ctx.settings.flavour}


class Settings(BaseModel):
    flavour: str = "plain"


class Query(BaseModel):
    q: str


async def explicit_handler(args: Query, ctx: Context) -> str:
    return f"{args.q} for {ctx.agent}"


SEARCH = toolcrib.tool("search", "Search for q.", Query, explicit_handler)

CANCELLED: list[str] = []


@toolcrib.tool(timeout=0.2)
async def hangs() -> str:
    """Never finish on its own."""
    try:
        await anyio.sleep(30)
    finally:
        CANCELLED.append("cancelled")
    return "never"


@toolcrib.tool(timeout=0.2)
def hangs_sync(release: float = 1.0) -> str:
    """Block a worker thread for a while."""
    threading.Event().wait(release)
    return "late"


@toolcrib.tool(timeout=0.3)
async def own_scope(seconds: float) -> str:
    """Enter a cancel scope of its own before its first await (the pipeline's timeout must nest with it)."""
    with anyio.move_on_after(5) as scope:
        await anyio.sleep(seconds)
    return "inner deadline hit" if scope.cancelled_caught else "slept"


@toolcrib.tool
async def raises_timeout() -> str:
    """Raise a TimeoutError of its own (not the pipeline's timeout)."""
    await anyio.sleep(0)
    raise TimeoutError("the upstream service timed out")


STOPPED = threading.Event()


@toolcrib.tool(timeout=0.2)
def cooperative(ctx: Context) -> str:
    """Work in a loop until told the call is over, then stop (freeing the worker)."""
    while not ctx.cancelled:
        threading.Event().wait(0.01)
    STOPPED.set()
    return "stopped"


BARRIER = threading.Barrier(5)


@toolcrib.tool
def rendezvous() -> str:
    """Wait until five calls run at once (they can only meet if they run in parallel)."""
    BARRIER.wait(timeout=20)
    return "met"


SHOP = Pack(lookup_order, fetch_user, exits, limited, typed_order, shipment, listing, image, mixed, huge, not_json,
            mentions_nan, whoami, SEARCH, hangs, hangs_sync, rendezvous, own_scope, raises_timeout, cooperative,
            settings=Settings)

CONFIG = """
[host]
max_result_chars = 100
[packs.shop]
flavour = "spicy"
[agents.a]
[agents.a.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
"""


@pytest.fixture(scope="module")
def host():  # type: ignore[no-untyped-def]
    return make_host(CONFIG, {"shop": SHOP}, base_dir=Path("/srv/ws"))


def call(host: Any, tool: str, args: Any = None, agent: str = "a", **kwargs: Any) -> ToolResult:
    return anyio.run(lambda: host.call(agent, tool, args, **kwargs))


def test_seed_order_lookup(host) -> None:  # type: ignore[no-untyped-def]
    ok = call(host, "shop__lookup_order", {"order_id": "O-1001"})
    assert ok.to_wire() == {
        "content": [{"type": "text", "text": '{"id":"O-1001","status":"shipped"}'}],
        "isError": False,
        "structuredContent": {"id": "O-1001", "status": "shipped"},
    }
    missing = call(host, "shop__lookup_order", {"order_id": "O-42"})
    assert missing.to_wire() == {"content": [{"type": "text", "text": "Order not found: O-42"}], "isError": True}


def test_validation_failure_names_every_field(host) -> None:  # type: ignore[no-untyped-def]
    result = call(host, "shop__limited", {"count": 50, "ratio": "lots", "extra": 1})
    assert result.is_error
    assert result.text == (
        "Invalid arguments for shop__limited:\n"
        "- count: Input should be less than or equal to 10 (got 50)\n"
        "- name: required argument is missing\n"
        "- ratio: Input should be a valid number, unable to parse string as a number (got 'lots')\n"
        "- extra: unknown argument (this tool takes: count, name, ratio)"
    )


@pytest.mark.parametrize(("args", "problem"), [
    ([1, 2], "arguments must be a JSON object, not an array"),
    ("x", "arguments must be a JSON object, not a string"),
    ({"count": 1, "name": "n", "ratio": float("nan")}, "numbers must be finite (NaN and Infinity are not JSON)"),
    ({"count": 1, "name": "n", "ratio": float("inf")}, "numbers must be finite (NaN and Infinity are not JSON)"),
    ({"count": 10**30, "name": "n"}, "an integer has more than 64 bits; send big numbers as strings"),
    ({"name": "x" * 2_000_000}, "the arguments are larger than the limit of 1048576 bytes"),
    ({"name": json.loads("[" * 40 + "]" * 40)}, "nested more than 32 levels deep"),
])
def test_payload_limits(host, args: Any, problem: str) -> None:  # type: ignore[no-untyped-def]
    result = call(host, "shop__limited", args)
    text = f"Invalid arguments for shop__limited: {problem}"
    assert result.to_wire() == {"content": [{"type": "text", "text": text}], "isError": True}


def test_a_handler_that_throws_leaks_nothing(host, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    with caplog.at_level(logging.ERROR, logger="toolcrib.calls"):
        result = call(host, "shop__fetch_user", {"user_id": "u1"})
    assert result.to_wire() == {"content": [{"type": "text", "text": "Tool shop__fetch_user failed with an internal "
                                             "error; the host's log has the details."}], "isError": True}
    assert "hunter2" in caplog.text and "Traceback" in caplog.text
    assert call(host, "shop__exits").text == "Tool shop__exits failed with an internal error; the host's log has the " \
                                             "details."


def test_results_are_normalized(host) -> None:  # type: ignore[no-untyped-def]
    assert call(host, "shop__typed_order", {"good": True}).to_wire() == {
        "content": [{"type": "text", "text": '{"id":"O-1","total":3.5}'}],
        "isError": False,
        "structuredContent": {"id": "O-1", "total": 3.5},
    }
    shipped = {"orderId": "O-1", "shipped": "2026-01-02T03:04:05Z"}  # by alias, as JSON (its schema says so)
    assert call(host, "shop__shipment").to_wire() == {
        "content": [{"type": "text", "text": json.dumps(shipped, separators=(",", ":"))}], "isError": False,
        "structuredContent": shipped}
    bad = call(host, "shop__typed_order", {"good": False})
    assert bad.is_error and bad.text.startswith("Tool shop__typed_order returned a result that cannot be sent")
    assert call(host, "shop__listing").to_wire() == {
        "content": [{"type": "text", "text": "[1,2,3]"}], "isError": False, "structuredContent": {"result": [1, 2, 3]}}
    assert call(host, "shop__image").to_wire() == {
        "content": [{"type": "image", "data": "iVBORw==", "mimeType": "image/png"}], "isError": False}
    assert call(host, "shop__mixed").to_wire() == {"content": [
        {"type": "text", "text": "see:"},
        {"type": "resource_link", "uri": "file:///x.txt", "name": "x.txt", "mimeType": "text/plain"},
    ], "isError": False}
    assert call(host, "shop__not_json").is_error
    assert call(host, "shop__mentions_nan").to_wire() == {  # the words are no reason to refuse it
        "content": [{"type": "text", "text": '{"note":"NaN ≠ Infinity","n":1.5}'}], "isError": False,
        "structuredContent": {"note": "NaN ≠ Infinity", "n": 1.5}}


def test_long_results_are_truncated_with_a_marker(host) -> None:  # type: ignore[no-untyped-def]
    result = call(host, "shop__huge")
    assert result.text == "x" * 100 + ("\n[... truncated by toolcrib: the result had 500 characters, more than the "
                                       "limit of 100]")


def test_context_and_explicit_form(host) -> None:  # type: ignore[no-untyped-def]
    assert call(host, "shop__whoami").structured_content == {
        "agent": "a", "tool": "shop__whoami", "workspace": "/srv/ws", "settings": "spicy"}
    assert call(host, "shop__search", {"q": "refunds"}).text == "refunds for a"
    assert call(host, "shop__search", {"q": "r", "ctx": 1}).text == (
        "Invalid arguments for shop__search:\n- ctx: unknown argument (this tool takes: q)")


def test_timeout_cancels_an_async_handler(host) -> None:  # type: ignore[no-untyped-def]
    CANCELLED.clear()
    result = call(host, "shop__hangs")
    assert result.to_wire() == {"content": [{"type": "text", "text": "Tool shop__hangs timed out after 0.2 seconds "
                                             "and was stopped."}], "isError": True}
    assert CANCELLED == ["cancelled"]


def test_handlers_with_cancel_scopes_of_their_own(host) -> None:  # type: ignore[no-untyped-def]
    assert call(host, "shop__own_scope", {"seconds": 0.01}).text == "slept"
    assert call(host, "shop__own_scope", {"seconds": 3}).text == (
        "Tool shop__own_scope timed out after 0.3 seconds and was stopped.")
    assert call(host, "shop__raises_timeout").text == (
        "Tool shop__raises_timeout failed with an internal error; the host's log has the details.")


def test_calls_under_trio_run_timeouts_and_worker_threads_alike(host) -> None:  # type: ignore[no-untyped-def]
    """anyio's other backend: asyncio's eager start and timer are not used there, anyio's cancel scopes are; and
    the same host's sync handlers run on both (anyio's worker limiter belongs to one backend)."""

    def on_trio(tool: str, args: Any = None) -> str:
        return anyio.run(lambda: host.call("a", tool, args), backend="trio").text

    assert call(host, "shop__listing").text == "[1,2,3]"  # a worker thread under asyncio first
    assert on_trio("shop__listing") == "[1,2,3]"
    CANCELLED.clear()
    assert on_trio("shop__own_scope", {"seconds": 0.01}) == "slept"
    assert on_trio("shop__hangs") == "Tool shop__hangs timed out after 0.2 seconds and was stopped."
    assert CANCELLED == ["cancelled"]
    assert on_trio("shop__hangs_sync", {"release": 1.0}) == (
        "Tool shop__hangs_sync timed out after 0.2 seconds and was stopped.")
    assert on_trio("shop__lookup_order", {"order_id": "O-1001"}) == '{"id":"O-1001","status":"shipped"}'


def test_timeout_of_a_sync_handler_returns_while_the_thread_finishes(host) -> None:  # type: ignore[no-untyped-def]
    assert call(host, "shop__hangs_sync", {"release": 1.0}).text == (
        "Tool shop__hangs_sync timed out after 0.2 seconds and was stopped.")


def test_a_sync_handler_is_told_when_its_call_timed_out(host) -> None:  # type: ignore[no-untyped-def]
    STOPPED.clear()
    assert call(host, "shop__cooperative").text == "Tool shop__cooperative timed out after 0.2 seconds and was stopped."
    assert STOPPED.wait(30)  # a deadlock guard, not a time limit: without ctx.cancelled the loop never ends


def test_sync_calls_run_in_parallel(host) -> None:  # type: ignore[no-untyped-def]
    results: list[str] = []

    async def five() -> None:
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(lambda: _collect(host, results))

    anyio.run(five)
    # The barrier only opens when five handlers wait on it at the same time.
    assert results == ["met"] * 5


async def _collect(host: Any, results: list[str]) -> None:
    results.append((await host.call("a", "shop__rendezvous", {})).text)


# -- approvals, modes, argument rules, hooks -------------------------------------------------------------------

RULES = """
[agents.{name}]
mode = "{mode}"
{extra}
[agents.{name}.permissions]
plugins = {{ allow = ["*"] }}
tools = {tools}
ask = ["files__write", "files__touch", "files__read(secret*)"]
"""


def rules_host(mode: str = "default", tools: str = '{ allow = ["*"] }', plugins: dict[str, Any] | None = None) -> Any:
    extra = "allow_dangerously_skip_permissions = true" if mode == "bypassPermissions" else ""
    return make_host(RULES.format(name="a", mode=mode, tools=tools, extra=extra), {"files": FILES, **(plugins or {})})


def test_ask_without_an_approver_is_denied_with_a_clear_message() -> None:
    result = call(rules_host(), "files__write", {"path": "a.txt", "text": "hi"})
    assert result.to_wire() == {"content": [{"type": "text", "text": (
        "Permission denied: files__write needs approval (ask rule 'files__write'), and no approver could answer "
        "(the client does not support elicitation and no approval hook decided).")}], "isError": True}
    assert call(rules_host(), "files__read", {"path": "notes.txt"}).text == "contents of notes.txt"
    assert call(rules_host(), "files__read", {"path": "secret.txt"}).is_error


def test_approver_callback_answers() -> None:
    seen: list[str] = []

    async def yes(agent: str, tool: str, args: Any, message: str) -> bool:
        seen.append(message)
        return True

    async def no(agent: str, tool: str, args: Any, message: str) -> bool:
        return False

    host = rules_host()
    assert call(host, "files__write", {"path": "a", "text": "hi"}, approver=yes).text == "wrote 2 characters to a"
    assert seen == ["Agent 'a' wants to call files__write (ask rule 'files__write'). Allow this call?"]
    assert call(host, "files__write", {"path": "a", "text": "hi"}, approver=no).text == (
        "Permission denied: files__write needs approval (ask rule 'files__write'), and the user declined.")


@pytest.mark.parametrize(("mode", "write", "touch"), [
    ("dontAsk", "Permission denied: files__write needs approval (ask rule 'files__write'), and agent mode 'dontAsk' "
                "denies calls that need approval.", "Permission denied: files__touch needs approval (ask rule "
                "'files__touch'), and agent mode 'dontAsk' denies calls that need approval."),
    ("acceptEdits", "Permission denied: files__write needs approval (ask rule 'files__write'), and no approver could "
                    "answer (the client does not support elicitation and no approval hook decided).",
     "touched t"),
    ("bypassPermissions", "wrote 2 characters to w", "touched t"),
])
def test_modes_decide_asked_calls(mode: str, write: str, touch: str) -> None:
    host = rules_host(mode)
    assert call(host, "files__write", {"path": "w", "text": "hi"}).text == write
    assert call(host, "files__touch", {"path": "t"}).text == touch


APPROVE = """
[host]
audit_log = "{log}"
[agents.a]
mode = "{mode}"
[agents.a.permissions]
plugins = {{ allow = ["files"] }}
tools = {{ deny = ["files__write(/etc/*)"] }}
ask = ["*"]
approve = ["files__read", "files__write(docs/*)", "@writes"]
"""


@pytest.mark.parametrize("mode", ["default", "dontAsk"])
def test_approve_runs_what_ask_would_hold_and_deny_still_wins(mode: str, tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    host = make_host(APPROVE.format(log=log, mode=mode).replace(', "@writes"', ""), {"files": FILES})
    assert call(host, "files__read", {"path": "a"}).text == "contents of a"
    assert call(host, "files__write", {"path": "docs/a", "text": "hi"}).text == "wrote 2 characters to docs/a"
    asked = "and no approver could answer (the client does not support elicitation and no approval hook decided)." \
        if mode == "default" else "and agent mode 'dontAsk' denies calls that need approval."
    # each argument must match the specifier; one outside it is asked
    assert call(host, "files__write", {"path": "src/a", "text": "hi"}).text == (
        f"Permission denied: files__write needs approval (ask rule '*'), {asked}")
    assert call(host, "files__touch", {"path": "t"}).text == (
        f"Permission denied: files__touch needs approval (ask rule '*'), {asked}")
    assert call(host, "files__write", {"path": "/etc/docs/x", "text": ""}).text == (
        "Permission denied: files__write with path='/etc/docs/x' is denied by the agent's permissions (rule "
        "'files__write(/etc/*)').")
    host.close()
    decided = [(line["tool"], line["decision"], line["by"]) for line in map(json.loads, log.read_text().splitlines())]
    assert decided[:2] == [("files__read", "allowed", "approve rule 'files__read'"),
                           ("files__write", "allowed", "approve rule 'files__write(docs/*)'")]


def test_approve_takes_selectors_and_a_tool_with_no_argument_to_match_is_not_approved_by_a_specifier(
        tmp_path: Path) -> None:
    host = make_host(APPROVE.format(log=tmp_path / "a.jsonl", mode="default"), {"files": FILES})
    assert call(host, "files__touch", {"path": "t"}).text == "touched t"  # @writes: not read-only
    assert call(host, "files__rm", {"path": "t"}).text == "removed t"
    no_subject = make_host(APPROVE.format(log=tmp_path / "b.jsonl", mode="default").replace(
        '"files__read", "files__write(docs/*)", "@writes"', '"files__rm(*)"'), {"files": FILES})
    assert call(no_subject, "files__rm", {"path": "t"}).text.startswith(  # rm names no rule subject
        "Permission denied: files__rm needs approval (ask rule '*')")


def test_seed_mode_names_are_read_as_toolcrib_modes() -> None:
    host = make_host('[agents.a]\nmode = "yolo"\nallow_dangerously_skip_permissions = true\n'
                     '[agents.a.permissions]\nplugins = { allow = ["files"] }\ntools = { allow = ["*"] }\n'
                     'ask = ["*"]\n', {"files": FILES})
    assert host.rules["a"].mode == "bypassPermissions"
    assert call(host, "files__write", {"path": "w", "text": "hi"}).text == "wrote 2 characters to w"
    from conftest import problems

    assert problems('[agents.a]\nmode = "yolo"\n') == [
        "error: conf.toml: agents.a.mode: bypassPermissions approves every asked call; it is accepted only with "
        "allow_dangerously_skip_permissions = true beside it"]
    assert problems('[agents.a]\nmode = "auto"\n') == [
        "error: conf.toml: agents.a.mode: expected one of 'default', 'plan', 'acceptEdits', 'dontAsk' or "
        "'bypassPermissions', got a string ('auto')"]
    assert problems('[agents.a.permissions]\napprove = ["@everything"]\n') == [
        "error: conf.toml: agents.a.permissions.approve[0]: '@everything' is not a selector; approve takes tool "
        "patterns and '@writes', '@destructive'"]


def test_no_mode_runs_a_hidden_tool() -> None:
    host = rules_host("bypassPermissions", tools='{ deny = ["files__rm"] }')
    with pytest.raises(toolcrib.UnknownToolError, match=r"^Unknown tool: files__rm$"):
        call(host, "files__rm", {"path": "x"})


def test_argument_rules_restrict_calls_without_hiding() -> None:
    host = rules_host(tools='{ deny = ["files__write(/etc/*)", "files__rm(*)"] }')
    assert host.view("a").names == ["files__read", "files__rm", "files__touch", "files__write"]
    assert call(host, "files__write", {"path": "/etc/passwd", "text": ""}).text == (
        "Permission denied: files__write with path='/etc/passwd' is denied by the agent's permissions "
        "(rule 'files__write(/etc/*)').")
    assert call(host, "files__rm", {"path": "x"}).text == (
        "Permission denied: files__rm with this call is denied by the agent's permissions (rule 'files__rm(*)').")
    allow = rules_host(tools='{ allow = ["files__read(docs/*)", "files__touch"] }')
    assert allow.view("a").names == ["files__read", "files__touch"]
    assert call(allow, "files__read", {"path": "docs/a.md"}).text == "contents of docs/a.md"
    assert call(allow, "files__read", {"path": "src/a.py"}).text == (
        "Permission denied: files__read with path='src/a.py' is denied by the agent's permissions (no allow rule "
        "matches its argument).")


class Policy:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    @toolcrib.hookimpl
    def toolcrib_pre_tool_use(self, tool: str, arguments: Any) -> Any:
        self.seen.append((tool, dict(arguments)))
        if tool == "files__rm":
            return Deny("rm is not allowed in this workflow; move the file to trash/ instead")
        if tool == "files__read" and arguments["path"] == "old.txt":
            return Allow(updated_input={"path": "new.txt"})
        if tool == "files__read" and arguments["path"] == "bad.txt":
            return Allow(updated_input={"path": 3})
        if tool == "files__touch":
            raise RuntimeError("policy backend down")
        return None


class Lenient:
    @toolcrib.hookimpl
    async def toolcrib_pre_tool_use(self, agent: str) -> Any:
        return Allow()


class Redactor:
    @toolcrib.hookimpl
    def toolcrib_post_tool_use(self, tool: str, result: ToolResult) -> Any:
        if "secret" in result.text:
            return ToolResult(content=({"type": "text", "text": result.text.replace("secret", "[redacted]")},))
        if tool == "files__touch":
            raise ValueError("redactor broke")
        return None


def test_pre_tool_use_hooks() -> None:
    policy = Policy()
    host = rules_host(tools='{ allow = ["*"] }', plugins={"policy": policy, "lenient": Lenient()})
    assert call(host, "files__rm", {"path": "x"}).to_wire() == {"content": [{"type": "text", "text": (
        "rm is not allowed in this workflow; move the file to trash/ instead")}], "isError": True}
    assert call(host, "files__read", {"path": "old.txt"}).text == "contents of new.txt"
    assert call(host, "files__read", {"path": "bad.txt"}).text == (
        "Invalid arguments for files__read (as replaced by 'policy'):\n- path: Input should be a valid string (got 3)")
    approve = {"approver": _always}
    assert call(host, "files__touch", {"path": "t"}, **approve).text == (
        "files__touch was denied: a policy check failed (RuntimeError).")
    assert ("files__rm", {"path": "x"}) in policy.seen


async def _always(*args: Any) -> bool:
    return True


class Narrow:
    """A policy that says which calls it sees (``sees_calls``): only files__read's, and only agent a's."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str, str]] = []
        self.seen: list[str] = []

    def sees_calls(self, hook: str, agent: str, tool: str) -> bool:
        self.asked.append((hook, agent, tool))
        return agent == "a" and tool == "files__read"

    @toolcrib.hookimpl
    def toolcrib_pre_tool_use(self, tool: str) -> Any:
        self.seen.append(tool)
        return Deny("not now")


def test_a_plugin_that_says_which_calls_it_sees_is_called_for_those_alone() -> None:
    narrow = Narrow()
    host = rules_host(tools='{ allow = ["*"] }', plugins={"narrow": narrow})
    assert call(host, "files__rm", {"path": "x"}).text == "removed x"
    assert call(host, "files__read", {"path": "a.md"}).text == "not now"
    assert call(host, "files__read", {"path": "b.md"}).text == "not now"
    assert narrow.seen == ["files__read", "files__read"]
    assert narrow.asked == [("toolcrib_pre_tool_use", "a", "files__rm"),
                            ("toolcrib_pre_tool_use", "a", "files__read")]  # asked once a tool (a view never changes)


class LooksLikeASink:
    """A pack with an audit hook and a method shaped like the audit log's: it is heard through its hook alone."""

    def __init__(self) -> None:
        self.records: list[str] = []

    def log_decision(self, decision: Any) -> None:
        raise RuntimeError("a pack's method the pipeline must never call")

    @toolcrib.hookimpl
    def toolcrib_audit(self, record: Any) -> None:
        self.records.append(f"{record['tool']} {record['decision']}")


def test_only_the_host_s_own_audit_log_takes_decisions_raw_a_pack_is_heard_through_its_hook() -> None:
    pack = LooksLikeASink()
    host = rules_host(tools='{ allow = ["*"] }', plugins={"sinkish": pack})
    assert call(host, "files__rm", {"path": "x"}).text == "removed x"
    assert pack.records == ["files__rm allowed"]


def test_post_tool_use_hooks_redact_and_fail_closed() -> None:
    host = rules_host(plugins={"redactor": Redactor()})
    assert call(host, "files__read", {"path": "secret-plan"}, approver=_always).text == "contents of [redacted]-plan"
    assert call(host, "files__touch", {"path": "t"}, approver=_always).text == (
        "The result of files__touch was withheld: a post-processing check failed.")


class ApproveHook:
    @toolcrib.hookimpl
    def toolcrib_approve(self, tool: str, rule: str) -> Any:
        if tool == "files__touch":
            return True
        if tool == "files__write":
            return Deny("writes need a ticket number")
        return None


def test_approval_hook() -> None:
    host = rules_host(plugins={"approvals": ApproveHook()})
    assert call(host, "files__touch", {"path": "t"}).text == "touched t"
    denied = call(host, "files__write", {"path": "w", "text": ""})
    assert denied.text == "Permission denied: writes need a ticket number"


# -- sync workers -------------------------------------------------------------------------------------------


def _meeting(parties: int) -> tuple[Any, list[int]]:
    """A sync tool whose calls wait for each other: ``parties`` of them must run at once for any to return."""
    barrier = threading.Barrier(parties, timeout=60)  # a deadlock guard, not a speed limit
    running = [0, 0]  # now, most at once
    lock = threading.Lock()

    @toolcrib.tool
    def meet() -> str:
        """Wait until enough calls run at once."""
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return "alone"
        finally:
            with lock:
                running[0] -= 1
        return "met"

    return Pack(meet), running


def _all_at_once(host: Any, tool: str, n: int) -> list[str]:
    texts: list[str] = []

    async def one() -> None:
        texts.append((await host.call("a", tool, {})).text)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(n):
                group.start_soon(one)

    anyio.run(main)
    return texts


def test_a_hundred_sync_calls_run_at_once_by_default() -> None:
    pack, running = _meeting(100)
    host = make_host(CONFIG, {"meeting": pack})
    assert _all_at_once(host, "meeting__meet", 100) == ["met"] * 100
    assert running[1] == 100


def test_sync_workers_bounds_the_sync_calls_running_at_once() -> None:
    pack, running = _meeting(2)
    host = make_host("[host]\nsync_workers = 2\n" + CONFIG.replace("[host]\n", "", 1), {"meeting": pack})
    assert _all_at_once(host, "meeting__meet", 10) == ["met"] * 10
    assert running[1] == 2


# -- audit --------------------------------------------------------------------------------------------------


def test_audit_log_one_line_per_decision(tmp_path: Path) -> None:
    config = RULES.format(name="a", mode="default", tools='{ deny = ["files__rm"] }', extra="")
    host = make_host('[host]\naudit_log = "audit.jsonl"\n' + config, {"files": FILES}, base_dir=tmp_path)
    call(host, "files__read", {"path": "x"})
    call(host, "files__write", {"path": "w", "text": "secret"})
    call(host, "files__read", {"path": 5})
    with pytest.raises(toolcrib.UnknownToolError):
        call(host, "files__rm", {"path": "x"})
    host.close()
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["agent"], r["tool"], r["decision"], r["by"], r["is_error"]) for r in records] == [
        ("a", "files__read", "allowed", "rules", False),
        ("a", "files__write", "denied", "Permission denied: files__write needs approval (ask rule 'files__write'), "
                                        "and no approver could answer (the client does not support elicitation and "
                                        "no approval hook decided).", True),
        ("a", "files__read", "invalid", "input validation", True),
        ("a", "files__rm", "unknown", "no such tool in the agent's view", True),
    ]
    assert all("arguments" not in r for r in records)
    assert all(isinstance(r["duration_ms"], float) and r["time"].endswith("+00:00") for r in records)


def test_audit_arguments_when_asked(tmp_path: Path) -> None:
    config = RULES.format(name="a", mode="default", tools='{ allow = ["*"] }', extra="")
    host = make_host('[host]\naudit_log = "a.jsonl"\naudit_arguments = true\n' + config, {"files": FILES},
                     base_dir=tmp_path)
    call(host, "files__read", {"path": "x"})
    host.close()
    assert json.loads((tmp_path / "a.jsonl").read_text())["arguments"] == {"path": "x"}


class _Unwritable:
    def __repr__(self) -> str:
        raise KeyboardInterrupt


@pytest.mark.parametrize("arguments", [None, {"path": "x"}, {"ü\n\"": ["\u2028", 1.5, None, True]}])
@pytest.mark.parametrize("name", ["files__read", 'we"ird\\name\u00e9'])
@pytest.mark.parametrize("identity", [None, {"kind": "oauth", "subject": "ali\"ce", "client": "bot"}])
@pytest.mark.parametrize("call_id", [None, "call_0123456789abcdef"])
@pytest.mark.parametrize("notes", [None, {"found": ["fs__ls", "f\"s"]}])
def test_audit_line_is_the_records_json(name: str, arguments: Any, identity: Any, call_id: str | None,
                                        notes: Any) -> None:
    from toolcrib.default_plugins.audit import line, record
    for at, seconds in [(1_764_510_000.0, 0.0), (1_764_510_000.9996, 0.0012345), (1_764_510_001.5, 12.0)]:
        decision = (at, "ag\u00eant", "tool", name, "denied", 'rule "x"\n', seconds, True, arguments, identity,
                    call_id, notes)
        assert json.loads(line(decision)) == record(decision)
        assert record(decision)["time"] == datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    written = line((1_764_510_000.9996, "a", "tool", "t", "allowed", "rules", 0.012, False, {"x": "é"}, None, None,
                    None))
    assert written == ('{"time": "2025-11-30T13:40:00.999+00:00", "agent": "a", "kind": "tool", "tool": "t", '
                       '"decision": "allowed", "by": "rules", "duration_ms": 12.000, "is_error": false, '
                       '"arguments": {"x": "é"}}\n')


def test_audit_lines_keep_coming_past_arguments_that_cannot_be_written(tmp_path: Path) -> None:
    from toolcrib.default_plugins.audit import AuditLog
    audit = AuditLog(tmp_path / "a.jsonl")
    audit.log_decision((1_764_510_000.25, "a", "tool", "t", "allowed", "rules", 0.001, False, {"x": _Unwritable()},
                        None, None, None))
    audit.log_decision((1_764_510_000.5, "a", "tool", "t", "allowed", "rules", 0.002, False, {"x": 1}, None, "call_1",
                        None))
    audit.close()
    lines = [json.loads(text) for text in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert [(line["arguments"], line.get("call_id")) for line in lines] == [
        ({"(not written)": "KeyboardInterrupt: "}, None), ({"x": 1}, "call_1")]


def test_an_audit_log_that_cannot_be_opened_costs_no_call(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "taken").write_text("a file where the log's folder should be")
    config = RULES.format(name="a", mode="default", tools='{ allow = ["*"] }', extra="")
    host = make_host('[host]\naudit_log = "taken/a.jsonl"\n' + config, {"files": FILES}, base_dir=tmp_path)
    with caplog.at_level(logging.ERROR, logger="toolcrib.default_plugins.audit"):
        assert call(host, "files__read", {"path": "x"}).text == "contents of x"
        assert call(host, "files__read", {"path": "y"}).text == "contents of y"
        host.close()
    assert [r.getMessage().split(":")[0] for r in caplog.records] == [
        f"audit log {tmp_path / 'taken' / 'a.jsonl'} cannot be opened, its lines are lost until it can"]


def test_other_audit_plugins_get_the_same_records_as_the_log(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    class Auditor:
        @toolcrib.hookimpl
        def toolcrib_audit(self, record: Any) -> None:
            seen.append(dict(record))

    config = RULES.format(name="a", mode="default", tools='{ allow = ["*"] }', extra="")
    host = make_host('[host]\naudit_log = "a.jsonl"\naudit_arguments = true\n' + config,
                     {"files": FILES, "auditor": Auditor()}, base_dir=tmp_path)
    call(host, "files__read", {"path": "x"})
    host.close()
    assert [json.loads(text) for text in (tmp_path / "a.jsonl").read_text().splitlines()] == seen
    assert [(r["tool"], r["decision"], r["arguments"]) for r in seen] == [("files__read", "allowed", {"path": "x"})]


def test_a_process_that_never_closes_its_log_loses_no_line(tmp_path: Path) -> None:
    script = ("import sys; from pathlib import Path; from toolcrib.default_plugins.audit import AuditLog\n"
              "log = AuditLog(Path(sys.argv[1]))\n"
              "for i in range(500):\n"
              "    log.log_decision((1.0 + i, 'a', 'tool', f't{i}', 'allowed', 'rules', 0.0, False, None, None, None,"
              " None))\n")
    subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.jsonl")], check=True, timeout=60)
    names = [json.loads(text)["tool"] for text in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert names == [f"t{i}" for i in range(500)]


def test_a_cli_call_leaves_its_audit_line(tmp_path: Path, cli_config: Any) -> None:
    path = cli_config(CONFIG.replace("[host]\n", '[host]\naudit_log = "audit.jsonl"\n'), "shop=test_calls:SHOP")
    assert cli("call", "--config", path, "--agent", "a", "shop__lookup_order", "--args",
               '{"order_id": "O-1001"}')[0] == 0
    records = [json.loads(text) for text in (Path(path).parent / "audit.jsonl").read_text().splitlines()]
    assert [(r["agent"], r["tool"], r["decision"]) for r in records] == [("a", "shop__lookup_order", "allowed")]


# -- the CLI runs the same pipeline ---------------------------------------------------------------------------


@pytest.fixture
def shop_cli(cli_config: Any) -> str:
    return str(cli_config(CONFIG, "shop=test_calls:SHOP"))


def test_cli_call_seed_examples(shop_cli: str) -> None:
    assert cli("call", "--config", shop_cli, "--agent", "a", "shop__lookup_order", "--args",
               '{"order_id": "O-1001"}') == (0, '{"id":"O-1001","status":"shipped"}\n', "")
    assert cli("call", "--config", shop_cli, "--agent", "a", "shop__lookup_order", "--args",
               '{"order_id": "O-42"}') == (1, "Order not found: O-42\n", "")
    code, out, _ = cli("call", "--config", shop_cli, "--agent", "a", "shop__limited", "--args", '{"count": 0}')
    assert (code, out) == (1, "Invalid arguments for shop__limited:\n- count: Input should be greater than or equal "
                              "to 1 (got 0)\n- name: required argument is missing\n")
    code, out, _ = cli("call", "--config", shop_cli, "--agent", "a", "shop__fetch_user", "--args",
                       '{"user_id": "u"}', "--json")
    assert (code, json.loads(out)) == (1, {"content": [{"type": "text", "text": "Tool shop__fetch_user failed with "
                                           "an internal error; the host's log has the details."}], "isError": True})


def test_cli_call_bad_args(shop_cli: str) -> None:
    code, _, err = cli("call", "--config", shop_cli, "--agent", "a", "shop__limited", "--args", "{nope")
    assert code == 2
    assert "Invalid value for --args: not valid JSON: Expecting property name enclosed in double quotes" in err
    code, _, err = cli("call", "--config", shop_cli, "--agent", "a", "shop__limited", "--args", "[1]")
    assert code == 2
    assert "Invalid value for --args: must be a JSON object" in err


class Opaque:
    """A type pydantic cannot build a schema for."""


@toolcrib.tool
def broken(thing: Opaque) -> str:
    """A tool whose input schema cannot be built (found when it is first needed, and by toolcrib check)."""
    return "never"


def test_a_tool_whose_schema_cannot_be_built_is_listed_errors_and_is_reported() -> None:
    host = make_host(CONFIG, {"kit": Pack(broken, listing)})
    view = host.view("a")
    assert view.names == ["kit__broken", "kit__listing"]  # listed and callable alike
    assert view.mcp_tools[0] == {"name": "kit__broken", "description": broken.__doc__.strip(),  # type: ignore[union-attr]
                                 "inputSchema": {"type": "object"}}
    assert call(host, "kit__broken", {"thing": 1}).to_wire() == {"content": [{"type": "text", "text": (
        "Tool kit__broken cannot be called: its input schema could not be built (`toolcrib check` says why).")}],
        "isError": True}
    problems = [str(p) for p in host.problems() if p.severity == "error"]
    assert len(problems) == 1
    assert problems[0].startswith("error: pack 'kit': kit__broken: tool 'broken': cannot build an input schema "
                                  "from its parameters: Unable to generate pydantic-core schema for ")


def test_a_json_schema_tool_gets_its_arguments_as_a_dict_and_bad_ones_named_by_field() -> None:
    from packs import ADDRESS_SCHEMA

    register = toolcrib.tool("register", "Register a person.", ADDRESS_SCHEMA,
                             lambda args: f"{type(args).__name__} {sorted(args.items())}")
    host = make_host(CONFIG, {"kit": Pack(register)})
    # served self-contained: its $ref inlined; a schema naming its dialect keeps its $defs as given (SEP-1613)
    assert host.view("a").mcp_tools[0]["inputSchema"] == {
        "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
        "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}}, "required": ["street"]}},
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "address": {"type": "object", "properties": {"street": {"type": "string"}}, "required": ["street"]}},
        "required": ["name"], "additionalProperties": False}
    assert call(host, "kit__register", {"name": "Ada"}).to_wire() == {
        "content": [{"type": "text", "text": "dict [('name', 'Ada')]"}], "isError": False}
    assert call(host, "kit__register", {"name": 7, "address": {}}).to_wire() == {"content": [{"type": "text", "text": (
        "Invalid arguments for kit__register:\n"
        "- address.street: required argument is missing\n"
        "- name: 7 is not of type 'string'")}], "isError": True}


@toolcrib.tool
def sdk_content() -> list[Any]:
    """Return the MCP SDK's own content objects."""
    import mcp_types

    return [mcp_types.TextContent(text="from the SDK"),
            mcp_types.ImageContent(data="iVBORw==", mime_type="image/png"),
            mcp_types.EmbeddedResource(resource=mcp_types.TextResourceContents(uri="mem://note", text="embedded",
                                                                                mime_type="text/plain"))]


def test_mcp_types_content_passes_through() -> None:
    host = make_host(CONFIG, {"kit": Pack(sdk_content)})
    assert call(host, "kit__sdk_content").to_wire() == {"content": [
        {"type": "text", "text": "from the SDK"},
        {"type": "image", "data": "iVBORw==", "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "mem://note", "mimeType": "text/plain", "text": "embedded"}},
    ], "isError": False}


@pytest.mark.parametrize(("result", "problem"), [
    (ToolResult(content=({"type": "text", "text": "ok"},), structured_content={"a": 1}), None),
    (ToolResult(content=["not a dict"]), "content must be a tuple of dicts in the MCP wire shape"),  # type: ignore[list-item]
    (ToolResult(content=({"type": "text", "text": "x"},), structured_content=[1]),
     "structured_content must be a JSON object (a dict) or None"),
    (ToolResult(content=({"type": "text", "text": "x"},), is_error="yes"), "is_error must be a bool"),  # type: ignore[arg-type]
    (ToolResult(content=({"type": "text", "text": "x"}, {"type": "video", "url": "x"})),
     "content block 1 has type 'video'; MCP content is one of: text, image, audio, resource_link, resource"),
    (ToolResult(content=({"type": "image", "data": 7, "mimeType": "image/png"},)),
     "content block 0 (image): data: Input should be a valid string"),
    (ToolResult(content=({"type": "resource", "resource": {"uri": "mem://x"}},)),
     "content block 0 (resource): resource.TextResourceContents.text: Field required"),
])
def test_results_built_by_user_code_are_checked(result: ToolResult, problem: str | None) -> None:
    assert result_problem(result) == problem
