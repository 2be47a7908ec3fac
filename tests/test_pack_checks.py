"""The checks line of an isolated pack (toolcrib.supply.mcp.pack_checks), on real pipes: the host's end with this test
as the child, every line a child may write, well formed or not; and the child's end with this test as the host.
(tests/test_isolation.py runs it end to end, with a real pack in a real confined child.)"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from toolcrib.context import AvailabilityContext
from toolcrib.sandbox import Unconfinable
from toolcrib.supply.mcp.pack_checks import (
    CheckFailed,
    CheckLine,
    Deferred,
    remote_check,
    remote_describe,
    serve_checks,
)

CTX = AvailabilityContext(agent="seer", model="qwen-vl", capabilities=frozenset({"vision", "tools"}), settings=None,
                          mode="plan", workspace=Path("/srv/ws"),
                          _permits=lambda dimension, name: (dimension, name) == ("plugins", "other"))


def read_line(fd: int) -> dict[str, Any]:
    data = b""
    while not data.endswith(b"\n"):
        byte = os.read(fd, 1)
        if not byte:
            raise EOFError
        data += byte
    found: dict[str, Any] = json.loads(data)
    return found


class Child:
    """This test as the child: it reads the host's questions and writes what ``script`` says for each."""

    def __init__(self) -> None:
        self.questions_read, questions_write = os.pipe()
        answers_read, self.answers_write = os.pipe()
        self.line = CheckLine(answers_read, questions_write, "probe")
        self.heard: list[dict[str, Any]] = []
        self.thread: threading.Thread | None = None

    def run(self, script: Callable[[dict[str, Any]], list[bytes | dict[str, Any]]]) -> None:
        def loop() -> None:
            try:
                while True:
                    message = read_line(self.questions_read)
                    self.heard.append(message)
                    for line in script(message):
                        data = line if isinstance(line, bytes) else json.dumps(line).encode() + b"\n"
                        os.write(self.answers_write, data)
            except (OSError, ValueError, EOFError):
                return

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()


@pytest.fixture
def child() -> Iterator[Child]:
    made = Child()
    yield made
    made.line.close()  # the script's thread reads the end of its questions, and stops
    if made.thread is not None:
        made.thread.join(10)
    for fd in (made.questions_read, made.answers_write):
        os.close(fd)


def check(line: CheckLine, seconds: float = 5.0) -> Any:
    return remote_check(lambda: line, "tool", "look", lambda: seconds)(CTX)


def test_the_host_asks_with_the_agent_s_context_and_takes_the_child_s_answer(child: Child) -> None:
    child.run(lambda m: [{"answer": m["ask"], "value": True}])
    assert check(child.line) is True
    assert child.heard == [{"ask": 1, "what": "is_available", "kind": "tool", "key": "look", "context": {
        "agent": "seer", "model": "qwen-vl", "capabilities": ["tools", "vision"], "mode": "plan",
        "workspace": "/srv/ws"}}]


@pytest.mark.parametrize(("answer", "expected"), [
    ({"value": False}, ("bool", False)), ({"value": "no camera"}, ("str", "no camera")),
    # anything else is returned as the child wrote it, and hides the tool as in process ("is_available returned 42")
    ({"value": 42, "unexpected": True}, ("_Returned", "42")), ({"value": [1]}, ("_Returned", "[1]")),
    ({"value": "42", "unexpected": True}, ("_Returned", "42")), ({}, ("_Returned", "None"))])
def test_what_the_child_answers_is_what_the_check_returns(child: Child, answer: dict[str, Any],
                                                          expected: tuple[str, Any]) -> None:
    child.run(lambda m: [{"answer": m["ask"], **answer}])
    found = check(child.line)
    assert (type(found).__name__, found if isinstance(found, bool | str) else repr(found)) == expected


def test_an_unconfinable_reason_stays_one(child: Child) -> None:
    child.run(lambda m: [{"answer": m["ask"], "value": "reaches the config", "unconfinable": True}])
    found = check(child.line)
    assert isinstance(found, Unconfinable) and found == "reaches the config"


def test_what_the_child_s_check_raised_is_raised_here_under_its_name(child: Child) -> None:
    raised_there = iter([("ValueError", "nothing for seer"), ("not a name; rm -rf", "x")])
    child.run(lambda m: [dict(zip(("answer", "raised", "message"), (m["ask"], *next(raised_there)), strict=True))])
    with pytest.raises(CheckFailed) as raised:
        check(child.line)
    assert (type(raised.value).__name__, str(raised.value)) == ("ValueError", "nothing for seer")
    with pytest.raises(CheckFailed) as raised:
        check(child.line)
    assert type(raised.value).__name__ == "CheckFailed"


