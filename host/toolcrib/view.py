"""One agent's view: the tools it sees, in a stable order, built once per (config, catalog) and then only read.

Every front end (Python API, CLI, MCP, schema export) reads views; none filters tools on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from toolcrib.catalog import Entry
from toolcrib.content import ToolResult
from toolcrib.context import Approver, AvailabilityContext, ClientChannel
from toolcrib.errors import UnknownToolError
from toolcrib.names import clean, clean_schema
from toolcrib.permissions import AgentRules, CallRules, availability_context, check_availability, decide, permitted
from toolcrib.tool import Tool

if TYPE_CHECKING:
    from toolcrib.scope import Services

log = logging.getLogger("toolcrib.view")

EXPORT_FORMATS = ("mcp", "openai", "anthropic")


class Pipeline(Protocol):
    """What a view needs of the call pipeline (``toolcrib.calls.Pipeline``), so that data flows one way: the
    pipeline knows views, views know only this."""

    call_timeout: float

    def call(self, view: AgentView, name: str, arguments: Any, *, approver: Approver | None = None,
             channel: ClientChannel | None = None) -> Awaitable[ToolResult]: ...

    async def run(self, view: AgentView, vt: ViewTool, arguments: Any, approver: Approver | None = None,
                  channel: ClientChannel | None = None, started: float = 0.0) -> ToolResult: ...


@dataclass(frozen=True, slots=True)
class ViewTool:
    """A tool as one agent sees it: the catalog entry plus the call rules and timeout that apply."""

    entry: Entry
    call_rules: CallRules | None
    timeout: float
    own_description: str | None = None  # written for this agent (load_skill lists the agent's skills)
    name: str = field(init=False)  # copies of entry.name and entry.tool: read on every call
    tool: Tool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.entry.name)
        object.__setattr__(self, "tool", self.entry.tool)

    @property
    def description(self) -> str:
        """The description as the agent reads it (hidden characters and escape sequences removed)."""
        return clean(self.own_description if self.own_description is not None else self.tool.description)

    def to_mcp(self) -> dict[str, Any]:
        """This tool as MCP's tools/list shows it (camelCase wire keys). Every text is ``names.clean``: whatever
        a pack or a server wrote, an agent never gets hidden characters."""
        tool = self.entry.tool
        wire: dict[str, Any] = {"name": self.entry.name}
        if tool.title:
            wire["title"] = clean(tool.title)
        wire["description"] = self.description
        try:
            wire["inputSchema"] = clean_schema(tool.input_schema)
            output = tool.output_schema
        except Exception:
            # A tool whose schema cannot be built stays listed (listing and calling agree); a call of it is an
            # error result, and `toolcrib check` reports it.
            log.exception("tool %s: its schemas cannot be built", self.entry.name)
            wire["inputSchema"] = {"type": "object"}
            output = None
        if output is not None:
            wire["outputSchema"] = clean_schema(output)
        if tool.annotations:
            annotations = dict(tool.annotations)
            if isinstance(annotations.get("title"), str):
                annotations["title"] = clean(annotations["title"])
            wire["annotations"] = annotations
        return wire


class AgentView:
    """The tools one agent sees. Immutable once built; ``call`` runs the full pipeline. ``services`` is what the
    host lends the capabilities of ``Context`` (other agents' views, lazy servers)."""

    def __init__(self, rules: AgentRules, tools: tuple[ViewTool, ...], pipeline: Pipeline,
                 services: Services | None = None) -> None:
        self.rules = rules
        self.tools = tools
        self._by_name: Mapping[str, ViewTool] = {vt.name: vt for vt in tools}
        self._pipeline = pipeline
        self.services = services

    @property
    def agent(self) -> str:
        return self.rules.agent

    @property
    def mode(self) -> str:
        return self.rules.mode

    @property
    def names(self) -> list[str]:
        return [vt.name for vt in self.tools]

    def lookup(self, name: Any) -> ViewTool | None:
        """The tool of that exact name, or None (hidden and nonexistent alike)."""
        return self._by_name.get(name) if isinstance(name, str) else None

    def __contains__(self, name: object) -> bool:
        return self.lookup(name) is not None

    def __len__(self) -> int:
        return len(self.tools)

    def get(self, name: str) -> ViewTool:
        """The tool, or ``UnknownToolError`` - word for word the same for hidden and nonexistent tools."""
        vt = self.lookup(name)
        if vt is None:
            raise UnknownToolError(name)
        return vt

    @cached_property
    def mcp_tools(self) -> list[dict[str, Any]]:
        """The tools/list payload (wire dicts), built once per view."""
        return [vt.to_mcp() for vt in self.tools]

    def export(self, format: str = "mcp") -> list[dict[str, Any]]:
        """This view's tools for a framework: ``mcp`` (the tools/list objects), ``openai`` (function tools for
        chat completions) or ``anthropic`` (tool definitions for the Messages API)."""
        tools = self.mcp_tools
        if format == "mcp":
            return [dict(t) for t in tools]
        if format == "openai":
            return [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                                      "parameters": t["inputSchema"]}} for t in tools]
        if format == "anthropic":
            return [{"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}
                    for t in tools]
        raise ValueError(f"unknown export format {format!r}; formats: {', '.join(EXPORT_FORMATS)}")

    @property
    def pipeline(self) -> Pipeline:
        return self._pipeline

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        approver: Approver | None = None,
        channel: ClientChannel | None = None,
    ) -> Awaitable[ToolResult]:
        """Call a tool through the full pipeline, as this agent (``await view.call(...)``). ``UnknownToolError``
        for a name it does not see."""
        return self._pipeline.call(self, name, arguments, approver=approver, channel=channel)

    async def run(self, entry: Entry, arguments: Mapping[str, Any], *, approver: Approver | None = None,
                  channel: ClientChannel | None = None) -> ToolResult:
        """Call a tool that is not in this view's list but that ``decide`` let this agent see (a lazy server's,
        loaded during a call), through the same pipeline."""
        vt = view_tool(self.rules, entry, self._pipeline.call_timeout)
        return await self._pipeline.run(self, vt, arguments, approver, channel)

    def availability_context(self, entry: Entry, chain: tuple[str, ...] = ()) -> AvailabilityContext:
        return availability_context(self.rules, entry, chain)

    def __repr__(self) -> str:
        return f"<AgentView {self.agent!r}: {len(self.tools)} tools>"


def view_tool(rules: AgentRules, entry: Entry, call_timeout: float) -> ViewTool:
    """``entry`` as ``rules.agent`` sees it (the caller has decided it may): its call rules, its timeout, and its
    description when the tool writes one for each agent."""
    timeout = entry.tool.timeout if entry.tool.timeout is not None else call_timeout
    describe = entry.tool.describe
    own = describe(availability_context(rules, entry)) if describe is not None else None
    return ViewTool(entry=entry, call_rules=rules.call_rules(entry), timeout=timeout, own_description=own)


def build_view(rules: AgentRules, entries: Mapping[str, Entry], pipeline: Pipeline,
               services: Services | None = None) -> AgentView:
    """The agent's view of ``entries``: each tool goes through ``decide``, the one decision function. The
    availability checks of the tools the rules permit run first, together, each within its time budget."""
    checked = [e for e in entries.values() if e.tool.is_available is not None and permitted(rules, e)]
    answers = check_availability(rules, checked) if checked else None
    visible = []
    for name in sorted(entries):
        entry = entries[name]
        if decide(rules, entry, availability=answers).visible:
            visible.append(view_tool(rules, entry, pipeline.call_timeout))
    return AgentView(rules, tuple(visible), pipeline, services)
