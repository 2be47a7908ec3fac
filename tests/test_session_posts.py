"""Requests of a 2025-11-25 session answered in their POSTs (toolcrib.mcp.session_posts) put on the wire exactly what
the SDK's stateful transport puts there: an answer that comes first is the body the SDK's JSON-response mode
writes, anything else the stream of events of its streaming mode (the same head and events, event ids included),
and what this path hands over is the SDK's own answer. Each request goes through three real HTTP apps built for
the same agents (through httpx's ASGI transport), each with a session opened alike: one as served, one whose
sessions answer every request through the SDK's transport (``answers_in_posts`` off), and one whose sessions are
in the SDK's JSON-response mode.

Then what a session's request does beyond one answer: a request to the client, a cancellation, the session's end,
a client that leaves and comes back, a long silent call and polling."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest
from mcp.server.streamable_http import StreamableHTTPServerTransport

import toolcrib
from conftest import make_host
from packs import Pack
from test_exchange import CONFIG, TOKENS, hang, quiet, sampler, seen, slow
from test_wire import REQUESTS, Garble, Prompts, crash, garbled, hand_built, missing, order, picture, text, total
from toolcrib.mcp import session_posts
from toolcrib.mcp.http import HttpApp, HttpOptions
from toolcrib.mcp.sessions import SessionManager
from toolcrib.mcp.state import ServingState

PATH = "/agents/a/mcp"
INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {"sampling": {}, "elicitation": {}},
    "clientInfo": {"name": "t", "version": "1"}}}

HANDED: list[tuple[str, str]] = []  # (session id, method) of each POST the SDK's transport answered, in order


@pytest.fixture(autouse=True)
def _recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    sdk = StreamableHTTPServerTransport._handle_post_request

    async def handed(self: Any, scope: Any, request: Any, receive: Any, send: Any) -> None:
        try:
            method = json.loads(await request.body()).get("method", "?")
        except (ValueError, AttributeError):
            method = "?"
        HANDED.append((self.mcp_session_id, method))
        await sdk(self, scope, request, receive, send)

    monkeypatch.setattr(StreamableHTTPServerTransport, "_handle_post_request", handed)
    HANDED.clear()


def base(agent: str = "a", **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS['TOK_' + agent.upper()]}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream", **extra}


class Side:
    """One app's client and the session it opened."""

    def __init__(self, client: httpx2.AsyncClient, app: HttpApp) -> None:
        self.client = client
        self.app = app
        self.sid = ""
        self.opened = 0

    async def open(self, agent: str = "a") -> None:
        opened = await self.client.post(f"/agents/{agent}/mcp", json=INITIALIZE, headers=base(agent))
        assert opened.status_code == 200, opened.text
        self.sid = opened.headers["mcp-session-id"]
        done = await self.client.post(f"/agents/{agent}/mcp", json={
            "jsonrpc": "2.0", "method": "notifications/initialized"}, headers=self.headers(agent=agent))
        assert done.status_code == 202
        assert self.handed() == ["initialize", "notifications/initialized"]  # the SDK's path opens a session
        self.opened = len(HANDED)

    def headers(self, agent: str = "a", **extra: str) -> dict[str, str]:
        return base(agent, **{"MCP-Session-Id": self.sid, "MCP-Protocol-Version": "2025-11-25", **extra})

    async def post(self, body: bytes | dict[str, Any] | list[Any], agent: str = "a", **extra: str
                   ) -> httpx2.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return await self.client.post(f"/agents/{agent}/mcp", content=content, headers=self.headers(agent, **extra))

    def handed(self) -> list[str]:
        """The methods of this session's POSTs the SDK's transport answered, since it was opened."""
        return [method for sid, method in HANDED[self.opened:] if sid == self.sid]


@contextlib.asynccontextmanager
async def apps(agent: str = "a", before: str = "") -> AsyncIterator[tuple[Side, Side]]:
    """Two apps for the same host, each with a session of ``agent`` open: toolcrib's path, and the SDK's
    transport for every request (``json_apps``: a third, in the SDK's JSON-response mode)."""
    async with json_apps(agent, before) as (ours, theirs, _):
        yield ours, theirs


@toolcrib.tool
async def leaves_word(ctx: toolcrib.Context) -> str:
    """Answer at once, leaving behind a task that tells the client something once the call has answered."""

    async def later() -> None:
        await seen["answered"].wait()
        await ctx.info("too late")
        seen["said"].set()

    seen["task"] = asyncio.get_running_loop().create_task(later())
    return "answered"


