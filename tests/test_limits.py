"""Rate and concurrency limits per agent and per tool (issue 17): the token bucket on a clock the test moves, the
answer a limited call gets (Python API and MCP), calls in flight, the metrics, reloads, and config mistakes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import anyio
import pytest
from mcp import Client

import toolcrib
from conftest import config_from, problems
from packs import FILES, MISC, Pack
from toolcrib import ToolResult
from toolcrib.host import Host
from toolcrib.limits import LimitBook, RateError, compile_limits, parse_rate
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState
from toolcrib.observe import Metrics

CONFIG = """
[agents.a]
[agents.a.permissions]
plugins = { allow = ["files", "misc", "boom"] }
tools = { allow = ["*"] }
[agents.a.limits]
rate = "3/minute"
[agents.a.limits.tools."misc__slow*"]
in_flight = 2
[agents.a.limits.tools."files__*"]
rate = "1/second"
[agents.a.limits.tools."boom__*"]
in_flight = 1

[agents.b]
[agents.b.permissions]
plugins = { allow = ["misc"] }
tools = { allow = ["*"] }
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def host(text: str = CONFIG, clock: Clock | None = None, metrics: Metrics | None = None) -> Host:
    return Host(config_from(text), plugins={"files": FILES, "misc": MISC, "boom": BOOM}, autoload=False,
                env={}, limits=LimitBook(clock or Clock()), metrics=metrics)


@toolcrib.tool
async def explode() -> str:
    """Always fails."""
    raise RuntimeError("boom")


BOOM = Pack(explode)


def texts(result: ToolResult) -> str:
    return "".join(str(block.get("text", "")) for block in result.content)


def test_a_rate_is_a_burst_then_one_call_per_share_of_the_period() -> None:
    clock = Clock()
    served = host(clock=clock)

    async def main() -> None:
        for _ in range(3):
            assert texts(await served.call("a", "misc__add", {"a": 1, "b": 1})) == "2"
        refused = await served.call("a", "misc__add", {"a": 1, "b": 1})
        assert refused.is_error
        assert texts(refused) == "Rate limited: agent 'a' may make at most 3 calls a minute; try again in 20 s."
        clock.now += 19.5
        assert texts(await served.call("a", "misc__add", {"a": 1, "b": 1})).endswith("try again in 1 s.")
        clock.now += 0.5
        assert texts(await served.call("a", "misc__add", {"a": 1, "b": 1})) == "2"  # recovered
        assert texts(await served.call("b", "misc__add", {"a": 1, "b": 1})) == "2"  # b has no limit of its own

    anyio.run(main)


def test_a_tool_limit_counts_its_own_calls_and_the_agents_as_well() -> None:
    clock = Clock()
    served = host(clock=clock)

    async def main() -> None:
        assert texts(await served.call("a", "files__read", {"path": "x"})) == "contents of x"
        refused = await served.call("a", "files__touch", {"path": "x"})
        assert texts(refused) == ("Rate limited: agent 'a' may make at most 1 calls of files__* a second; try again "
                                  "in 1 s.")
        clock.now += 1.0
        assert texts(await served.call("a", "files__touch", {"path": "x"})) == "touched x"
        # the agent's own 3/minute counted those two calls: one left
        assert texts(await served.call("a", "misc__add", {"a": 1, "b": 2})) == "3"
        assert texts(await served.call("a", "misc__add", {"a": 1, "b": 2})).startswith("Rate limited: agent 'a' "
                                                                                       "may make at most 3 calls a")

    anyio.run(main)


def test_calls_in_flight_are_bounded_and_a_refused_one_does_not_count() -> None:
    served = host(CONFIG.replace('rate = "3/minute"', 'rate = "100/minute"'))

    async def main() -> list[str]:
        answers: list[str] = []

        async def one() -> None:
            answers.append(texts(await served.call("a", "misc__slow", {"seconds": 0.3})))

        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(one)
                await anyio.sleep(0.05)  # the first two are running when the third comes
        answers.append(texts(await served.call("a", "misc__slow", {"seconds": 0.0})))  # they have ended: room again
        return answers

    answers = anyio.run(main)
    limited = ("Rate limited: agent 'a' may make at most 2 calls of misc__slow* at once; try again when one of them "
               "has finished.")
    assert sorted(answers[:3]) == sorted(["done", "done", limited])
    assert answers[3] == "done"


def test_a_failing_call_gives_its_place_back() -> None:
    served = host(CONFIG.replace('rate = "3/minute"', 'rate = "100/minute"'))

    async def main() -> None:
        for _ in range(3):  # in_flight = 1: a place a raising call kept would shut the tool after one call
            result = await served.call("a", "boom__explode", {})
            assert texts(result) == "Tool boom__explode failed with an internal error; the host's log has the details."
        for _ in range(3):  # nor a call refused for its arguments (misc__slow* has in_flight = 2)
            result = await served.call("a", "misc__slow", {"seconds": "not a number"})
            assert texts(result).startswith("Invalid arguments for misc__slow:\n- seconds: ")
        assert texts(await served.call("a", "misc__slow", {"seconds": 0})) == "done"

    anyio.run(main)


