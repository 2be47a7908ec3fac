"""The audit log: one JSON line per decision (a call, a read, a prompt get), written to ``[host] audit_log``.

The call pipeline hands each decision to ``AuditLog.add`` as a tuple; a writer thread of the log's own turns it
into the JSON line and writes it, so a call pays for a queue put, not for formatting and a write (other plugins get
the same records through ``toolcrib_audit``). Lines reach the file in the order of the decisions, a few
milliseconds after them (the writer gathers what comes in ``BATCH_SECONDS`` and writes it at once, flushed);
``close`` writes whatever is still queued.
"""

from __future__ import annotations

import atexit
import json
import logging
import queue
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

from toolcrib.hookspecs import hookimpl

log = logging.getLogger(__name__)

BATCH_SECONDS = 0.005  # how long the writer lets decisions gather before it writes them

Decision = tuple[float, str, str, str, str, str, float, bool, Any, Any, str | None]
"""(time, agent, kind, name, decision, by, seconds, is_error, arguments or None, identity or None, call id or
None)."""


class AuditLog:
    """Appends each decision to a file as one JSON line (the file is opened on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._queue: queue.SimpleQueue[Decision | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._lock = threading.Lock()

    def add(self, decision: Decision) -> None:
        """Queue one decision for the writer thread."""
        if self._writer is None:
            with self._lock:
                if self._writer is None:
                    self._writer = threading.Thread(target=self._write, name="toolcrib-audit", daemon=True)
                    self._writer.start()
                    atexit.register(self.close)  # a process that ends without closing its host loses no line
        self._queue.put(decision)

    @hookimpl
    def toolcrib_audit(self, record: Mapping[str, Any]) -> None:
        """Not used by the pipeline (which calls ``add``): kept so the log is a plugin like the others."""

    def _write(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            file = self.path.open("a", encoding="utf-8")
        except OSError as exc:
            log.error("audit log %s cannot be opened, its lines are lost until it can: %s", self.path, exc)
            file = None
        closing = False
        while not closing:
            batch = [self._queue.get()]  # wait for one, then let a few more come: one wake-up per batch, not per
            time.sleep(BATCH_SECONDS)    # call, keeps the writer from taking the interpreter on every call
            while not self._queue.empty():
                batch.append(self._queue.get())
            if None in batch:
                closing = True
            if file is None:
                continue
            try:
                file.write("".join(_line_or_note(item) for item in batch if item is not None))
                file.flush()
            except OSError as exc:
                log.error("audit log %s: %d lines not written: %s", self.path, len(batch), exc)
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                log.error("audit log %s: closing failed: %s", self.path, exc)

    def close(self) -> None:
        """Write what is queued, then close the file (a later ``add`` opens it again)."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            atexit.unregister(self.close)
            self._queue.put(None)
            writer.join()


def record(decision: Decision) -> dict[str, Any]:
    """A decision as the audit record ``toolcrib_audit`` plugins get."""
    at, agent, kind, name, verdict, by, seconds, is_error, arguments, identity, call_id = decision
    out: dict[str, Any] = {
        "time": _time(at),
        "agent": agent,
        "kind": kind,
        kind: name,
        "decision": verdict,
        "by": by,
        "duration_ms": round(seconds * 1000, 3),
        "is_error": is_error,
    }
    if call_id is not None:
        out["call_id"] = call_id
    if identity is not None:
        out["identity"] = identity
    if arguments is not None:
        out["arguments"] = arguments
    return out


_moment: tuple[int, str] = (-1, "")  # the last millisecond formatted and its text (one tuple: threads share it)


def _time(at: float) -> str:
    """ISO 8601 in UTC to the millisecond, as ``datetime.isoformat(timespec="milliseconds")`` writes it."""
    global _moment
    ms = int(at * 1000)
    known = _moment
    if known[0] != ms:
        second, fraction = divmod(ms, 1000)
        text = f"{datetime.fromtimestamp(second, UTC).strftime('%Y-%m-%dT%H:%M:%S')}.{fraction:03d}+00:00"
        known = _moment = (ms, text)
    return known[1]


_dumps = json.JSONEncoder(ensure_ascii=False, default=repr).encode
_text = encode_basestring  # a str as a JSON string (what _dumps writes for one, without its type dispatch)


def line(decision: Decision) -> str:
    """The JSON line of a decision: ``record``'s, written field by field (the writer's time goes here); the
    duration is written with three decimals ("12.000" where ``record`` has 12.0)."""
    at, agent, kind, name, verdict, by, seconds, is_error, arguments, identity, call_id = decision
    text = (f'{{"time": "{_time(at)}", "agent": {_text(agent)}, "kind": "{kind}", "{kind}": {_text(name)}, '
            f'"decision": "{verdict}", "by": {_text(by)}, "duration_ms": {seconds * 1000:.3f}, '
            f'"is_error": {"true" if is_error else "false"}')
    if call_id is not None:
        text += f', "call_id": "{call_id}"'
    if identity is not None:
        text += f', "identity": {_dumps(identity)}'
    if arguments is not None:
        text += f', "arguments": {_dumps(arguments)}'
    return text + "}\n"


def _line_or_note(decision: Decision) -> str:
    """The decision's line; if its arguments cannot be written (their repr raised), the line says so instead."""
    try:
        return line(decision)
    except BaseException as exc:  # a pack's argument object must not cost the other lines, whatever it raises
        return line((*decision[:8], {"(not written)": f"{type(exc).__name__}: {exc}"}, decision[9], decision[10]))


__all__ = ["AuditLog", "line", "record"]
