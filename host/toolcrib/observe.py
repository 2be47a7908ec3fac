"""What an operator sees of a serving toolcrib: Prometheus metrics (``prometheus_client``), one log line per
request (text or JSON), and OpenTelemetry spans per request (``opentelemetry-api``: free when no SDK is set up).

Metrics are reported by the call pipeline where it writes the audit log, so a call is counted exactly where it is
decided. Labels are bounded: a name an agent asks for that it does not see is counted as
``(unknown)``, never as the name it sent. A call only notes its observation; the notes are folded into the
counters whenever the registry is collected (a scrape), so calls do not pay prometheus_client's locks.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

requests_log = logging.getLogger("toolcrib.requests")

UNKNOWN = "(unknown)"
DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
FOLD_AT = 10_000  # observations noted before they are folded in without waiting for a scrape (bounds the memory)


class Metrics:
    """The metrics of one serving process. It outlives reloads (a new host reports into the same counters)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        metrics = self

        class Registry(CollectorRegistry):
            """Folds the noted observations in before anything is collected: no reader ever sees them late."""

            def collect(self) -> Iterator[Any]:
                metrics.fold()
                yield from super().collect()

        self._noted: deque[tuple[str, str, str, str, bool, float]] = deque()
        self.registry = Registry(auto_describe=True)
        self.calls = Counter("toolcrib_tool_calls", "Tool calls, by agent, tool and outcome (ok, error, denied, "
                             "limited, invalid, unknown)", ["agent", "tool", "outcome"], registry=self.registry)
        self.duration = Histogram("toolcrib_tool_call_duration_seconds", "How long tool calls took, by agent",
                                  ["agent"], buckets=DURATION_BUCKETS, registry=self.registry)
        self.reads = Counter("toolcrib_item_requests", "Resource reads and prompt gets, by agent, kind and outcome",
                             ["agent", "kind", "outcome"], registry=self.registry)
        self.reloads = Counter("toolcrib_reloads", "Config reloads, by result (ok, rejected)", ["result"],
                               registry=self.registry)
        started = Gauge("toolcrib_start_time_seconds", "When this process started serving (Unix time)",
                        registry=self.registry)
        started.set(time.time())
        self._call_counters: dict[tuple[str, str, str], Any] = {}
        self._read_counters: dict[tuple[str, str, str], Any] = {}
        self._timers: dict[str, Any] = {}
        self._sessions: Callable[[], Mapping[str, int]] = dict
        self._upstreams: Callable[[], Mapping[str, bool]] = dict
        self.registry.register(_Live(self))

    def watch(self, *, sessions: Callable[[], Mapping[str, int]] | None = None,
              upstreams: Callable[[], Mapping[str, bool]] | None = None) -> None:
        """Where the gauges read from when scraped: open sessions by agent, upstream servers up or not."""
        if sessions is not None:
            self._sessions = sessions
        if upstreams is not None:
            self._upstreams = upstreams

    def observe(self, agent: str, kind: str, name: str, decision: str, is_error: bool, seconds: float) -> None:
        """One decision of the call pipeline (a call, a read, a prompt get), noted to be counted at the next
        collection (a deque's append is safe from any thread)."""
        self._noted.append((agent, kind, name, decision, is_error, seconds))
        if len(self._noted) >= FOLD_AT:
            self.fold()

    def fold(self) -> None:
        """Count the noted observations."""
        noted = self._noted
        while noted:
            try:
                self._count(*noted.popleft())
            except IndexError:  # another thread folded the last one meanwhile
                return

    def _count(self, agent: str, kind: str, name: str, decision: str, is_error: bool, seconds: float) -> None:
        outcome = ("error" if is_error else "ok") if decision == "allowed" else decision
        if kind != "tool":
            key = (agent, kind, outcome)
            counter = self._read_counters.get(key)
            if counter is None:
                counter = self._read_counters[key] = self.reads.labels(agent, kind, outcome)
            counter.inc()
            return
        tool = name if decision != "unknown" else UNKNOWN
        call_key = (agent, tool, outcome)
        calls = self._call_counters.get(call_key)
        if calls is None:  # labels() takes a lock and builds a key: done once per series, not once per call
            calls = self._call_counters[call_key] = self.calls.labels(agent, tool, outcome)
        calls.inc()
        timer = self._timers.get(agent)
        if timer is None:
            timer = self._timers[agent] = self.duration.labels(agent)
        timer.observe(seconds)

    def render(self) -> tuple[bytes, str]:
        """The exposition (and its content type) for ``GET /metrics``."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _Live:
    """Gauges read at scrape time: nothing to keep up to date between scrapes."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        sessions = GaugeMetricFamily("toolcrib_http_sessions", "Open HTTP sessions, by agent", labels=["agent"])
        for agent, count in sorted(self.metrics._sessions().items()):
            sessions.add_metric([agent], count)
        yield sessions
        upstream = GaugeMetricFamily("toolcrib_upstream_up", "Upstream MCP servers: 1 connected, 0 not",
                                     labels=["server"])
        for server, up in sorted(self.metrics._upstreams().items()):
            upstream.add_metric([server], 1 if up else 0)
        yield upstream

    def describe(self) -> Iterable[Any]:
        return []


