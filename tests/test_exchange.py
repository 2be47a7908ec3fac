"""2026-07-28 POSTs answered by toolcrib.mcp.exchange put on the wire exactly what the SDK's own HTTP entry puts
there: the same status, the same content type, the same message (or events), for requests it answers and for the
ones it hands over. Each request goes through two real HTTP apps built for the same agents (through httpx's ASGI
transport): one as served, one with ``answers_modern`` off, so every request takes the SDK's entry.

Then what only this path does on its own: a client that goes ends its call, a long call keeps its stream alive, and
``Mcp-Param-*`` headers are checked against the schema of the tool as the caller sees it."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import pytest

import toolcrib
from conftest import make_host
from packs import Pack
from toolcrib.mcp import exchange
from toolcrib.mcp.http import MAX_BODY_BYTES, HttpApp, HttpOptions
from toolcrib.mcp.state import ServingState
from wire_pack import (
    META,
    REQUESTS,
    Garble,
    Prompts,
    crash,
    garbled,
    hand_built,
    missing,
    order,
    picture,
    routed,
    text,
    total,
)

seen: dict[str, Any] = {}


@toolcrib.tool
async def slow(seconds: float, ctx: toolcrib.Context) -> str:
    """Report progress, log, sleep."""
    await ctx.report_progress(1, 2, "half")
    await ctx.info("halfway")
    await anyio.sleep(seconds)
    return "done"


@toolcrib.tool
async def hang() -> str:
    """Wait until cancelled, and say so."""
    seen["started"].set()
    try:
        await anyio.sleep_forever()
    finally:
        seen["ended"] = "cancelled"
    return "never"


@toolcrib.tool
async def hang_then_say(ctx: toolcrib.Context) -> str:
    """Wait until cancelled, then tell the client how far it came as it stops."""
    seen["started"].set()
    try:
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True):
            await ctx.report_progress(1, 1, "stopping")
        seen["ended"] = "cancelled"
    return "never"


@toolcrib.tool
async def quiet(seconds: float) -> str:
    """Sleep without a word."""
    await anyio.sleep(seconds)
    return "slept"



CONFIG = """
[agents.a]
token_env = "TOK_A"
[agents.a.permissions]
plugins = { allow = ["w", "garble", "p", "s"] }
tools = { deny = ["w__total_hidden"] }
prompts = { allow = ["*"] }
resources = { allow = ["*"] }

[agents.b]
token_env = "TOK_B"
[agents.b.permissions]
plugins = { allow = ["w"] }
tools = { allow = ["w__text"] }
"""
TOKENS = {"TOK_A": "a" * 32, "TOK_B": "b" * 32}


HANDED: list[str] = []  # the requests toolcrib's app handed to the SDK's entry (by method header), in order


@asynccontextmanager
async def apps(before: str = "", base_dir: Any = None
               ) -> AsyncIterator[tuple[httpx2.AsyncClient, httpx2.AsyncClient, HttpApp]]:
    """Two apps for the same host: toolcrib's path, and the SDK's entry for everything. What the first hands to
    the SDK's entry is written down in ``HANDED``."""
    state = ServingState(make_host(before + CONFIG, {
        "w": Pack(text, order, total, picture, missing, crash, garbled, hand_built), "garble": Garble(),
        "p": Prompts(), "s": Pack(slow, hang, quiet, routed, sampler)}, base_dir))
    ours, theirs = HttpApp(state, HttpOptions(), env=TOKENS), HttpApp(state, HttpOptions(), env=TOKENS)
    theirs.answers_modern = False
    HANDED.clear()
    async with ours.app.router.lifespan_context(ours.app), theirs.app.router.lifespan_context(theirs.app):
        for endpoint in ours.endpoints.values():
            endpoint.app = _recording(endpoint.app)
        clients = [httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000",
                                      timeout=30) for app in (ours, theirs)]
        async with clients[0], clients[1]:
            yield clients[0], clients[1], ours


def _recording(sdk: Any) -> Any:
    async def handed(scope: Any, receive: Any, send: Any) -> None:
        HANDED.append(dict(scope["headers"]).get(b"mcp-method", b"?").decode())
        await sdk(scope, receive, send)

    return handed


