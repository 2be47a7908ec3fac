"""Sync handlers declared ``inline``: run on the event loop (no worker thread's hop), what they ask of their client
sent in order once they return, and the guard that sends one that held the loop too long to worker threads for a
while (toolcrib.runner.InlineGuard)."""

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
from toolcrib import runner
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState

RAN_IN: list[str] = []  # "loop" or "thread", per run
LOOP: list[int] = []  # the event loop's thread


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
        return [quick, threaded]

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
    WORK.clear()


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


def guarded() -> tuple[Any, list[str]]:
    """A host serving a fresh ``g__work`` declared inline (a guard of its own: the guard is its runner's), which
    runs the next of the ``WORK`` functions it is given (none: it does nothing), and where each run was."""
    ran: list[str] = []

    @toolcrib.tool(inline=True)
    def work() -> str:
        """Do the next piece of work."""
        ran.append(where())
        if WORK:
            WORK.pop(0)()
        return "done"

    class Guarded:
        @toolcrib.hookimpl
        def toolcrib_tools(self) -> list[Any]:
            return [work]

    return make_host(CONFIG.replace('"p"', '"g"'), {"g": Guarded()}), ran


WORK: list[Any] = []


def waits() -> None:
    time.sleep(runner.INLINE_SECONDS * 4)


def computes() -> None:
    spent = time.thread_time() + runner.INLINE_SECONDS * 4
    while time.thread_time() < spent:
        pass


def guard_said(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage().split(" for ")[0]) for r in caplog.records if r.name == "toolcrib.runner"]


@pytest.mark.parametrize("slow", [waits, computes], ids=["waiting", "computing"])
def test_an_inline_handler_that_holds_the_loop_twice_in_a_row_runs_in_threads_for_a_while(
        slow: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "INLINE_COOLDOWN", 3)
    caplog.set_level(logging.DEBUG, logger="toolcrib.runner")
    host, ran = guarded()

    async def main() -> None:
        LOOP.append(threading.get_ident())
        WORK.extend([slow, slow])  # the first run over the bound is a suspect; the second, measured, trips the guard
        for _ in range(7):
            assert (await host.call("a", "g__work", {})).text == "done"
        WORK.extend([slow, slow])  # once more: sent off the loop again, and said at debug only
        for _ in range(3):
            await host.call("a", "g__work", {})

    anyio.run(main)
    # two runs over the bound, 3 in threads, then on the loop again (where it overran twice more, and went back)
    assert ran == ["loop", "loop", "thread", "thread", "thread", "loop", "loop", "loop", "loop", "thread"]
    assert guard_said(caplog) == [("WARNING", "g__work runs inline and held the event loop"),
                                  ("DEBUG", "g__work runs inline and held the event loop")]
    assert caplog.records[-1].getMessage().endswith("(more than 5 ms): its next 3 calls run in worker threads")


def test_one_inline_run_over_the_bound_is_only_a_suspect(caplog: pytest.LogCaptureFixture) -> None:
    """What a busy machine does to a quick handler (its run takes long by the clock on the wall, once) sends it to
    no thread: the next run is measured by the thread's own clock, and a quick one clears it."""
    caplog.set_level(logging.DEBUG, logger="toolcrib.runner")
    host, ran = guarded()

    async def main() -> None:
        LOOP.append(threading.get_ident())
        WORK.extend([waits, lambda: None, waits, lambda: None, computes])
        for _ in range(6):
            assert (await host.call("a", "g__work", {})).text == "done"

    anyio.run(main)
    assert ran == ["loop"] * 6
    assert guard_said(caplog) == []


def test_an_inline_run_past_the_wait_bound_trips_the_guard_at_once(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "INLINE_WAIT_SECONDS", runner.INLINE_SECONDS * 2)
    caplog.set_level(logging.DEBUG, logger="toolcrib.runner")
    host, ran = guarded()

    async def main() -> None:
        LOOP.append(threading.get_ident())
        WORK.append(waits)
        for _ in range(2):
            await host.call("a", "g__work", {})

    anyio.run(main)
    assert ran == ["loop", "thread"]
    assert guard_said(caplog) == [("WARNING", "g__work runs inline and held the event loop")]


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


def test_a_resource_and_a_prompt_that_overrun_time_out_as_a_tool_does() -> None:
    """One executor runs tools, resources and prompts: a resource's async reader and a prompt's sync function that
    outlive the call timeout end the call with the same message a tool's would, and the sync one is told."""
    told: list[bool] = []

    @toolcrib.resource("slow://note")
    async def slow_note() -> str:
        await anyio.sleep(30)
        return "never"

    @toolcrib.prompt
    def slow_prompt(ctx: toolcrib.Context) -> str:
        """Wait until told."""
        while not ctx.cancelled:
            time.sleep(0.01)
        told.append(True)
        return "never"

    class Slow:
        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [slow_note]

        @toolcrib.hookimpl
        def toolcrib_prompts(self) -> list[Any]:
            return [slow_prompt]

    host = make_host("[host]\ncall_timeout = 0.2\n" + CONFIG.replace('"p"', '"s"'), {"s": Slow()})

    async def main() -> list[str]:
        said, view = [], host.view("a")
        for ask in (lambda: view.read("slow://note"), lambda: view.get_prompt("s__slow_prompt", {})):
            with pytest.raises(toolcrib.ToolError) as raised:
                await ask()
            said.append(str(raised.value))
        for _ in range(500):  # the prompt's thread, told, returns
            if told:
                break
            await anyio.sleep(0.01)
        return said

    assert anyio.run(main) == ["Resource s__slow_note timed out after 0.2 seconds and was stopped.",
                               "Prompt s__slow_prompt timed out after 0.2 seconds and was stopped."]
    assert told == [True]
