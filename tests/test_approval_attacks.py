"""What an agent, or whatever else writes to the shared store, tries on approvals out of band: more calls held than
its cap across replicas, records that are not toolcrib's. Two desks on one real redis-server, as two replicas."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolcrib.approvals import MAX_PENDING, NOT_PENDING, DeskFull

pytest.importorskip("redis")


async def desks(redis_url: str, n: int = 2) -> tuple[list[Any], list[Any]]:
    from toolcrib.cluster import Store
    from toolcrib.config import ClusterConfig
    from toolcrib.mcp.fleet import RedisDesk

    stores = [Store(ClusterConfig(redis_url=redis_url, key_prefix="cap:")) for _ in range(n)]
    for store in stores:
        await store.open()
    return stores, [RedisDesk(store) for store in stores]


def test_an_agent_s_cap_of_held_calls_holds_across_replicas(redis_url: str) -> None:
    """A burst of 60 calls of one agent, over two replicas at once: exactly ``MAX_PENDING`` are held, the rest
    refused at once (counted and stored in one step); another agent still has its own."""

    async def main() -> tuple[int, int, list[str]]:
        stores, (one, two) = await desks(redis_url)
        outcomes: list[str] = []

        async def ask(desk: Any, agent: str, i: int) -> None:
            try:
                await desk.ask(agent, None, "t__deploy", {"i": i}, "ask rule", f"c{i}", "v", 2)
            except DeskFull:
                outcomes.append("full")
            else:
                outcomes.append("held")

        async with anyio.create_task_group() as tg:
            for i in range(60):
                tg.start_soon(ask, one if i % 2 else two, "a", i)
            await anyio.sleep(1)  # (the held ones wait their 2 s for an answer that never comes)
            held = len([p for p in await one.pending() if p.agent == "a"])
            tg.start_soon(ask, two, "b", 99)
            await anyio.sleep(0.5)
            others = [p.agent for p in await one.pending() if p.agent == "b"]
        for store in stores:
            await store.close()
        return held, outcomes.count("full"), others

    held, full, others = anyio.run(main)
    assert (held, full) == (MAX_PENDING, 60 - MAX_PENDING)
    assert others == ["b"]


@pytest.mark.parametrize(("record", "why"), [
    (b"not json", "Expecting value: line 1 column 1 (char 0)"),
    (b"[1, 2]", "not a JSON object"),
    (b'{"id": "x"}', "its 'agent' is missing or not a string"),
    (b'{"id": "x", "agent": "a", "tool": "t", "arguments": {}, "rule": "r", "call_id": "c", "version": "v", '
     b'"created": 1, "expires": "soon"}', "its 'expires' is missing or not a number"),
    (b"\xff\xfe", "Expecting value: line 1 column 1 (char 0)"),
])
def test_a_record_in_redis_that_is_not_toolcrib_s_is_skipped_and_the_rest_served(
        redis_url: str, caplog: pytest.LogCaptureFixture, record: bytes, why: str) -> None:
    from conftest import redis_command

    async def main() -> tuple[list[str], Any, Any]:
        stores, (one, two) = await desks(redis_url)
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: one.ask("a", None, "t__deploy", {}, "ask rule", "c", "v", 2))
            await anyio.sleep(0.3)
            await redis_command(redis_url, "SET", "cap:approval:bad", record)
            await redis_command(redis_url, "ZADD", "cap:approvals", "9999999999", "bad")
            listed = [p.tool for p in await two.pending()]
            bad = await two.get("bad")
            answered = await two.answer("bad", True, "x" * 64, "operator")
            tg.cancel_scope.cancel()
        for store in stores:
            await store.close()
        return listed, bad, answered

    with caplog.at_level(logging.WARNING, "toolcrib.cluster"):
        listed, bad, answered = anyio.run(main)
    assert (listed, bad, answered) == (["t__deploy"], None, NOT_PENDING)
    assert f"the approval record 'bad' in Redis is not one toolcrib can read ({why}); it is skipped" in [
        r.getMessage() for r in caplog.records]


def test_a_session_record_in_redis_that_is_not_utf_8_is_no_session(redis_url: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """A session hash whose fields are not UTF-8 (not toolcrib's): the session is not found (the client's 404 opens
    a new one), never a 500."""
    from conftest import redis_command
    from toolcrib.cluster import Fanout
    from toolcrib.mcp.fleet import RedisSessions, session_digest

    async def main() -> Any:
        stores, _ = await desks(redis_url, 1)
        sessions = RedisSessions(stores[0], Fanout(stores[0]), idle=60, cap=8)
        await redis_command(redis_url, "HSET", f"cap:session:{session_digest('a', 's1')}", "agent", b"\xff", "owner",
                            "x")
        found = await sessions.find("a", "s1")
        await stores[0].close()
        return found

    with caplog.at_level(logging.WARNING, "toolcrib.cluster"):
        assert anyio.run(main) is None
    assert "the session record of agent 'a' in Redis is not one toolcrib can read; it is ignored" in [
        r.getMessage() for r in caplog.records]


def test_an_agent_whose_token_becomes_the_operator_s_on_a_reload_is_not_served(tmp_path: Path,
                                                                             caplog: pytest.LogCaptureFixture) -> None:
    """The rule "the operator token is never an agent's" holds after a reload too: an agent given the operator's
    token then is not served (it would answer its own held calls), and the others are."""
    from approving import AGENT_TOKEN, CONFIG, OPERATOR_TOKEN, PACK
    from conftest import config_from
    from toolcrib import Host
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    text = CONFIG.format(approvals="operator", timeout=60, operator="") + '[agents.b]\ntoken_env = "TOK_B"\n'
    state = ServingState(Host(config_from(text, tmp_path), plugins={"t": PACK}, autoload=False, env={}))
    env = {"TOK_A": AGENT_TOKEN, "TOK_B": "b" * 32, "TOK_OP": OPERATOR_TOKEN}
    app = HttpApp(state, HttpOptions(), env=env)
    assert sorted(app.credentials()) == ["a", "b"]
    env["TOK_A"] = OPERATOR_TOKEN  # what the next reload reads
    with caplog.at_level(logging.ERROR, "toolcrib.serve"):
        assert sorted(app.credentials()) == ["b"]
    why = "its token is the operator's: an agent must never answer its own approvals"
    assert app.not_served == {"a": why}
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("ERROR", f"agent 'a' is not served over HTTP: {why}")]


def test_a_console_session_signed_out_on_one_replica_is_ended_on_every_one(redis_url: str) -> None:
    """Sign-out ends the session on the server, fleet-wide: what one replica's desk records, another's reads, until
    the session's cookie would have expired; another session stays open."""
    import time

    from conftest import redis_command

    async def main() -> tuple[list[bool], int]:
        stores, (one, two) = await desks(redis_url)
        before = await two.session_ended("s" * 24)
        await one.end_session("s" * 24, time.time() + 60)
        seen = [before, await two.session_ended("s" * 24), await two.session_ended("t" * 24)]
        ttl = await redis_command(redis_url, "PTTL", "cap:console:ended:" + "s" * 24)
        for store in stores:
            await store.close()
        return seen, ttl

    seen, ttl = anyio.run(main)
    assert seen == [False, True, False]
    assert 50_000 < ttl <= 60_000


