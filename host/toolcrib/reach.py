"""What a running call may reach beyond its own tool, on behalf of its agent: the capabilities behind
``Context.permits``, ``Context.subagent`` and ``Context.server``. Each asks the one decision (``permissions.decide``)
for the call's agent, so a pack that uses them (the host's own ``toolcrib`` pack does) can never offer more than the
agent's rules allow.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from toolcrib.answers import Deny
from toolcrib.content import ToolResult
from toolcrib.context import CHAIN, CONVERSATION
from toolcrib.errors import Suspend, ToolError, UnknownToolError
from toolcrib.names import clean
from toolcrib.permissions import Named, check_availability, decide

if TYPE_CHECKING:
    from toolcrib.config import AgentConfig
    from toolcrib.context import Context
    from toolcrib.entries import Entry
    from toolcrib.sources import Source
    from toolcrib.view import AgentView


class HostServices(Protocol):
    """What the host lends the views it builds: other agents' views, their configs, its sources (lazy servers)."""

    def view(self, agent: str) -> AgentView: ...

    @property
    def agent_configs(self) -> Mapping[str, AgentConfig]: ...

    def source(self, name: str) -> Source | None: ...

    @property
    def lazy_servers(self) -> tuple[str, ...]: ...


def chain_of(ctx: Context) -> tuple[str, ...]:
    """The delegation chain this call runs in, the calling agent last."""
    return CHAIN.get() or (ctx.agent,)


def permits(ctx: Context, dimension: str, name: str) -> bool:
    view = ctx._view
    if view is None:
        return False
    return decide(view.rules, Named(dimension, name), chain=chain_of(ctx)).visible


class Delegate:
    """Another agent the calling agent may hand a task to now (``Context.subagent``): its config, the tools its model
    is offered, and calls as that agent, through its own view and pipeline."""

    def __init__(self, ctx: Context, view: AgentView, config: AgentConfig, chain: tuple[str, ...],
                 exclude: frozenset[str] = frozenset()) -> None:
        self._ctx = ctx
        self._view = view
        self.name = view.agent
        self.config = config
        self.chain = chain  # the chain while it runs: ..., the caller, this agent
        self.exclude = exclude  # tools of the view it is not offered (and cannot call)

    @property
    def description(self) -> str | None:
        return self.config.description

    @property
    def max_turns(self) -> int:
        return self.config.max_turns

    def tools(self) -> list[dict[str, Any]]:
        """Its tools as its model is offered them (MCP tools/list objects). A tool that describes itself per agent
        is described for this agent within this chain (``toolcrib__run_agent`` names only the agents it may still
        run, and is gone when there are none)."""
        rechecked = [vt.entry for vt in self._view.tools if vt.tool.describe is not None
                     and vt.tool.is_available is not None and vt.name not in self.exclude]
        # within this chain, through the same budgeted runner as every view's checks
        answers = check_availability(self._view.rules, rechecked, self.chain) if rechecked else {}
        tools = []
        for vt, wire in zip(self._view.tools, self._view.mcp_tools, strict=True):
            if vt.name in self.exclude:
                continue
            describe = vt.tool.describe
            if describe is not None:
                if vt.name in answers and not answers[vt.name][0]:
                    continue
                wire = {**wire, "description": clean(describe(self._view.availability_context(vt.entry, self.chain)))}
            tools.append(wire)
        return tools

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """While the block runs, calls anywhere below are in this agent's run (no agent of the chain is offered),
        a conversation of its own."""
        token = CHAIN.set(self.chain)
        talk = CONVERSATION.set(set())
        try:
            yield
        finally:
            CONVERSATION.reset(talk)
            CHAIN.reset(token)

    async def refuse(self, name: str) -> ToolResult:
        """The answer to a call of a tool it is not offered, audited as a direct call of a hidden tool is."""
        return ToolResult.error(str(self._view.unknown(name, channel=self._ctx._channel)))

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        """Call one of its tools as it; an unknown or hidden one answers as unknown. An approval its call needs is
        put to the caller's approver, except one that would need a new round trip of the caller's whole call
        (2026-07-28): that call is refused, saying why."""
        if name in self.exclude:
            return await self.refuse(name)
        try:
            return await self._view.call(name, arguments if arguments is not None else {},
                                         approver=_nested(self._ctx._approver), channel=self._ctx._channel)
        except UnknownToolError as exc:
            return ToolResult.error(str(exc))


def subagent(ctx: Context, name: str) -> Delegate | None:
    view = ctx._view
    services = view.services if view is not None else None
    if services is None or name not in services.agent_configs or not permits(ctx, "subagents", name):
        return None
    return Delegate(ctx, services.view(name), services.agent_configs[name], (*chain_of(ctx), name))


def itself(ctx: Context, exclude: frozenset[str]) -> Delegate | None:
    """The calling agent as a delegate of its own call: a temporary sub-agent with exactly the caller's view (its
    permissions, never wider), without the tools in ``exclude``."""
    view = ctx._view
    if view is None:
        return None
    return Delegate(ctx, view, view.rules.config, chain_of(ctx), exclude)


def _nested(approver: Any) -> Any:
    if approver is None:
        return None

    async def ask(*args: Any) -> Any:
        try:
            return await approver(*args)
        except Suspend:
            return Deny("a sub-agent's call cannot be put to the user from inside its run on a 2026-07-28 "
                        "connection (use a 2025-11-25 session, or an approval hook)")

    return ask


class Server:
    """An upstream server the calling agent may load (``Context.server``): connected on first use; only the tools
    the agent may see are listed or called, through the agent's own pipeline."""

    def __init__(self, ctx: Context, source: Source) -> None:
        self._ctx = ctx
        self._source = source
        self.name = source.name

    async def _visible(self) -> list[Entry]:
        view = self._ctx._view
        assert view is not None
        return [e for e in await self._source.fetch() if e.kind == "tool" and decide(view.rules, e).visible]

    async def tools(self) -> list[dict[str, Any]]:
        """Its tools this agent may call: name (the server's own), description, input schema."""
        return [{"name": e.tool.name, "description": clean(e.tool.description),
                 "inputSchema": e.tool.wire_input_schema} for e in await self._visible()]

    async def call(self, tool: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        """Call one of its tools through this agent's pipeline (its argument and ``ask`` rules, hooks, audit);
        ``ToolError("Unknown tool: <server>__<tool>")`` for one it may not see or that does not exist."""
        full = f"{self.name}__{tool}"
        entry = next((e for e in await self._visible() if e.name == full), None)
        if entry is None:
            raise ToolError(f"Unknown tool: {full}")  # hidden and nonexistent alike
        view = self._ctx._view
        assert view is not None
        return await view.run(entry, arguments or {}, approver=self._ctx._approver, channel=self._ctx._channel)

    async def read(self, uri: str) -> ToolResult:
        """One of its resources, as embedded resource content."""
        return await self._source.read(uri)


def server(ctx: Context, name: str) -> Server | None:
    view = ctx._view
    services = view.services if view is not None else None
    if services is None or name not in services.lazy_servers or not permits(ctx, "mcps", name):
        return None
    source = services.source(name)
    return Server(ctx, source) if source is not None else None


class CallCapabilities:
    """What an agent's view lends the calls it runs (``Context.permits``, ``subagent``, ``itself``, ``server``):
    each answers through the one decision, for the calling agent within its chain of runs."""

    permits = staticmethod(permits)
    subagent = staticmethod(subagent)
    itself = staticmethod(itself)
    server = staticmethod(server)


CAPABILITIES = CallCapabilities()