@toolcrib.tool
async def sampler(ctx: toolcrib.Context) -> str:
    """Ask the client's model."""
    reply = await ctx.sample([{"role": "user", "content": {"type": "text", "text": "hi"}}])
    return str(reply)


def headers(method: str, name: str | None = None, agent: str = "a", **extra: str) -> dict[str, str]:
    found = {"Authorization": f"Bearer {TOKENS['TOK_' + agent.upper()]}", "Content-Type": "application/json",
             "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28",
             "Mcp-Method": method}
    if name is not None:
        found["Mcp-Name"] = name
    return {**found, **extra}


def request(request_id: int, method: str, params: dict[str, Any] | None, meta: dict[str, Any] | None = None
            ) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method,
            "params": {**(params or {}), "_meta": {**META, **(meta or {})}}}


def reply(response: httpx2.Response) -> tuple[int, str, Any, bytes]:
    """Status, content type, the message (JSON) or the events (a stream of them) as a client reads them, and the
    bytes themselves (this path writes what the SDK writes, to the byte)."""
    return (*_read(response), response.content)


def _read(response: httpx2.Response) -> tuple[int, str, Any]:
    kind = response.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        body = [line for line in response.text.split("\r\n") if line.startswith("data: ")]
        return response.status_code, kind, [json.loads(line[6:]) for line in body]
    try:
        return response.status_code, kind, response.json()
    except ValueError:
        return response.status_code, kind, response.text


def _name(params: dict[str, Any] | None) -> str | None:
    name = (params or {}).get("name")
    return name if isinstance(name, str) else None


def test_every_request_of_the_wire_tests_gets_the_sdks_answer_word_for_word() -> None:
    async def main() -> list[tuple[Any, Any]]:
        pairs = []
        async with apps() as (ours, theirs, _):
            for i, (method, params) in enumerate(REQUESTS):
                message, sent = request(i + 1, method, params), headers(method, _name(params))
                got = [reply(await client.post("/agents/a/mcp", json=message, headers=sent))
                       for client in (ours, theirs)]
                pairs.append((got[0], got[1]))
        return pairs

    pairs = anyio.run(main)
    for ours, theirs in pairs:
        assert ours == theirs
    # every one answered by toolcrib's path (the errors from the SDK's request runner) but the call whose name is
    # no string: it has no Mcp-Name header to match, and the SDK's header check refuses it
    assert HANDED == ["tools/call"]
    by_id = {message["id"]: (status, message) for status, _, message, _ in (ours for ours, _ in pairs)}
    # anchors, so that equality cannot hold by both sides being broken alike
    assert by_id[3][1]["result"]["content"] == [{"type": "text", "text": "hello"}]
    assert by_id[10] == (400, {"jsonrpc": "2.0", "id": 10, "error": {"code": -32602,
                                                                     "message": "Unknown tool: w__nope"}})
    assert by_id[8][0] == 200 and by_id[8][1]["result"]["isError"] is True