HIDDEN = "run\u202e\U000e0041\u200b\x9b\u00a0\ufe0f\u3164"  # bidi, tag, zero-width, C1, no-break, variation, filler
MARKED = ("run\u27e8U+202E\u27e9\u27e8U+E0041\u27e9\u27e8U+200B\u27e9\u27e8U+009B\u27e9\u27e8U+00A0\u27e9"
          "\u27e8U+FE0F\u27e9\u27e8U+3164\u27e9")


def test_what_an_operator_is_shown_marks_every_character_that_would_not_show_as_itself() -> None:
    from toolcrib.names import clean, shown

    assert shown(HIDDEN) == MARKED
    assert shown("run") != shown("run\u200b") != shown("run\u200c")  # what differs looks different
    assert shown("\u27e8U+200B\u27e9") == "\u27e8U+27E8\u27e9U+200B\u27e9"  # a mark typed as text is no mark
    assert shown("línea 1\nzweite Zeile: 東京 🙂") == "línea 1\nzweite Zeile: 東京 🙂"  # the rest as it is
    # texts an agent reads: every one of these is taken out
    assert clean("a\u00adb\u2028c\u2029d\u180ee\ufe0ff\U000e0100g\u115fh\u3164i\uffa0j\x85k\x9bl") == "abcdefghijkl"


def test_the_console_and_a_link_s_page_show_a_held_call_s_hidden_characters_marked(tmp_path: Path) -> None:
    import re

    from approving import app_of, client_of, open_session, signed_in
    from conftest import until
    from toolcrib.approvals import Pending
    from toolcrib.mcp.operator import _describe

    async def main() -> str:
        app = app_of(tmp_path)
        async with app.app.router.lifespan_context(app.app), client_of(app) as http, \
                anyio.create_task_group() as tg:
            await signed_in(http)
            call = await open_session(http)
            tg.start_soon(call, "t__deploy", {"target": HIDDEN})

            async def listed() -> bool:
                return "approval-" in (await http.get("/console/approvals")).text

            await until(listed, "the console lists the call")
            page = (await http.get("/console/approvals")).text
            tg.cancel_scope.cancel()
        return page

    page = anyio.run(main)
    arguments = re.search(r'<pre class="arguments">(.*?)</pre>', page, re.S).group(1)
    assert arguments == '{\n  &#34;target&#34;: &#34;' + MARKED + '&#34;\n}'
    assert not any(c in page for c in "\u202e\U000e0041\u200b\x9b\ufe0f\u3164")
    link = _describe(Pending("id", "a", None, "t__deploy", {"target": HIDDEN}, "ask rule", "c", "v", 0, 1))
    assert "&quot;target&quot;: &quot;" + MARKED + "&quot;" in link and "\u202e" not in link
