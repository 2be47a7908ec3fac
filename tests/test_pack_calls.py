"""The host's end of an isolated pack's calls lane (toolcrib.supply.mcp.pack_calls), on real pipes, with this test as
the child: every line a child may write, well formed or not, and what the host answers. (tests/test_isolation.py runs
the lane end to end, with a real pack in a real confined child.)"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

import toolcrib
from conftest import make_host
from toolcrib.content import ToolResult
from toolcrib.runner import Call
from toolcrib.supply.mcp.pack_calls import Lane


class Child:
    """The child's end: lines written to the host, and the host's lines read back."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self._buffer = b""

    def say(self, message: Any) -> None:
        data = (message if isinstance(message, bytes) else json.dumps(message).encode()) + b"\n"
        while data:
            data = data[os.write(self.write_fd, data):]

    async def hear_line(self) -> bytes:
        while b"\n" not in self._buffer:
            await anyio.wait_readable(self.read_fd)
            self._buffer += os.read(self.read_fd, 1 << 20)
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    async def hear(self) -> dict[str, Any]:
        heard: dict[str, Any] = json.loads(await self.hear_line())
        return heard


@asynccontextmanager
async def lane() -> AsyncIterator[tuple[Lane, Child]]:
    to_child_read, to_child_write = os.pipe()
    from_child_read, from_child_write = os.pipe()
    os.set_blocking(to_child_read, False)
    host = Lane(from_child_read, to_child_write, "probe")
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.run)
        try:
            yield host, Child(to_child_read, from_child_write)
        finally:
            host.stop()
            tg.cancel_scope.cancel()
            for fd in (to_child_read, from_child_write):
                os.close(fd)


class Client:
    """The agent's client as the host's pipeline hands it to a call (a front end's channel): what it was told."""

    def __init__(self, sample: bool = True) -> None:
        self.told: list[tuple[Any, ...]] = []
        if sample:
            self.sample = self._sample

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.told.append(("progress", progress, total, message))

    async def log(self, level: str, message: str, logger: str | None) -> None:
        self.told.append(("log", level, message, logger))

    async def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        self.told.append(("elicit", message))
        return {"action": "accept", "content": {"sure": True}}

    async def _sample(self, request: dict[str, Any]) -> dict[str, Any]:
        self.told.append(("sample", request["messages"][0]["content"]["text"]))
        return {"role": "assistant", "content": {"type": "text", "text": "a model's answer"}, "model": "m"}


@toolcrib.tool
def probe() -> str:
    """A tool to make a call of."""
    return "unused"


class Probe:
    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return [probe]


def a_call(client: Client | None, tmp_path: Path) -> Call:
    view = make_host('[agents.a.permissions]\nplugins = { allow = ["kit"] }\ntools = { allow = ["*"] }\n',
                     {"kit": Probe()}).view("a")
    return Call(view, "kit__probe", {}, channel=client, tool=view.lookup("kit__probe"), workspace=tmp_path)