UNUSUAL: list[tuple[str, bytes | dict[str, Any] | list[Any], dict[str, str]]] = [
    ("not JSON", b"{nope", headers("tools/call", "w__text")),
    ("a batch", [request(1, "tools/list", None)], headers("tools/list")),
    ("a notification", {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
     headers("notifications/cancelled")),
    ("a method header that disagrees", request(1, "tools/list", None), headers("tools/call")),
    ("a name header that disagrees", request(1, "tools/call", {"name": "w__text", "arguments": {"word": "x"}}),
     headers("tools/call", "w__order")),
    ("no envelope", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}, headers("tools/list")),
    ("a version this SDK does not serve", request(1, "tools/list", None),
     headers("tools/list", **{"MCP-Protocol-Version": "2099-01-01"})),
    ("an Accept without events", request(1, "tools/list", None), headers("tools/list", Accept="application/json")),
    ("a Content-Type not JSON", request(1, "tools/list", None),
     headers("tools/list", **{"Content-Type": "text/plain"})),
    ("a foreign Origin", request(1, "tools/list", None), headers("tools/list", Origin="https://evil.example")),
    ("an id that is no id", {**request(1, "tools/list", None), "id": True}, headers("tools/list")),
    ("an extra envelope key", {**request(1, "tools/list", None), "extra": 1}, headers("tools/list")),
    ("params that are a list", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]},
     headers("tools/list")),
    ("an unknown method", request(1, "nope/nope", None), headers("nope/nope")),
    ("a ping", request(1, "ping", None), headers("ping")),
    ("resources/list", request(1, "resources/list", None), headers("resources/list")),
    ("a hidden tool", request(1, "tools/call", {"name": "w__order", "arguments": {"order_id": 1}}),
     headers("tools/call", "w__order", agent="b")),
    ("a hidden tool's header", request(1, "tools/call", {"name": "s__route", "arguments": {"region": "eu"}}),
     headers("tools/call", "s__route", agent="b", **{"Mcp-Param-Region": "us"})),  # unknown, not a mismatch
    ("arguments that are a list", request(1, "tools/call", {"name": "s__route", "arguments": ["eu"]}),
     headers("tools/call", "s__route", **{"Mcp-Param-Region": "eu"})),
    ("a header without its argument", request(1, "tools/call", {"name": "s__route", "arguments": {}}),
     headers("tools/call", "s__route", **{"Mcp-Param-Region": "eu"})),
]


ANSWERED = {"an unknown method", "a ping", "resources/list", "a hidden tool", "a hidden tool's header",
            "arguments that are a list", "a header without its argument"}  # by toolcrib's path
STATUS = {"a notification": 202, "an Accept without events": 406, "a foreign Origin": 403, "an unknown method": 404,
          "a ping": 404, "an extra envelope key": 200, "resources/list": 200}  # 400 for the others


@pytest.mark.parametrize(("what", "body", "sent"), UNUSUAL, ids=[case[0] for case in UNUSUAL])
def test_what_this_path_hands_over_or_answers_gets_the_sdks_answer(
        what: str, body: bytes | dict[str, Any] | list[Any], sent: dict[str, str]) -> None:
    agent = "b" if sent["Authorization"].endswith("b" * 32) else "a"

    async def main() -> list[tuple[int, str, Any]]:
        async with apps() as (ours, theirs, _):
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            return [reply(await client.post(f"/agents/{agent}/mcp", content=content, headers=sent))
                    for client in (ours, theirs)]

    ours, theirs = anyio.run(main)
    assert ours == theirs
    assert ours[0] == STATUS.get(what, 400)
    assert ([] if what in ANSWERED else [sent["Mcp-Method"]]) == HANDED


def test_a_body_over_the_cap_is_refused_as_the_sdk_refuses_it() -> None:
    big = request(1, "tools/call", {"name": "w__text", "arguments": {"word": "x" * MAX_BODY_BYTES}})

    async def main() -> list[tuple[int, str, Any]]:
        async with apps() as (ours, theirs, _):
            content = json.dumps(big).encode()
            found = []
            for client in (ours, theirs):
                found.append(reply(await client.post("/agents/a/mcp", content=content,
                                                     headers=headers("tools/call", "w__text"))))

                async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the cap is met while reading
                    for start in range(0, len(content), 1 << 20):
                        yield content[start:start + (1 << 20)]

                found.append(reply(await client.post("/agents/a/mcp", content=chunks(),
                                                     headers=headers("tools/call", "w__text"))))
            return found

    found = anyio.run(main)
    assert found == [(413, "", "Request body too large", b"Request body too large")] * 4  # the SDK's word
    assert HANDED == ["tools/call", "tools/call"]


def test_progress_and_log_messages_turn_the_answer_into_the_sdks_stream_of_events() -> None:
    message = request(1, "tools/call", {"name": "s__slow", "arguments": {"seconds": 0}}, {"progressToken": "p1"})

    async def main() -> list[tuple[int, str, Any]]:
        async with apps() as (ours, theirs, _):
            return [reply(await client.post("/agents/a/mcp", json=message, headers=headers("tools/call", "s__slow")))
                    for client in (ours, theirs)]

    ours, theirs = anyio.run(main)
    assert ours == theirs
    status, kind, events, _ = ours
    assert (status, kind) == (200, "text/event-stream")
    assert events[0] == {"jsonrpc": "2.0", "method": "notifications/progress",
                         "params": {"progressToken": "p1", "progress": 1.0, "total": 2.0, "message": "half"}}
    assert events[-1]["id"] == 1 and events[-1]["result"]["content"] == [{"type": "text", "text": "done"}]


