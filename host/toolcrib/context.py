"""What a tool sees of the world: the availability context and the handler ``Context``."""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio.from_thread
from pydantic import BaseModel

from toolcrib.errors import ToolError
from toolcrib.fastschema import json_schema_of

if TYPE_CHECKING:
    from toolcrib.answers import Deny
    from toolcrib.reach import CallCapabilities, Delegate, Server
    from toolcrib.view import AgentView

# The chain of agents whose runs led to the call running now (sub-agents), the calling agent last.
CHAIN: ContextVar[tuple[str, ...]] = ContextVar("toolcrib_agent_chain", default=())
# What the running conversation has been given (a skill loaded, ...), where the host can tell a conversation: an MCP
# session that lasts (stdio, stateful HTTP on 2025-11-25), a sub-agent's run. None elsewhere.
CONVERSATION: ContextVar[set[Any] | None] = ContextVar("toolcrib_conversation", default=None)

SEARCHING = ("toolcrib__search_tools", "toolcrib__call_tool")  # the tools that find and call the rest (tool_search)
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


@dataclass(frozen=True, slots=True)
class AvailabilityContext:
    """Given to a tool's ``is_available`` (and ``describe``) when an agent's view is built (never per call).

    ``capabilities`` holds the names that are true for the agent's model under ``[models.<id>]``,
    so a vision tool checks ``"vision" in ctx.capabilities``.
    """

    agent: str
    model: str | None
    capabilities: frozenset[str]
    settings: Any
    mode: str = "default"
    workspace: Path | None = None  # the root of the agent's file tools
    _permits: Callable[[str, str], bool] | None = field(default=None, repr=False)

    def permits(self, dimension: str, name: str) -> bool:
        """Whether the agent's rules give it ``name`` of ``dimension`` (``"skills"``, ``"subagents"``, ``"mcps"``,
        ``"plugins"``): the host's one decision, as ``Context.permits`` asks it during a call."""
        return self._permits is not None and self._permits(dimension, name)


Approver = Callable[[str, str, Mapping[str, Any], str], Awaitable["bool | Deny | None"]]
"""What a front end offers for ``ask`` approvals: ``(agent, tool, arguments, message) -> True/False`` (or a
``Deny``), or None when it cannot ask anyone (MCP: elicitation; the CLI: the terminal)."""


class ClientChannel(Protocol):
    """What a front end (MCP) offers a running call: progress and log messages to the client.

    A channel may also have ``async def sample(self, request: dict) -> dict``: one turn of the client's model,
    taking MCP's ``sampling/createMessage`` params and answering its result, both as wire dicts (camelCase).
    Sub-agents run on it; ``Context.sample`` reaches it. And ``async def remember(kind, compute)``, for a front end
    that makes one call several times (``Context.remember``).

    And ``held(message: str | None)``: told when the call starts waiting for an operator's approval (the message
    says so) and when it stops (None), for a front end whose client asks where a call stands (an MCP task).

    A front end that runs a call for an agent whose view it does not have (an isolated pack's process, which runs
    its calls in a view of its own: ``toolcrib.supply.mcp.pack_calls``) names that agent in ``calling_agent`` and
    answers ``permits(dimension, name) -> bool`` for it.
    """

    async def progress(self, progress: float, total: float | None, message: str | None) -> None: ...

    async def log(self, level: str, message: str, logger: str | None) -> None: ...


@dataclass(frozen=True, slots=True)
class Elicitation:
    """What the user did with a form (``Context.elicit``): ``action`` is ``"accept"`` (then ``content`` holds the
    answers, by field), ``"decline"`` or ``"cancel"``."""

    action: str
    content: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Form:
    """A question for ``Context.ask``: a form for the user to fill in (MCP elicitation, form mode); ``schema`` as
    ``Context.elicit`` takes it. Its answer is an ``Elicitation``."""

    message: str
    schema: Mapping[str, Any] | type[BaseModel]

    def wire(self) -> dict[str, Any]:
        schema = self.schema
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            schema = json_schema_of(schema, "validation")
        return {"method": "elicitation/create",
                "params": {"mode": "form", "message": self.message, "requestedSchema": dict(schema)}}


@dataclass(frozen=True, slots=True)
class Sample:
    """A question for ``Context.ask``: one turn of the client's model (MCP sampling), as ``Context.sample`` takes
    it. Its answer is the model's message (``role``, ``content``, ``model``, ``stopReason``)."""

    messages: list[dict[str, Any]]
    max_tokens: int = 1024
    system_prompt: str | None = None

    def wire(self) -> dict[str, Any]:
        params: dict[str, Any] = {"messages": self.messages, "maxTokens": self.max_tokens}
        if self.system_prompt is not None:
            params["systemPrompt"] = self.system_prompt
        return {"method": "sampling/createMessage", "params": params}


