"""One agent's view as an MCP server (the SDK's low-level ``Server``), both protocol eras.

toolcrib's own pipeline does all the work: the SDK adds no second validation layer, and its generic tracing
middleware is replaced by toolcrib's own (``observe``: a span and a log line per request, only when something
listens). A hidden or unknown tool gets the protocol error ``-32602 Unknown tool: <name>``, word for word the same
for both; everything else is a result.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import mcp_types as types
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.validation import validate_sampling_tools, validate_tool_use_result_messages, wants_sampling_tools
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp.shared.message import ServerMessageMetadata
from mcp_types import SERVER_INFO_META_KEY
from mcp_types.methods import serialize_server_result
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolcrib.context import CONVERSATION, LOG_LEVELS
from toolcrib.errors import (
    InvalidArgumentsError,
    ToolError,
    UnknownPromptError,
    UnknownResourceError,
    UnknownToolError,
)
from toolcrib.mcp.oauth import IDENTITY, Identity
from toolcrib.mcp.roundtrip import (
    CONFIG_CHANGED,
    ONCE_UNREACHABLE,
    REUSED,
    UNVERIFIABLE,
    ApprovalPending,
    AskPending,
    ElicitPending,
    Journal,
    MissingCapability,
    OnceUnreachable,
    PagesFirst,
    SamplePending,
    Unverifiable,
    answer_to,
)
from toolcrib.mcp.sdk import connection_of
from toolcrib.mcp.sessions import LOG_LEVEL, SUBSCRIPTIONS
from toolcrib.mcp.state import ServingState
from toolcrib.mcp.tasks import EXTENSION as TASKS
from toolcrib.mcp.tasks import TERMINAL, Task, TasksUnavailable, UpdateTaskParams, needs_tasks, speaks_tasks
from toolcrib.observe import log_request, request_span, requests_log, tracing
from toolcrib.uris import normalize
from toolcrib.view import AgentView

log = logging.getLogger("toolcrib.serve")

INSTRUCTIONS = ("Tools, resources and prompts served by toolcrib. Each tool and prompt is named "
                "<namespace>__<name>: its pack or server, then its name.")
# What 2026-07-28 requires of a read (SEP-2549): a resource's contents may change at any read, so none is kept. Lists
# are kept for [host] list_ttl (``_Handlers.listed``). Each is private: what an agent sees depends on its credential
# (and an OAuth token's scopes). For the handshake era the SDK sieves these keys off.
UNCACHED = {"resultType": "complete", "ttlMs": 0, "cacheScope": "private"}

APPROVAL_KEY = "toolcrib_approval"
SAMPLE_KEY = "toolcrib_sample"
ELICIT_KEY = "toolcrib_elicit"
ASKED = {"sample": SAMPLE_KEY, "elicit": ELICIT_KEY}  # what a round asked the client for -> its answer's key
PROMPT_BINDING = "prompts/get "  # a prompt's round-trip state is bound to this and its name (never a tool's)
RESOURCE_NOT_FOUND = -32002  # 2025-11-25's error code for a resource that is not there (hidden ones answer alike)
MAX_STATE_CHARS = 2 * 1024 * 1024  # request state goes back and forth with every round; HTTP bodies cap at 4 MiB

_MODERN = frozenset(MODERN_PROTOCOL_VERSIONS)



class _Channel:
    """Progress, log messages and model turns from a running handler to this request's client.

    On 2026-07-28 a model turn cannot be pushed: the call ends with an input-required result, and the client makes
    it again with the model's answer. ``journal`` carries what earlier rounds of the same call already got (model
    turns, and the results of the tool calls they made), so the retried call replays them instead of doing
    anything twice.
    """

    def __init__(self, ctx: ServerRequestContext[Any, Any], journal: Journal | None = None,
                 answers: Mapping[str, Any] | None = None) -> None:
        self._ctx = ctx
        self.journal = journal
        self.answers = answers or {}  # 2026-07-28: what the client has answered so far, by the keys the tool chose

    @property
    def identity(self) -> dict[str, str] | None:
        """Who the request acts for, as the audit log records it (never the token)."""
        found = identity_of_request(self._ctx)
        return found.record() if found is not None else None

    @property
    def principal(self) -> Identity | None:
        """Who the request acts for, as the front end authenticated them (what policies see)."""
        return identity_of_request(self._ctx)

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        await self._ctx.session.report_progress(progress, total, message)

    async def sample(self, request: dict[str, Any]) -> dict[str, Any]:
        """One turn of the client's model (``sampling/createMessage``): pushed on 2025-11-25 sessions; on
        2026-07-28 replayed from the journal, or asked for by ending the round (``SamplePending``)."""
        ctx = self._ctx
        if self.journal is None and not ctx.session.can_send_request:
            raise ToolError("This needs the client's model, which this connection cannot be asked for (a stateless "
                            "2025-11-25 connection has no back-channel).")
        _check(ctx.session.client_capabilities, {"method": "sampling/createMessage", "params": request},
               self.journal is not None)
        if self.journal is not None:  # 2026-07-28: replay the turns earlier rounds got, then ask for the next
            recorded = self.journal.replay("sample")
            if recorded is not None:
                return dict(recorded)
            raise SamplePending(request)
        # The request whole, as it was asked, its _meta included (which names the server a forwarded one comes
        # from): the SDK's create_message takes the fields but _meta, so the request goes by its send_request,
        # after the checks create_message makes.
        params = types.CreateMessageRequestParams.model_validate(request, by_name=False)
        validate_sampling_tools(ctx.session.client_capabilities, params.tools, params.tool_choice)
        validate_tool_use_result_messages(params.messages)
        answer = types.CreateMessageResultWithTools if wants_sampling_tools(params.tools, params.tool_choice) \
            else types.CreateMessageResult
        try:
            result: types.Result = await ctx.session.send_request(
                types.CreateMessageRequest(params=params), answer,
                metadata=ServerMessageMetadata(related_request_id=ctx.request_id))
        except MCPError as exc:
            raise ToolError(f"The client's model did not answer: {exc.error.message}") from None
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def remember(self, kind: str, compute: Any) -> Any:
        """What an earlier round of this call recorded of ``kind``, else ``compute()``'s value, recorded."""
        if self.journal is None:
            return await compute()
        if self.journal.next_kind() == kind:
            return self.journal.replay(kind)
        value = await compute()
        self.journal.record(kind, value)
        return value

    async def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        """The user's answer to a form (``elicitation/create``): pushed on 2025-11-25 sessions; on 2026-07-28
        replayed from the journal, or asked for by ending the round (``ElicitPending``)."""
        ctx = self._ctx
        return await self._user({"mode": "form", "message": message, "requestedSchema": schema},
                                lambda: ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id))

    async def elicit_url(self, message: str, url: str, elicitation_id: str) -> dict[str, Any]:
        """The user's answer to a page to open (``elicitation/create``, URL mode), as ``elicit`` asks a form."""
        ctx = self._ctx
        return await self._user({"mode": "url", "message": message, "url": url, "elicitationId": elicitation_id},
                                lambda: ctx.session.elicit_url(message, url, elicitation_id,
                                                               related_request_id=ctx.request_id))

    async def _user(self, params: dict[str, Any], push: Callable[[], Awaitable[types.ElicitResult]]) -> dict[str, Any]:
        """An ``elicitation/create`` (``params``) put to the user: ``push()`` on 2025-11-25 sessions; on 2026-07-28
        replayed from the journal, or asked for by ending the round."""
        ctx = self._ctx
        _check(ctx.session.client_capabilities, {"method": "elicitation/create", "params": params},
               self.journal is not None)
        if self.journal is not None:
            recorded = self.journal.replay("elicit")
            if recorded is not None:
                return dict(recorded)
            raise ElicitPending(params)
        if not ctx.session.can_send_request:
            raise ToolError("This needs the user's answer, which this connection cannot ask for (a stateless "
                            "2025-11-25 connection has no back-channel).")
        try:
            result = await push()
        except MCPError as exc:
            raise ToolError(f"The client did not ask the user: {exc.error.message}") from None
        return result.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def elicitation_complete(self, elicitation_id: str) -> None:
        """Tell the client that the page of a URL elicitation is done with (2025-11-25 sessions; a 2026-07-28
        client makes the call again instead)."""
        if self.journal is None and self._ctx.session.can_send_request:
            await self._ctx.session.send_elicit_complete(elicitation_id, related_request_id=self._ctx.request_id)

    def can(self, question: Mapping[str, Any]) -> bool:
        """Whether the client declared what it takes to answer ``question`` (``{"method", "params"}``)."""
        return _lacking(self._ctx.session.client_capabilities, question) is None

    def pages_first(self, message: str, pages: list[dict[str, Any]]) -> None:
        """End the call with the protocol's -32042 (the user is to open ``pages``, then call again), where the
        client can send its user to pages; else return (the call's error result says why)."""
        if all(self.can({"method": "elicitation/create", "params": page}) for page in pages):
            raise PagesFirst(message, pages)

    async def ask(self, questions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """Answers to several questions, by the keys the tool chose: asked one by one on 2025-11-25 sessions; on
        2026-07-28 replayed from the journal, taken from what the client answered, or asked for by ending the
        round (``AskPending``, which carries the answers this round brought)."""
        modern = self.journal is not None
        for question in questions.values():
            _check(self._ctx.session.client_capabilities, question, modern)
        if self.journal is None:
            return {key: await self._push(question) for key, question in questions.items()}
        recorded = self.journal.replay("asked")
        if recorded is not None:
            return dict(recorded)
        answers: dict[str, Any] = {}
        for key, question in questions.items():
            found = answer_to(question["method"], self.answers.get(key))
            if found is not None:
                answers[key] = found
        if len(answers) < len(questions):
            raise AskPending({key: q for key, q in questions.items() if key not in answers}, answers)
        self.journal.record("asked", answers)
        return answers

    async def _push(self, question: Mapping[str, Any]) -> dict[str, Any]:
        """One question, asked of a 2025-11-25 session."""
        params = dict(question.get("params") or {})
        if question["method"] == "elicitation/create":
            return await self.elicit(params["message"], params["requestedSchema"])
        if question["method"] == "sampling/createMessage":
            return await self.sample(params)
        ctx = self._ctx
        if not ctx.session.can_send_request:
            raise ToolError("This needs the client's roots, which this connection cannot be asked for (a stateless "
                            "2025-11-25 connection has no back-channel).")
        try:
            roots = await ctx.session.list_roots()
        except MCPError as exc:
            raise ToolError(f"The client did not give its roots: {exc.error.message}") from None
        return roots.model_dump(by_alias=True, mode="json", exclude_none=True)

    async def log(self, level: str, message: str, logger: str | None) -> None:
        connection = connection_of(self._ctx.session)
        chosen = connection.state.get(LOG_LEVEL) if connection is not None else None
        if chosen is not None and LOG_LEVELS.index(level) < LOG_LEVELS.index(chosen):
            return  # below the level the client set (logging/setLevel)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # logging is deprecated as of 2026-07-28, yet clients still use it
            await self._ctx.session.send_log_message(level, message, logger,  # type: ignore[arg-type]
                                                     related_request_id=self._ctx.request_id)


def _lacking(capabilities: types.ClientCapabilities | None,
             question: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """What keeps the client from answering ``question`` (``{"method", "params"}``): why, and the capabilities it
    would have to declare (as the protocol's -32021 error names them); None when nothing does."""
    method = question["method"]
    if method == "elicitation/create" and (question.get("params") or {}).get("mode") == "url":
        elicitation = capabilities.elicitation if capabilities is not None else None
        if elicitation is not None and elicitation.url is not None:
            return None
        return ("This needs the user to open a page, and the client cannot send its user to one (it does not "
                "support MCP URL elicitation).", {"elicitation": {"url": {}}})
    if method == "elicitation/create":
        if capabilities is not None and capabilities.elicitation is not None:
            return None
        return ("This needs the user's answer, and the client cannot ask for one (it does not support MCP "
                "elicitation).", {"elicitation": {"form": {}}})
    if method == "sampling/createMessage":
        sampling = capabilities.sampling if capabilities is not None else None
        if sampling is None:
            return ("This needs the client's model, and the client offers none (it does not support MCP "
                    "sampling).", {"sampling": {}})
        if (question.get("params") or {}).get("tools") and sampling.tools is None:
            return ("This needs the client's model with tools, and the client's sampling does not take tools.",
                    {"sampling": {"tools": {}}})
        return None
    if capabilities is not None and capabilities.roots is not None:
        return None
    return "This needs the client's roots, and the client shares none (it does not support MCP roots).", {"roots": {}}


def _check(capabilities: types.ClientCapabilities | None, question: Mapping[str, Any], modern: bool) -> None:
    """Refuse a question the client cannot answer: on 2026-07-28 with the protocol's missing-capability error
    (``MissingCapability``), elsewhere with a ``ToolError`` (which the call's result says)."""
    lacking = _lacking(capabilities, question)
    if lacking is None:
        return
    if modern:
        raise MissingCapability(*lacking)
    raise ToolError(lacking[0])


class _TaskChannel:
    """What a call running as a task has of its client: no connection (the request that made the task has been
    answered), so progress becomes the task's status message and a question (a form, a model turn, an approval)
    makes the task ``input_required`` until a ``tasks/update`` answers it."""

    journal = None

    def __init__(self, task: Task, capabilities: types.ClientCapabilities | None, identity: Identity | None) -> None:
        self.task = task
        self.capabilities = capabilities
        self._identity = identity

    @property
    def identity(self) -> dict[str, str] | None:
        return self._identity.record() if self._identity is not None else None

    @property
    def principal(self) -> Identity | None:
        return self._identity

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.task.touch(message=message if message else f"{progress:g} of {total:g}" if total else f"{progress:g}")

    async def log(self, level: str, message: str, logger: str | None) -> None:
        return  # nobody listens: a task's client polls for its status, not for its log

    async def sample(self, request: dict[str, Any]) -> dict[str, Any]:
        _check(self.capabilities, {"method": "sampling/createMessage", "params": request}, False)
        params = types.CreateMessageRequestParams.model_validate(request, by_name=False)
        return await self.task.ask("sampling/createMessage",
                                   params.model_dump(by_alias=True, mode="json", exclude_none=True))

    async def elicit(self, message: str, schema: dict[str, Any]) -> dict[str, Any]:
        _check(self.capabilities, {"method": "elicitation/create"}, False)
        return await self.task.ask("elicitation/create", {"mode": "form", "message": message,
                                                           "requestedSchema": schema})

    async def elicit_url(self, message: str, url: str, elicitation_id: str) -> dict[str, Any]:
        params = {"mode": "url", "message": message, "url": url, "elicitationId": elicitation_id}
        _check(self.capabilities, {"method": "elicitation/create", "params": params}, False)
        return await self.task.ask("elicitation/create", params)

    def can(self, question: Mapping[str, Any]) -> bool:
        return _lacking(self.capabilities, question) is None

    async def ask(self, questions: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """Several questions of the task at once (each under a key of the task's own, as all its questions)."""
        for question in questions.values():
            _check(self.capabilities, question, False)
        found = await asyncio.gather(*(self.task.ask(q["method"], dict(q.get("params") or {}))
                                       for q in questions.values()))
        return dict(zip(questions, found, strict=True))

    async def remember(self, kind: str, compute: Any) -> Any:
        return await compute()  # a task's call runs once, whole

    def held(self, message: str | None) -> None:
        """The call waits for an operator's approval (``message`` says so), or no longer (None)."""
        self.task.message = message
        self.task.touch()

    def approver(self) -> Any:
        """Approvals asked of the client's user, as questions of the task (None: the client cannot be asked)."""
        if self.capabilities is None or self.capabilities.elicitation is None:
            return None

        async def approve(_agent: str, _tool: str, _args: Mapping[str, Any], message: str) -> bool | None:
            answer = await self.task.ask("elicitation/create", {
                "mode": "form", "message": message, "requestedSchema": {"type": "object", "properties": {}}})
            return answer.get("action") == "accept"

        return approve


def _state_of(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
    """The state kept on the connection of a request (which lasts while the client stays connected)."""
    state: dict[str, Any] = connection_of(ctx.session).state
    return state


_CONVERSATIONS: weakref.WeakKeyDictionary[Any, set[Any]] = weakref.WeakKeyDictionary()


def _conversation(session: Any) -> set[Any] | None:
    """What an MCP connection that lasts has been given (gone with the connection; the SDK makes a session object
    per request, around the one connection)."""
    connection = connection_of(session)
    if connection is None:
        return None
    try:
        return _CONVERSATIONS.setdefault(connection, set())
    except TypeError:  # an object that takes no weak reference: no memory rather than a leak
        return None


def identity_of_request(ctx: ServerRequestContext[Any, Any]) -> Identity | None:
    """Who the HTTP request acts for (``toolcrib.mcp.http`` put it in the ASGI scope); None over stdio."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    return scope.get(IDENTITY) if isinstance(scope, dict) else None


def _principal(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """Who made a request, as a round-trip state is bound to it: the OAuth issuer, client and subject, or the
    static token's variable; None where nobody authenticates (stdio, in process)."""
    identity = identity_of_request(ctx)
    if identity is None:
        return None
    return json.dumps([identity.kind, identity.issuer, identity.client, identity.subject, identity.credential])


class _Handlers:
    """What one agent's MCP server answers, method by method: the SDK calls these for each request. Each reads the
    serving state's current host, so reloads apply."""

    def __init__(self, state: ServingState, agent: str) -> None:
        self.state = state
        self.agent = agent
        self.server: Server[Any] | None = None  # set once the server is made (its info stamp goes on replies)
        self.identity: dict[str, Any] | None = None  # its identity, taken once, when a flat copy is a whole one

    def view_of(self, ctx: ServerRequestContext[Any, Any]) -> AgentView:
        """The agent's view for this request: an OAuth token lacking scopes of ``identity.needs_scope`` sees less."""
        identity = identity_of_request(ctx)
        if identity is not None:
            return self.state.view(self.agent, identity.lacking)
        return self.state.view(self.agent)

    def listing(self, ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
        # Wire dicts, not models: never validated twice. The extra keys are what 2026-07-28 requires; for the
        # handshake era the SDK sieves them off, or the fast path leaves them out.
        return {"tools": self.tools_of(ctx), **self.listed()}

    def listed(self) -> dict[str, Any]:
        """What 2026-07-28 requires of a list: it changes only at a reload (a config edit, a pack's
        ``catalog_changed``, an upstream's list_changed), which clients that listen hear at once; one that does not
        may keep it ``[host] list_ttl`` seconds."""
        ttl = self.state.host.loaded.config.host.list_ttl
        return {"resultType": "complete", "ttlMs": round(ttl * 1000), "cacheScope": "private"}

    def tools_of(self, ctx: ServerRequestContext[Any, Any]) -> list[dict[str, Any]]:
        """The agent's tools/list: its view's listed tools and, deferring (``tool_search``), those its searches
        found in this session (on 2025-11-25: a session lasts)."""
        view = self.view_of(ctx)
        if not view.deferring:
            return view.listed_tools
        given = _conversation(ctx.session) if ctx.protocol_version not in _MODERN else None
        found = {key[1] for key in given or () if isinstance(key, tuple) and key[0] == "tool"}
        if not found:
            return view.listed_tools
        listed = {tool["name"] for tool in view.listed_tools}
        return [tool for tool in view.mcp_tools if tool["name"] in listed or tool["name"] in found]

    async def list_tools(self, ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> Any:
        self._one_page(ctx, params)
        return self.listing(ctx)

    async def call_tool(self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams) -> Any:
        return await self.call(ctx, params.name, params.arguments, params.input_responses, params.request_state)

    async def call(self, ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, Any] | None,
                   responses: Mapping[str, Any] | None, request_state: str | None) -> Any:
        view = self.view_of(ctx)
        arguments = arguments if arguments is not None else {}
        modern = ctx.protocol_version in _MODERN
        earlier = None
        journal = None
        vt = view.lookup(name)
        if vt is not None and vt.tool.task != "forbidden" and not (request_state or responses):
            if modern and speaks_tasks(ctx.session.client_capabilities):
                created = await self._start_task(ctx, view, name, arguments, vt.tool.task == "required")
                if created is not None:
                    return created
            elif vt.tool.task == "required":
                raise needs_tasks(f"tool {name} runs only as an MCP task; it")
        if modern:
            if request_state or responses:  # a later round of a call: what the earlier ones carried
                carried = await self._carried(view, name, arguments, ctx, responses, request_state)
                if isinstance(carried, dict):
                    return carried  # ended before anything ran
                earlier, journal = carried
            else:
                journal = Journal([])
        approved = earlier is not None and earlier.get("approved") is True
        given = None if modern else _conversation(ctx.session)
        talk = CONVERSATION.set(given) if given is not None or CONVERSATION.get() is not None else None
        polling = self._poll(ctx)
        had = len(given) if given is not None and name in view.searching_names else None
        try:
            result = await view.call(name, arguments,
                                     approver=self._approver(ctx, name, responses, earlier is not None, approved),
                                     channel=_Channel(ctx, journal, _answers(responses, earlier)))
        except UnknownToolError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except MissingCapability as lacking:
            raise _missing(lacking) from None
        except PagesFirst as first:
            raise MCPError(code=types.URL_ELICITATION_REQUIRED, message=first.message,
                           data={"elicitations": first.pages}) from None
        except (ApprovalPending, SamplePending, ElicitPending, AskPending) as need:
            return self._input_required(ctx, need, name, arguments, journal, approved or _answered_yes(
                responses, earlier))
        finally:
            if talk is not None:
                CONVERSATION.reset(talk)
            if polling is not None:
                polling.cancel()
        if had is not None and given is not None and len(given) > had and view.deferring:
            try:  # a search found tools: they are listed from now on
                await ctx.session.send_tool_list_changed()
            except Exception:  # a connection that went: nothing to tell, and the search's result still stands
                log.debug("could not tell agent %r's session that its tools changed", self.agent, exc_info=True)
        wire = result.to_wire()
        wire["resultType"] = "complete"
        return wire

    async def _start_task(self, ctx: ServerRequestContext[Any, Any], view: AgentView, name: str,
                          arguments: dict[str, Any], required: bool) -> dict[str, Any] | None:
        """Start the call as a task and answer with it (``resultType: "task"``); None when the agent has as many
        tasks as ``[host] max_tasks`` allows (the call then runs as a plain one), or the result that refuses a
        call that runs only as a task."""
        config = self.state.host.loaded.config.host
        capabilities = ctx.session.client_capabilities
        identity = identity_of_request(ctx)

        async def work(task: Task) -> dict[str, Any]:
            channel = _TaskChannel(task, capabilities, identity)
            try:
                result = await view.call(name, arguments, approver=channel.approver(), channel=channel)
            except UnknownToolError as exc:
                raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
            return result.to_wire()

        try:
            task = await self.state.tasks.start(self.agent, _principal(ctx), name, config.task_ttl,
                                                config.max_tasks, work)
        except TasksUnavailable as exc:
            log.warning("agent %r, tool %s: no task could be made (%s)", self.agent, name, exc)
            if not required:
                return None
            return _ended(f"Tool {name} runs only as an MCP task, and none can be made now: {exc}.")
        if task is not None:
            return {**task.wire(), "resultType": "task"}
        if not required:
            return None
        return _ended(f"Tool {name} runs only as an MCP task, and agent {self.agent!r} has {config.max_tasks} "
                      f"tasks kept, as many as [host] max_tasks allows: call it again once one has been "
                      f"forgotten ({config.task_ttl:g} s after its creation).")

    async def _task(self, ctx: ServerRequestContext[Any, Any], method: str, task_id: str) -> Task:
        """The task a tasks/* request names, if it is this agent's and this principal's. Over HTTP, an
        ``Mcp-Name`` header (which routes the request to the replica holding the task) must name the same task
        (SEP-2663 and SEP-2243: ``-32020``); one that is absent is tolerated, as the SDK's clients send none."""
        if not speaks_tasks(ctx.session.client_capabilities):
            raise needs_tasks(method)
        headers = getattr(ctx.request, "headers", None)
        named = headers.get(MCP_NAME_HEADER) if headers is not None else None
        if named is not None and decode_header_value(named.strip()) != task_id:
            raise MCPError(code=types.HEADER_MISMATCH,
                           message="Mcp-Name header does not match the request body's 'taskId' parameter")
        return await self.state.tasks.find(self.agent, _principal(ctx), task_id)

    async def get_task(self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams) -> Any:
        task = await self._task(ctx, "tasks/get", params.task_id)
        if task.status not in TERMINAL and self.view_of(ctx).lookup(task.tool) is None:
            await self.state.tasks.fail(task, types.INVALID_PARAMS, str(UnknownToolError(task.tool)),
                                        "its tool is no longer served to this agent")
        return {**task.wire(), "resultType": "complete"}

    async def update_task(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> Any:
        task = await self._task(ctx, "tasks/update", params.task_id)
        await self.state.tasks.answer(task, params.input_responses)
        return {}

    async def cancel_task(self, ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams) -> Any:
        await self.state.tasks.cancel(await self._task(ctx, "tasks/cancel", params.task_id))
        return {}

    async def _carried(self, view: AgentView, name: str, arguments: dict[str, Any], ctx: ServerRequestContext[Any, Any],
                       responses: Mapping[str, Any] | None,
                       request_state: str | None) -> tuple[dict[str, Any] | None, Journal] | dict[str, Any]:
        """What a 2026-07-28 round that answers earlier ones carries: (the earlier rounds' state, verified, or None;
        the journal, with this round's answer), or the result that ends the call when they cannot be used."""
        try:
            earlier = self.state.seal.open(self.agent, name, arguments, _principal(ctx), request_state) \
                if request_state else None
            if earlier is None and responses and set(responses) & {APPROVAL_KEY, *ASKED.values()}:
                raise Unverifiable  # answers to questions this call never asked: nothing to carry them on
        except Unverifiable:
            if view.lookup(name) is None:
                raise MCPError(code=types.INVALID_PARAMS, message=str(UnknownToolError(name))) from None
            log.warning("agent %r, tool %s: a round-trip state could not be verified (replicas with different "
                        "TOOLCRIB_STATE_SECRET, or an altered state); the call is refused", self.agent, name)
            raise MCPError(code=types.INVALID_PARAMS, message=UNVERIFIABLE) from None
        if earlier is not None and (earlier.get("approval") is True or earlier.get("approved") is True):
            refused = await self._use_approval(earlier)
            if refused is not None:
                if view.lookup(name) is None:
                    raise MCPError(code=types.INVALID_PARAMS, message=str(UnknownToolError(name)))
                log.warning("agent %r, tool %s: %s", self.agent, name, refused)
                return _ended(refused)
        return earlier, _journal(earlier, responses)

    def _poll(self, ctx: ServerRequestContext[Any, Any]) -> asyncio.TimerHandle | None:
        """With ``[host] http_stream_seconds``, close this call's SSE stream once it has run that long (the client
        reconnects with Last-Event-ID; the call goes on): only where the transport offers it (a 2025-11-25
        session that keeps its events)."""
        close = ctx.close_sse_stream  # None but on a 2025-11-25 HTTP session that keeps its events
        if close is None:
            return None
        seconds = self.state.host.loaded.config.host.http_stream_seconds
        if seconds is None:
            return None
        loop = asyncio.get_running_loop()

        async def closing() -> None:
            await close()

        return loop.call_later(seconds, lambda: self.state.keep(loop.create_task(closing())))

    async def _use_approval(self, earlier: Mapping[str, Any]) -> str | None:
        """Use up the approval a round's state carries (given, or asked for and maybe being given now): once, on
        every replica, under the config it was given in. Why not, when it may not be used."""
        if earlier.get("version") != self.state.host.loaded.version:
            return CONFIG_CHANGED
        once = earlier.get("once")
        try:
            first = isinstance(once, str) and await self.state.once.claim(once, self.state.seal.horizon())
        except OnceUnreachable:
            return ONCE_UNREACHABLE
        return None if first else REUSED

    def _approval_bound(self, payload: dict[str, Any]) -> dict[str, Any]:
        """A state's payload that carries an approval, made usable once and under this config only."""
        return {**payload, "once": secrets.token_hex(16), "version": self.state.host.loaded.version}

    def _input_required(self, ctx: ServerRequestContext[Any, Any],
                        need: ApprovalPending | SamplePending | ElicitPending | AskPending, name: str,
                        arguments: dict[str, Any], journal: Journal | None, approved: bool) -> Any:
        """A 2026-07-28 call that must ask its client first (an approval, a sample, an elicitation, the questions a
        tool asked under its own keys): the questions, and the sealed state the client sends back with its answer,
        in which the call goes on."""
        if isinstance(need, ApprovalPending):
            request = types.ElicitRequest(params=types.ElicitRequestFormParams(
                message=need.message,
                requested_schema={"type": "object", "properties": {}},
            ))
            sealed = self.state.seal.seal(self.agent, name, arguments, _principal(ctx),
                                          self._approval_bound({"approval": True}))
            return types.InputRequiredResult(input_requests={APPROVAL_KEY: request}, request_state=sealed)
        assert journal is not None
        kind = "sample" if isinstance(need, SamplePending) else "elicit" if isinstance(need, ElicitPending) else None
        carried: dict[str, Any] = {"asked": kind, "journal": journal.events, "approved": approved}
        if isinstance(need, AskPending):
            carried["given"] = dict(need.given)
        if approved:
            carried = self._approval_bound(carried)
        sealed = self.state.seal.seal(self.agent, name, arguments, _principal(ctx), carried)
        if len(sealed) > MAX_STATE_CHARS:
            return types.CallToolResult(is_error=True, content=[types.TextContent(text=(
                f"Tool {name} stopped: its conversation grew past what a 2026-07-28 round trip carries "
                f"({MAX_STATE_CHARS} characters of request state); a 2025-11-25 session has no such limit."))])
        if isinstance(need, AskPending):
            asked = {key: _request(question["method"], question.get("params") or {})
                     for key, question in need.questions.items()}
        else:
            assert kind is not None
            asked = {ASKED[kind]: _request("sampling/createMessage" if kind == "sample" else "elicitation/create",
                                           need.request)}
        return types.InputRequiredResult(input_requests=asked, request_state=sealed)

    def _approver(self, ctx: ServerRequestContext[Any, Any], name: str, responses: Mapping[str, Any] | None,
                  sealed: bool, approved: bool) -> Any:
        capabilities = ctx.session.client_capabilities
        if capabilities is None or capabilities.elicitation is None:
            return None
        if ctx.protocol_version in _MODERN:
            answer = (responses or {}).get(APPROVAL_KEY)
            if answer is None and not approved:
                return _ask_in_a_round  # (most calls: nothing made for each)

            async def modern(caller: str, tool: str, args: Mapping[str, Any], message: str) -> bool | None:
                if caller != self.agent or tool != name:
                    raise ApprovalPending(message)  # a sub-agent's call: answers given for this call are not its
                if approved:
                    return True  # approved in an earlier round of this very call
                if answer is None:
                    raise ApprovalPending(message)
                if not sealed:
                    return False  # an answer that was not given for exactly this call approves nothing
                return getattr(answer, "action", None) == "accept"

            return modern

        if not ctx.session.can_send_request:
            return None  # no back-channel (stateless HTTP): nothing can be asked

        async def legacy(_agent: str, tool: str, args: Mapping[str, Any], message: str) -> bool | None:
            result = await ctx.session.elicit_form(message, {"type": "object", "properties": {}},
                                                   related_request_id=ctx.request_id)
            return result.action == "accept"

        return legacy

    async def fast_paths(self, ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        """tools/list, plain tools/call and plain prompts/get without the SDK's generic work around them.

        tools/list comes from the view's cached wire list, never validated again (about a third of a 1000-tool
        list's cost). A tools/call (or a prompts/get, with string arguments) holding only a name and arguments skips
        the SDK's request and result models: its result is toolcrib's own wire dict, and only content that is not
        plain text is shaped by the SDK. Anything unusual (a cursor, approval answers, a request before the
        handshake, a malformed call, a task) goes the SDK's way. tests/test_wire.py holds both paths to the same
        bytes."""
        method, params = ctx.method, ctx.params
        if method == "tools/call":
            if not _plain_call(params):
                return await call_next(ctx)
        elif method == "prompts/get":
            if params is None or not _plain_call(params) or not all(
                    type(v) is str for v in (params.get("arguments") or {}).values()):
                return await call_next(ctx)
        elif method != "tools/list" or (params and set(params) - {"_meta"}):
            return await call_next(ctx)
        version = ctx.protocol_version
        modern = version in _MODERN
        if not modern:
            connection = connection_of(ctx.session)
            if connection is None or not connection.initialize_accepted:
                return await call_next(ctx)  # the SDK answers a request that came before the handshake
        if method == "tools/list":
            if not modern:
                self.state.remember_session(self.agent, ctx.session)
                return {"tools": self.tools_of(ctx)}
            return {**self.listing(ctx), "_meta": {SERVER_INFO_META_KEY: self.stamp}}
        assert params is not None
        if method == "prompts/get":
            result = await self.prompt(ctx, params["name"], params.get("arguments"))
            if not isinstance(result, dict):  # a question first (2026-07-28): the SDK's own shaping
                return self._asking(result)
            if not all(message["content"].get("type") == "text" for message in result["messages"]):
                result = serialize_server_result(method, version, result)
            if modern:
                result["_meta"] = {SERVER_INFO_META_KEY: self.stamp}
            else:
                result.pop("resultType", None)
            return result
        result = await self.call(ctx, params["name"], params.get("arguments"), None, None)
        if not isinstance(result, dict):  # a question first (2026-07-28): the SDK's own shaping
            return self._asking(result)
        if result["resultType"] == "task":  # a task (2026-07-28 only): its own shape, which the SDK leaves be
            result["_meta"] = {SERVER_INFO_META_KEY: self.stamp}
            return result
        if not _all_text(result["content"]):
            # Other content is shaped by the SDK for the connection's protocol version (toolcrib checked it already:
            # the pipeline refuses content that is not MCP's).
            result = serialize_server_result(method, version, result)
        if modern:
            meta = result.get("_meta")  # a policy's interrupt mark stays beside the stamp
            result["_meta"] = {**meta, SERVER_INFO_META_KEY: self.stamp} if meta else \
                {SERVER_INFO_META_KEY: self.stamp}
        else:
            result.pop("resultType", None)
        return result

    # -- resources, prompts, completion, logging ------------------------------------------------------------

    def _one_page(self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None) -> None:
        """What every list request starts with: one page only (a cursor is refused), and a handshake-era session
        remembered, so that it hears when the lists change."""
        if params is not None and params.cursor is not None:
            raise MCPError(code=types.INVALID_PARAMS, message="Invalid cursor: this server returns one page")
        if ctx.protocol_version not in _MODERN:
            self.state.remember_session(self.agent, ctx.session)

    async def list_resources(self, ctx: ServerRequestContext[Any, Any],
                             params: types.PaginatedRequestParams | None) -> Any:
        self._one_page(ctx, params)
        return {"resources": self.view_of(ctx).mcp_resources, **self.listed()}

    async def list_templates(self, ctx: ServerRequestContext[Any, Any],
                             params: types.PaginatedRequestParams | None) -> Any:
        self._one_page(ctx, params)
        return {"resourceTemplates": self.view_of(ctx).mcp_templates, **self.listed()}

    async def read_resource(self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams) -> Any:
        try:
            contents = await self.view_of(ctx).read(str(params.uri), channel=_Channel(ctx))
        except UnknownResourceError as exc:  # (2026-07-28, SEP-2164: invalid params; 2025-11-25: its own -32002)
            code = types.INVALID_PARAMS if ctx.protocol_version in _MODERN else RESOURCE_NOT_FOUND
            raise MCPError(code=code, message=str(exc), data={"uri": str(params.uri)}) from None
        except InvalidArgumentsError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except ToolError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
        return {"contents": contents, **UNCACHED}

    async def subscribe(self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams) -> Any:
        uri = str(params.uri)
        if self.view_of(ctx).resource(uri) is None:  # hidden and nonexistent alike
            raise MCPError(code=RESOURCE_NOT_FOUND, message=str(UnknownResourceError(uri)), data={"uri": uri})
        self.state.remember_session(self.agent, ctx.session)
        _state_of(ctx).setdefault(SUBSCRIPTIONS, set()).add(normalize(uri))  # as updates name it
        await self.state.session_changed(self.agent, connection_of(ctx.session))
        return {}

    async def unsubscribe(self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams) -> Any:
        _state_of(ctx).setdefault(SUBSCRIPTIONS, set()).discard(normalize(str(params.uri)))
        await self.state.session_changed(self.agent, connection_of(ctx.session))
        return {}

    async def listen(self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams) -> Any:
        """A 2026-07-28 listen stream hears of what this request's token may read: the listener of its scopes
        (updates are published in the normal form of their URI, to the listeners whose view may read it)."""
        identity = identity_of_request(ctx)
        lacking = identity.lacking if identity is not None else frozenset()
        return await self.state.listener(self.agent, lacking)(ctx, params)

    async def list_prompts(self, ctx: ServerRequestContext[Any, Any],
                           params: types.PaginatedRequestParams | None) -> Any:
        self._one_page(ctx, params)
        return {"prompts": self.view_of(ctx).mcp_prompts, **self.listed()}

    async def get_prompt(self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams) -> Any:
        return await self.prompt(ctx, params.name, params.arguments, params.input_responses, params.request_state)

    async def prompt(self, ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, str] | None,
                     responses: Mapping[str, Any] | None = None, request_state: str | None = None) -> Any:
        """A prompt, which may ask the client as a tool does (``Context.ask``, ``elicit``, ``sample``): on
        2026-07-28 in rounds, each ending with the questions and a sealed state (approvals are only for tools)."""
        view = self.view_of(ctx)
        journal, answers = None, None
        if ctx.protocol_version in _MODERN:
            if view.prompt(name) is None:
                raise MCPError(code=types.INVALID_PARAMS, message=str(UnknownPromptError(name)))
            try:
                earlier = self.state.seal.open(self.agent, PROMPT_BINDING + name, arguments or {}, _principal(ctx),
                                               request_state) if request_state else None
            except Unverifiable:
                raise MCPError(code=types.INVALID_PARAMS, message=UNVERIFIABLE) from None
            journal, answers = _journal(earlier, responses), _answers(responses, earlier)
        try:
            answer = await view.get_prompt(name, arguments, channel=_Channel(ctx, journal, answers))
        except UnknownPromptError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except InvalidArgumentsError as exc:
            raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
        except ToolError as exc:
            raise MCPError(code=types.INTERNAL_ERROR, message=str(exc)) from None
        except MissingCapability as lacking:
            raise _missing(lacking) from None
        except (SamplePending, ElicitPending, AskPending) as need:
            return self._input_required(ctx, need, PROMPT_BINDING + name, arguments or {}, journal, False)
        return {**answer, "resultType": "complete"}

    async def complete(self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams) -> Any:
        ref = params.ref.model_dump(by_alias=True, mode="json", exclude_none=True)
        context = params.context.arguments if params.context is not None else None
        found = await self.view_of(ctx).complete(ref, params.argument.name, params.argument.value, context)
        return {"completion": {"values": list(found), "total": found.total, "hasMore": found.has_more},
                "resultType": "complete"}

    async def set_level(self, ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams) -> Any:
        _state_of(ctx)[LOG_LEVEL] = params.level
        await self.state.session_changed(self.agent, connection_of(ctx.session))
        return {}

    def _asking(self, result: types.Result) -> dict[str, Any]:
        """An input-required result (2026-07-28) as the fast paths send it, stamped like the rest."""
        shaped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        shaped["_meta"] = {SERVER_INFO_META_KEY: self.stamp}
        return shaped

    @property
    def stamp(self) -> dict[str, Any]:
        """The server's identity for a 2026-07-28 result's ``_meta`` (what the SDK stamps on its own), a copy each
        result owns: toolcrib's holds only strings, so a flat copy of it taken once is a whole one."""
        if self.identity is not None:
            return dict(self.identity)
        assert self.server is not None
        return self.server.server_info_stamp


def build_server(state: ServingState, agent: str) -> Server[Any]:
    """The MCP server for ``agent``; it reads ``state``'s current host on every request, so reloads apply."""
    h = _Handlers(state, agent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # logging/setLevel is deprecated as of 2026-07-28, yet clients still use it
        server = _Server(
            "toolcrib",
            version=_version(),
            instructions=INSTRUCTIONS,
            on_list_tools=h.list_tools,
            on_call_tool=h.call_tool,
            on_list_resources=h.list_resources,
            on_list_resource_templates=h.list_templates,
            on_read_resource=h.read_resource,
            on_subscribe_resource=h.subscribe,
            on_unsubscribe_resource=h.unsubscribe,
            on_list_prompts=h.list_prompts,
            on_get_prompt=h.get_prompt,
            on_completion=h.complete,
            on_set_logging_level=h.set_level,
            on_subscriptions_listen=h.listen,
        )
    h.server = server
    server.extensions[TASKS] = {}
    server.add_request_handler("tasks/get", types.GetTaskRequestParams, h.get_task)
    server.add_request_handler("tasks/update", UpdateTaskParams, h.update_task)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, h.cancel_task)
    identity = server.server_info_stamp  # (the SDK's public copy, taken once)
    if all(type(value) is str for value in identity.values()):
        h.identity = identity
    server.middleware.clear()  # the SDK's generic OpenTelemetry middleware costs about a third of a call
    if requests_log.isEnabledFor(logging.INFO) or tracing():
        server.middleware.append(_observer(agent))
    server.middleware.append(h.fast_paths)
    return server


_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def _observer(agent: str) -> Any:
    """A span (continuing the caller's trace from ``_meta``) and a log line for each request."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind, StatusCode

    tracer = trace.get_tracer("toolcrib")

    async def observe(ctx: ServerRequestContext[Any, Any], call_next: Any) -> Any:
        if ctx.request_id is None:  # a notification: nothing to answer, nothing to report
            return await call_next(ctx)
        started = time.perf_counter()
        method = ctx.method
        params = ctx.params or {}
        key = _NAMED.get(method)
        name = params.get(key) if key is not None else None
        name = name if isinstance(name, str) else None
        span_name, parent, attributes = request_span(agent, method, name, params.get("_meta"))
        outcome = "ok"
        with tracer.start_as_current_span(span_name, kind=SpanKind.SERVER, context=parent, attributes=attributes,
                                          record_exception=False, set_status_on_exception=False) as span:
            try:
                result = await call_next(ctx)
            except MCPError as exc:
                outcome = f"error {exc.error.code}"
                span.set_status(StatusCode.ERROR, exc.error.message)
                raise
            except BaseException as exc:
                outcome = type(exc).__name__
                span.set_status(StatusCode.ERROR)
                raise
            else:
                failed = result.get("isError") if isinstance(result, dict) else getattr(result, "is_error", False)
                if failed is True:
                    outcome = "tool error"
                    span.set_status(StatusCode.ERROR)
                return result
            finally:
                span.set_attribute("toolcrib.outcome", outcome)
                connection = connection_of(ctx.session)
                log_request(agent, method, name, outcome, started, getattr(connection, "session_id", None))

    return observe


class _Server(Server[Any]):
    """The SDK's low-level server, advertising the same capabilities on every transport: toolcrib tells clients when
    an agent's tools, resources or prompts change (on reload), whoever asks for the initialization options."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      *args: Any, **kwargs: Any) -> Any:
        if notification_options is None:
            notification_options = NOTIFY
        return super().create_initialization_options(notification_options, *args, **kwargs)



NOTIFY = NotificationOptions(tools_changed=True, resources_changed=True, prompts_changed=True)


def _plain_call(params: Mapping[str, Any] | None) -> bool:
    """A tools/call with a string name, an object (or no) arguments and nothing else but ``_meta``."""
    if not params or type(params.get("name")) is not str:
        return False
    arguments = params.get("arguments")
    if arguments is not None and type(arguments) is not dict:
        return False
    return _PLAIN_CALL_KEYS.issuperset(params)


_PLAIN_CALL_KEYS = frozenset({"name", "arguments", "_meta"})


def _all_text(content: list[dict[str, Any]]) -> bool:
    """Whether every block of a result is text, which needs no shaping by the SDK."""
    for block in content:  # noqa: SIM110 - all() over a generator costs 0.3 us more a call
        if block.get("type") != "text":
            return False
    return True


async def _ask_in_a_round(_agent: str, _tool: str, _args: Mapping[str, Any], message: str) -> bool | None:
    """The approver of a 2026-07-28 call that carries no answer and no earlier approval: the call ends with the
    question (an input-required result), and its next round carries the answer."""
    raise ApprovalPending(message)


def _journal(earlier: Mapping[str, Any] | None, responses: Mapping[str, Any] | None) -> Journal:
    """What earlier rounds of a request got, with this round's answer to the question the host asked last."""
    events = list(earlier.get("journal", [])) if earlier is not None else []
    asked = earlier.get("asked") if earlier is not None else None
    answer = (responses or {}).get(ASKED[asked]) if asked in ASKED else None
    if answer is not None:
        events.append({asked: answer.model_dump(by_alias=True, mode="json", exclude_none=True)})
    return Journal(events)


def _request(method: str, params: Mapping[str, Any]) -> Any:
    """A question to put in a round's ``inputRequests``, from its wire method and params."""
    if method == "sampling/createMessage":
        return types.CreateMessageRequest(params=types.CreateMessageRequestParams.model_validate(params, by_name=False))
    if method == "elicitation/create":
        model = types.ElicitRequestURLParams if params.get("mode") == "url" else types.ElicitRequestFormParams
        return types.ElicitRequest(params=model.model_validate(params, by_name=False))
    return types.ListRootsRequest()


def _answers(responses: Mapping[str, Any] | None, earlier: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """What the client has answered of the questions a tool asked under its own keys: the answers earlier rounds
    brought (sealed in their state, so they stand), then this round's. An answer is data the client gives, as
    arguments are: it needs no state of its own (approvals, which do, are the host's keys). (A call's first round,
    the usual, makes nothing.)"""
    sealed = earlier.get("given") if earlier is not None else None
    if not isinstance(sealed, dict) or not sealed:
        return responses
    return {**(responses or {}), **sealed}


def _missing(lacking: MissingCapability) -> MCPError:
    """The protocol's answer to a request that needs what the client did not declare (2026-07-28: -32021)."""
    return MCPError(code=types.MISSING_REQUIRED_CLIENT_CAPABILITY, message=lacking.message,
                    data={"requiredCapabilities": dict(lacking.required)})


def _ended(text: str) -> dict[str, Any]:
    """A 2026-07-28 call ended before anything ran, saying why."""
    return {"content": [{"type": "text", "text": text}], "isError": True, "resultType": "complete"}


def _answered_yes(responses: Mapping[str, Any] | None, earlier: Mapping[str, Any] | None) -> bool:
    """Whether this round carries the user's yes to an approval this call asked for."""
    answer = (responses or {}).get(APPROVAL_KEY)
    return earlier is not None and earlier.get("approval") is True and getattr(answer, "action", None) == "accept"


def _version() -> str:
    from toolcrib._version import __version__

    return __version__