def test_without_notifications_a_call_is_answered_as_json(monkeypatch: pytest.MonkeyPatch) -> None:
    """... by this path: the SDK's entry is out of reach here."""
    from mcp.server import streamable_http_manager

    async def refuse(*args: Any) -> None:
        raise AssertionError("the SDK's entry answered")

    monkeypatch.setattr(streamable_http_manager, "handle_modern_request", refuse)

    async def main() -> httpx2.Response:
        async with apps() as (ours, _, _):
            return await ours.post("/agents/a/mcp", json=request(5, "tools/call", {"name": "w__total",
                                   "arguments": {"a": 2, "b": 3}}), headers=headers("tools/call", "w__total"))

    response = anyio.run(main)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert response.headers["content-length"] == str(len(response.content))
    body = response.json()
    assert (body["id"], body["result"]["content"], body["result"]["isError"]) == (
        5, [{"type": "text", "text": "5"}], False)


@pytest.mark.parametrize("tool", ["s__hang", "s__hang_then_say"])
def test_a_call_whose_client_goes_is_cancelled_and_answered_with_nothing(
        monkeypatch: pytest.MonkeyPatch, tool: str) -> None:
    """On 2026-07-28 a client cancels by closing the response: the watcher that starts beside a call that runs on
    hears it and ends the call. What the handler says as it stops goes nowhere: the client is gone."""
    monkeypatch.setattr(exchange, "WATCH_AFTER", 0.01)
    sent: list[Any] = []

    async def main() -> None:
        seen.clear()
        seen["started"] = anyio.Event()
        gone = anyio.Event()
        state = ServingState(make_host(CONFIG, {"s": Pack(slow, hang, hang_then_say, quiet, routed)}))
        app = HttpApp(state, HttpOptions(), env=TOKENS)
        body = json.dumps(request(1, "tools/call", {"name": tool, "arguments": {}}, {"progressToken": "p"})).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
                 "scheme": "http", "path": "/agents/a/mcp", "raw_path": b"/agents/a/mcp", "query_string": b"",
                 "root_path": "", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000),
                 "headers": [(k.lower().encode(), v.encode()) for k, v in
                             {**headers("tools/call", tool), "Host": "127.0.0.1:8000"}.items()]}
        async with app.app.router.lifespan_context(app.app), anyio.create_task_group() as tg:
            tg.start_soon(app, scope, receive, send)
            await seen["started"].wait()
            await anyio.sleep(0.05)  # past WATCH_AFTER: the watcher listens
            gone.set()
            with anyio.fail_after(10):
                while "ended" not in seen:
                    await anyio.sleep(0.01)

    anyio.run(main)
    assert seen["ended"] == "cancelled"
    assert sent == []  # nobody to answer


def test_a_long_silent_call_keeps_its_stream_alive_with_pings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(exchange, "WATCH_AFTER", 0.01)
    monkeypatch.setattr(exchange, "PING_SECONDS", 0.05)

    async def main() -> httpx2.Response:
        async with apps() as (ours, _, _):
            return await ours.post("/agents/a/mcp", json=request(2, "tools/call", {
                "name": "s__quiet", "arguments": {"seconds": 0.3}}), headers=headers("tools/call", "s__quiet"))

    response = anyio.run(main)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    text = response.text
    assert text.startswith(": ping\r\n\r\n")
    assert text.count(": ping\r\n\r\n") >= 2
    final = json.loads(text.rsplit("data: ", 1)[1])
    assert final["id"] == 2 and final["result"]["content"] == [{"type": "text", "text": "slept"}]


