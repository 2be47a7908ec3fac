"""Rate and concurrency limits on an agent's calls (``[agents.<name>.limits]``), per replica.

A limit counts the calls it covers: all of the agent's, or those of the tools a pattern matches (together). A rate
is a token bucket: ``60/minute`` allows a burst of 60, then one more call each second. ``in_flight`` bounds the
calls running at once. A call over any limit is not run: it is answered at once with an ``isError`` result that
says which limit and when to try again (a call that waited would hold a client and a worker for nothing).

The counts live in a book that outlives reloads (``ServingState`` hands the same one to each new host): a limit the
reload did not change keeps its count, a changed one starts afresh. ``LimitBook`` counts one process's calls, in
memory; with ``[cluster]``, ``toolcrib.cluster.RedisLimitBook`` counts every replica's on Redis. The pipeline knows
only the contract both keep (``Limiter``): ``admit`` a call through its limits (a ``Lease`` on its places, or a
``Refusal``), and ``leave`` when the lease is given back.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from toolcrib import patterns

if TYPE_CHECKING:
    from toolcrib.config import LimitConfig, LimitsConfig

_RATE = re.compile(r"\s*(\d+)\s*/\s*([a-z]+)\s*")
_PERIODS = {"second": 1.0, "sec": 1.0, "s": 1.0, "minute": 60.0, "min": 60.0, "m": 60.0, "hour": 3600.0, "h": 3600.0,
            "day": 86400.0, "d": 86400.0}


class RateError(ValueError):
    """A rate that is not ``N/period``."""


@dataclass(frozen=True)
class Rate:
    count: int
    seconds: float


def parse_rate(text: str) -> Rate:
    """``"60/minute"`` -> Rate(60, 60.0). Periods: second, minute, hour, day (or s, min, h, d)."""
    match = _RATE.fullmatch(text.lower())
    if match is None or match.group(2) not in _PERIODS:
        raise RateError(f"expected calls per period, such as \"60/minute\" (second, minute, hour, day), got {text!r}")
    count = int(match.group(1))
    if count < 1:
        raise RateError(f"{text!r}: allow at least one call per period (to forbid a tool, deny it)")
    return Rate(count, _PERIODS[match.group(2)])


def _per(rate: Rate) -> str:
    return {1.0: "a second", 60.0: "a minute", 3600.0: "an hour", 86400.0: "a day"}[rate.seconds]


@dataclass
class _Counter:
    """One limit's state: a token bucket (for a rate) and the calls running (for in_flight)."""

    rate: Rate | None
    in_flight: int | None
    checked: float
    tokens: float = 0.0
    running: int = 0

    def __post_init__(self) -> None:
        if self.rate is not None:  # a full bucket
            self.tokens = float(self.rate.count)

    def wait(self, now: float) -> float | None:
        """Seconds until this limit lets one more call through (0: now), or None when only calls ending will."""
        if self.in_flight is not None and self.running >= self.in_flight:
            return None
        if self.rate is None:
            return 0.0
        self.tokens = min(float(self.rate.count),
                          self.tokens + (now - self.checked) * self.rate.count / self.rate.seconds)
        self.checked = now
        return max(0.0, (1.0 - self.tokens) * self.rate.seconds / self.rate.count)  # 0 once a whole token is in


@dataclass(frozen=True)
class Limit:
    key: tuple[str, str, str | None, int | None]  # (agent, pattern or "", rate text, in_flight)
    pattern: patterns.Pattern | None
    rate: Rate | None
    in_flight: int | None

    def covers(self, tool: str) -> bool:
        return self.pattern is None or self.pattern.matches(tool)

    def describe(self, agent: str) -> str:
        calls = f"calls of {self.pattern.text}" if self.pattern is not None else "calls"
        parts = []
        if self.rate is not None:
            parts.append(f"{self.rate.count} {calls} {_per(self.rate)}")
        if self.in_flight is not None:
            parts.append(f"{self.in_flight} {calls} at once")
        return f"agent {agent!r} may make at most " + " and ".join(parts)


@dataclass(frozen=True)
class Refusal:
    """A call refused by a limit: what the model is told, the limit (its pattern, or "*"), and the seconds after
    which a call would pass (None: when a running call ends)."""

    text: str
    limit: str
    retry_after: float | None


class Limiter(Protocol):
    """Where the counts of limits live: this process (``LimitBook``) or a store every replica shares."""

    async def admit(self, agent: str, limits: list[Limit]) -> Refusal | Lease:
        """Take one call through every limit covering it (a lease on its places), or, when one is full, none (a
        refusal that says which and when)."""
        ...

    def leave(self, token: Any) -> Awaitable[None] | None:
        """Give back the places a lease held (``Lease`` calls it once, from any thread). On the event loop's thread
        it may answer an awaitable that gives them back; from another thread it must see to it itself."""
        ...


