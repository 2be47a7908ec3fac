"""The audit record: what one decision (a call, a read, a prompt get) is, as ``toolcrib_audit`` plugins get it and
as the audit log (``toolcrib.default_plugins.audit``) writes it, one JSON line each. The pipeline hands each
decision as a tuple (``Logged``) to an ``AuditSink``; formatting waits until something reads it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from json.encoder import encode_basestring
from typing import Any, Protocol, runtime_checkable

Logged = tuple[float, str, str, str, str, str, float, bool, Any, Any, str | None, Any]
"""(time, agent, kind, name, decision, by, seconds, is_error, arguments or None, identity or None, call id or
None, notes or None: what the tool itself added to its record, ``Context.note``)."""


@runtime_checkable
class AuditSink(Protocol):
    """What takes decisions as they are made, as they are (the built-in audit log, whose writer thread formats
    them), instead of through ``toolcrib_audit``'s records: the host hands the pipeline its own (a pack is heard
    through ``toolcrib_audit`` only). ``log_decision`` must not block."""

    def log_decision(self, decision: Logged) -> None: ...


def record(decision: Logged) -> dict[str, Any]:
    """A decision as the audit record ``toolcrib_audit`` plugins get."""
    at, agent, kind, name, verdict, by, seconds, is_error, arguments, identity, call_id, notes = decision
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
    if notes is not None:
        out["notes"] = notes
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


def line(decision: Logged) -> str:
    """The JSON line of a decision: ``record``'s, written field by field (the writer's time goes here); the
    duration is written with three decimals ("12.000" where ``record`` has 12.0)."""
    at, agent, kind, name, verdict, by, seconds, is_error, arguments, identity, call_id, notes = decision
    text = (f'{{"time": "{_time(at)}", "agent": {_text(agent)}, "kind": "{kind}", "{kind}": {_text(name)}, '
            f'"decision": "{verdict}", "by": {_text(by)}, "duration_ms": {seconds * 1000:.3f}, '
            f'"is_error": {"true" if is_error else "false"}')
    if call_id is not None:
        text += f', "call_id": "{call_id}"'
    if identity is not None:
        text += f', "identity": {_dumps(identity)}'
    if arguments is not None:
        text += f', "arguments": {_dumps(arguments)}'
    if notes is not None:
        text += f', "notes": {_dumps(notes)}'
    return text + "}\n"


def _line_or_note(decision: Logged) -> str:
    """The decision's line; where its arguments or its notes cannot be written (their repr raised), the line says
    so in their place."""
    try:
        return line(decision)
    except BaseException:  # a pack's object must not cost the other lines, whatever it raises
        pass
    parts = list(decision)
    for i in (8, 11):  # the arguments, the notes
        try:
            _dumps(parts[i])
        except BaseException as exc:
            parts[i] = {"(not written)": f"{type(exc).__name__}: {exc}"}
    return line(tuple(parts))