def test_a_check_s_permits_is_answered_from_the_agent_s_rules_while_the_host_waits(child: Child) -> None:
    def script(m: dict[str, Any]) -> list[bytes | dict[str, Any]]:
        if "ask" in m and "what" in m:
            return [{"permits": 1, "ask": m["ask"], "dimension": "plugins", "name": "other"},
                    {"permits": 2, "ask": m["ask"], "dimension": "plugins", "name": "elsewhere"},
                    {"permits": 3, "ask": m["ask"], "dimension": 7, "name": "other"}]
        if m.get("permitted") == 3:
            return [{"answer": 1, "value": "asked"}]
        return []

    child.run(script)
    assert check(child.line) == "asked"
    assert child.heard[1:] == [{"permitted": 1, "value": True}, {"permitted": 2, "value": False},
                               {"permitted": 3, "value": False}]


def test_answers_to_questions_no_longer_asked_and_permits_for_another_are_dropped(child: Child) -> None:
    def script(m: dict[str, Any]) -> list[bytes | dict[str, Any]]:
        return [{"answer": m["ask"] + 7, "value": False}, {"answer": "1", "value": False},
                {"permits": 1, "ask": m["ask"] + 1, "dimension": "plugins", "name": "other"},
                {"answer": m["ask"], "value": True}]

    child.run(script)
    assert check(child.line) is True
    assert check(child.line) is True  # and the next question is not confused by them
    assert [m.get("ask") for m in child.heard] == [1, 2]


@pytest.mark.parametrize(("line", "why"), [
    (b"not json\n", "answered out of turn: Expecting value: line 1 column 1 (char 0)"),
    (b"[1, 2]\n", "answered out of turn: a line that is not a JSON object"),
])
def test_a_line_that_is_not_the_line_s_fails_the_check_closed(child: Child, line: bytes, why: str) -> None:
    child.run(lambda m: [line])
    with pytest.raises(CheckFailed) as raised:
        check(child.line)
    assert (type(raised.value).__name__, str(raised.value)) == ("BrokenLine", f"isolated pack 'probe' {why}")


def test_a_line_too_long_fails_the_check_closed(child: Child) -> None:
    child.run(lambda m: [b"x" * (1024 * 1024 + 65536)])
    with pytest.raises(CheckFailed) as raised:
        check(child.line)
    assert str(raised.value) == "isolated pack 'probe' answered out of turn: a line longer than 1048576 bytes"


def test_no_answer_in_time_fails_closed_and_the_line_serves_the_next_question(child: Child) -> None:
    answered = threading.Event()

    def script(m: dict[str, Any]) -> list[bytes | dict[str, Any]]:
        if m["ask"] == 1:
            answered.wait(10)  # late: after the host gave up
            return [{"answer": 1, "value": True}]
        return [{"answer": m["ask"], "value": "second"}]

    child.run(script)
    with pytest.raises(CheckFailed) as raised:
        check(child.line, 0.2)
    assert (type(raised.value).__name__, str(raised.value)) == (
        "TimeoutError", "isolated pack 'probe' gave no answer within 0.7 seconds")  # (0.5 s past the budget)
    answered.set()
    assert check(child.line) == "second"  # the late answer to the first is dropped


def test_a_closed_line_fails_at_once_and_describe_falls_back_to_what_was_listed(child: Child) -> None:
    child.line.closed = True
    begun = time.monotonic()
    with pytest.raises(CheckFailed) as raised:
        check(child.line)
    assert (type(raised.value).__name__, str(raised.value)) == ("ProcessEnded",
                                                               "isolated pack 'probe': its process ended")
    describe = remote_describe(lambda: child.line, "look", "Look at an image.", lambda: 5.0)
    assert describe(CTX) == "Look at an image."
    assert remote_describe(lambda: None, "look", "Listed.", lambda: 5.0)(CTX) == "Listed."
    with pytest.raises(CheckFailed, match="the isolated pack's process is not running"):
        remote_check(lambda: None, "tool", "look", lambda: 5.0)(CTX)
    assert time.monotonic() - begun < 5.0  # none of them waited for an answer


