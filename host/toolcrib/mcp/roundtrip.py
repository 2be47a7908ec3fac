"""MCP 2026-07-28's round trips: a call that must ask the client something ends with "input required", and the
client makes it again with the answer and the state it was given. Here: the exceptions that end a round, the
journal a call carries between rounds, and the seal (an HMAC) that binds that state to exactly one call.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

from toolcrib.errors import Suspend, ToolError


class ApprovalPending(Suspend):
    """Raised by an approver that must ask the user whether the call may run."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ElicitPending(Suspend):
    """Raised by a channel that must ask the user (``request``: ``elicitation/create`` params, form mode)."""

    def __init__(self, request: Mapping[str, Any]) -> None:
        super().__init__("the user must answer first")
        self.request = request


class SamplePending(Suspend):
    """Raised by a channel that must ask the client's model for one turn (``request``: sampling params)."""

    def __init__(self, request: Mapping[str, Any]) -> None:
        super().__init__("the client's model must answer first")
        self.request = request


class Journal:
    """What earlier rounds of one call got, in order: model turns (``sample``) and the results of the tool calls
    sub-agents made (``tool``). A run is deterministic given these, so a call made again replays them and goes
    on live where they end (MCP 2026-07-28, where each model turn is a round trip of the whole call).

    A nested run (a sub-agent's own ``run_agent`` call) records its turns as they happen and its result only when
    it ends, so its result follows its turns: replaying it means running it again over its recorded turns, then
    taking its recorded result.
    """

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self._next = 0

    def next_kind(self) -> str | None:
        """``sample`` or ``tool`` for the next recorded event; None once the record is used up."""
        if self._next >= len(self.events):
            return None
        event = self.events[self._next]
        return next(iter(event)) if isinstance(event, dict) and len(event) == 1 else "?"

    def replay(self, kind: str) -> Any:
        """The next recorded event, which must be of ``kind``; None once the record is used up."""
        found = self.next_kind()
        if found is None:
            return None
        if found != kind:
            raise ToolError("The run cannot be continued: the config changed between its rounds. Start it again.")
        self._next += 1
        return self.events[self._next - 1][kind]

    def record(self, kind: str, value: Any) -> None:
        """Note what just happened: appended when live, or matched to the record when it was replayed."""
        if self.next_kind() is None:
            self.events.append({kind: value})
            self._next = len(self.events)
        else:
            self.replay(kind)


def seal(key: bytes, agent: str, name: str, arguments: Mapping[str, Any], payload: Mapping[str, Any]) -> str:
    """A request state carrying ``payload``, bound (HMAC) to exactly this agent, tool and arguments."""
    body = base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode("ascii")
    return f"{body}.{mac(key, agent, name, arguments, body)}"


class Unverifiable(Exception):
    """A round-trip state that this server cannot verify: sealed with another key, altered, or another call's."""


UNVERIFIABLE = ("The call could not go on: the state it carried from its earlier round could not be verified (it was "
                "sealed by a server with another key, changed, or given for another call). Replicas behind a "
                "balancer must all have the same TOOLCRIB_STATE_SECRET. Nothing of the call was run again; make the "
                "call anew.")


def open_state(key: bytes, agent: str, name: str, arguments: Mapping[str, Any],
               request_state: str | None) -> dict[str, Any] | None:
    """The payload of a request state sealed for exactly this call; None when there is none. ``Unverifiable`` when
    there is one this server cannot verify: it never counts as no state, which would start the call over."""
    if not request_state:
        return None
    body, _, given = request_state.rpartition(".")
    try:
        if not (body and hmac.compare_digest(given.encode("ascii"), mac(key, agent, name, arguments, body).encode())):
            raise Unverifiable
        payload = json.loads(base64.urlsafe_b64decode(body.encode("ascii")))
    except (UnicodeEncodeError, ValueError, TypeError):
        raise Unverifiable from None
    if not isinstance(payload, dict):
        raise Unverifiable
    return payload


def mac(key: bytes, agent: str, name: str, arguments: Mapping[str, Any], body: str) -> str:
    """The seal of ``body`` for exactly this agent, tool and arguments."""
    message = json.dumps([agent, name, arguments, body], sort_keys=True, separators=(",", ":"), default=str)
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()
