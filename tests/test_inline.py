"""Sync handlers declared ``inline``: run on the event loop (no worker thread's hop), what they ask of their client
sent in order once they return, and the guard that sends one that held the loop too long to worker threads for a
while (toolcrib.calls.INLINE_SECONDS, INLINE_COOLDOWN)."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import anyio
import pytest
from mcp import Client

import toolcrib
from conftest import make_host
from toolcrib import calls
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState

RAN_IN: list[str] = []  # "loop" or "thread", per run
LOOP: list[int] = []  # the event loop's thread
SLOW: list[float] = []  # seconds the next run of ``slow`` takes


def where() -> str:
    return "loop" if threading.get_ident() == LOOP[0] else "thread"


@toolcrib.tool(inline=True)
def quick(ctx: toolcrib.Context, n: int) -> str:
    """Answer at once, telling the client how far it got."""
    RAN_IN.append(where())
    ctx.report_progress(1, 2, "halfway")
    ctx.info(f"working on {n}")
    ctx.report_progress(2, 2, "done")
    return f"quick {n}"


@toolcrib.tool(inline=True)
def slow() -> str:
    """Take as long as SLOW says."""
    RAN_IN.append(where())
    time.sleep(SLOW.pop(0) if SLOW else 0)
    return "slow"


@toolcrib.tool
def threaded() -> str:
    """A sync tool not declared inline."""
    RAN_IN.append(where())
    return "threaded"


@toolcrib.prompt(inline=True)
def hello(name: str) -> str:
    """Greet."""
    RAN_IN.append(where())
    return f"Say hello to {name}."


@toolcrib.resource("inline://note", inline=True)
def note() -> str:
    RAN_IN.append(where())
    return "a note"


class Pack:
    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return [quick, slow, threaded]

    @toolcrib.hookimpl
    def toolcrib_prompts(self) -> list[Any]:
        return [hello]

    @toolcrib.hookimpl
    def toolcrib_resources(self) -> list[Any]:
        return [note]


CONFIG = """
[agents.a.permissions]
plugins = { allow = ["p"] }
tools = { allow = ["*"] }
prompts = { allow = ["*"] }
resources = { allow = ["*"] }
[agents.a.limits]
in_flight = 4
"""


@pytest.fixture(autouse=True)
def fresh() -> None:
    RAN_IN.clear()
    LOOP.clear()
    SLOW.clear()


def test_inline_handlers_run_on_the_loop_and_their_progress_and_logs_reach_the_client_in_order() -> None:
    told: list[Any] = []

    async def main() -> list[str]:
        LOOP.append(threading.get_ident())

        async def logged(params: Any) -> None:
            told.append(("log", params.data))

        async with Client(build_server(ServingState(make_host(CONFIG, {"p": Pack()})), "a"), mode="legacy",
                          cache=None, logging_callback=logged) as client:
            async def progressed(done: float, total: float | None, message: str | None) -> None:
                told.append(("progress", done, total, message))

            said = [(await client.call_tool("p__quick", {"n": 7}, progress_callback=progressed)).content[0].text,
                    (await client.call_tool("p__threaded", {})).content[0].text,
                    (await client.get_prompt("p__hello", {"name": "Ada"})).messages[0].content.text,
                    (await client.read_resource("inline://note")).contents[0].text]
            return said

    said = anyio.run(main)
    assert said == ["quick 7", "threaded", "Say hello to Ada.", "a note"]
    assert RAN_IN == ["loop", "thread", "loop", "loop"]
    assert told == [("progress", 1.0, 2.0, "halfway"), ("log", "working on 7"), ("progress", 2.0, 2.0, "done")]


def test_an_inline_handler_that_held_the_loop_too_long_runs_in_threads_for_a_while(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "INLINE_COOLDOWN", 3)
    host = make_host(CONFIG, {"p": Pack()})
    caplog.set_level(logging.DEBUG, logger="toolcrib.calls")

    async def main() -> None:
        LOOP.append(threading.get_ident())
        SLOW.extend([calls.INLINE_SECONDS * 4])  # the first run overruns; the others take no time
        for _ in range(5):
            assert (await host.call("a", "p__slow", {})).text == "slow"
        SLOW.extend([calls.INLINE_SECONDS * 4])  # once more: sent off the loop again, and said at debug only
        for _ in range(2):
            await host.call("a", "p__slow", {})

    anyio.run(main)
    # the slow run, 3 in threads, then on the loop again (where it overran once more, and went back to a thread)
    assert RAN_IN == ["loop", "thread", "thread", "thread", "loop", "loop", "thread"]
    said = [(r.levelname, r.getMessage().split(" (")[0]) for r in caplog.records if r.name == "toolcrib.calls"]
    assert [(level, text.split(" for ")[0]) for level, text in said] == [
        ("WARNING", "p__slow runs inline and held the event loop"),
        ("DEBUG", "p__slow runs inline and held the event loop")]
    assert said[0][1].endswith("ms") and caplog.records[-1].getMessage().endswith(
        "(more than 5 ms): its next 3 calls run in worker threads")


def test_an_inline_handler_s_tool_error_is_its_result() -> None:
    @toolcrib.tool(inline=True)
    def fails() -> str:
        """Raise."""
        raise toolcrib.ToolError("no such order")

    class Failing:
        @toolcrib.hookimpl
        def toolcrib_tools(self) -> list[Any]:
            return [fails]

    host = make_host(CONFIG.replace('"p"', '"f"'), {"f": Failing()})
    result = anyio.run(host.call, "a", "f__fails", {})
    assert (result.is_error, result.text) == (True, "no such order")


@pytest.mark.parametrize(("declare", "said"), [
    (lambda: toolcrib.tool(inline=True)(async_handler), "tool 'async_handler': inline is for a sync handler; an "
                                                         "async one runs on the event loop already"),
    (lambda: toolcrib.tool(inline="yes")(sync_handler), "tool 'sync_handler': inline must be True or False, not "
                                                         "'yes'"),
    (lambda: toolcrib.prompt(inline=1)(sync_handler), "prompt 'sync_handler': inline must be True or False, not 1"),
    (lambda: toolcrib.resource("x://y", inline=True)(async_handler), "resource 'async_handler': inline is for a "
                                                                      "sync handler; an async one runs on the event "
                                                                      "loop already"),
])
def test_inline_is_declared_forsync_handlers_only(declare: Any, said: str) -> None:
    with pytest.raises(toolcrib.ToolDeclarationError) as raised:
        declare()
    assert str(raised.value) == said


async def async_handler() -> str:
    """Async."""
    return "x"


def sync_handler() -> str:
    """Sync."""
    return "x"