def test_describe_takes_the_child_s_text_and_an_empty_or_odd_one_falls_back(child: Child) -> None:
    texts = iter(["For seer.", "  ", 7])
    child.run(lambda m: [{"answer": m["ask"], "value": next(texts)}])
    describe = remote_describe(lambda: child.line, "look", "Listed.", lambda: 5.0)
    assert [describe(CTX), describe(CTX), describe(CTX)] == ["For seer.", "Listed.", "Listed."]
    assert child.heard[0] == {"ask": 1, "what": "describe", "kind": "tool", "key": "look", "context": {
        "agent": "seer", "model": "qwen-vl", "capabilities": ["tools", "vision"], "mode": "plan",
        "workspace": "/srv/ws"}}


def test_the_inventory_keeps_only_what_it_knows(child: Child) -> None:
    child.run(lambda m: [{"answer": m["ask"], "value": {
        "tool": {"look": ["is_available", "describe", "delete_everything"], "plain": [], "odd": "not a list"},
        "resource": {"checked://pictures": ["is_available"]}, "prompt": "not a mapping", "other": {"x": []}}}])
    assert child.line.inventory(5.0) == {"tool": {"look": ["is_available", "describe"], "plain": []},
                                         "resource": {"checked://pictures": ["is_available"]}}


# -- the child's end, with this test as the host -------------------------------------------------------------------


class Item:
    def __init__(self, is_available: Any = None, describe: Any = None) -> None:
        self.is_available, self.describe = is_available, describe


def test_the_child_runs_the_pack_s_own_checks_with_the_host_s_context(tmp_path: Path) -> None:
    def sees(ctx: AvailabilityContext) -> Any:
        if not ctx.permits("plugins", "other"):
            return f"{ctx.agent} lacks other"
        return (ctx.agent, ctx.model, sorted(ctx.capabilities), ctx.mode, str(ctx.workspace), ctx.settings) == (
            "seer", "qwen-vl", ["vision"], "plan", "/srv/ws", "the pack's settings")

    def leaves(ctx: AvailabilityContext) -> Any:
        raise SystemExit(3)

    deferred = Deferred({("tool", "look"): (Item(sees, lambda ctx: f"for {ctx.agent}"), "the pack's settings"),
                         ("prompt", "review"): (Item(leaves), None),
                         ("resource", "x://odd"): (Item(lambda ctx: 42), None)})
    questions, answers = tmp_path / "questions", tmp_path / "answers"
    os.mkfifo(questions)
    os.mkfifo(answers)
    to_child = os.open(questions, os.O_RDWR)
    from_child = os.open(answers, os.O_RDWR)
    thread = serve_checks(deferred, f"{questions}{os.pathsep}{answers}")
    context = {"agent": "seer", "model": "qwen-vl", "capabilities": ["vision", 5], "mode": "plan",
               "workspace": "/srv/ws"}

    def ask(message: dict[str, Any]) -> dict[str, Any]:
        os.write(to_child, json.dumps(message).encode() + b"\n")
        return read_line(from_child)

    try:
        assert ask({"ask": 1, "what": "inventory"}) == {"answer": 1, "value": {
            "tool": {"look": ["is_available", "describe"]}, "resource": {"x://odd": ["is_available"]},
            "prompt": {"review": ["is_available"]}}}
        assert ask({"ask": 2, "what": "is_available", "kind": "tool", "key": "look", "context": context}) == {
            "permits": 1, "ask": 2, "dimension": "plugins", "name": "other"}
        assert ask({"permitted": 1, "value": True}) == {"answer": 2, "value": True}
        assert ask({"ask": 3, "what": "is_available", "kind": "tool", "key": "look", "context": context})["permits"] \
            == 1
        assert ask({"permitted": 1, "value": "yes"}) == {"answer": 3, "value": "seer lacks other"}
        assert ask({"ask": 4, "what": "describe", "kind": "tool", "key": "look", "context": context}) == {
            "answer": 4, "value": "for seer"}
        assert ask({"ask": 5, "what": "is_available", "kind": "prompt", "key": "review", "context": context}) == {
            "answer": 5, "raised": "SystemExit", "message": "3"}
        assert ask({"ask": 6, "what": "is_available", "kind": "resource", "key": "x://odd", "context": context}) \
            == {"answer": 6, "value": "42", "unexpected": True}
        assert ask({"ask": 7, "what": "describe", "kind": "prompt", "key": "review", "context": context}) == {
            "answer": 7, "raised": "LookupError", "message": "no describe for 'review'"}
        assert ask({"ask": 8, "what": "is_available", "kind": "tool", "key": "nope", "context": context}) == {
            "answer": 8, "raised": "LookupError", "message": "no is_available for 'nope'"}
        assert ask({"ask": 9, "what": "__class__", "kind": "tool", "key": "look", "context": context}) == {
            "answer": 9, "raised": "LookupError", "message": "no __class__ for 'look'"}
        assert thread.is_alive()  # a check that raised SystemExit ended nothing
    finally:
        os.write(to_child, b"not json\n")  # ends the child's thread
        thread.join(5)
        os.close(to_child)
        os.close(from_child)
    assert not thread.is_alive()


