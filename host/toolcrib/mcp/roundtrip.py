"""MCP 2026-07-28's round trips: a call that must ask the client something ends with "input required", and the
client makes it again with the answer and the state it was given. Here: the exceptions that end a round, the
journal a call carries between rounds, and the seal that binds that state to exactly one call (``StateSeal``).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import mcp_types as types
from mcp.server.request_state import AESGCMRequestStateCodec, InvalidRequestState
from pydantic import ValidationError

from toolcrib.errors import Suspend, ToolError


class ApprovalPending(Suspend):
    """Raised by an approver that must ask the user whether the call may run."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ElicitPending(Suspend):
    """Raised by a channel that must ask the user (``request``: ``elicitation/create`` params, form or URL mode)."""

    def __init__(self, request: Mapping[str, Any]) -> None:
        super().__init__("the user must answer first")
        self.request = request


class SamplePending(Suspend):
    """Raised by a channel that must ask the client's model for one turn (``request``: sampling params)."""

    def __init__(self, request: Mapping[str, Any]) -> None:
        super().__init__("the client's model must answer first")
        self.request = request


class AskPending(Suspend):
    """Raised by a channel that must put questions to the client (``questions``: key -> ``{"method", "params"}``,
    under the keys the tool chose); ``given``: the answers this round already brought, carried to the next."""

    def __init__(self, questions: Mapping[str, Mapping[str, Any]], given: Mapping[str, Any]) -> None:
        super().__init__("the client must answer first")
        self.questions = questions
        self.given = given


class MissingCapability(Suspend):
    """Raised on MCP 2026-07-28 by a channel asked for what the client did not declare it can give (``required``:
    the ``ClientCapabilities`` it would need, as the protocol's -32021 error names them)."""

    ends = True

    def __init__(self, message: str, required: Mapping[str, Any]) -> None:
        super().__init__(message)
        self.message = message
        self.required = required


# What answers each kind of question: the first model is the one a refusal names.
ANSWERS: dict[str, tuple[type[Any], ...]] = {
    "elicitation/create": (types.ElicitResult,),
    "sampling/createMessage": (types.CreateMessageResult, types.CreateMessageResultWithTools),
    "roots/list": (types.ListRootsResult,),
}


def answer_to(method: str, given: Any) -> dict[str, Any] | None:
    """``given`` as a wire answer to a question of ``method``; None when it is none (absent, or an answer to
    another kind of question), so the question is asked again."""
    if given is None:
        return None
    if isinstance(given, types.Result):
        given = given.model_dump(by_alias=True, mode="json", exclude_none=True)
    for model in ANSWERS[method]:
        try:
            model.model_validate(given, by_name=False)
        except ValidationError:
            continue
        return dict(given)
    return None