def test_a_call_its_asks_and_its_result_cross_and_bad_asks_are_dropped_or_refused(tmp_path: Path) -> None:
    client = Client()

    async def main() -> tuple[Any, ...]:
        async with lane() as (host, child):
            got: list[Any] = []

            async def calling() -> None:
                got.append(await host.call("probe", {"a": 1}, a_call(client, tmp_path)))

            async with anyio.create_task_group() as tg:
                tg.start_soon(calling)
                sent = await child.hear()
                number = sent["call"]
                for args in ([1, 2, "half"], [1, "x", 7], ["one", 2, "m"], [1, 2]):  # the last three: dropped
                    child.say({"ask": 0, "call": number, "what": "progress", "args": args})
                child.say({"ask": 0, "call": number, "what": "log", "args": ["info", "hello", "pack.log"]})
                child.say({"ask": 0, "call": number, "what": "log", "args": ["info", 5, None]})  # dropped
                answers = []
                for k, what, args in ((1, "elicit", ["Sure?", {"type": "object"}]), (2, "sample", [{"messages": [
                        {"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 5}]),
                        (3, "elicit", ["no schema"]), (4, "sample", ["not a request"]), (5, "steal", []),
                        (6, "elicit", "not a list")):
                    child.say({"ask": k, "call": number, "what": what, "args": args})
                    answers.append(await child.hear())
                child.say({"result": number, "content": [{"type": "text", "text": "done"}],
                           "structuredContent": {"n": 1}, "isError": False})
            return sent, answers, got[0]

    sent, answers, result = anyio.run(main)
    assert sent == {"call": 1, "tool": "probe", "arguments": {"a": 1}, "agent": "a"}  # the calling agent, for ctx
    assert client.told == [("progress", 1.0, 2.0, "half"), ("progress", 1.0, None, None),
                           ("log", "info", "hello", "pack.log"), ("elicit", "Sure?"), ("sample", "hi")]
    assert answers == [
        {"answer": 1, "value": {"action": "accept", "content": {"sure": True}}},
        {"answer": 2, "value": {"role": "assistant", "content": {"type": "text", "text": "a model's answer"},
                                "model": "m"}},
        {"answer": 3, "error": "the lane does not carry 'elicit'"},
        {"answer": 4, "error": "the lane does not carry 'sample'"},
        {"answer": 5, "error": "the lane does not carry 'steal'"},
        {"answer": 6, "error": "the lane does not carry 'elicit'"}]
    assert result == ToolResult(content=({"type": "text", "text": "done"},), structured_content={"n": 1})


def test_a_call_with_no_client_or_no_model_is_answered_so(tmp_path: Path) -> None:
    async def asked(call: Call | None, what: str, args: list[Any]) -> dict[str, Any]:
        async with lane() as (host, child):
            heard: list[dict[str, Any]] = []

            async def calling() -> None:
                await host.call("probe", {}, call)

            async with anyio.create_task_group() as tg:
                tg.start_soon(calling)
                number = (await child.hear())["call"]
                child.say({"ask": 9, "call": number, "what": what, "args": args})
                heard.append(await child.hear())
                child.say({"result": number, "content": []})
            return heard[0]

    request = [{"messages": [], "maxTokens": 1}]
    assert anyio.run(asked, None, "sample", request) == {
        "answer": 9, "error": "nobody can be asked here (the call has no client)"}
    assert anyio.run(asked, a_call(Client(sample=False), tmp_path), "sample", request) == {
        "answer": 9, "error": "This needs the client's model, and the client offers none (it does not support MCP "
                              "sampling)."}


@pytest.mark.parametrize(("answer", "said"), [
    ({"error": "no such tool"}, "isolated pack 'probe' refused the call: no such tool"),
    ({"content": "not a list"}, "isolated pack 'probe' answered with a malformed result: Input should be a valid list"),
])
def test_a_refusal_or_a_malformed_result_is_the_call_s_error(answer: dict[str, Any], said: str) -> None:
    async def main() -> str:
        async with lane() as (host, child):
            failed: list[str] = []

            async def calling() -> None:
                try:
                    await host.call("probe", {}, None)
                except toolcrib.ToolError as exc:
                    failed.append(str(exc))

            async with anyio.create_task_group() as tg:
                tg.start_soon(calling)
                number = (await child.hear())["call"]
                child.say({"result": number, **answer})
            return failed[0]

    assert anyio.run(main) == said


def test_a_long_message_is_written_whole_and_the_next_waits_for_it() -> None:
    async def main() -> list[dict[str, Any]]:
        async with lane() as (host, child):
            big = "x" * (1 << 20)  # far past what a pipe holds: the host waits for room, mid-message

            async def calling(arguments: dict[str, Any]) -> None:
                with anyio.move_on_after(30):  # (never answered: cancelled once read)
                    await host.call("probe", arguments, None)

            async with anyio.create_task_group() as tg:
                tg.start_soon(calling, {"big": big})
                await anyio.sleep(0.05)  # the first is half written
                tg.start_soon(calling, {"small": 1})
                heard = [await child.hear(), await child.hear()]
                tg.cancel_scope.cancel()
            return heard

    first, second = anyio.run(main)
    assert (first["call"], len(first["arguments"]["big"]), second) == (
        1, 1 << 20, {"call": 2, "tool": "probe", "arguments": {"small": 1}, "agent": None})


def test_lines_are_compact_utf_8_a_result_keeps_its_blocks_wire_keys_and_a_non_object_ends_the_lane() -> None:
    async def main() -> tuple[Any, ...]:
        async with lane() as (host, child):
            got: list[Any] = []

            async def calling() -> None:
                got.append(await host.call("probe", {"city": "Zürich"}, None))

            async with anyio.create_task_group() as tg:
                tg.start_soon(calling)
                line = await child.hear_line()
                child.say({"result": 1, "content": [{"type": "text", "text": "x", "_meta": {"k": 1}}]})
            child.say(b"[1, 2]")  # JSON, and not an object
            with anyio.fail_after(30):  # (a hang guard)
                while host.closed is None:
                    await anyio.sleep(0.01)
            return line, got[0], host.closed

    line, result, closed = anyio.run(main)
    assert line == '{"call":1,"tool":"probe","arguments":{"city":"Zürich"},"agent":null}'.encode()
    assert result.content == ({"type": "text", "text": "x", "_meta": {"k": 1}},)
    assert closed == "a line that is not a JSON object"


class Remembering(Client):
    """A front end that makes one call several times (MCP 2026-07-28): what earlier rounds recorded, by kind."""

    def __init__(self, recorded: dict[str, Any]) -> None:
        super().__init__()
        self.recorded = recorded

    async def remember(self, kind: str, compute: Any) -> Any:
        if kind in self.recorded:
            return self.recorded[kind]
        self.recorded[kind] = value = await compute()
        self.told.append(("recorded", kind, value))
        return value


@pytest.mark.parametrize("client", ["none", "plain", "stored", "computes", "ends"])
def test_remember_takes_what_the_front_end_recorded_or_has_the_child_compute_it(tmp_path: Path,
                                                                                  client: str) -> None:
    front = {"none": None, "plain": Client(), "stored": Remembering({"ticket": 7}),
             "computes": Remembering({}), "ends": Remembering({})}[client]

    async def main() -> list[dict[str, Any]]:
        async with lane() as (host, child):
            heard: list[dict[str, Any]] = []

            async def calling() -> None:
                await host.call("probe", {}, a_call(front, tmp_path) if front is not None else None)

            async with anyio.create_task_group() as tg:
                tg.start_soon(calling)
                number = (await child.hear())["call"]
                child.say({"ask": 1, "call": number, "what": "remember", "args": ["ticket"]})
                heard.append(await child.hear())
                if client in ("computes", "ends"):  # while it computes, its progress still crosses
                    child.say({"ask": 0, "call": number, "what": "progress", "args": [1, 2, "computing"]})
                    if client == "computes":
                        child.say({"ask": 0, "call": number, "what": "remembered", "args": [{"n": 42}]})
                if client != "ends":
                    child.say({"ask": 0, "call": number, "what": "remembered", "args": ["unasked"]})  # dropped
                child.say({"result": number, "content": []})
            return heard

    heard = anyio.run(main)
    expected = {"none": {"compute": True}, "plain": {"compute": True}, "stored": {"stored": 7},
                "computes": {"compute": True}, "ends": {"compute": True}}[client]
    assert heard == [{"answer": 1, "value": expected}]
    if client == "computes":
        assert front.told == [("progress", 1.0, 2.0, "computing"), ("recorded", "ticket", {"n": 42})]  # type: ignore
    if client == "ends":  # the call's result came before the value: nothing is recorded
        assert (front.told, front.recorded) == ([("progress", 1.0, 2.0, "computing")], {})  # type: ignore


def test_permits_questions_are_answered_for_the_call_s_agent_in_the_chain_it_was_made_in(tmp_path: Path) -> None:
    from toolcrib.context import CHAIN
    from toolcrib.supply.mcp.pack_calls import _Pipes

    config = ('[agents.a.permissions]\nplugins = { allow = ["kit"] }\ntools = { allow = ["*"] }\n'
              'subagents = { allow = ["b", "c"] }\n[agents.b]\n[agents.c]\n')
    view = make_host(config, {"kit": Probe()}).view("a")
    call = Call(view, "kit__probe", {}, channel=Client(), tool=view.lookup("kit__probe"), workspace=tmp_path)

    async def main() -> list[Any]:
        asks_read, asks_write = os.pipe()
        told_read, told_write = os.pipe()
        async with lane() as (host, child):
            host.permits_line = _Pipes(asks_read, told_write)  # before its run starts: it answers them
            heard: list[Any] = []
            async with anyio.create_task_group() as tg:

                async def calling() -> None:
                    CHAIN.set(("c", "a"))  # a sub-agent run of c's: c is back along the chain, never permitted
                    await host.call("probe", {}, call)

                tg.start_soon(calling)
                number = (await child.hear())["call"]
                asker = Child(told_read, asks_write)
                for m, (call_number, dimension, name) in enumerate([
                        (number, "subagents", "b"), (number, "subagents", "c"), (number, "plugins", "kit"),
                        (number, "plugins", "other"), (number + 1, "plugins", "kit"), (number, 5, "kit"),
                        ("1", "plugins", "kit")], 1):
                    asker.say({"permits": m, "call": call_number, "dimension": dimension, "name": name})
                    heard.append(await asker.hear())
                child.say({"result": number, "content": []})
                await anyio.sleep(0.05)
                asker.say({"permits": 8, "call": number, "dimension": "plugins", "name": "kit"})  # it has ended
                heard.append(await asker.hear())
                tg.cancel_scope.cancel()
        for fd in (asks_write, told_read):
            os.close(fd)
        return heard

    assert anyio.run(main) == [{"permitted": 1, "value": True}, {"permitted": 2, "value": False},
                               {"permitted": 3, "value": True}, {"permitted": 4, "value": False},
                               {"permitted": 5, "value": False}, {"permitted": 6, "value": False},
                               {"permitted": 7, "value": False}, {"permitted": 8, "value": False}]


def test_a_long_line_is_read_whole_and_the_loop_serves_others_while_it_comes(tmp_path: Path) -> None:
    """A pack that floods its lane with one long line (from a file, so that no read ever waits): the line arrives
    whole, and another task of the loop runs while it is read, not after (a reader that never yields while bytes keep
    coming holds every other source's calls)."""
    from toolcrib.supply.mcp.pack_calls import _CHUNK, _Pipes

    line = b'{"result": 1, "pad": "' + b"x" * (40 * _CHUNK) + b'"}'
    flood = tmp_path / "flood"
    flood.write_bytes(line + b"\n" + b'{"result": 2}\n')
    order: list[str] = []

    async def main() -> list[bytes]:
        pipes = _Pipes(os.open(flood, os.O_RDONLY), os.open(os.devnull, os.O_WRONLY))
        got: list[bytes] = []

        async def other() -> None:
            order.append("another task ran")

        async with anyio.create_task_group() as tg:
            tg.start_soon(other)  # queued behind the reader, which starts first
            async for read in pipes.lines():
                order.append(f"a line of {len(read)} bytes")
                got.append(read)
        pipes.close()
        return got

    got = anyio.run(main)
    assert got == [line, b'{"result": 2}']
    assert order == ["another task ran", f"a line of {len(line)} bytes", "a line of 13 bytes"]


@pytest.mark.parametrize("line", [b"[" * 200_000 + b"]" * 200_000, b"{" * 3 + b"nope"])
def test_a_line_nested_past_what_python_parses_is_no_json_and_ends_the_lane(line: bytes) -> None:
    from toolcrib.supply.mcp.pack_calls import LaneClosed, _message

    with pytest.raises(LaneClosed) as ended:
        _message(line)
    assert str(ended.value) == "a line that is not JSON"