def test_a_question_that_comes_while_a_check_waits_for_permits_is_answered_after_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The host gave up on a check that asked ``permits`` and asks anew: the child answers the new question once the
    first check has its answer. What crosses of a context that is not well formed is made safe; what a check
    returns is sent as the host reads it; the line's end is logged."""
    from toolcrib.sandbox import Unconfinable

    def seen(ctx: AvailabilityContext) -> Any:
        return f"{ctx.model!r} {ctx.mode} {sorted(ctx.capabilities)} {ctx.permits('plugins', 'other')}"

    deferred = Deferred({("tool", "look"): (Item(seen), None),
                         ("tool", "locked"): (Item(lambda ctx: Unconfinable("reaches the config")), None),
                         ("tool", "long"): (Item(lambda ctx: list(range(1000))), None)})
    questions, answers = tmp_path / "questions", tmp_path / "answers"
    os.mkfifo(questions)
    os.mkfifo(answers)
    to_child, from_child = os.open(questions, os.O_RDWR), os.open(answers, os.O_RDWR)
    caplog.set_level(logging.WARNING, logger="toolcrib.checks")
    thread = serve_checks(deferred, f"{questions}{os.pathsep}{answers}")

    def say(message: dict[str, Any]) -> None:
        os.write(to_child, json.dumps(message).encode() + b"\n")

    odd = {"agent": "seer", "model": 5, "capabilities": "vision", "workspace": 7}
    try:
        say({"ask": 1, "what": "is_available", "kind": "tool", "key": "look", "context": odd})
        assert read_line(from_child) == {"permits": 1, "ask": 1, "dimension": "plugins", "name": "other"}
        say({"ask": 2, "what": "is_available", "kind": "tool", "key": "locked", "context": odd})  # (it gave up)
        say({"permitted": 1, "value": True})
        assert read_line(from_child) == {"answer": 1, "value": "None default [] True"}
        assert read_line(from_child) == {"answer": 2, "value": "reaches the config", "unconfinable": True}
        say({"ask": 3, "what": "is_available", "kind": "tool", "key": "long", "context": odd})
        long = read_line(from_child)
        assert long == {"answer": 3, "value": repr(list(range(1000)))[:200], "unexpected": True}
        say({"ask": "4", "what": "is_available", "kind": "tool", "key": "look", "context": odd})
        assert read_line(from_child) == {"answer": "4", "raised": "LookupError", "message": "no is_available for "
                                                                                          "'look'"}
    finally:
        os.write(to_child, b"[1]\n")  # not an object: the line ends
        thread.join(5)
        os.close(to_child)
        os.close(from_child)
    assert not thread.is_alive()
    assert [r.getMessage() for r in caplog.records] == ["the checks line ended: a line that is not a JSON object"]


def test_describe_answers_permits_from_the_agent_s_rules_and_logs_why_it_fell_back(
        child: Child, caplog: pytest.LogCaptureFixture) -> None:
    def script(m: dict[str, Any]) -> list[bytes | dict[str, Any]]:
        if m.get("what") == "describe" and m["ask"] == 1:
            return [{"permits": 1, "ask": 1, "dimension": "plugins", "name": "other"}]
        if m.get("permitted") == 1:
            return [{"answer": 1, "value": f"with other: {m['value']}"}]
        return [{"answer": m["ask"], "raised": "KeyError", "message": "'x'"}]

    child.run(script)
    caplog.set_level(logging.WARNING, logger="toolcrib.checks")
    describe = remote_describe(lambda: child.line, "look", "Listed.", lambda: 5.0)
    assert [describe(CTX), describe(CTX)] == ["with other: True", "Listed."]
    assert [r.getMessage() for r in caplog.records] == [
        "describe of isolated tool look for agent 'seer' failed (KeyError: 'x'); its listed description is served"]
    gone = remote_describe(lambda: None, "look", "Listed.", lambda: 5.0)
    assert gone(CTX) == "Listed."
    assert caplog.records[-1].getMessage() == (
        "describe of isolated tool look for agent 'seer' failed (ProcessEnded: the isolated pack's process is not "
        "running); its listed description is served")
