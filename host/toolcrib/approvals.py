"""Approvals out of band: a call held by an ``ask`` rule waits for an operator (``[agents.X] approvals``), who
answers on the operator endpoint (``toolcrib approvals``), or by a signed link a webhook was sent.

Each pending approval is bound to exactly its call: a digest of the agent, the tool, the final arguments (after
hooks and curation) and the config version; an answer names that digest, so no answer meant for one call (or for
what a call looked like before) lets another run. An answer is taken once; a call that waited past its expiry is
denied. A waiting call holds no worker thread: it awaits an event on the event loop.

The desk is the serving process's (one per ``ServingState``, opened by the HTTP front end that serves the operator
endpoint): ``Desk`` keeps the pending approvals in memory; with ``[cluster]``, ``toolcrib.mcp.fleet.RedisDesk``
keeps them on Redis, where every replica lists and answers them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

log = logging.getLogger(__name__)

ANSWERED = "approved"  # what an answer did, as the endpoint reports it; or one of the refusals below
MAX_PENDING = 32  # calls one agent may have waiting for an operator at once; more are denied at once
NOT_PENDING = "no such pending approval: it was answered, it expired, or its call ended"
WRONG_DIGEST = ("the approval's digest differs: it was shown for another call, or for this call as it was before; "
                "list the pending approvals again")


def new_id() -> str:
    """An approval's id: 16 URL-safe random characters (96 bits), never a leading "-", which
    ``toolcrib approvals approve ID`` would take for an option."""
    made = secrets.token_urlsafe(12)
    while made.startswith("-"):
        made = secrets.token_urlsafe(12)
    return made


_TEXT, _NUMBER = (str, "a string"), ((int, float), "a number")
_RECORD: dict[str, tuple[Any, str]] = {  # what a pending approval's record holds, and of what kind
    "id": _TEXT, "agent": _TEXT, "tool": _TEXT, "arguments": (dict, "an object"), "rule": _TEXT, "call_id": _TEXT,
    "version": _TEXT, "created": _NUMBER, "expires": _NUMBER}


@dataclass
class Pending:
    """One call waiting for an operator: what the operator is shown, and what an answer must name."""

    id: str
    agent: str
    principal: Any  # who is calling, as the front end authenticated them (an identity dict), or None
    tool: str
    arguments: dict[str, Any]
    rule: str  # what asked: "ask rule 'fs__write_file'", "hook <name>: <message>"
    call_id: str
    version: str  # the config version the call runs under
    created: float
    expires: float
    digest: str = field(init=False)
    _done: anyio.Event = field(default_factory=anyio.Event, repr=False)
    _answer: tuple[bool, str] | None = field(default=None, repr=False)  # (approved, by whom)

    def __post_init__(self) -> None:
        self.digest = digest(self.agent, self.tool, self.arguments, self.version)

    def record(self) -> dict[str, Any]:
        """What a shared store keeps of it (``from_record`` makes it again)."""
        return {"id": self.id, "agent": self.agent, "principal": self.principal, "tool": self.tool,
                "arguments": self.arguments, "rule": self.rule, "call_id": self.call_id, "version": self.version,
                "created": self.created, "expires": self.expires}

    @classmethod
    def from_record(cls, record: Any) -> Pending:
        """The pending approval a shared store kept (``record``'s), or ``ValueError`` naming what is wrong with a
        record that is not one (another writer's, or a damaged one)."""
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        for key, (kinds, what) in _RECORD.items():
            if not isinstance(record.get(key), kinds) or isinstance(record.get(key), bool):
                raise ValueError(f"its {key!r} is missing or not {what}")
        return cls(record["id"], record["agent"], record.get("principal"), record["tool"], record["arguments"],
                   record["rule"], record["call_id"], record["version"], record["created"], record["expires"])


    def public(self) -> dict[str, Any]:
        """The JSON an operator is shown (the endpoint's list, the webhook's body)."""
        return {"id": self.id, "agent": self.agent, "principal": self.principal, "tool": self.tool,
                "arguments": self.arguments, "rule": self.rule, "call_id": self.call_id or None,
                "config_version": self.version, "digest": self.digest,
                "created": _iso(self.created), "expires": _iso(self.expires)}


def digest(agent: str, tool: str, arguments: Mapping[str, Any], version: str) -> str:
    """What an answer is bound to: SHA-256 of the call's agent, tool, arguments (canonical JSON) and config
    version."""
    text = json.dumps([agent, tool, arguments, version], sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def who(principal: Any) -> str:
    """Who a held call acts for, in words (the console and ``toolcrib approvals`` say it alike): ``token $TOK_A``,
    ``alice (OAuth, client cli, issuer https://id.example)``; "-" for nobody known."""
    if not isinstance(principal, dict) or not principal:
        return "-"
    if principal.get("kind") == "token" and principal.get("credential"):
        return f"token {principal['credential']}"
    parts = [f"{key} {principal[key]}" for key in ("client", "issuer") if principal.get(key)]
    name = principal.get("subject") or principal.get("credential") or principal.get("kind") or "?"
    kind = "OAuth" if principal.get("kind") == "oauth" else str(principal.get("kind", ""))
    return f"{name} ({', '.join(filter(None, [kind, *parts]))})"


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


class DeskUnreachable(Exception):
    """The shared store of pending approvals did not answer: the call is not held, and not run (fail closed)."""


class DeskFull(Exception):
    """The agent already has ``MAX_PENDING`` calls waiting for an operator: this one is not held (an agent must not
    fill the operator's list, nor the host's memory, with calls)."""


class Desk:
    """The pending approvals of one process, and how they are answered."""

    def __init__(self, link_key: bytes | None = None) -> None:
        self._pending: dict[str, Pending] = {}
        self._ended: dict[str, float] = {}  # console sessions signed out -> until when their cookie would be good
        self.link_key = link_key  # signs the links a webhook is sent (None: no links)
        self.notify: list[Callable[[Pending], Awaitable[None]]] = []  # told of each new pending approval

    async def pending(self) -> list[Pending]:
        """What waits now, oldest first (an expired one is gone)."""
        now = time.time()
        return [p for p in self._pending.values() if p.expires > now]

    async def end_session(self, session_id: str, until: float) -> None:
        """A console session signed out: its cookie opens nothing from now on (it would have until ``until``)."""
        now = time.time()
        self._ended = {k: v for k, v in self._ended.items() if v > now}
        self._ended[session_id] = until

    async def session_ended(self, session_id: str) -> bool:
        return self._ended.get(session_id, 0.0) > time.time()

    async def get(self, approval_id: str) -> Pending | None:
        found = self._pending.get(approval_id)
        return found if found is not None and found.expires > time.time() else None

    async def ask(self, agent: str, principal: Any, tool: str, arguments: Mapping[str, Any], rule: str,
                  call_id: str, version: str, timeout: float) -> tuple[bool | None, str]:
        """Hold the call until an operator answers or ``timeout`` seconds pass: (True, by) approved, (False, by)
        denied, (None, "") no answer in time. ``DeskFull`` when the agent has ``MAX_PENDING`` calls waiting."""
        pending = await self._open(agent, principal, tool, arguments, rule, call_id, version, timeout)
        self._pending[pending.id] = pending
        try:
            await self._tell(pending)
            with anyio.move_on_after(timeout):
                await pending._done.wait()
        finally:
            self._pending.pop(pending.id, None)
        if pending._answer is None:
            return None, ""
        return pending._answer

    async def _open(self, agent: str, principal: Any, tool: str, arguments: Mapping[str, Any], rule: str,
                    call_id: str, version: str, timeout: float) -> Pending:
        """A new pending approval, unless the agent has ``MAX_PENDING`` already (``DeskFull``)."""
        if sum(p.agent == agent for p in await self.pending()) >= MAX_PENDING:  # (counted and stored with no await
            raise DeskFull                                                     # between: one process, one loop)
        now = time.time()
        return Pending(new_id(), agent, principal, tool, dict(arguments), rule, call_id, version, now, now + timeout)

    async def _tell(self, pending: Pending) -> None:
        """Tell ``notify`` of a new pending approval; one that fails is logged and costs the call nothing."""
        for notify in self.notify:
            try:
                await notify(pending)
            except Exception:
                log.exception("telling of pending approval %s failed", pending.id)

    async def answer(self, approval_id: str, approve: bool, given_digest: str, by: str) -> str:
        """Answer a pending approval, naming the digest the operator was shown: ``ANSWERED`` or why not."""
        pending = await self.get(approval_id)
        if pending is None or pending._answer is not None:
            return NOT_PENDING
        if not hmac.compare_digest(given_digest.encode(), pending.digest.encode()):
            return WRONG_DIGEST
        pending._answer = (approve, by)
        del self._pending[approval_id]  # taken: a second answer finds nothing
        pending._done.set()
        return ANSWERED

    # -- signed links ----------------------------------------------------------------------------------------

    def signature(self, pending: Pending, decision: str) -> str:
        """The signature of a one-time link that answers ``pending`` with ``decision`` ("approve" or "deny")."""
        assert self.link_key is not None
        message = f"{pending.id}|{decision}|{pending.digest}".encode()
        return hmac.new(self.link_key, message, hashlib.sha256).hexdigest()

    async def check_link(self, approval_id: str, decision: str, signature: str) -> Pending | None:
        """The pending approval a link answers, if its signature is this desk's for it; else None."""
        pending = await self.get(approval_id)
        if pending is None or self.link_key is None or decision not in ("approve", "deny"):
            return None
        if not hmac.compare_digest(signature.encode(), self.signature(pending, decision).encode()):
            return None
        return pending


def link_key(operator_token: str) -> bytes:
    """The key links are signed with, derived from the operator's token (a link never carries the token)."""
    return hmac.new(operator_token.encode(), b"toolcrib approval links", hashlib.sha256).digest()


__all__ = ["ANSWERED", "MAX_PENDING", "NOT_PENDING", "WRONG_DIGEST", "Desk", "DeskFull", "DeskUnreachable", "Pending",
           "digest", "link_key"]