def test_over_mcp_a_limited_call_is_an_error_result_and_counts_in_the_metrics() -> None:
    metrics = Metrics()
    clock = Clock()
    state = ServingState(host(clock=clock, metrics=metrics))
    state.metrics = metrics

    async def main() -> list[tuple[bool, str]]:
        found = []
        async with Client(build_server(state, "a"), cache=None) as client:
            for _ in range(4):
                result = await client.call_tool("misc__add", {"a": 2, "b": 2})
                found.append((result.is_error, result.content[0].text))
        return found

    assert anyio.run(main) == [(False, "4")] * 3 + [
        (True, "Rate limited: agent 'a' may make at most 3 calls a minute; try again in 20 s.")]
    sample = metrics.registry.get_sample_value("toolcrib_tool_calls_total",
                                               {"agent": "a", "tool": "misc__add", "outcome": "limited"})
    assert sample == 1.0


def test_the_audit_log_says_which_limit(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    served = host(f'[host]\naudit_log = "{log}"\n' + CONFIG.replace("3/minute", "1/minute"))
    anyio.run(served.call, "a", "misc__add", {"a": 1, "b": 1})
    anyio.run(served.call, "a", "misc__add", {"a": 1, "b": 1})
    served.close()
    lines = log.read_text().splitlines()
    assert '"decision": "limited", "by": "limit \'*\'"' in lines[1]
    assert '"decision": "allowed"' in lines[0]


def test_a_reload_keeps_the_counts_of_unchanged_limits_and_starts_changed_ones_afresh(tmp_path: Path) -> None:
    from toolcrib.config import load_config

    path = tmp_path / "toolcrib.toml"
    path.write_text(CONFIG.replace("3/minute", "1/minute"))
    book = LimitBook(Clock())  # serving_state keeps one book for every host it builds, as here

    def build() -> Host:
        return Host(load_config(path), plugins={"files": FILES, "misc": MISC}, autoload=False, env={}, limits=book)

    state = ServingState(build(), make_host=build)

    async def main() -> list[bool]:
        found = [(await state.host.call("a", "misc__add", {"a": 1, "b": 1})).is_error]
        path.write_text(CONFIG.replace("3/minute", "1/minute") + "\n# touched\n")
        await state.reload()
        found.append((await state.host.call("a", "misc__add", {"a": 1, "b": 1})).is_error)  # same limit: still used
        path.write_text(CONFIG.replace("3/minute", "2/minute"))
        await state.reload()
        found.append((await state.host.call("a", "misc__add", {"a": 1, "b": 1})).is_error)  # a new limit
        return found

    assert anyio.run(main) == [False, True, False]


@pytest.mark.parametrize(("text", "count", "seconds"), [
    ("60/minute", 60, 60.0), ("1/second", 1, 1.0), (" 10 / hour ", 10, 3600.0), ("5/DAY", 5, 86400.0),
    ("2/s", 2, 1.0), ("7/min", 7, 60.0)])
def test_rates_parse(text: str, count: int, seconds: float) -> None:
    rate = parse_rate(text)
    assert (rate.count, rate.seconds) == (count, seconds)


@pytest.mark.parametrize(("text", "message"), [
    ("60", "expected calls per period, such as \"60/minute\" (second, minute, hour, day), got '60'"),
    ("60/fortnight", "expected calls per period, such as \"60/minute\" (second, minute, hour, day), got "
                     "'60/fortnight'"),
    ("-1/minute", "expected calls per period, such as \"60/minute\" (second, minute, hour, day), got '-1/minute'"),
    ("0/minute", "'0/minute': allow at least one call per period (to forbid a tool, deny it)"),
])
def test_bad_rates_say_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(RateError) as info:
        parse_rate(text)
    assert str(info.value) == message


def test_limit_mistakes_name_the_key() -> None:
    found = problems(textwrap.dedent("""
        [agents.a.limits]
        rate = "lots"
        [agents.a.limits.tools."misc__*"]
        [agents.a.limits.tools."fs__write(/etc/**)"]
        in_flight = 1
    """))
    assert found == [
        "error: conf.toml: agents.a.limits.rate: expected calls per period, such as \"60/minute\" (second, minute, "
        "hour, day), got 'lots'",
        "error: conf.toml: agents.a.limits.tools.\"misc__*\": expected rate = \"N/minute\" or in_flight = N (or both)",
        "error: conf.toml: agents.a.limits.tools.\"fs__write(/etc/**)\": limits count calls by tool name only",
    ]


def test_a_limit_of_no_calls_at_once_is_a_schema_error() -> None:
    assert problems("[agents.a.limits]\nin_flight = 0\n") == [
        "error: conf.toml: agents.a.limits.in_flight: Input should be greater than 0, got an integer (0)"]


def test_a_call_goes_through_the_moment_a_whole_token_is_back() -> None:
    """The bucket's edge, on a clock the test holds: at exactly one token a call goes through, a hair before it
    does not (and is told how long to wait)."""
    from toolcrib.config import LimitsConfig

    clock = Clock()
    book = LimitBook(clock)
    (limit,) = compile_limits("a", LimitsConfig(rate="2/second"))
    assert isinstance(book.enter("a", [limit]), list) and isinstance(book.enter("a", [limit]), list)
    clock.now += 0.25  # half a token back (sums of powers of two: exact in floating point)
    refused = book.enter("a", [limit])
    assert not isinstance(refused, list) and (refused.text, refused.retry_after) == (
        "Rate limited: agent 'a' may make at most 2 calls a second; try again in 1 s.", 0.25)
    clock.now += 0.25
    assert isinstance(book.enter("a", [limit]), list)
    single = LimitBook(clock)
    (one,) = compile_limits("b", LimitsConfig(rate="1/minute"))
    assert isinstance(single.enter("b", [one]), list)  # a full bucket of one lets its one call through