# -- logs --------------------------------------------------------------------------------------------------------


MAX_LOGGED = 200  # characters of one client-sent value (a tool name, a URI, a session id) in a log line or span
MAX_MESSAGE = 16_384  # characters of one log message (a traceback is kept whole, after it)
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(value: str, limit: int = MAX_LOGGED) -> str:
    """A value a client sent, fit for one log line or span name: control characters (line breaks among them)
    escaped, so no client can write a line of its own into the operator's log, and cut at ``limit`` characters
    (with how many were left out)."""
    if len(value) > limit:
        value = f"{value[:limit]}...(+{len(value) - limit} characters)"
    return _UNPRINTABLE.sub(lambda m: m.group(0).encode("unicode_escape").decode("ascii"), value)


class TextFormatter(logging.Formatter):
    """``LEVEL logger: message``, one line per message whatever it holds: control characters in the message are
    escaped and it is cut at ``MAX_MESSAGE`` characters (a traceback that follows keeps its own lines)."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message, MAX_MESSAGE)
        return super().formatMessage(record)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the fields a record carries (``extra``)."""

    _STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage()[:MAX_MESSAGE],
        }
        line.update({k: v for k, v in record.__dict__.items() if k not in self._STANDARD and not k.startswith("_")})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str, format: str, requests: bool = False) -> None:
    """The serving process's logs on stderr: ``text`` (the default) or ``json``, at ``level``; a line per request
    (``toolcrib.requests``) only with ``requests`` (``serve --log-requests``) or at ``debug``: written for every
    request, it cost 15-20% of a busy HTTP server's throughput, and the audit log records every decision anyway."""
    handler = logging.StreamHandler()
    if format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    logging.basicConfig(level=getattr(logging, level.upper()), handlers=[handler], force=True)
    requests_log.setLevel(logging.NOTSET if requests or level == "debug" else logging.WARNING)


def tracing() -> bool:
    """Whether an OpenTelemetry SDK is set up (the API alone answers every span with a no-op)."""
    from opentelemetry import trace
    from opentelemetry.trace import ProxyTracerProvider

    return not isinstance(trace.get_tracer_provider(), ProxyTracerProvider)


def request_span(agent: str, method: str, name: str | None, meta: Any) -> tuple[str, Any, dict[str, str]]:
    """A request's span, as every path that answers one makes it: its name (the method, then the tool, prompt or
    resource it names, escaped and capped: the client's), the caller's trace it continues (a W3C ``traceparent``
    in the request's ``_meta``; else None) and its attributes."""
    from opentelemetry.propagate import extract

    shown = printable(name) if name is not None else None
    parent = extract(meta) if isinstance(meta, dict) and "traceparent" in meta else None
    attributes = {"mcp.method.name": printable(method), "toolcrib.agent": agent}
    if shown is not None:
        attributes["gen_ai.tool.name" if method == "tools/call" else "toolcrib.item"] = shown
    return (f"{printable(method)} {shown}" if shown else printable(method)), parent, attributes


def log_request(agent: str, method: str, name: str | None, outcome: str, started: float,
                session: str | None) -> None:
    """The one line a request leaves (logger ``toolcrib.requests``, level info): its agent, method, target (the
    tool, prompt or resource it names), outcome, duration and session."""
    if not requests_log.isEnabledFor(logging.INFO):
        return
    duration = round((time.perf_counter() - started) * 1000, 3)
    method, name = printable(method), printable(name) if name is not None else None
    session = printable(session) if session is not None else None
    fields = {"agent": agent, "method": method, "target": name, "outcome": outcome, "duration_ms": duration,
              "session": session}
    requests_log.info("%s %s%s %s %.1f ms", agent, method, f" {name}" if name else "", outcome, duration,
                      extra=fields)