class PagesFirst(Suspend):
    """Raised by a channel whose client is to open pages before the call can be made (an upstream server's -32042,
    passed on as that error: ``message`` and the ``pages``, URL-mode elicitation params)."""

    ends = True

    def __init__(self, message: str, pages: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.message = message
        self.pages = pages


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


STATE_TTL = 600.0  # seconds a round-trip state may be carried before it is refused
_FORMAT = "toolcrib/state/1"
_FUTURE_SKEW = 60.0  # seconds a replica's clock may run ahead of another's


class Unverifiable(Exception):
    """A round-trip state that this server cannot verify: sealed with another key, altered, expired, or another
    call's or another principal's."""


UNVERIFIABLE = ("The call could not go on: the state it carried from its earlier round could not be verified (it was "
                "sealed by a server with another key, changed, expired, or given for another call or by another "
                "client). Replicas behind a balancer must all have the same TOOLCRIB_STATE_SECRET. Nothing of the "
                "call was run again; make the call anew.")


class StateSeal:
    """What a 2026-07-28 client carries between the rounds of one call, sealed: encrypted and authenticated with
    AES-256-GCM (the mcp SDK's ``AESGCMRequestStateCodec``: the client can neither read nor change it), bound to
    the agent, the tool, a digest of its arguments and the principal that made the call (the OAuth issuer, client
    and subject, or the static token's variable), and valid for ``ttl`` seconds. ``keys[0]`` seals and every key
    opens, so a secret can be rotated without failing calls in flight: ``new,old``, then ``new`` after a TTL."""

    def __init__(self, keys: Sequence[bytes], ttl: float = STATE_TTL) -> None:
        self._codec = AESGCMRequestStateCodec(list(keys))
        self.ttl = ttl

    def seal(self, agent: str, name: str, arguments: Mapping[str, Any], principal: str | None,
             payload: Mapping[str, Any]) -> str:
        now = time.time()
        envelope = {"v": _FORMAT, "bind": _binding(agent, name, arguments), "principal": principal,
                    "iat": now, "exp": now + self.ttl, "payload": payload}
        return self._codec.seal(json.dumps(envelope, separators=(",", ":")).encode())

    def horizon(self) -> float:
        """When a state opened now has surely expired (seconds since the epoch): how long to remember it."""
        return time.time() + self.ttl + _FUTURE_SKEW

    def open(self, agent: str, name: str, arguments: Mapping[str, Any], principal: str | None,
             request_state: str | None) -> dict[str, Any] | None:
        """The payload of a state sealed for exactly this call and principal; None when there is none.
        ``Unverifiable`` when there is one this server cannot verify: it never counts as no state, which would
        start the call over."""
        if not request_state:
            return None
        try:
            envelope = json.loads(self._codec.unseal(request_state))
        except (InvalidRequestState, ValueError, TypeError):
            raise Unverifiable from None
        now = time.time()
        if not isinstance(envelope, dict) or envelope.get("v") != _FORMAT:
            raise Unverifiable
        exp, iat = envelope.get("exp"), envelope.get("iat")
        if not isinstance(exp, float | int) or not isinstance(iat, float | int) or exp < now or \
                iat > now + _FUTURE_SKEW:
            raise Unverifiable
        if envelope.get("bind") != _binding(agent, name, arguments) or envelope.get("principal") != principal:
            raise Unverifiable
        payload = envelope.get("payload")
        if not isinstance(payload, dict):
            raise Unverifiable
        return payload


class OnceUnreachable(Exception):
    """The store that remembers which approvals were used does not answer: an approval cannot be used then."""


class Once(Protocol):
    """Where the approvals a call carries between rounds are used up: ``claim(token, until)`` is true the first
    time a token is claimed (until it expires: ``until``, seconds since the epoch), false every time after, on
    every replica that shares the store. Raises ``OnceUnreachable`` when it cannot tell."""

    async def claim(self, token: str, until: float) -> bool: ...


class MemoryOnce:
    """``Once`` for one process: the tokens claimed and not yet expired (a token is worth nothing after its state
    expires, so this holds at most a state TTL's worth of approvals)."""

    def __init__(self) -> None:
        self._claimed: set[str] = set()
        self._expiry: list[tuple[float, str]] = []

    async def claim(self, token: str, until: float) -> bool:
        now = time.time()
        while self._expiry and self._expiry[0][0] < now:
            self._claimed.discard(heapq.heappop(self._expiry)[1])
        if token in self._claimed:
            return False
        self._claimed.add(token)
        heapq.heappush(self._expiry, (until, token))
        return True


REUSED = ("The call was not run: the approval it carries was already used (an approval lets one call run, once). "
          "Make the call again to be asked anew.")
CONFIG_CHANGED = ("The call was not run: it was approved under a config that has changed since. Make the call again "
                  "to be asked anew.")
ONCE_UNREACHABLE = ("The call was not run: the shared store that makes sure an approval is used only once is "
                    "unreachable. Try again shortly.")


def _binding(agent: str, name: str, arguments: Mapping[str, Any]) -> str:
    """A digest of exactly this agent, tool and arguments."""
    text = json.dumps([agent, name, arguments], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