def test_the_first_ping_comes_ping_seconds_after_the_call_began(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher starts ``WATCH_AFTER`` into the call and counts that as waited: the first keep-alive goes out
    ``PING_SECONDS`` after the call began, as the SDK's entry sends it, not that much after the watcher began."""
    monkeypatch.setattr(exchange, "WATCH_AFTER", 0.3)
    monkeypatch.setattr(exchange, "PING_SECONDS", 0.4)
    written: list[tuple[float, dict[str, Any]]] = []

    async def send(message: dict[str, Any]) -> None:
        written.append((time.perf_counter(), message))

    async def main() -> float:
        going = _exchange(send)
        began = time.perf_counter()
        await going.run(_sleeping(1.2))
        return began

    began = anyio.run(main)
    pings = [when - began for when, message in written if message.get("body") == b": ping\r\n\r\n"]
    took = written[-1][0] - began
    assert 2 <= len(pings) <= took / 0.4 + 1  # one every PING_SECONDS of the call (1.2 s here), never a burst
    assert 0.4 <= pings[0] < 0.7  # (the watcher's own start would put it at 0.7)
    assert all(later - earlier >= 0.39 for earlier, later in itertools.pairwise(pings))  # (a busy machine: more)


async def _sleeping(seconds: float) -> dict[str, Any]:
    await anyio.sleep(seconds)
    return {"content": []}


def test_a_request_to_the_client_has_no_channel_on_2026_07_28() -> None:
    """A 2026-07-28 server asks its client nothing during a call (it ends the round instead): the SDK's own error,
    naming the request."""
    from mcp.shared.exceptions import NoBackChannelError

    async def send(message: dict[str, Any]) -> None:
        raise AssertionError(message)

    async def main() -> None:
        await _exchange(send).send_raw_request("roots/list", None)

    with pytest.raises(NoBackChannelError) as refused:
        anyio.run(main)
    assert (refused.value.method, refused.value.error.message) == (
        "roots/list", "Cannot send 'roots/list': this transport context has no back-channel for server-initiated "
        "requests.")


@pytest.mark.parametrize(("sent", "expected"), [
    ({"Mcp-Param-Region": "eu"}, (200, "routed to eu")),
    ({}, (400, "Mcp-Param-Region header is missing but the request body's 'region' argument is present")),
    ({"Mcp-Param-Region": "us"}, (400, "Mcp-Param-Region header does not match the request body's 'region' "
                                       "argument")),
], ids=["agrees", "missing", "disagrees"])
def test_param_headers_are_checked_against_the_callers_tool(sent: dict[str, str], expected: tuple[int, str]) -> None:
    message = request(3, "tools/call", {"name": "s__route", "arguments": {"region": "eu"}})

    async def main() -> list[tuple[int, str, Any]]:
        async with apps() as (ours, theirs, _):
            return [reply(await client.post("/agents/a/mcp", json=message,
                                            headers=headers("tools/call", "s__route", **sent)))
                    for client in (ours, theirs)]

    ours, theirs = anyio.run(main)
    assert ours == theirs
    status, _, body, _ = ours
    said = body["result"]["content"][0]["text"] if status == 200 else body["error"]["message"]
    assert (status, said) == expected


@pytest.mark.parametrize(("tool", "arguments"), [("w__text", {"word": "hi"}), ("w__crash", {}),
                                                 ("w__nope", {})], ids=["answered", "a tool error", "refused"])
def test_what_a_request_puts_on_its_connections_exit_stack_is_closed(tool: str, arguments: dict[str, Any]) -> None:
    """However the request ends, what was registered on its connection's exit stack runs after it (the SDK's
    serve_one closes that stack; this path closes it without the shielded scope when the request ended well)."""
    from toolcrib.mcp.sdk import connection_of

    closed: list[str] = []

    async def registering(ctx: Any, call_next: Any) -> Any:
        connection_of(ctx.session).exit_stack.callback(closed.append, ctx.method)
        return await call_next(ctx)

    async def main() -> int:
        async with apps() as (ours, _, app):
            app.endpoints["a"].server.middleware.insert(0, registering)
            response = await ours.post("/agents/a/mcp", json=request(1, "tools/call", {
                "name": tool, "arguments": arguments}), headers=headers("tools/call", tool))
            return response.status_code

    status = anyio.run(main)
    assert (status, closed) == (400 if tool == "w__nope" else 200, ["tools/call"])


async def _raw(app: HttpApp, body: bytes | list[dict[str, Any]], sent_headers: dict[str, str]
               ) -> list[dict[str, Any]]:
    """One request straight into the ASGI app, its body as given (bytes, or the messages that carry it) and its
    headers as given (an HTTP client would mend some of them)."""
    sent: list[dict[str, Any]] = []
    messages = list(body) if isinstance(body, list) else [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await anyio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/agents/a/mcp", "raw_path": b"/agents/a/mcp", "query_string": b"", "root_path": "",
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000),
             "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in sent_headers.items()]}
    with anyio.fail_after(30):
        await app(scope, receive, send)
    return sent


@pytest.mark.parametrize("length", ["\u00b2", "9" * 5000, "-1", "12a", " 12"])
def test_a_content_length_that_is_no_number_gets_the_sdks_answer(length: str) -> None:
    body = json.dumps(request(1, "tools/call", {"name": "w__text", "arguments": {"word": "hi"}})).encode()
    sent_headers = {**headers("tools/call", "w__text"), "Host": "127.0.0.1:8000", "Content-Length": length}

    async def main() -> list[list[dict[str, Any]]]:
        async with apps() as (_, _, ours):
            theirs = ours  # the same app with its exchange off: the SDK's entry
            found = [await _raw(ours, body, sent_headers)]
            theirs.answers_modern = False
            found.append(await _raw(theirs, body, sent_headers))
            return found

    ours, theirs = anyio.run(main)
    assert ours == theirs
    assert ours[0]["status"] == 200 and b'"text":"hi"' in ours[-1]["body"]  # the SDK reads the body regardless


def _exchange(send: Any) -> Any:
    """A request's exchange on its own, writing with ``send``; its client never leaves."""
    from mcp.shared.message import ServerMessageMetadata
    from mcp.shared.transport_context import TransportContext

    async def receive() -> dict[str, Any]:
        await anyio.sleep_forever()
        raise AssertionError

    return exchange._Exchange(send, receive, 7, "tok", TransportContext(kind="streamable-http",
                              can_send_request=False), ServerMessageMetadata())


def test_a_notification_after_the_answer_is_dropped() -> None:
    """What a handler leaves behind may notify after the call answered: nothing more goes onto that response."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def main() -> None:
        done = _exchange(send)

        async def call() -> dict[str, Any]:
            return {"content": []}

        await done.run(call())
        await done.progress(1.0, None, "late")
        await done.notify("notifications/message", {"level": "info", "data": "late"})

    anyio.run(main)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert json.loads(sent[1]["body"]) == {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}


def _sized(size: int) -> bytes:
    """A call of w__text whose body is exactly ``size`` bytes: its word is ``size - _bare()`` x's."""
    message = request(1, "tools/call", {"name": "w__text", "arguments": {"word": "x" * (size - _bare())}})
    body = json.dumps(message).encode()
    assert len(body) == size
    return body


def _bare() -> int:
    return len(json.dumps(request(1, "tools/call", {"name": "w__text", "arguments": {"word": ""}})).encode())


@pytest.mark.parametrize(("size", "chunks", "length", "handed"), [
    (MAX_BODY_BYTES, 1, True, []),
    (MAX_BODY_BYTES, 3, False, []),
    (MAX_BODY_BYTES + 1, 3, False, ["tools/call"]),
    (MAX_BODY_BYTES + 1, 1, True, ["tools/call"]),
    (600, 4, False, []),
], ids=["at-the-cap", "at-the-cap-in-parts", "over-in-parts", "over-by-length", "small-in-parts"])
def test_a_body_up_to_the_cap_is_answered_here_whole_or_in_parts(size: int, chunks: int, length: bool,
                                                                  handed: list[str]) -> None:
    """The cap is the SDK's (4 MiB, inclusive); a body that comes in several messages (the first without a
    ``body`` key, as ASGI allows) is read whole."""
    body = _sized(size)
    step = -(-len(body) // chunks)
    messages: list[dict[str, Any]] = [{"type": "http.request", "more_body": True}]  # no body: ASGI's default b""
    messages += [{"type": "http.request", "body": body[i:i + step], "more_body": True}
                 for i in range(0, len(body), step)]
    del messages[-1]["more_body"]  # the last: no more_body, ASGI's default false
    sent_headers = {**headers("tools/call", "w__text"), "Host": "127.0.0.1:8000"}
    if length:
        sent_headers["Content-Length"] = str(size)

    async def main() -> list[dict[str, Any]]:
        async with apps() as (_, _, app):
            return await _raw(app, messages, sent_headers)

    sent = anyio.run(main)
    assert handed == HANDED
    status = sent[0]["status"]
    if size > MAX_BODY_BYTES:
        assert (status, sent[1]["body"]) == (413, b"Request body too large")
        return
    reply = json.loads(sent[1]["body"])
    word = size - _bare()
    said = reply["result"]["content"][0]["text"]
    assert (status, reply["id"]) == (200, 1)
    assert said == ("x" * word if word < 1 << 20 else
                    "Invalid arguments for w__text: the arguments are larger than the limit of 1048576 bytes")


def test_a_call_here_acts_for_the_token_that_made_it(tmp_path: Any) -> None:
    """The handler sees the HTTP request (the audit log records who called), and the client's capabilities (a
    model turn is asked for, as 2026-07-28 asks: an input-required result)."""
    before = '[host]\naudit_log = "audit.jsonl"\n'
    with_model = request(2, "tools/call", {"name": "s__sampler", "arguments": {}})
    with_model["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {"sampling": {}}

    async def main() -> list[Any]:
        async with apps(before, tmp_path) as (ours, _, app):
            said = await ours.post("/agents/a/mcp", json=request(1, "tools/call", {
                "name": "w__text", "arguments": {"word": "hi"}}), headers=headers("tools/call", "w__text"))
            asked = await ours.post("/agents/a/mcp", json=with_model, headers=headers("tools/call", "s__sampler"))
            refused = await ours.post("/agents/a/mcp", json=request(3, "tools/call", {
                "name": "s__sampler", "arguments": {}}), headers=headers("tools/call", "s__sampler"))
            app.state.host.close()  # the audit log written out
            return [said.json(), asked.json(), refused.json()]

    said, asked, refused = anyio.run(main)
    assert HANDED == []
    assert said["result"]["content"] == [{"type": "text", "text": "hi"}]
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["identity"]) for r in records] == [
        ("w__text", {"kind": "token", "credential": "$TOK_A"}), ("s__sampler", {"kind": "token",
                                                                               "credential": "$TOK_A"})]
    assert asked["result"]["resultType"] == "input_required"
    # a client that declared no sampling: the protocol's missing-capability error (SEP-2575), naming what it lacks
    assert refused["error"] == {"code": -32021, "message": "This needs the client's model, and the client offers "
                                                           "none (it does not support MCP sampling).",
                                "data": {"requiredCapabilities": {"sampling": {}}}}


@pytest.mark.parametrize(("length", "handed", "status"), [
    ("5000000", ["tools/call"], 413),  # says more than the cap, whatever comes: the SDK's 413
    ("000000000600", [], 200),  # twelve digits: read here
    ("0000000000600", ["tools/call"], 200),  # more: the SDK reads it
], ids=["over-the-cap", "twelve-digits", "thirteen-digits"])
def test_the_declared_length_decides_before_the_body_is_read(length: str, handed: list[str], status: int) -> None:
    body = _sized(600)
    sent_headers = {**headers("tools/call", "w__text"), "Host": "127.0.0.1:8000", "Content-Length": length}

    async def main() -> list[dict[str, Any]]:
        async with apps() as (_, _, app):
            return await _raw(app, body, sent_headers)

    sent = anyio.run(main)
    assert (sent[0]["status"], HANDED) == (status, handed)


def test_a_routing_header_sent_twice_is_refused_by_the_sdks_word() -> None:
    message = json.dumps(request(1, "tools/call", {"name": "w__text", "arguments": {"word": "x"}})).encode()
    sent = [*headers("tools/call", "w__text").items(), ("Mcp-Method", "tools/call")]

    async def main() -> list[tuple[int, str, Any, bytes]]:
        async with apps() as (ours, theirs, _):
            return [reply(await client.post("/agents/a/mcp", content=message, headers=sent))
                    for client in (ours, theirs)]

    ours, theirs = anyio.run(main)
    assert ours == theirs
    assert (ours[0], ours[2]["error"]["message"], HANDED) == (400, "mcp-method header appears more than once",
                                                              ["tools/call"])


def test_subscriptions_listen_is_the_sdks_stream() -> None:
    body = json.dumps(request(1, "subscriptions/listen", {"notifications": {"toolsListChanged": True}})).encode()
    sent_headers = {**headers("subscriptions/listen"), "Host": "127.0.0.1:8000"}

    async def main() -> None:
        async with apps() as (_, _, app):
            with anyio.move_on_after(0.5):  # a stream that lasts: what matters is who took it
                await _raw(app, body, sent_headers)

    anyio.run(main)
    assert HANDED == ["subscriptions/listen"]


def test_a_response_the_client_stopped_reading_gets_nothing_more() -> None:
    """A write that fails (the client went) ends what this request writes: no more events, no answer."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body":
            raise OSError("the connection is gone")

    async def main() -> None:
        going = _exchange(send)

        async def call() -> dict[str, Any]:
            await going.progress(0.5, None, "half")  # the stream is committed; its first event fails
            await going.progress(1.0, None, "all")
            return {"content": []}

        await going.run(call())

    anyio.run(main)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]


@pytest.mark.parametrize("gone_at", ["http.response.start", "http.response.body"])
def test_a_json_answer_whose_client_left_ends_quietly(gone_at: str) -> None:
    """An ASGI server may raise ``OSError`` for a write to a connection that closed (uvicorn drops it): the
    answer's write ends the request, with nothing more written and nothing raised into the server."""
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == gone_at:
            raise OSError("the connection is closed")

    async def main() -> None:
        going = _exchange(send)

        async def call() -> dict[str, Any]:
            return {"content": []}

        await going.run(call())
        await going.progress(1.0, None, "after")  # nothing more goes onto that response

    anyio.run(main)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"][
        :2 if gone_at == "http.response.body" else 1]
    body = b'{"jsonrpc":"2.0","id":7,"result":{"content":[]}}'
    assert sent[0] == {"type": "http.response.start", "status": 200, "headers": [  # (ASGI's names: lower case)
        (b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]}


def test_an_app_served_under_a_root_path_answers_its_agents_through_the_router() -> None:
    """Behind a proxy that mounts toolcrib under a prefix (uvicorn --root-path), requests come with a root path:
    they go through Starlette's router rather than the shortcut, and get the same answers."""
    state = ServingState(make_host(CONFIG, {"w": Pack(text, order)}))
    app = HttpApp(state, HttpOptions(), env=TOKENS)
    message = request(1, "tools/call", {"name": "w__text", "arguments": {"word": "hi"}})

    async def main() -> list[tuple[int, Any]]:
        answers = []
        async with app.app.router.lifespan_context(app.app):
            for root in ("", "/toolcrib"):
                async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app, root_path=root),
                                              base_url="http://127.0.0.1:8000", timeout=30) as client:
                    response = await client.post(f"{root}/agents/a/mcp", json=message,
                                                 headers=headers("tools/call", "w__text"))
                    answers.append((response.status_code, response.json()))
                    response = await client.post(f"{root}/agents/a/mcp", json=message,
                                                 headers={**headers("tools/call", "w__text"), "Authorization": ""})
                    answers.append((response.status_code, response.json()))
        return answers

    plain, plain_refused, rooted, rooted_refused = anyio.run(main)
    assert plain == rooted
    assert plain[0] == 200 and plain[1]["result"]["content"] == [{"type": "text", "text": "hi"}]
    assert plain_refused == rooted_refused and plain_refused[0] == 401
