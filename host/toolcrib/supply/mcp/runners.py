"""How a call reaches an upstream server (``UpstreamRunner``), and how what the server asks during it (a form to
fill, a turn of a model) is put to the agent's client of that call."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from toolcrib.consent import Consenting
from toolcrib.content import ToolResult
from toolcrib.credentials import NONE as NO_CREDENTIALS
from toolcrib.credentials import Credentials
from toolcrib.delegation import UPSTREAM_BEARER, Acting, ConsentNeeded, agents_of, ask_consent
from toolcrib.errors import Suspend, ToolError
from toolcrib.names import foreign_item, foreign_meta
from toolcrib.runner import Call
from toolcrib.supply.mcp.pack_calls import Lane, LaneClosed
from toolcrib.supply.mcp.settings import FORWARDED

log = logging.getLogger("toolcrib.upstream")

TASK_TTL_MS = 3_600_000  # how long a 2025-11-25 server is asked to keep a task toolcrib makes (an hour)

# The call an upstream tool is running for, in the task that awaits the server's answer: a server's request during
# it (a 2026-07-28 server's input requests are answered within that task) is put to the call's own client.
CALLING: contextvars.ContextVar[Call | None] = contextvars.ContextVar("toolcrib_upstream_call", default=None)
# A handshake-era server asks in a request of its own, read by the connection's task: then the call is the one
# call in flight on that connection (with two or more, whose it is cannot be told, and it is refused).
_IN_FLIGHT: dict[int, list[Call]] = {}  # id(the connection's client session) -> its calls awaiting an answer


def _asking(context: Any) -> Call | None:
    found = CALLING.get()
    if found is not None:
        return found
    calls = _IN_FLIGHT.get(id(getattr(context, "session", None)), [])
    return calls[0] if len(calls) == 1 else None


def _upstream(call: Call | None) -> UpstreamRunner | None:
    """The upstream runner of a call's tool, if it is an upstream server's."""
    runner = call.tool.tool.runner if call is not None and call.tool is not None else None
    return runner if isinstance(runner, UpstreamRunner) else None


def withheld(call: Call | None, what: str) -> str | None:
    """Why ``what`` (``elicitation``, ``url_elicitation``, ``sampling``, ``log``) of the server a call's tool is of
    does not reach the agent's client, or None when it does."""
    runner = _upstream(call)
    if runner is None or what in runner.forward:
        return None
    return (f"toolcrib does not forward {_FORWARD_WORDS[what]} from {runner.what} {runner.namespace!r} to the "
            f"agent's client ([mcps.{runner.namespace}] forward)")


def named(call: Call, message: str) -> str:
    """A server's question as the agent's client shows it: cleaned, and naming the server that asks (the user
    answers toolcrib's client, and should know who wants to know)."""
    from toolcrib.names import clean

    runner = _upstream(call)
    who = f"{runner.what} {runner.namespace!r}" if runner is not None else "an upstream server"
    return f"[{who}] {clean(message)}"


def _asked_by(call: Call | None, request: dict[str, Any]) -> dict[str, Any]:
    """A server's request for a model's turn as the agent's client gets it: its fields as the server asked them
    (a model's turn cannot be reworded: the model would be asked something else), and in its ``_meta`` only the
    server's namespace (``ASKED_BY_KEY``). The server's own ``_meta`` describes its hop to toolcrib (its progress
    token, keys it may have forged as toolcrib's), not the one to the agent's client."""
    from toolcrib.names import ASKED_BY_KEY

    runner = _upstream(call)
    return {**request, "_meta": {ASKED_BY_KEY: runner.namespace if runner is not None else "an upstream server"}}


_FORWARD_WORDS = {"elicitation": "questions to the user", "sampling": "requests for a model's turn",
                  "log": "log messages", "url_elicitation": "pages to send the user to"}