class LimitBook:
    """The counts of every limit, kept across reloads (one lock: a few dict and float operations per call)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._counters: dict[tuple[str, str, str | None, int | None], _Counter] = {}
        self._lock = threading.Lock()
        self._clock = clock

    def counter(self, limit: Limit) -> _Counter:
        with self._lock:
            found = self._counters.get(limit.key)
            if found is None:
                found = self._counters[limit.key] = _Counter(limit.rate, limit.in_flight, checked=self._clock())
            return found

    def enter(self, agent: str, limits: list[Limit]) -> Refusal | list[_Counter]:
        """Take one call through every limit covering it; or, when one is full, none, and say which and when."""
        counted = [(limit, self.counter(limit)) for limit in limits]
        with self._lock:
            now = self._clock()
            for limit, counter in counted:
                wait = counter.wait(now)
                if wait is None or wait > 0:
                    return _refusal(agent, limit, wait)
            counters = [counter for _, counter in counted]
            for counter in counters:
                if counter.rate is not None:
                    counter.tokens -= 1.0
                counter.running += 1
        return counters

    async def admit(self, agent: str, limits: list[Limit]) -> Refusal | Lease:
        entered = self.enter(agent, limits)
        return entered if isinstance(entered, Refusal) else Lease(self, entered)

    def leave(self, counters: list[_Counter]) -> None:
        with self._lock:
            for counter in counters:
                counter.running -= 1

    def usage(self, agent: str) -> list[dict[str, Any]]:
        """The agent's limits as they stand (for the operator's console): per limit, its tool pattern ("*": all
        its calls), the calls running and how many may, and the calls its rate would let through now of its
        burst. A limit no call has met yet is full."""
        now = self._clock()
        found = []
        with self._lock:
            for (owner, pattern, rate, in_flight), counter in self._counters.items():
                if owner != agent:
                    continue
                counter.wait(now)  # brings the bucket up to now
                found.append({"tools": pattern or "*", "running": counter.running, "in_flight": in_flight,
                              "rate": rate, "tokens": None if counter.rate is None else int(counter.tokens),
                              "burst": None if counter.rate is None else counter.rate.count})
        return found


class Lease:
    """The places one call holds in its limits, given back exactly once: when its handler has really ended and the
    call is over. A sync handler's thread cannot be stopped, so one that outlives its call (a timeout, a client
    that gave up) keeps its places until it returns (``start`` and ``end`` in the thread); the pipeline
    ``abandon``s the lease when the call is over, which gives the places back at once unless the handler is still
    running. A handler whose thread had not begun when the call was abandoned never runs (``start`` says so)."""

    __slots__ = ("_book", "_counters", "_lock", "_state")

    def __init__(self, book: Limiter, counters: Any) -> None:
        self._book, self._counters = book, counters
        self._lock = threading.Lock()
        # held -> running -> ended -> released (the usual call), held -> released (abandoned before it ran),
        # running -> orphaned -> released (abandoned while its handler ran on)
        self._state = "held"

    def start(self) -> bool:
        """In the handler's thread, before it runs: whether it may (False: the call was already abandoned)."""
        with self._lock:
            if self._state == "released":
                return False
            self._state = "running"
            return True

    def end(self) -> None:
        """The handler has ended: its places go back when the call is over (at once, if it already is)."""
        with self._lock:
            if self._state == "running":
                self._state = "ended"
                return
            if self._state != "orphaned":
                return
            self._state = "released"
        self._book.leave(self._counters)

    def abandon(self) -> Any:
        """The call is over: give the places back now, unless its handler is still running (it gives them when it
        ends). Answers what the book's ``leave`` does: an awaitable, for a book across the network, to await so
        that the next call finds the places free."""
        with self._lock:
            if self._state == "running":
                self._state = "orphaned"
                return None
            if self._state in ("released", "orphaned"):
                return None
            self._state = "released"
        return self._book.leave(self._counters)


def _refusal(agent: str, limit: Limit, wait: float | None) -> Refusal:
    if wait is None:
        when = "try again when one of them has finished"
    else:
        when = f"try again in {max(1, round(wait + 0.4999))} s"
    return Refusal(f"Rate limited: {limit.describe(agent)}; {when}.",
                   limit.pattern.text if limit.pattern is not None else "*", wait)


def compile_limits(agent: str, config: LimitsConfig | None) -> tuple[Limit, ...]:
    """The agent's limits (the config was checked: rates and patterns parse)."""
    if config is None:
        return ()
    found = []
    rules: list[tuple[str | None, LimitConfig]] = [(None, config), *config.tools.items()]
    for glob, rule in rules:
        if rule.rate is None and rule.in_flight is None:
            continue
        rate = parse_rate(rule.rate) if rule.rate is not None else None
        pattern = patterns.parse("tools", glob) if glob is not None else None
        found.append(Limit((agent, glob or "", rule.rate, rule.in_flight), pattern, rate, rule.in_flight))
    return tuple(found)


__all__ = ["Lease", "LimitBook", "Limiter", "Rate", "RateError", "Refusal", "compile_limits", "parse_rate"]