@contextlib.asynccontextmanager
async def json_apps(agent: str = "a", before: str = "") -> AsyncIterator[tuple[Side, Side, Side]]:
    state = ServingState(make_host(before + CONFIG, {
        "w": Pack(text, order, total, picture, missing, crash, garbled, hand_built), "garble": Garble(),
        "p": Prompts(), "s": Pack(slow, hang, quiet, sampler, leaves_word)}))
    built = [HttpApp(state, HttpOptions(), env=TOKENS) for _ in range(3)]
    async with contextlib.AsyncExitStack() as stack:
        for app in built:
            await stack.enter_async_context(app.app.router.lifespan_context(app.app))
        for endpoint in built[1].endpoints.values():
            assert isinstance(endpoint.manager, SessionManager)
            endpoint.manager.answers_in_posts = False
        for endpoint in built[2].endpoints.values():  # (answering in POSTs left on: JSON mode is the SDK's alone)
            assert isinstance(endpoint.manager, SessionManager)
            endpoint.manager.json_response = True
        sides = []
        for app in built:
            client = await stack.enter_async_context(httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000", timeout=30))
            sides.append(Side(client, app))
            await sides[-1].open(agent)
        yield sides[0], sides[1], sides[2]


def wire(response: httpx2.Response, sid: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, head and body, with the session's id put as ``SID`` (the two sessions' ids differ)."""
    head = [(k, v.replace(sid, "SID")) for k, v in response.headers.multi_items() if k != "content-length"]
    return response.status_code, head, response.content.replace(sid.encode(), b"SID")


def events(response: httpx2.Response) -> list[dict[str, str]]:
    found = []
    for block in response.text.split("\r\n\r\n"):
        fields: dict[str, str] = {}
        for line in block.split("\r\n"):
            name, _, value = line.partition(": ")
            if line:
                fields[name] = value  # a comment line (a ping) under ""
        if fields:
            found.append(fields)
    return found


def call(request_id: int | str, name: Any, arguments: Any = None, **params: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, **params}
    if arguments is not None:
        found["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": found}


def test_every_request_of_the_wire_tests_gets_the_sdks_answer_to_the_byte() -> None:
    """Each answered at once: the body the SDK's JSON-response mode writes, and the message its streaming mode
    puts last in its stream."""

    async def main() -> list[tuple[Any, ...]]:
        found = []
        async with json_apps() as sides:
            for i, (method, params) in enumerate(REQUESTS):
                message: dict[str, Any] = {"jsonrpc": "2.0", "id": i + 1, "method": method}
                if params is not None:
                    message["params"] = params
                found.append(tuple([await side.post(message) for side in sides]))
            ours, theirs, plain = sides
            assert ours.handed() == []  # every request answered in its POST
            assert theirs.handed() == plain.handed() == [method for method, _ in REQUESTS]
            assert [m.get("id") for m in session_requests(ours)] == [0]  # initialize's: nothing kept of an answer
            return [(wire(o, ours.sid), wire(p, plain.sid), o, t) for o, t, p in found]

    found = anyio.run(main)
    for ours, plain, response, streamed in found:
        assert ours == plain
        assert response.headers["content-length"] == str(len(response.content))
        assert response.json() == json.loads(events(streamed)[-1]["data"])  # what the stream would have said
    # anchors, so that equality cannot hold by both sides being broken alike
    status, head, body = found[2][0]
    assert (status, head) == (200, [("content-type", "application/json"), ("mcp-session-id", "SID")])
    assert body == b'{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hello"}],"isError":false}}'
    assert found[9][0][2] == b'{"jsonrpc":"2.0","id":10,"error":{"code":-32602,"message":"Unknown tool: w__nope"}}'


UNUSUAL: list[tuple[str, bytes | dict[str, Any] | list[Any], dict[str, str]]] = [
    ("not JSON", b"{nope", {}),
    ("a batch", [call(1, "w__text", {"word": "x"})], {}),
    ("a notification", {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}, {}),
    ("a response", {"jsonrpc": "2.0", "id": 99, "result": {}}, {}),
    ("a second initialize", INITIALIZE, {}),
    ("an Accept without events", call(1, "w__text", {"word": "x"}), {"Accept": "application/json"}),
    ("a Content-Type not JSON", call(1, "w__text", {"word": "x"}), {"Content-Type": "text/plain"}),
    ("a foreign Origin", call(1, "w__text", {"word": "x"}), {"Origin": "https://evil.example"}),
    ("another session", call(1, "w__text", {"word": "x"}), {"MCP-Session-Id": "f" * 32}),
    ("an id that is no id", {**call(1, "w__text", {"word": "x"}), "id": True}, {}),
    ("a null id", {**call(1, "w__text", {"word": "x"}), "id": None}, {}),
    ("an extra envelope key", {**call(1, "w__text", {"word": "x"}), "extra": 1}, {}),
    ("params that are a list", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": [1]}, {}),
    ("null params", {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": None}, {}),
    ("an unknown method", {"jsonrpc": "2.0", "id": 1, "method": "nope/nope"}, {}),
    ("a ping", {"jsonrpc": "2.0", "id": "p", "method": "ping"}, {}),
    ("a string id", call("s-1", "w__text", {"word": "x"}), {}),
    ("an older protocol version", call(1, "w__text", {"word": "x"}), {"MCP-Protocol-Version": "2025-06-18"}),
    ("a hidden tool", call(1, "w__order", {"order_id": 1}), {}),
]
ANSWERED = {"null params", "an unknown method", "a ping", "a string id", "an older protocol version",
            "a hidden tool"}  # by this path (the others by the SDK's transport, or before it)
BEFORE = {"a foreign Origin", "another session", "a Content-Type not JSON"}  # refused before either path


@pytest.mark.parametrize(("what", "body", "extra"), UNUSUAL, ids=[case[0] for case in UNUSUAL])
def test_what_this_path_hands_over_or_answers_gets_the_sdks_answer(
        what: str, body: bytes | dict[str, Any] | list[Any], extra: dict[str, str]) -> None:
    """What this path answers, as the SDK's JSON-response mode; what it hands over, as the SDK's streaming mode."""
    agent = "b" if what == "a hidden tool" else "a"

    async def main() -> tuple[Any, Any, Any, list[str]]:
        async with json_apps(agent) as sides:
            got = [wire(await side.post(body, agent, **extra), side.sid) for side in sides]
            return got[0], got[1], got[2], sides[0].handed()

    ours, theirs, plain, handed = anyio.run(main)
    assert ours == (plain if what in ANSWERED else theirs)
    if what in BEFORE or what in ANSWERED:
        assert handed == []
    else:
        assert handed == [body.get("method", "?") if isinstance(body, dict) else "?"]
    expected = {"a notification": 202, "a response": 202, "an id that is no id": 202, "a null id": 202,
                "an Accept without events": 406, "a foreign Origin": 403, "another session": 404}
    assert ours[0] == expected.get(what, 200 if what in ANSWERED | {"an extra envelope key", "a second initialize"}
                                   else 400)


def test_progress_and_log_messages_are_the_sdks_events_with_their_ids() -> None:
    message = call(1, "s__slow", {"seconds": 0}, _meta={"progressToken": "p1"})

    async def main() -> list[Any]:
        async with apps() as (ours, theirs):
            found = [wire(await side.post(message), side.sid) for side in (ours, theirs)]
            assert ours.handed() == []
            return found

    ours, theirs = anyio.run(main)
    assert ours == theirs
    assert ours[2].count(b"\r\n\r\n") == 4  # priming, progress, log, answer
    assert b'id: 4\r\nevent: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":' \
           b'{"progressToken":"p1","progress":1,"total":2,"message":"half"}}' in ours[2]


def test_a_request_to_the_client_goes_out_on_the_calls_stream_and_its_answer_comes_back() -> None:
    """Sampling asked by a call answered in its POST: the request to the client is an event of the call's stream
    (routed by the session's dispatcher), the client's answer a POST of its own, the call's answer uses it."""

    async def main() -> tuple[list[dict[str, str]], list[str]]:
        async with apps() as (ours, _):
            answered: dict[str, Any] = {}
            async with anyio.create_task_group() as tg:

                async def calling() -> None:
                    answered["call"] = await ours.post(call(4, "s__sampler", {}))

                tg.start_soon(calling)
                with anyio.fail_after(10):
                    while not (asked := [m for m in session_requests(ours) if m.get("method")]):
                        await anyio.sleep(0.01)
                reply = {"jsonrpc": "2.0", "id": asked[0]["id"], "result": {
                    "role": "assistant", "model": "m", "content": {"type": "text", "text": "sampled"}}}
                assert (await ours.post(reply)).status_code == 202
            return events(answered["call"]), ours.handed()

    found, handed = anyio.run(main)
    assert handed == ["?"]  # the client's answer (a response: no method) took the SDK's path
    messages = [json.loads(e["data"]) for e in found if e.get("data")]
    assert messages[0]["method"] == "sampling/createMessage"
    assert messages[0]["params"]["messages"] == [{"role": "user", "content": {"type": "text", "text": "hi"}}]
    assert messages[-1]["id"] == 4 and "sampled" in messages[-1]["result"]["content"][0]["text"]
    assert [e["id"] for e in found] == ["3", "4", "5"]  # priming, the request, the answer: each stored


def session_requests(side: Side) -> list[dict[str, Any]]:
    """What the session's event store holds so far (the requests to the client among them)."""
    manager = side.app.endpoints["a"].manager
    assert isinstance(manager, SessionManager)
    store = manager._events[side.sid]
    return [message.model_dump(by_alias=True, exclude_unset=True) for _, _, message in store._events
            if message is not None]



async def while_hanging(side: Side, request_id: int | str, then: Callable[[], Awaitable[Any]], *,
                        opened: bool = True) -> tuple[Any, Any, str]:
    """Call ``s__hang`` on ``side`` and, once it runs (and, if ``opened``, its stream is open on both paths),
    ``then()``: the call's answer (``wire``), what ``then`` gave, and whether the call ended."""
    seen.clear()
    seen["started"] = anyio.Event()
    answered: dict[str, httpx2.Response] = {}
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def calling() -> None:
                answered["call"] = await side.post(call(request_id, "s__hang", {}))

            tg.start_soon(calling)
            await seen["started"].wait()
            if opened:
                await anyio.sleep(session_posts.WATCH_AFTER * 2)
            given = await then()
    return wire(answered["call"], side.sid), given, seen.get("ended", "running")


def cancelling(side: Side, request_id: int | str) -> Callable[[], Awaitable[int]]:
    async def cancel() -> int:
        notice = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
        return (await side.post(notice)).status_code

    return cancel


def test_a_cancelled_call_ends_and_its_stream_ends_with_the_sdks_error() -> None:
    async def main() -> tuple[Any, Any, list[str]]:
        async with apps() as (ours, theirs):
            found = [await while_hanging(side, 9, cancelling(side, 9)) for side in (ours, theirs)]
            return found[0], found[1], ours.handed()

    ours, theirs, handed = anyio.run(main)
    assert ours == theirs
    assert handed == ["notifications/cancelled"]  # the call itself was answered in its POST
    (status, _, body), notified, ended = ours
    assert (status, notified, ended) == (200, 202, "cancelled")
    assert body == (b'id: 3\r\ndata: \r\nretry: 1000\r\n\r\nid: 4\r\nevent: message\r\ndata: {"jsonrpc":"2.0",'
                    b'"id":9,"error":{"code":-32800,"message":"Request cancelled"}}\r\n\r\n')


def test_a_call_cancelled_before_its_stream_opened_gets_the_sdks_json_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_posts, "WATCH_AFTER", 30.0)  # no stream opens while the test runs

    async def main() -> list[Any]:
        async with json_apps() as (ours, _, plain):
            return [await while_hanging(side, "c", cancelling(side, "c"), opened=False) for side in (ours, plain)]

    ours, plain = anyio.run(main)
    assert ours == plain
    (status, _, body), notified, ended = ours
    assert (status, body, notified, ended) == (
        200, b'{"jsonrpc":"2.0","id":"c","error":{"code":-32800,"message":"Request cancelled"}}', 202, "cancelled")


def test_the_sessions_end_ends_its_calls() -> None:
    async def main() -> list[Any]:
        async with apps() as sides:

            def deleting(side: Side) -> Callable[[], Awaitable[int]]:
                async def delete() -> int:
                    return (await side.client.delete(PATH, headers=side.headers())).status_code

                return delete

            return [await while_hanging(side, 9, deleting(side)) for side in sides]

    ours, theirs = anyio.run(main)
    assert ours == theirs
    (status, _, body), deleted, ended = ours
    assert (status, body, deleted, ended) == (200, b"id: 3\r\ndata: \r\nretry: 1000\r\n\r\n", 200, "cancelled")


def test_the_first_ping_comes_ping_seconds_after_the_call_began(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watcher starts ``WATCH_AFTER`` into the call and counts that as waited: the first keep-alive goes out
    ``PING_SECONDS`` after the call began, not that much after the watcher began."""
    monkeypatch.setattr(session_posts, "WATCH_AFTER", 0.3)
    monkeypatch.setattr(session_posts, "PING_SECONDS", 0.4)

    async def main() -> tuple[float, list[float], list[dict[str, Any]]]:
        async with apps() as (ours, _):
            times: list[float] = []
            began = time.perf_counter()
            sent = await raw_post(ours, call(15, "s__quiet", {"seconds": 1.2}),
                                  lambda sent: times.append(time.perf_counter()))
            return began, times, sent

    began, times, sent = anyio.run(main)
    pings = [when - began for when, message in zip(times, sent, strict=True)
             if message.get("body", b"").startswith(b": ping - ")]
    took = times[-1] - began
    assert 2 <= len(pings) <= took / 0.4 + 1  # one every PING_SECONDS of the call (1.2 s here), never a burst
    assert 0.4 <= pings[0] < 0.7  # (the watcher's own start would put it at 0.7)
    assert all(later - earlier >= 0.39 for earlier, later in itertools.pairwise(pings))  # (a busy machine: more)


def test_a_long_silent_call_opens_its_stream_then_keeps_it_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(session_posts, "WATCH_AFTER", 0.01)
    monkeypatch.setattr(session_posts, "PING_SECONDS", 0.05)

    async def main() -> httpx2.Response:
        async with apps() as (ours, _):
            return await ours.post(call(2, "s__quiet", {"seconds": 0.3}))

    response = anyio.run(main)
    found = events(response)
    assert found[0] == {"id": "3", "data": "", "retry": "1000"}
    pings = [e for e in found[1:-1] if list(e) == [""]]
    assert len(pings) >= 2 and all(e[""].startswith("ping - ") for e in pings) and len(pings) == len(found) - 2
    assert found[-1]["id"] == "4"
    assert json.loads(found[-1]["data"])["result"]["content"] == [{"type": "text", "text": "slept"}]


def test_a_client_that_leaves_comes_back_for_the_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """On this protocol a client that loses its stream has not cancelled: the call goes on, and its answer waits in
    the session's events for a ``Last-Event-ID``."""
    monkeypatch.setattr(session_posts, "WATCH_AFTER", 0.01)
    sent: list[dict[str, Any]] = []

    async def main() -> httpx2.Response:
        async with apps() as (ours, _):
            gone = anyio.Event()
            body = json.dumps(call(5, "s__quiet", {"seconds": 0.2})).encode()
            messages = [{"type": "http.request", "body": body, "more_body": False}]

            async def receive() -> dict[str, Any]:
                if messages:
                    return messages.pop()
                await gone.wait()
                return {"type": "http.disconnect"}

            async def send(message: dict[str, Any]) -> None:
                sent.append(message)
                if message["type"] == "http.response.body":
                    gone.set()  # the client leaves once the stream is open

            with anyio.fail_after(10):
                await ours.app(post_scope(ours), receive, send)  # returns when the call has ended
                return await ours.client.get(PATH, headers=ours.headers(**{"Last-Event-ID": "3"}))

    resumed = anyio.run(main)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]  # nothing after it left
    sid = dict(sent[0]["headers"])[b"mcp-session-id"]
    assert (sent[0]["status"], sent[0]["headers"]) == (200, [  # sse-starlette's head, names as ASGI wants them
        (b"cache-control", b"no-cache, no-transform"), (b"connection", b"keep-alive"),
        (b"content-type", b"text/event-stream"), (b"mcp-session-id", sid), (b"x-accel-buffering", b"no")])
    assert sent[1]["body"] == b"id: 3\r\ndata: \r\nretry: 1000\r\n\r\n"
    found = events(resumed)
    assert [e["id"] for e in found] == ["4"]
    assert json.loads(found[0]["data"]) == {"jsonrpc": "2.0", "id": 5, "result": {
        "content": [{"type": "text", "text": "slept"}], "isError": False}}


def test_a_stream_closed_for_polling_is_the_sdks_and_the_rest_is_resumed() -> None:
    """``[host] http_stream_seconds``: the call's stream ends after that long (its priming event only); the client
    asks for the rest with its ``Last-Event-ID``."""

    async def polled(side: Side) -> tuple[Any, Any]:
        with anyio.fail_after(10):
            first = await side.post(call(6, "s__quiet", {"seconds": 0.3}))
            rest = await side.client.get(PATH, headers=side.headers(**{"Last-Event-ID": "3"}))
        return wire(first, side.sid), wire(rest, side.sid)

    async def main() -> tuple[Any, Any]:
        async with apps(before="[host]\nhttp_stream_seconds = 0.1\n") as (ours, theirs):
            return await polled(ours), await polled(theirs)

    ours, theirs = anyio.run(main)
    assert ours[0] == theirs[0]
    assert ours[0][2] == b"id: 3\r\ndata: \r\nretry: 1000\r\n\r\n"
    assert ours[1] == theirs[1]
    assert ours[1][2] == (b'id: 4\r\nevent: message\r\ndata: {"jsonrpc":"2.0","id":6,"result":{"content":[{"type":'
                          b'"text","text":"slept"}],"isError":false}}\r\n\r\n')


def test_a_stream_closed_for_polling_ends_with_an_empty_last_body_as_asgi_has_it() -> None:
    """What the server is handed when a call's stream closes for polling: its head, the priming event, then an
    empty body that says no more comes (ASGI's bodies are bytes, never None)."""

    async def main() -> list[dict[str, Any]]:
        async with apps(before="[host]\nhttp_stream_seconds = 0.1\n") as (ours, _):
            return await raw_post(ours, call(6, "s__quiet", {"seconds": 0.3}))

    sent = anyio.run(main)
    assert [(m["type"], m.get("body"), m.get("more_body")) for m in sent] == [
        ("http.response.start", None, None),
        ("http.response.body", b"id: 3\r\ndata: \r\nretry: 1000\r\n\r\n", True),
        ("http.response.body", b"", False)]
    assert [name for name, _ in sent[0]["headers"]] == [name.lower() for name, _ in sent[0]["headers"]]


def test_the_transports_own_close_of_a_calls_stream_ends_it_once_and_the_call_goes_on() -> None:
    """``close_sse_stream(request_id)``, the transport's public way to end a request's stream (it closes both ends
    it registered), ends this path's stream as the SDK's: the priming event, then nothing; the answer is stored."""

    async def main() -> tuple[Any, list[dict[str, Any]]]:
        async with apps() as (ours, _):
            answered: dict[str, httpx2.Response] = {}
            manager = ours.app.endpoints["a"].manager
            assert isinstance(manager, SessionManager)
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:

                    async def calling() -> None:
                        answered["call"] = await ours.post(call(8, "s__quiet", {"seconds": 0.2}))

                    tg.start_soon(calling)
                    while "8" not in manager._server_instances[ours.sid]._request_streams:
                        await anyio.sleep(0.005)
                    manager._server_instances[ours.sid].close_sse_stream("8")
                while not any(m.get("id") == 8 for m in session_requests(ours)):
                    await anyio.sleep(0.01)
            return wire(answered["call"], ours.sid), session_requests(ours)

    (status, _, body), stored = anyio.run(main)
    assert (status, body) == (200, b"id: 3\r\ndata: \r\nretry: 1000\r\n\r\n")
    assert stored[-1] == {"jsonrpc": "2.0", "id": 8, "result": {"content": [{"type": "text", "text": "slept"}],
                                                                 "isError": False}}


async def raw_post(side: Side, body: dict[str, Any], watch: Callable[[list[dict[str, Any]]], None] | None = None,
                   **extra: str) -> list[dict[str, Any]]:
    """One POST into ``side``'s app as ASGI messages, and what it sent back, as sent. ``watch`` is shown what was
    sent so far after each message: it may note when, or raise ``OSError`` (the client has left by then, as the
    ASGI spec has a server say of a closed connection)."""
    sent: list[dict[str, Any]] = []
    messages = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop()
        await anyio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if watch is not None:
            watch(sent)

    with anyio.fail_after(10):
        await side.app(post_scope(side, **extra), receive, send)
    return sent


def gone_after(test: Callable[[list[dict[str, Any]]], bool]) -> Callable[[list[dict[str, Any]]], None]:
    """A ``raw_post`` watch: the client leaves once ``test`` holds of what was sent (that send fails)."""

    def watch(sent: list[dict[str, Any]]) -> None:
        if test(sent):
            raise OSError("the connection is closed")

    return watch


def post_scope(side: Side, **extra: str) -> dict[str, Any]:
    """The ASGI scope of a POST on ``side``'s session."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": PATH, "raw_path": PATH.encode(), "query_string": b"", "root_path": "",
            "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000),
            "headers": [(k.lower().encode(), v.encode()) for k, v in
                        {**side.headers(**extra), "Host": "127.0.0.1:8000"}.items()]}


def test_an_answer_is_one_json_body_with_its_length_and_the_request_leaves_nothing_behind() -> None:
    async def main() -> tuple[list[dict[str, Any]], str, Any]:
        async with apps() as (ours, _):
            sent = await raw_post(ours, call(11, "w__text", {"word": "hi"}))
            transport = ours.app.endpoints["a"].manager._server_instances[ours.sid]
            left = (dict(transport._request_streams), dict(transport.session.dispatcher._in_flight))
            return sent, ours.sid, left

    sent, sid, left = anyio.run(main)
    body = b'{"jsonrpc":"2.0","id":11,"result":{"content":[{"type":"text","text":"hi"}],"isError":false}}'
    assert sent == [{"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/json"), (b"mcp-session-id", sid.encode()),
        (b"content-length", str(len(body)).encode())]}, {"type": "http.response.body", "body": body}]
    assert left == ({}, {})  # its place on the transport's router and in the dispatcher's table given back


@pytest.mark.parametrize("gone_at", ["http.response.start", "http.response.body"])
def test_an_answer_whose_client_left_ends_quietly_and_the_session_goes_on(
        gone_at: str, caplog: pytest.LogCaptureFixture) -> None:
    """An ASGI server may raise ``OSError`` for a write to a connection that closed (uvicorn drops it): the request
    ends with nothing more written, no traceback, and the session answers its next call."""

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
        async with apps() as (ours, _):
            sent = await raw_post(ours, call(12, "w__text", {"word": "hi"}),
                                  gone_after(lambda sent: sent[-1]["type"] == gone_at))
            again = await raw_post(ours, call(13, "w__text", {"word": "again"}))
            transport = ours.app.endpoints["a"].manager._server_instances[ours.sid]
            return sent, again, (dict(transport._request_streams), dict(transport.session.dispatcher._in_flight))

    with caplog.at_level(logging.WARNING):
        sent, again, left = anyio.run(main)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"][
        :2 if gone_at == "http.response.body" else 1]
    assert again[-1]["body"] == (b'{"jsonrpc":"2.0","id":13,"result":{"content":[{"type":"text","text":"again"}],'
                                 b'"isError":false}}')
    assert left == ({}, {})
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("failing", [1, 2])
def test_once_a_write_fails_nothing_more_is_written_and_the_answer_is_kept(failing: int) -> None:
    """The client left while its call's stream was written (the head's priming event, or a later event): nothing
    more is written to it, and the answer is stored for a client that comes back with its Last-Event-ID."""

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with apps() as (ours, _):
            sent = await raw_post(ours, call(14, "s__slow", {"seconds": 0}, _meta={"progressToken": "p"}), gone_after(
                lambda sent: sum(m["type"] == "http.response.body" for m in sent) == failing))
            return sent, session_requests(ours)

    sent, stored = anyio.run(main)
    assert [m["type"] for m in sent] == ["http.response.start", *["http.response.body"] * failing]
    assert stored[-1] == {"jsonrpc": "2.0", "id": 14, "result": {"content": [{"type": "text", "text": "done"}],
                                                                  "isError": False}}


def test_what_a_call_leaves_behind_says_nothing_after_its_answer(caplog: pytest.LogCaptureFixture) -> None:
    """A task a handler left behind may notify after the call answered: nothing more goes out for that request,
    and nothing is stored for a client that would come back for it."""

    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
        seen.clear()
        seen["answered"], seen["said"] = anyio.Event(), anyio.Event()
        async with apps() as (ours, _):
            sent = await raw_post(ours, call(16, "s__leaves_word", {}))
            before = session_requests(ours)
            seen["answered"].set()
            with anyio.fail_after(10):
                await seen["said"].wait()
            return sent, before, session_requests(ours)

    with caplog.at_level(logging.DEBUG, logger="toolcrib.serve"):
        sent, before, after = anyio.run(main)
    assert sent[-1]["body"] == (b'{"jsonrpc":"2.0","id":16,"result":{"content":[{"type":"text","text":"answered"}],'
                                b'"isError":false}}')
    assert after == before
    assert "dropped notifications/message: its request is answered" in [r.getMessage() for r in caplog.records]


def test_a_request_whose_id_is_in_flight_takes_the_sdks_path() -> None:
    async def main() -> tuple[list[str], dict[str, Any]]:
        seen.clear()
        seen["started"] = anyio.Event()
        async with apps() as (ours, _):
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(ours.post, call(12, "s__hang", {}))
                    await seen["started"].wait()
                    again = await ours.post({"jsonrpc": "2.0", "id": 12, "method": "tools/list"})
                    tg.cancel_scope.cancel()
            return ours.handed(), {"status": again.status_code, "type": again.headers["content-type"]}

    handed, again = anyio.run(main)
    assert handed == ["tools/list"]  # the second request with id 12; the first was answered in its POST
    assert again == {"status": 200, "type": "text/event-stream"}


def test_a_client_that_names_no_version_gets_the_sdks_stream_without_a_priming_event() -> None:
    """Without an ``MCP-Protocol-Version`` header a request speaks the default version (2025-03-26), whose clients
    cannot read a priming event: none is sent (nor a way to close the stream for polling)."""
    message = call(1, "s__slow", {"seconds": 0}, _meta={"progressToken": "p1"})

    async def main() -> list[Any]:
        async with apps() as (ours, theirs):
            found = []
            for side in (ours, theirs):
                headers = side.headers()
                del headers["MCP-Protocol-Version"]
                found.append(wire(await side.client.post(PATH, json=message, headers=headers), side.sid))
            assert ours.handed() == []
            return found

    ours, theirs = anyio.run(main)
    assert ours == theirs
    assert ours[2].startswith(b'id: 3\r\nevent: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress"')


def test_a_handler_that_fails_unmapped_is_answered_as_the_sdks_dispatcher_answers(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """An exception the SDK maps to no error (none of toolcrib's handlers lets one out): code 0 and its text,
    and the traceback logged."""
    from mcp.server.runner import ServerRunner

    given = ServerRunner._on_request

    async def failing(self: Any, dctx: Any, method: str, params: Any) -> Any:
        if method == "tools/call" and (params or {}).get("name") == "boom":
            raise RuntimeError("it broke")
        return await given(self, dctx, method, params)

    monkeypatch.setattr(ServerRunner, "_on_request", failing)

    async def main() -> list[Any]:
        async with json_apps() as (ours, _, plain):
            return [wire(await side.post(call(13, "boom", {})), side.sid) for side in (ours, plain)]

    with caplog.at_level(logging.ERROR, logger="toolcrib.serve"):
        ours, plain = anyio.run(main)
    assert ours == plain
    assert ours[2] == b'{"jsonrpc":"2.0","id":13,"error":{"code":0,"message":"it broke"}}'
    logged = [r.getMessage() for r in caplog.records if r.name == "toolcrib.serve"]
    assert logged == ["handler for 'tools/call' raised"]


def test_a_client_that_cannot_resume_never_has_its_stream_closed_for_polling() -> None:
    """With ``[host] http_stream_seconds``, a call of a client that got no priming event (no version header: the
    default version) runs on in its one stream, as on the SDK's path, which offers no way to close it."""
    message = call(6, "s__quiet", {"seconds": 0.3})

    async def main() -> list[Any]:
        async with apps(before="[host]\nhttp_stream_seconds = 0.1\n") as sides:
            found = []
            for side in sides:
                headers = side.headers()
                del headers["MCP-Protocol-Version"]
                with anyio.fail_after(10):
                    found.append(wire(await side.client.post(PATH, json=message, headers=headers), side.sid))
            return found

    ours, theirs = anyio.run(main)
    assert ours == theirs
    assert ours[2] == (b'id: 3\r\nevent: message\r\ndata: {"jsonrpc":"2.0","id":6,"result":{"content":[{"type":'
                       b'"text","text":"slept"}],"isError":false}}\r\n\r\n')  # the whole answer, no priming event