async def forward_log(session: Any, params: Any) -> None:
    """A server's log message (``notifications/message``): during its one call in flight on that connection, to
    the agent's client of the call (at the level that client asked for, from the tool's logger, which names the
    server), and to the host's log; otherwise to the host's log only (whose call it is cannot be told)."""
    from toolcrib.context import LOG_LEVELS
    from toolcrib.names import clean

    level = str(getattr(params, "level", "info"))
    data = getattr(params, "data", None)
    text = clean(data if isinstance(data, str) else json.dumps(data, default=str))[:MAX_LOG_CHARS]
    calls = _IN_FLIGHT.get(id(session), [])
    call = calls[0] if len(calls) == 1 else None
    if call is None or level not in LOG_LEVELS or withheld(call, "log") is not None:
        log.info("log message (%s) of an upstream server, kept in the host's log: %s", level, text)
        return
    await call.context().log(level, text)


MAX_LOG_CHARS = 10_000  # of one forwarded log message

MID_CALL = ("the agent's client speaks MCP 2026-07-28, where a call's questions are answered between its rounds, "
            "and this server asked in the middle of its call (as a 2025-11-25 server does); toolcrib cannot put that "
            "question to it")


async def _put(ask: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``ask()`` for a server's request. In the call's own task a question may suspend the call (the front end asks
    its client and the call is made again); from the connection's task, it cannot (``MID_CALL``)."""
    import mcp_types as types

    if CALLING.get() is not None:
        return await ask()
    try:
        return await ask()
    except Suspend:
        return types.ErrorData(code=types.INVALID_REQUEST, message=MID_CALL)


async def elicit(context: Any, params: Any) -> Any:
    """A server asks the user something during a call: the call's ``Context.elicit`` asks the agent's client (with
    toolcrib's checks of the form), or ``Context.elicit_url`` sends the user to an ``https:`` page where the
    server's ``forward`` has ``url_elicitation``; outside a call it is refused."""
    import mcp_types as types

    call = _asking(context)
    url = getattr(params, "url", None) if getattr(params, "mode", "form") == "url" else None
    refused = withheld(call, "url_elicitation" if url is not None else "elicitation")
    if refused is not None:
        return types.ErrorData(code=types.INVALID_REQUEST, message=refused)
    if call is not None and url is not None:
        return await _to_page(call, str(params.message), str(url), params.elicitation_id)
    schema = getattr(params, "requested_schema", None)
    if call is None or schema is None:
        return types.ErrorData(code=types.INVALID_REQUEST, message="toolcrib asks its client only during one call")
    if hasattr(schema, "model_dump"):
        schema = schema.model_dump(by_alias=True, mode="json", exclude_none=True)
    context_of = call.context()

    async def ask() -> Any:
        try:
            answer = await context_of.elicit(named(call, params.message), schema)
        except ToolError as exc:
            return types.ErrorData(code=types.INVALID_REQUEST, message=str(exc))
        return types.ElicitResult(action=answer.action, content=answer.content)

    return await _put(ask)


def _page_url(url: str) -> bool:
    """Whether toolcrib sends an agent's user to a server's page at ``url``: ``https:`` with no spaces or hidden
    characters in the address."""
    from toolcrib.names import clean

    return url.startswith("https://") and clean(url) == url and not any(c.isspace() for c in url)


async def _to_page(call: Call, message: str, url: str, elicitation_id: str | None) -> Any:
    """A server's URL elicitation, put to the agent's client: only an ``https:`` URL with nothing hidden in it, its
    message naming the server, its id the server's namespaced (so a completion one server announces never passes
    for another's; a 2026-07-28 server gives none, and announces no completion: a new one); the client's channel
    is kept to tell it when the server says the page is done with."""
    import mcp_types as types

    if not _page_url(url):
        return types.ErrorData(code=types.INVALID_REQUEST, message="toolcrib sends the agent's user only to https: "
                               "pages with no spaces or hidden characters in their address")
    runner = _upstream(call)
    namespace = runner.namespace if runner is not None else ""
    shown = f"{namespace}:{elicitation_id if elicitation_id is not None else secrets.token_hex(8)}"
    context_of = call.context()

    async def ask() -> Any:
        try:
            answer = await context_of.elicit_url(named(call, message), url, shown)
        except ToolError as exc:
            return types.ErrorData(code=types.INVALID_REQUEST, message=str(exc))
        tell = getattr(call.channel, "elicitation_complete", None)
        if tell is not None and answer.action == "accept" and elicitation_id is not None:
            _PAGES[(namespace, elicitation_id)] = (shown, tell)
            while len(_PAGES) > MAX_PAGES:
                _PAGES.pop(next(iter(_PAGES)))
        return types.ElicitResult(action=answer.action)

    return await _put(ask)


MAX_PAGES_FIRST = 8  # pages one server's "open these first" error may name


def _pages_first(call: Call | None, message: str, data: Any) -> None:
    """A server's call refused until the user opens pages (its -32042 error, SEP-1036): passed on to the agent's
    client as that error (``channel.pages_first`` raises it), each page as a page asked during a call is (only where
    the server's forward names url_elicitation, https with nothing hidden, its message naming the server, its id
    namespaced). Returns where it cannot be, and the call ends with an error result naming the server's refusal."""

    runner = _upstream(call)
    passing = getattr(call.channel, "pages_first", None) if call is not None and call.channel is not None else None
    asked = data.get("elicitations") if isinstance(data, dict) else None
    if call is None or runner is None or passing is None or withheld(call, "url_elicitation") is not None or \
            not isinstance(asked, list) or not 0 < len(asked) <= MAX_PAGES_FIRST:
        return
    pages, given = [], []
    for page in asked:
        url = page.get("url") if isinstance(page, dict) and page.get("mode") == "url" else None
        if not isinstance(url, str) or not _page_url(url):
            return
        server_id = page.get("elicitationId")
        shown = f"{runner.namespace}:{server_id if isinstance(server_id, str) else secrets.token_hex(8)}"
        pages.append({"mode": "url", "message": named(call, str(page.get("message", ""))), "url": url,
                      "elicitationId": shown})
        if isinstance(server_id, str):
            given.append((server_id, shown))
    tell = getattr(call.channel, "elicitation_complete", None)
    if tell is not None:
        for server_id, shown in given:
            _PAGES[(runner.namespace, server_id)] = (shown, tell)
    while len(_PAGES) > MAX_PAGES:
        _PAGES.pop(next(iter(_PAGES)))
    passing(named(call, message), pages)


# The pages agents' users were sent to, by (server, the server's elicitation id): the id their client was given,
# and how to tell that client the page is done with (a 2025-11-25 session's channel). The oldest go first.
_PAGES: dict[tuple[str, str], tuple[str, Callable[[str], Coroutine[Any, Any, None]]]] = {}
MAX_PAGES = 1000


async def elicitation_completed(namespace: str, elicitation_id: str) -> None:
    """A server says the page of one of its URL elicitations is done with: the client whose user it sent there is
    told, once (a completion for a page toolcrib never sent anyone to is dropped)."""
    found = _PAGES.pop((namespace, elicitation_id), None)
    if found is None:
        log.info("upstream server %r completed an elicitation toolcrib did not send anyone to; dropped", namespace)
        return
    shown, tell = found
    try:
        await tell(shown)
    except Exception:  # the client went: nobody is left to tell
        log.debug("could not tell a client that elicitation %s completed", shown, exc_info=True)


async def answer_task_question(method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A question of an upstream server's task (its ``inputRequests``, 2026-07-28), put to the agent's client of the
    call that waits for the task, as any question a server asks during a call is (a form, with toolcrib's checks of
    it; a page to open, where the server's forward lets it; a turn of the client's model)."""
    import mcp_types as types

    call = CALLING.get()
    if call is None:
        raise ToolError("the upstream server's task asks a question, and no call of the agent waits for it")
    url = params.get("url") if method == "elicitation/create" and params.get("mode") == "url" else None
    refused = withheld(call, "url_elicitation" if url is not None else
                       "elicitation" if method == "elicitation/create" else "sampling")
    if refused is not None:
        raise ToolError(refused)
    if url is not None:
        page = await _to_page(call, str(params.get("message", "")), str(url), params.get("elicitationId"))
        if not isinstance(page, types.ElicitResult):
            raise ToolError(page.message)
        return {"action": page.action}
    if method == "elicitation/create":
        schema = params.get("requestedSchema")
        if params.get("mode", "form") != "form" or not isinstance(schema, dict):
            raise ToolError("the upstream server's task asks for something other than a form, which toolcrib does "
                            "not put to the agent's client")
        answer = await call.context().elicit(named(call, str(params.get("message", ""))), schema)
        return {"action": answer.action, **({"content": answer.content} if answer.content is not None else {})}
    if method == "sampling/createMessage":
        model = getattr(call.channel, "sample", None) if call.channel is not None else None
        if model is None:
            raise ToolError("the upstream server's task asks for a turn of a model, and the agent's client cannot "
                            "sample for this call")
        answer_: dict[str, Any] = await model(_asked_by(call, params))
        return answer_
    raise ToolError(f"the upstream server's task asks {method!r}, which toolcrib does not put to a client")


async def sample(context: Any, params: Any) -> Any:
    """A server asks for a turn of a model during a call: the agent's client is asked, if it can sample."""
    import mcp_types as types

    call = _asking(context)
    refused = withheld(call, "sampling")
    if refused is not None:
        return types.ErrorData(code=types.INVALID_REQUEST, message=refused)
    model = getattr(call.channel, "sample", None) if call is not None and call.channel is not None else None
    if model is None:
        return types.ErrorData(code=types.INVALID_REQUEST, message="the agent's client cannot sample for this call")

    async def ask() -> Any:
        answer = await model(_asked_by(call, params.model_dump(by_alias=True, mode="json", exclude_none=True)))
        return types.CreateMessageResult.model_validate(answer)

    return await _put(ask)


@contextlib.asynccontextmanager
async def as_caller(namespace: str, acting: Acting | Consenting | None, secrets: Credentials,
                    call: Call | None) -> AsyncIterator[Credentials]:
    """Within it, a server's requests go as ``call``'s caller where the server is called so (``[mcps.x] exchange``:
    a token exchanged for them; ``consent``: the person's own grant; else its ``headers``). Yields what is to be
    taken out of its answers: its own credentials, and that token."""
    bearer = None
    if acting is not None:
        try:
            bearer = await acting.bearer(call.principal if call is not None else None, agents_of(call))
        except ConsentNeeded as needed:  # the person is to grant access first: the page, or an error naming it
            raise ask_consent(call, needed) from None
    token = UPSTREAM_BEARER.set((namespace, bearer) if bearer is not None else None)
    try:
        yield secrets.with_bearer(bearer) if bearer is not None else secrets
    finally:
        UPSTREAM_BEARER.reset(token)


@dataclass(frozen=True, slots=True)
class UpstreamRunner:
    """Calls one tool of a connected upstream server with the validated arguments; the server's answer is the
    result, as it gave it (its own errors included); a refusal of the call itself is this tool's error."""

    client: Any  # the SDK's client session of the connection
    name: str  # the tool's name on the server
    namespace: str
    what: str = "upstream server"  # or "isolated pack", in its messages
    lane: Lane | None = None  # an isolated pack's calls take its lane while it is open
    as_task: bool = False  # a 2025-11-25 server runs it only as a task (SEP-1686): it is called as one
    forward: frozenset[str] = frozenset(FORWARDED)  # what of the server's reaches the agent's client
    acting: Acting | Consenting | None = None  # its calls are made as their caller (exchange, consent)
    secrets: Credentials = NO_CREDENTIALS  # what goes with its requests (a url server's headers)
    is_async = True

    def start(self, model: BaseModel, call: Call) -> Any:
        return self._call(dict(model.__pydantic_extra__ or {}), call)

    async def _call(self, arguments: dict[str, Any], call: Call | None = None) -> ToolResult:
        import mcp_types as types
        from mcp.shared.exceptions import MCPError

        if self.lane is not None and self.lane.closed is None:
            timeout = call.tool.timeout if call is not None and call.tool is not None else None
            with contextlib.suppress(LaneClosed):
                return await self.lane.call(self.name, arguments, call, timeout)

        channel = call.channel if call is not None else None

        async def progress(done: float, total: float | None, message: str | None) -> None:
            if channel is not None:  # the server's progress is the call's, as the agent's client sees it
                await channel.progress(done, total, message)

        async with as_caller(self.namespace, self.acting, self.secrets, call) as secrets:
            token = CALLING.set(call)  # what the server asks during the call is asked on its behalf (_asking)
            connection = id(getattr(self.client, "session", None))
            if call is not None:
                _IN_FLIGHT.setdefault(connection, []).append(call)
            try:
                if self.as_task:
                    result = await self._as_task(arguments, channel)
                else:
                    forwarded = channel is not None and "progress" in self.forward
                    result = await self.client.call_tool(self.name, arguments,
                                                         progress_callback=progress if forwarded else None)
            except MCPError as exc:
                if exc.error.code == types.URL_ELICITATION_REQUIRED:
                    _pages_first(call, exc.error.message, exc.error.data)  # (raises, where the agent's client can go)
                raise ToolError(secrets.scrub(f"{self.what} {self.namespace!r} refused the call: "
                                              f"{exc.error.message}")) from None
            except BaseExceptionGroup as group:  # the SDK's task group wraps what a callback raised
                asked = group.subgroup(lambda e: isinstance(e, Suspend))
                while isinstance(asked, BaseExceptionGroup):  # the agent's client is to be asked first: the front
                    asked = asked.exceptions[0]  # end does, and the call is made again (the server asks again)
                if asked is not None:
                    raise asked from None
                raise
            finally:
                CALLING.reset(token)
                if call is not None:
                    flying = _IN_FLIGHT.get(connection, [])
                    flying.remove(call)
                    if not flying:
                        _IN_FLIGHT.pop(connection, None)
            answer = ToolResult(
                content=tuple(foreign_item(block.model_dump(by_alias=True, mode="json", exclude_none=True))
                              for block in result.content),
                structured_content=result.structured_content,
                is_error=bool(result.is_error),
                meta=foreign_meta(getattr(result, "meta", None)),
            )
            # no credential of the server's (its headers, a token exchanged for the caller) reaches the agent,
            # though the server echo it: with one, the agent could call the server around toolcrib
            return secrets.scrub_result(answer)

    async def _as_task(self, arguments: dict[str, Any], channel: Any) -> Any:
        """A call of a tool a 2025-11-25 server runs only as a task (SEP-1686): made as a task, polled (its status
        message is the call's progress) until it ends or has a question, then its result asked for (``tasks/result``
        waits for its end; the server's questions meanwhile come as its requests, put to the agent's client as any
        server's are). A call that ends first cancels the task upstream."""
        import anyio
        import mcp_types as types

        from toolcrib.mcp.sdk import send_unread
        from toolcrib.mcp.tasks import poll_seconds

        session = self.client.session
        created = await send_unread(session, "tools/call", {"name": self.name, "arguments": arguments,
                                                             "task": {"ttl": TASK_TTL_MS}})
        task: dict[str, Any] = created["task"] if isinstance(created.get("task"), dict) else created
        task_id = task.get("taskId")
        if not isinstance(task_id, str):
            return types.CallToolResult.model_validate(created, by_name=False)  # answered at once, after all
        try:
            status = task.get("status")
            while status not in ("completed", "failed", "cancelled", "input_required"):
                await anyio.sleep(poll_seconds(task.get("pollInterval")))
                task = await send_unread(session, "tasks/get", {"taskId": task_id})
                status = task.get("status")
                if channel is not None and isinstance(task.get("statusMessage"), str):
                    await channel.progress(0, None, task["statusMessage"])
            if status == "cancelled":
                raise ToolError(f"{self.what} {self.namespace!r} cancelled the call's task "
                                f"({task.get('statusMessage') or 'no reason given'})")
            return types.CallToolResult.model_validate(await send_unread(session, "tasks/result",
                                                                         {"taskId": task_id}), by_name=False)
        except BaseException:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5), contextlib.suppress(Exception):
                await send_unread(session, "tasks/cancel", {"taskId": task_id})
            raise