@dataclass(frozen=True, slots=True)
class Roots:
    """A question for ``Context.ask``: the client's roots (MCP ``roots/list``: the folders or files the user has
    shared). Its answer is a list of roots, each a dict with ``uri`` and maybe ``name``."""

    def wire(self) -> dict[str, Any]:
        return {"method": "roots/list", "params": {}}


Question = Form | Sample | Roots


class _Done:
    """An already-finished awaitable, returned when a sync handler's call has been carried out in place."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield

    def __repr__(self) -> str:
        return "<done>"


_DONE = _Done()


@dataclass(slots=True)
class Context:
    """Injected into a handler that has a parameter annotated ``toolcrib.Context``; never part of the schema.

    Async handlers ``await ctx.report_progress(1, 10)``; sync handlers (run in a worker thread) call the
    same methods without ``await``: the call is carried out before it returns.
    """

    agent: str
    tool: str
    settings: Any
    workspace: Path
    logger: logging.Logger
    _channel: ClientChannel | None = field(default=None, repr=False)
    _loop_thread: int = field(default_factory=threading.get_ident, repr=False)
    _view: AgentView | None = field(default=None, repr=False)  # the calling agent's view
    _approver: Approver | None = field(default=None, repr=False)
    _cancelled: bool = field(default=False, repr=False)  # set from the event loop, read by the handler's thread
    _rules: Any = field(default=None, repr=False)  # the call's argument rules (permissions.CallRules), if any
    _call: Any = field(default=None, repr=False)  # the call (toolcrib.runner.Call), for what ``note`` adds
    # while a sync handler runs inline on the event loop: what it asked of its client, sent once it returns
    # (``held_messages``)
    _held: list[Awaitable[None]] | None = field(default=None, repr=False)

    def note(self, **fields: Any) -> None:
        """Add ``fields`` to this call's audit record, under ``"notes"`` (JSON values): what the tool found or
        decided that its arguments do not say. ``toolcrib__search_tools`` notes the names it found. A later note
        of one field replaces the earlier; outside a pipeline call (a test's context), nothing is kept."""
        call = self._call
        if call is not None:
            call.notes = {**(call.notes or {}), **fields}

    def check_rules(self, **arguments: Any) -> None:
        """Hold the agent's argument rules for this tool against a value the handler is about to act on that the
        call itself did not name, as if the call had named it: each hop of a redirect, a path a command resolves
        to. ``ctx.check_rules(url=next_url)`` raises ``ToolError`` when a rule denies it, or when it would need an
        approval the call did not get (the model may then call again with that value, and be asked)."""
        if self._rules is None:
            return
        verdict, rule, _ = self._rules.check(arguments)
        if verdict in ("ok", "approve"):
            return
        shown = ", ".join(f"{name}={value!r}" for name, value in arguments.items())
        if verdict == "deny":
            by = f"rule {rule.text!r}" if rule is not None else "no allow rule matches it"
            raise ToolError(f"Permission denied: {self.tool} went on to {shown}, which the agent's permissions deny "
                            f"({by}).")
        raise ToolError(f"{self.tool} went on to {shown}, which needs approval (ask rule {rule.text!r}); call "
                        f"{self.tool} again with it to be asked.")

    @property
    def cancelled(self) -> bool:
        """True once the call has ended without this handler: it timed out, or the client cancelled it. A sync
        handler (its worker thread cannot be stopped from outside) that works for long should check it and
        return, so the worker is free again; what it returns then is discarded."""
        return self._cancelled

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> Awaitable[None]:
        """Tell the client how far the call has come (MCP progress notification when the client asked)."""
        if self._channel is None:
            self.logger.debug("progress %s/%s %s", progress, total, message or "")
            return _DONE
        return self._dispatch(lambda: self._channel.progress(progress, total, message))  # type: ignore[union-attr]

    def log(self, level: str, message: str) -> Awaitable[None]:
        """Send a log message to the client (MCP logging); it also goes to the host's log."""
        if level not in LOG_LEVELS:
            raise ValueError(f"log level must be one of {', '.join(LOG_LEVELS)}, not {level!r}")
        self.logger.log(_PY_LEVELS.get(level, logging.ERROR), "%s", message)
        if self._channel is None:
            return _DONE
        return self._dispatch(lambda: self._channel.log(level, message, self.logger.name))  # type: ignore[union-attr]

    async def sample(
        self,
        messages: list[dict[str, Any]],
        *,
        system_prompt: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int = 1024,
    ) -> dict[str, Any]:
        """One turn of the client's model (MCP sampling; async handlers only): ``messages`` and ``tools`` in
        MCP's wire shapes; returns the model's message (``role``, ``content``, ``model``, ``stopReason``).
        A ``ToolError`` says so when the client offers no model."""
        sample = getattr(self._channel, "sample", None)
        if sample is None:
            raise ToolError("This needs the client's model, and the client offers none (it does not support MCP "
                            "sampling).")
        request: dict[str, Any] = {"messages": messages, "maxTokens": max_tokens}
        if system_prompt is not None:
            request["systemPrompt"] = system_prompt
        if tools:
            request["tools"] = tools
        reply: dict[str, Any] = await sample(request)
        return reply

    # -- what the call may reach on behalf of its agent: each asks the host's one decision ------------------------

    @property
    def _reach(self) -> CallCapabilities | None:
        """What the view lends its calls (``toolcrib.reach.CAPABILITIES``), or None outside an agent's view."""
        return self._view.reach if self._view is not None else None

    def permits(self, dimension: str, name: str) -> bool:
        """Whether this call's agent may have ``name`` of ``dimension``: ``"skills"`` (a skill), ``"subagents"``
        (another agent to hand a task to; never itself, nor one of the chain of runs that led here), ``"mcps"``
        (an upstream server), ``"plugins"`` (a pack)."""
        asked = getattr(self._channel, "permits", None)
        if asked is not None:  # the caller's own rules, where they are not this process's (an isolated pack)
            return bool(asked(dimension, name))
        reach = self._reach
        return reach is not None and reach.permits(self, dimension, name)

    def subagent(self, name: str) -> Delegate | None:
        """Another agent this call's agent may hand a task to now, or None (not permitted, itself, back along the
        chain, or no such agent: alike). See ``toolcrib.reach.Delegate``; sub-agent runs use it."""
        reach = self._reach
        return reach.subagent(self, name) if reach is not None else None

    @property
    def conversation(self) -> set[Any] | None:
        """What this call's conversation has been given so far, for tools that give a thing once (``load_skill``):
        a set to add keys to, the same for every call of one MCP session that lasts (stdio, stateful HTTP on
        2025-11-25) or one sub-agent run; None where the host cannot tell a conversation (2026-07-28 and stateless
        requests, the Python API)."""
        return CONVERSATION.get()

    def search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """The tools this call's agent sees that best match ``query`` (``AgentView.search``), without the tools
        that search and call for it; empty outside an agent's call. ``toolcrib.search.SearchError`` for a bad
        query."""
        view = self._view
        if view is None:
            return []
        found = view.search(query, k + len(SEARCHING))
        return [tool for tool in found if tool["name"] not in view.searching_names][:k]

    def itself(self, exclude: Iterable[str] = ()) -> Delegate | None:
        """This call's agent as a temporary sub-agent of the call: the same view and permissions (never wider),
        without the tools named in ``exclude``. Skill sub-agents (``toolcrib__call_skill_sub_agent``) run on it;
        None outside an agent's call."""
        reach = self._reach
        return reach.itself(self, frozenset(exclude)) if reach is not None else None

    def server(self, name: str) -> Server | None:
        """A lazy upstream server this call's agent may load, or None (not permitted, not lazy, or no such server:
        alike). See ``toolcrib.reach.Server``."""
        reach = self._reach
        return reach.server(self, name) if reach is not None else None

    async def remember(self, kind: str, compute: Callable[[], Awaitable[Any]]) -> Any:
        """``await compute()`` once per call, whatever the front end does: one that makes a call several times to
        finish it (MCP 2026-07-28's round trips) gets the value an earlier round recorded instead of doing the work
        again. ``kind`` names what it is (a tool result, ...); the value must be JSON. Async handlers only."""
        remember = getattr(self._channel, "remember", None)
        if remember is None:
            return await compute()
        return await remember(kind, compute)

    async def elicit(self, message: str, schema: Mapping[str, Any] | type[BaseModel]) -> Elicitation:
        """Ask the user to fill in a form (MCP elicitation, form mode; async handlers only): ``schema`` is a JSON
        Schema of a flat object (strings, numbers, integers, booleans, enums, with ``default`` where useful) or a
        pydantic model of one. Returns what the user did: ``accept`` (with ``content``), ``decline`` or
        ``cancel``. Works in both protocol eras (on 2026-07-28 the call makes a round trip and is replayed, never
        re-run past this point). A ``ToolError`` says so when the client cannot ask."""
        ask = getattr(self._channel, "elicit", None)
        if ask is None:
            raise ToolError("This needs the user's answer, and nobody can be asked here (no MCP client that "
                            "supports elicitation).")
        if isinstance(schema, type) and issubclass(schema, BaseModel):
            schema = json_schema_of(schema, "validation")
        answer: dict[str, Any] = await ask(message, dict(schema))
        content = answer.get("content")
        return Elicitation(str(answer.get("action", "cancel")), dict(content) if isinstance(content, dict) else None)

    def can_ask(self, question: Question) -> bool:
        """Whether this call's client can answer ``question`` (it declared the MCP capability it takes): a tool
        that can do without an answer asks only what it can be given."""
        can = getattr(self._channel, "can", None)
        if can is not None:
            return bool(can(question.wire()))
        wanted = {Form: "elicit", Sample: "sample"}.get(type(question))
        return wanted is not None and getattr(self._channel, wanted, None) is not None

    async def ask(self, questions: Mapping[str, Question]) -> dict[str, Any]:
        """Put several questions to the client at once, each under a key the tool chooses (``Form``: an
        ``Elicitation``; ``Sample``: the model's message; ``Roots``: a list of roots), and answer them by key
        (async handlers only). On MCP 2026-07-28 they are one round's ``inputRequests`` under these very keys (the
        call is made again with the answers and replayed, never re-run past this point); on 2025-11-25 they are
        asked one after another. A question the client cannot answer (it did not declare the capability) fails
        the call: on 2026-07-28 with the protocol's missing-capability error, elsewhere with a ``ToolError``; ask
        ``can_ask`` first where the tool can do without. Keys starting ``toolcrib`` are the host's own."""
        if not questions:
            return {}
        for key in questions:
            if not isinstance(key, str) or not key or key.startswith("toolcrib"):
                raise ValueError(f"a question's key must be a non-empty string not starting 'toolcrib', not {key!r}")
        ask = getattr(self._channel, "ask", None)
        if ask is not None:
            answers: dict[str, Any] = await ask({key: q.wire() for key, q in questions.items()})
        else:
            answers = {}
            for key, question in questions.items():
                answers[key] = await self._ask_one(question)
        return {key: _answer(question, answers[key]) for key, question in questions.items()}

    async def _ask_one(self, question: Question) -> Any:
        """One question, through a channel that asks one thing at a time (or none)."""
        if isinstance(question, Form):
            found = await self.elicit(question.message, question.schema)
            return {"action": found.action, "content": found.content}
        if isinstance(question, Sample):
            return await self.sample(question.messages, system_prompt=question.system_prompt,
                                     max_tokens=question.max_tokens)
        raise ToolError("This needs the client's roots, and there is no MCP client to ask here.")

    async def elicit_url(self, message: str, url: str, elicitation_id: str) -> Elicitation:
        """Send the user to a page (MCP elicitation, URL mode: a sign-in, a payment, anything the client must not
        see the answers of; async handlers only): ``url`` must be ``https:``. Returns whether the user agreed to
        open it (``accept``), or ``decline`` / ``cancel``; the page's outcome comes back out of band (MCP's
        ``notifications/elicitation/complete`` names ``elicitation_id``). Both protocol eras, as ``elicit``. A
        ``ToolError`` says so when the client cannot send its user to a page."""
        if not url.startswith("https://"):
            raise ValueError(f"a URL to send the user to must be https:, not {url[:80]!r}")
        ask = getattr(self._channel, "elicit_url", None)
        if ask is None:
            raise ToolError("This needs the user to open a page, and nobody can be asked here (no MCP client that "
                            "supports URL elicitation).")
        answer: dict[str, Any] = await ask(message, url, elicitation_id)
        return Elicitation(str(answer.get("action", "cancel")))

    def debug(self, message: str) -> Awaitable[None]:
        return self.log("debug", message)

    def info(self, message: str) -> Awaitable[None]:
        return self.log("info", message)

    def warning(self, message: str) -> Awaitable[None]:
        return self.log("warning", message)

    def error(self, message: str) -> Awaitable[None]:
        return self.log("error", message)

    def _dispatch(self, make: Callable[[], Awaitable[None]]) -> Awaitable[None]:
        if threading.get_ident() == self._loop_thread:
            if self._held is not None:  # a sync handler on the loop (inline): sent in order once it returns
                self._held.append(make())
                return _DONE
            return make()

        async def run() -> None:
            await make()

        anyio.from_thread.run(run)
        return _DONE


_PY_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def _answer(question: Question, answer: Any) -> Any:
    """A channel's wire answer to ``question``, as ``Context.ask`` gives it."""
    if isinstance(question, Form):
        content = answer.get("content")
        return Elicitation(str(answer.get("action", "cancel")), dict(content) if isinstance(content, dict) else None)
    if isinstance(question, Roots):
        return [dict(root) for root in answer.get("roots", [])]
    return dict(answer)


def held_messages(ctx: Context | None, held: list[Awaitable[None]]) -> Callable[[], None]:
    """While a sync handler runs on the event loop (inline): what it asks of its client through ``ctx`` (progress,
    log messages) goes to ``held``, to be sent in order once it returns, rather than sent from the loop it holds.
    Answers what ends that."""
    if ctx is None:
        return _nothing
    ctx._held = held

    def end() -> None:
        ctx._held = None

    return end


def _nothing() -> None:
    pass
