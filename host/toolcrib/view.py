"""One agent's view: the tools it sees, in a stable order, built once per (config, catalog) and then only read.

Every front end (Python API, CLI, MCP, schema export) reads views; none filters tools on its own.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from toolcrib import patterns, schemas, uris
from toolcrib.content import ToolResult
from toolcrib.context import SEARCHING, Approver, AvailabilityContext, ClientChannel
from toolcrib.declarations import Completions
from toolcrib.entries import Entry
from toolcrib.errors import UnknownToolError
from toolcrib.names import SEPARATOR, SOURCE_NAME_KEY, clean, clean_schema
from toolcrib.permissions import (
    VIEW_PROXIES,
    AgentRules,
    CallRules,
    Check,
    availability_context,
    availability_key,
    check_availability,
    check_policies,
    decide,
    permitted,
    uri_check,
)
from toolcrib.reach import CAPABILITIES
from toolcrib.search import ToolIndex
from toolcrib.tool import Tool

if TYPE_CHECKING:
    from toolcrib.reach import HostServices

_FIXED = Check("uri", True, "a fixed resource the agent sees")
log = logging.getLogger("toolcrib.view")

EXPORT_FORMATS = ("mcp", "openai", "openai-responses", "anthropic")


_freezing = False  # whether what a build made is frozen out of the collector's scans (freeze_builds)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for the block, then as it was (reference counting still frees). Loading
    packs and building a view or its wire list make many objects that live as long as the host and few cycles: the
    collector, run meanwhile, would only scan them again and again (a quarter of the time with 1,000 packs). In a
    process that freezes its builds (``freeze_builds``), what is alive at the end is frozen, then the collector is
    switched back on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if _freezing:
                gc.freeze()
            gc.enable()


def freeze_builds(on: bool = True) -> None:
    """Freeze what each host or view build leaves alive out of the cyclic collector's scans (``gc.freeze``), for
    a process whose host lives until it exits: the ``toolcrib`` command (``toolcrib.cli.run``).

    Once the collector is back on, the first full collection would scan everything the build made (the host, its
    packs' modules, the wire lists): 60-70 ms at 1,000 tools, in the first request, and as much in every later full
    collection. Frozen, they are never scanned. Whoever replaces the host calls ``thaw_builds`` (the serving
    state's reload does). Off by default: a program that builds many hosts (tests, a library user) would keep each
    one's cycles for good."""
    global _freezing
    _freezing = on


def thaw_builds() -> None:
    """After the host was replaced, in a process that froze its builds: the collector back to its usual ways,
    builds included, so that the replaced host's cycles are collected when the collector comes to them. Nothing is
    collected here: a full collection over everything (both hosts, the SDK), forced at the reload, held the event
    loop 0.6-0.7 s at 10,000 tools."""
    global _freezing
    if _freezing:
        _freezing = False
        gc.unfreeze()


class Pipeline(Protocol):
    """What a view needs of the call pipeline (``toolcrib.calls.Pipeline``), so that data flows one way: the
    pipeline knows views, views know only this."""

    call_timeout: float

    def call(self, view: AgentView, name: str, arguments: Any, *, approver: Approver | None = None,
             channel: ClientChannel | None = None) -> Awaitable[ToolResult]: ...

    async def run(self, view: AgentView, vt: ViewTool, arguments: Any, approver: Approver | None = None,
                  channel: ClientChannel | None = None, started: float = 0.0) -> ToolResult: ...

    def unknown(self, view: AgentView, name: Any, channel: ClientChannel | None) -> UnknownToolError: ...

    async def read(self, view: AgentView, uri: str, *,
                   channel: ClientChannel | None = None) -> list[dict[str, Any]]: ...

    async def get_prompt(self, view: AgentView, name: str, arguments: Mapping[str, Any] | None = None, *,
                         channel: ClientChannel | None = None) -> dict[str, Any]: ...

    async def complete(self, view: AgentView, ref: Mapping[str, Any], argument: str, value: str,
                       context: Mapping[str, str] | None = None) -> Completions: ...


@dataclass(frozen=True, slots=True)
class ViewTool:
    """A tool as one agent sees it: the catalog entry plus the call rules and timeout that apply."""

    entry: Entry
    call_rules: CallRules | None
    timeout: float
    own_description: str | None = None  # written for this agent (load_skill lists the agent's skills)
    served: str = ""  # the name MCP clients see: the full name, or without its namespace (bare_names)
    name: str = field(init=False)  # copies of entry.name and entry.tool: read on every call
    tool: Tool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", self.entry.name)
        object.__setattr__(self, "tool", self.entry.tool)
        if not self.served:
            object.__setattr__(self, "served", self.entry.name)

    @property
    def description(self) -> str:
        """The description as the agent reads it (hidden characters and escape sequences removed)."""
        return clean(self.own_description if self.own_description is not None else self.tool.description)

    def to_mcp(self) -> dict[str, Any]:
        """This tool as MCP's tools/list shows it (camelCase wire keys). Every text is ``names.clean``: whatever
        a pack or a server wrote, an agent never gets hidden characters."""
        tool = self.entry.tool
        wire: dict[str, Any] = {"name": self.served}
        if tool.title:
            wire["title"] = clean(tool.title)
        wire["description"] = self.description
        try:
            wire["inputSchema"] = tool.wire_input_schema
            output = tool.wire_output_schema
        except Exception:
            # A tool whose schema cannot be built stays listed (listing and calling agree); a call of it is an
            # error result, and `toolcrib check` reports it.
            log.exception("tool %s: its schemas cannot be built", self.entry.name)
            wire["inputSchema"] = {"type": "object"}
            output = None
        if output is not None:
            wire["outputSchema"] = output
        if tool.annotations:
            annotations = dict(tool.annotations)
            if isinstance(annotations.get("title"), str):
                annotations["title"] = clean(annotations["title"])
            wire["annotations"] = annotations
        if tool.icons:
            wire["icons"] = [dict(icon) for icon in tool.icons]
        meta = dict(tool.meta) if tool.meta else {}
        if tool.source_name is not None:
            meta[SOURCE_NAME_KEY] = tool.source_name  # toolcrib's own key, beside the source's
        if meta:
            wire["_meta"] = meta
        return wire


def estimated_tokens(tools: list[dict[str, Any]]) -> int:
    """About how many tokens these definitions cost a model: 4 characters of their compact JSON a token (the
    usual estimate for English text and JSON; a real tokenizer differs by model)."""
    return math.ceil(len(json.dumps(tools, separators=(",", ":"))) / 4)


MAX_NAMES_SHOWN = 30  # of a namespace's tools, in its description


def _namespace_description(members: list[tuple[ViewTool, dict[str, Any]]]) -> str:
    """What a model is told of a namespace before it searches it (OpenAI's namespaces show only this): its source
    and its tools' names."""
    entry = members[0][0].entry
    source = entry.supplier.the
    made = f" ({entry.distribution} {entry.version})" if entry.distribution and entry.version else ""
    names = [vt.name.split("__", 1)[-1] for vt, _ in members]
    shown = ", ".join(names[:MAX_NAMES_SHOWN]) + (f" and {len(names) - MAX_NAMES_SHOWN} more"
                                                 if len(names) > MAX_NAMES_SHOWN else "")
    return f"{len(names)} tools of {source} {entry.namespace}{made}: {shown}"

# Anthropic's server-side tool search (BM25), which finds the tools an export marks ``defer_loading``
ANTHROPIC_TOOL_SEARCH = {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}


class ResourcesAndPrompts(NamedTuple):
    """What a view shows besides its tools."""

    resources: tuple[Entry, ...] = ()  # the fixed ones
    templates: tuple[Entry, ...] = ()
    prompts: tuple[tuple[str, Entry], ...] = ()  # (the name it is served under, the prompt)


class ServedUris:
    """Every resource URI some source serves, whatever the agent: the fixed resources' (in normal form) and the
    templates. A result may not hand an agent one of these that its view does not let it read
    (``AgentView.hides_uri``); ``explain`` finds what a URI is by it."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        entries = list(entries)
        self.fixed = {uris.normalize(e.resource.uri): e for e in entries if e.kind == "resource"}
        self.templates = tuple(e for e in entries if e.kind == "template")

    def find(self, normal: str) -> tuple[Entry, dict[str, str]] | None:
        """What serves the normal URI ``normal``: a fixed resource, or the first template it fits with the
        template's parameters; None when nothing does."""
        fixed = self.fixed.get(normal)
        if fixed is not None:
            return fixed, {}
        for template in self.templates:
            parameters = template.resource.match(normal)
            if parameters is not None:
                return template, parameters
        return None

    def __contains__(self, normal: object) -> bool:
        return isinstance(normal, str) and self.find(normal) is not None


def referred_uri(item: Mapping[str, Any]) -> Any:
    """The resource URI a content block, a prompt message's content or a read's contents item refers to: a
    ``resource_link``'s, an embedded ``resource``'s, a contents item's own; None for anything else."""
    kind = item.get("type")
    if kind == "resource":
        embedded = item.get("resource")
        return embedded.get("uri") if isinstance(embedded, Mapping) else None
    return item.get("uri") if kind in ("resource_link", None) else None


class AgentView:
    """The tools one agent sees. Immutable once built; ``call`` runs the full pipeline. ``services`` is what the
    host lends the capabilities of ``Context`` (other agents' views, lazy servers), ``reach`` how they answer."""

    reach = CAPABILITIES

    def __init__(self, rules: AgentRules, tools: tuple[ViewTool, ...], pipeline: Pipeline,
                 services: HostServices | None = None,
                 others: Callable[[], ResourcesAndPrompts] = ResourcesAndPrompts,
                 served: Callable[[], ServedUris] = lambda: ServedUris(())) -> None:
        self.rules = rules
        self.tools = tools
        self._header_schemas: dict[str, dict[str, Any] | None] = {}  # header_schema's answers, asked per tool
        self._by_name: Mapping[str, ViewTool] = {**{vt.name: vt for vt in tools}, **{vt.served: vt for vt in tools}}
        self._pipeline = pipeline
        self.services = services
        self._decide_others = others
        self._served_of = served

    @cached_property
    def _others(self) -> ResourcesAndPrompts:
        """The resources, templates and prompts this agent sees, decided at the first look at any of them: a
        client asks for its tools first, and at 10,000 resources deciding them costs a tenth of a second."""
        return self._decide_others()

    @cached_property
    def resources(self) -> tuple[Entry, ...]:
        """The fixed resources."""
        return self._others.resources

    @cached_property
    def templates(self) -> tuple[Entry, ...]:
        return self._others.templates

    @cached_property
    def prompts(self) -> tuple[Entry, ...]:
        return tuple(entry for _, entry in self._others.prompts)

    @cached_property
    def served_prompts(self) -> Mapping[str, str]:
        """Each prompt's name as this agent is served it, by its full name."""
        return {entry.name: served for served, entry in self._others.prompts}

    @cached_property
    def _prompts(self) -> Mapping[str, Entry]:
        prompts = self._others.prompts
        return {**{entry.name: entry for _, entry in prompts}, **{served: entry for served, entry in prompts}}

    @cached_property
    def _resources(self) -> Mapping[str, Entry]:
        """The fixed resources by normal URI."""
        return {uris.normalize(entry.resource.uri): entry for entry in self.resources}

    # -- resources and prompts ---------------------------------------------------------------------------------

    def resource(self, uri: Any) -> tuple[Entry, dict[str, str]] | None:
        """The resource this agent may read at ``uri`` (a fixed one, or a template it fits, with the template's
        parameters), or None: hidden and nonexistent alike. The URI is taken in its normal form (``toolcrib.uris``:
        ``docs://pages/%69nternal`` is ``docs://pages/internal``). A deny rule or a lacking scope that names the URI
        itself, or the URI the template re-expands to from its parameters, hides it, even where it fits a template
        the agent sees."""
        if not isinstance(uri, str):
            return None
        found = self.find_resource(uri)
        return found[:2] if found is not None and found[2].passed else None

    def find_resource(self, uri: str) -> tuple[Entry, dict[str, str], Check] | None:
        """What ``uri`` (normalised) is in this view: a fixed resource or the template it fits, its parameters, and
        the check of the URI itself (``permissions.uri_check``); None when nothing the agent sees has it."""
        normal = uris.normalize(uri)
        fixed = self._resources.get(normal)
        if fixed is not None:
            return fixed, {}, _FIXED
        for template in self.templates:
            parameters = template.resource.match(normal)
            if parameters is not None:
                expanded = uris.expand(template.resource.uri, parameters)
                return template, parameters, uri_check(self.rules, [normal] if expanded in (None, normal) else
                                                       [normal, expanded])
        return None

    @cached_property
    def _served(self) -> ServedUris:
        return self._served_of()

    def hides_uri(self, uri: Any) -> bool:
        """Whether a result may not hand this agent ``uri``: a resource some source serves that this view does not
        let it read, or a URI its rules name to hide (a deny rule of ``resources``, a scope its token lacks). The
        decision of resources/list and resources/read, on the normal form. A URI that no source serves and no rule
        names (a web page, a file a tool wrote) is no resource of the host's: it passes."""
        if not isinstance(uri, str) or self.resource(uri) is not None:
            return False
        normal = uris.normalize(uri)
        return normal in self._served or not uri_check(self.rules, [normal]).passed

    def withhold(self, items: Sequence[Any], inner: str = "") -> tuple[list[Any], list[str]]:
        """``items`` (a result's content blocks, a read's contents; with ``inner``, what holds one under that key: a
        prompt's messages) without those that refer to a resource this agent may not see (``hides_uri``), and the
        URIs of those taken out."""
        kept: list[Any] = []
        taken: list[str] = []
        for item in items:
            block = item.get(inner) if inner and isinstance(item, Mapping) else item
            uri = referred_uri(block) if isinstance(block, Mapping) else None
            if uri is not None and self.hides_uri(uri):
                taken.append(uri)
            else:
                kept.append(item)
        return kept, taken

    def withhold_app(self, meta: Mapping[str, Any], taken: list[str]) -> Mapping[str, Any]:
        """A tool's or a result's ``_meta`` without its MCP App's ``ui`` (``ui.resourceUri``, or the older
        ``ui/resourceUri``) where that names a resource this agent may not see (its URI appended to ``taken``):
        ``meta`` itself when nothing is withheld."""
        ui = meta.get("ui")
        named = [ui.get("resourceUri")] if isinstance(ui, Mapping) else []
        named.append(meta.get("ui/resourceUri"))
        hidden = [uri for uri in named if isinstance(uri, str) and self.hides_uri(uri)]
        if not hidden:
            return meta
        taken += hidden
        return {key: value for key, value in meta.items() if key not in ("ui", "ui/resourceUri")}

    def prompt(self, name: Any) -> Entry | None:
        """The prompt of that name (served or full), or None: hidden and nonexistent alike."""
        return self._prompts.get(name) if isinstance(name, str) else None

    @cached_property
    def mcp_resources(self) -> list[dict[str, Any]]:
        """The resources/list payload."""
        return [clean_schema(entry.to_wire()) for entry in self.resources]

    @cached_property
    def mcp_templates(self) -> list[dict[str, Any]]:
        """The resources/templates/list payload."""
        return [clean_schema(entry.to_wire()) for entry in self.templates]

    @cached_property
    def mcp_prompts(self) -> list[dict[str, Any]]:
        """The prompts/list payload (served names)."""
        return [{**clean_schema(entry.to_wire()), "name": self.served_prompts[entry.name]} for entry in self.prompts]

    def read(self, uri: str, *, channel: ClientChannel | None = None) -> Awaitable[list[dict[str, Any]]]:
        """Read a resource as this agent (``await view.read(uri)``): its contents, as MCP's resource contents.
        ``UnknownResourceError`` for a URI it may not read, hidden or nonexistent alike."""
        return self._pipeline.read(self, uri, channel=channel)

    def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None, *,
                   channel: ClientChannel | None = None) -> Awaitable[dict[str, Any]]:
        """Get a prompt as this agent: ``{"description", "messages"}`` as MCP's prompts/get answers.
        ``UnknownPromptError`` for a name it does not see."""
        return self._pipeline.get_prompt(self, name, arguments, channel=channel)

    def complete(self, ref: Mapping[str, Any], argument: str, value: str,
                 context: Mapping[str, str] | None = None) -> Awaitable[Completions]:
        """The values an argument of a prompt (``{"type": "ref/prompt", "name": ...}``) or of a resource template
        (``{"type": "ref/resource", "uri": <the template>}``) may take, starting from ``value``; nothing for what
        this agent does not see."""
        return self._pipeline.complete(self, ref, argument, value, context)

    @property
    def agent(self) -> str:
        return self.rules.agent

    @property
    def mode(self) -> str:
        return self.rules.mode

    @property
    def names(self) -> list[str]:
        return [vt.name for vt in self.tools]

    def unknown(self, name: Any, *, channel: ClientChannel | None = None) -> UnknownToolError:
        """The error for a call of a tool this agent does not see (or is not offered), with its audit record, as
        a direct call of such a name gets."""
        return self._pipeline.unknown(self, name, channel)

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
        """The tools/list payload (wire dicts), built once per view. A proxy that calls the agent's own tools
        (``toolcrib__call_tool``) is annotated as the least permissive of them: read-only only if they all are,
        destructive or open-world if any is, idempotent only if all are."""
        with collector_paused():
            wires = [vt.to_mcp() for vt in self.tools]
            for vt, wire in zip(self.tools, wires, strict=True):
                if vt.name in VIEW_PROXIES:
                    wire["annotations"] = {**wire.get("annotations", {}), **self._reached_annotations()}
                if vt.tool.meta:  # an MCP App's ui:// resource this agent may not see is not named to it
                    meta = self.withhold_app(wire["_meta"], [])
                    if meta is not wire["_meta"]:
                        wire["_meta"] = meta
            return wires

    @cached_property
    def _wires(self) -> dict[str, dict[str, Any]]:
        return {wire["name"]: wire for wire in self.mcp_tools}

    def header_schema(self, name: str) -> dict[str, Any] | None:
        """The input schema of a tool of this view (by any name a call may use) when it routes arguments into
        ``Mcp-Param-*`` headers (``x-mcp-header``), as tools/list shows it; None for any other tool, and for a tool
        the view does not have (there is nothing to check a call's headers against)."""
        vt = self.lookup(name)
        if vt is None:
            return None
        if vt.served not in self._header_schemas:
            schema = self._wires[vt.served]["inputSchema"]
            self._header_schemas[vt.served] = schema if _mentions(schema, "x-mcp-header") else None
        return self._header_schemas[vt.served]

    def _reached_annotations(self) -> dict[str, bool]:
        reached = [vt for vt in self.tools if vt.name not in SEARCHING]
        hints = [vt.tool.annotations for vt in reached]
        read_only = all(vt.entry.read_only for vt in reached)
        return {"readOnlyHint": read_only,
                "destructiveHint": not read_only and any(vt.entry.destructive for vt in reached),
                "idempotentHint": all(vt.entry.read_only or (vt.entry.trusted and h.get("idempotentHint") is True)
                                      for vt, h in zip(reached, hints, strict=True)),
                "openWorldHint": any(not vt.entry.trusted or h.get("openWorldHint", True) is not False
                                     for vt, h in zip(reached, hints, strict=True))}

    @cached_property
    def searching_names(self) -> frozenset[str]:
        """The served names of the tools that search and call for the agent (``toolcrib__search_tools``,
        ``toolcrib__call_tool``), where it sees them."""
        return frozenset(vt.served for vt in self.tools if vt.name in SEARCHING)

    @cached_property
    def deferring(self) -> bool:
        """Whether the agent's tools are listed a few up front, the rest found by search: it has ``tool_search``,
        sees ``toolcrib__search_tools``, and passes a threshold (``when_more_than`` tools, ``when_tokens_more_than``
        tokens of definitions) or has none."""
        config = self.rules.config.tool_search
        if config is None or self.lookup(SEARCHING[0]) is None:
            return False
        if config.when_more_than is None and config.when_tokens_more_than is None:
            return True  # no threshold: always
        others = [wire for wire in self.mcp_tools if wire["name"] not in self.searching_names]
        return (config.when_more_than is not None and len(others) > config.when_more_than) or \
            (config.when_tokens_more_than is not None and estimated_tokens(others) > config.when_tokens_more_than)

    @cached_property
    def listed_tools(self) -> list[dict[str, Any]]:
        """What tools/list holds before any search: every tool; or, deferring, those ``tool_search.listed``
        names and the search tools. A tool left out is still the agent's: a call by its name works."""
        config = self.rules.config.tool_search
        if not self.searching_names:
            return self.mcp_tools  # no tool_search: the whole list, not a copy of it
        if not self.deferring or config is None:
            return [wire for vt, wire in zip(self.tools, self.mcp_tools, strict=True)
                    if vt.served not in self.searching_names]
        up_front = [patterns.parse("tools", text) for text in config.listed]
        return [wire for vt, wire in zip(self.tools, self.mcp_tools, strict=True)
                if vt.served in self.searching_names or any(p.matches(vt.name) for p in up_front)]

    def prepare(self) -> None:
        """Build now what this agent's first tools/list (and, where it searches its tools, its first search)
        would. The other lists wait for their first request: a client asks for its tools first, and at 10,000
        resources their list costs a quarter of a second more."""
        _ = self.listed_tools
        if self.searching_names:
            _ = self._index

    def search(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """The ``k`` tools of this view that best match ``query``, best first, as tools/list has them: BM25 over
        served names, descriptions and arguments, a served name itself, or ``/regex/`` over served names
        (``toolcrib.search``). Only what this agent sees is ever indexed. ``SearchError`` for a bad query."""
        return self._index.search(query, k)

    @cached_property
    def _index(self) -> ToolIndex:
        with collector_paused():
            return ToolIndex([wire for wire in self.mcp_tools if for_model(wire)],
                             {vt.served: vt.tool.keywords for vt in self.tools if vt.tool.keywords})

    def export(self, format: str = "mcp", strict: bool = False) -> list[dict[str, Any]]:
        """This view's tools for a framework: ``mcp`` (the tools/list objects), ``openai`` (function tools for
        chat completions) or ``anthropic`` (tool definitions for the Messages API). With ``strict``, OpenAI's
        function tools are strict where their schema can be (``not_strict`` says why the others are not)."""
        tools = self.mcp_tools
        if format == "mcp":
            return [dict(t) for t in tools]
        if format == "openai":
            out = []
            for t in filter(for_model, self.listed_tools):
                function = {"name": t["name"], "description": t["description"], "parameters": t["inputSchema"]}
                if strict:
                    function.update(_strict_parameters(t["inputSchema"]))
                out.append({"type": "function", "function": function})
            return out
        if format == "openai-responses":
            return self._responses_tools(strict)
        if format == "anthropic":
            if not self.deferring:
                return [{"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"]}
                        for t in self.listed_tools if for_model(t)]
            # tool_search: the tools not listed up front are deferred, and the API's own tool search finds them
            listed = {t["name"] for t in self.listed_tools}
            defined = [{"name": t["name"], "description": t["description"], "input_schema": t["inputSchema"],
                        **({} if t["name"] in listed else {"defer_loading": True})}
                       for t in tools if t["name"] not in self.searching_names and for_model(t)]
            return [ANTHROPIC_TOOL_SEARCH, *defined]
        raise ValueError(f"unknown export format {format!r}; formats: {', '.join(EXPORT_FORMATS)}")

    def not_strict(self) -> dict[str, str]:
        """The listed tools whose input schema cannot be OpenAI-strict, each with the argument and why."""
        found = {}
        for t in self.listed_tools:
            try:
                schemas.strict(t["inputSchema"])
            except schemas.NotStrict as exc:
                found[t["name"]] = str(exc)
        return found

    def _responses_tools(self, strict: bool = False) -> list[dict[str, Any]]:
        """Function tools for OpenAI's Responses API. Deferring, the tools not listed up front are grouped by
        toolcrib namespace into its namespaces, each tool ``defer_loading``, after its own ``tool_search`` (which
        stands in for toolcrib's two search tools); a tool keeps its served name, so a call maps back to it."""
        def function(wire: dict[str, Any], deferred: bool = False) -> dict[str, Any]:
            made = {"type": "function", "name": wire["name"], "description": wire["description"],
                    "parameters": wire["inputSchema"], "strict": False}
            if strict:
                made.update(_strict_parameters(wire["inputSchema"]))
            return {**made, **({"defer_loading": True} if deferred else {})}

        if not self.deferring:
            return [function(wire) for wire in self.listed_tools if for_model(wire)]
        pairs = [(vt, wire) for vt, wire in zip(self.tools, self.mcp_tools, strict=True) if for_model(wire)]
        listed = {t["name"] for t in self.listed_tools} - self.searching_names
        out: list[dict[str, Any]] = [{"type": "tool_search"}]
        out += [function(wire) for wire in self.mcp_tools if wire["name"] in listed and for_model(wire)]
        groups: dict[str, list[tuple[ViewTool, dict[str, Any]]]] = {}
        for vt, wire in pairs:
            if wire["name"] not in listed and wire["name"] not in self.searching_names:
                groups.setdefault(vt.entry.namespace, []).append((vt, wire))
        for namespace, members in groups.items():
            out.append({"type": "namespace", "name": namespace, "description": _namespace_description(members),
                        "tools": [function(wire, deferred=True) for _, wire in members]})
        return out

    def surface(self) -> dict[str, list[dict[str, Any]]]:
        """Everything this view serves over MCP, as MCP's lists give it: tools, resources, resource templates and
        prompts (``toolcrib schema --format mcp-all``)."""
        return {"tools": [dict(t) for t in self.mcp_tools], "resources": list(self.mcp_resources),
                "resourceTemplates": list(self.mcp_templates), "prompts": list(self.mcp_prompts)}

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


def view_tool(rules: AgentRules, entry: Entry, call_timeout: float, served: str = "") -> ViewTool:
    """``entry`` as ``rules.agent`` sees it (the caller has decided it may): its call rules, its timeout, the name
    it is served under, and its description when the tool writes one for each agent."""
    timeout = entry.tool.timeout if entry.tool.timeout is not None else call_timeout
    describe = entry.tool.describe
    own = describe(availability_context(rules, entry)) if describe is not None else None
    return ViewTool(entry=entry, call_rules=rules.call_rules(entry), timeout=timeout, own_description=own,
                    served=served)


def build_view(rules: AgentRules, entries: Iterable[Entry], pipeline: Pipeline,
               services: HostServices | None = None, served: Callable[[], ServedUris] | None = None) -> AgentView:
    """The agent's view of ``entries`` (tools, resources, templates, prompts): each goes through ``decide``, the
    one decision function. The availability checks of what the rules permit run first, together, each within its
    time budget. ``served``: every URI ``entries`` serve (the host keeps one for all its views); made from
    ``entries`` at its first use otherwise."""
    entries = list(entries)
    verdicts = None
    if rules.policies:  # the policies are asked about what the rules permit, all at once
        allowed = [e for e in entries if permitted(rules, e)]
        verdicts = check_policies(rules, allowed)
        checked = [e for e in allowed if e.is_available is not None and verdicts[availability_key(e)][0]]
    else:
        checked = [e for e in entries if e.is_available is not None and permitted(rules, e)]
    answers = check_availability(rules, checked) if checked else None
    bare = rules.config.bare_names
    tools = sorted((e for e in entries if e.kind == "tool" and decide(rules, e, availability=answers,
                                                                       policy=verdicts).visible),
                   key=lambda e: e.name)
    tool_names = served_names([e.name for e in tools]) if bare else {}
    visible = tuple(view_tool(rules, entry, pipeline.call_timeout, tool_names.get(entry.name, "")) for entry in tools)

    def others() -> ResourcesAndPrompts:  # decided when first looked at, with the same availability answers
        shown: dict[str, list[Entry]] = {"resource": [], "template": [], "prompt": []}
        for entry in entries:
            if entry.kind != "tool" and decide(rules, entry, availability=answers, policy=verdicts).visible:
                shown[entry.kind].append(entry)
        prompts = shown["prompt"]
        prompt_names = served_names([p.name for p in prompts]) if bare else {}
        return ResourcesAndPrompts(tuple(shown["resource"]), tuple(shown["template"]),
                      tuple((prompt_names.get(p.name, p.name), p) for p in prompts))

    return AgentView(rules, visible, pipeline, services, others, served or (lambda: ServedUris(entries)))


def app_uri(tool: Tool) -> str | None:
    """The ``ui://`` resource of the MCP App a tool declares (``_meta.ui.resourceUri``, or the older
    ``ui/resourceUri``), in its normal form; None for a tool with no App."""
    meta = tool.meta or {}
    ui = meta.get("ui")
    uri = ui.get("resourceUri") if isinstance(ui, Mapping) else meta.get("ui/resourceUri")
    return uris.normalize(uri) if isinstance(uri, str) else None


def for_model(wire: Mapping[str, Any]) -> bool:
    """Whether a tool is for the model: not one an MCP App declares for the App alone (``_meta.ui.visibility``
    without ``"model"``), which an MCP client lists for the App's host and keeps from the model, and which a search
    or an export for a model's API leaves out."""
    ui = (wire.get("_meta") or {}).get("ui")
    visibility = ui.get("visibility") if isinstance(ui, Mapping) else None
    return not isinstance(visibility, list) or "model" in visibility


def served_names(full_names: Sequence[str]) -> dict[str, str]:
    """Bare names (``bare_names = true``): each full name without its ``<namespace>__``, except where two share
    the bare name: those keep their full names."""
    bare = [name.split(SEPARATOR, 1)[-1] for name in full_names]
    counts: dict[str, int] = {}
    for name in bare:
        counts[name] = counts.get(name, 0) + 1
    return {full: short for full, short in zip(full_names, bare, strict=True) if counts[short] == 1}


def _mentions(value: Any, key: str) -> bool:
    """Whether ``key`` is a key of any object within a JSON value."""
    if isinstance(value, dict):
        return key in value or any(_mentions(item, key) for item in value.values())
    if isinstance(value, list):
        return any(_mentions(item, key) for item in value)
    return False


def _strict_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """``{"parameters": ..., "strict": True}`` where ``schema`` can be OpenAI-strict, else ``{"strict": False}``."""
    try:
        return {"parameters": schemas.strict(schema), "strict": True}
    except schemas.NotStrict:
        return {"strict": False}
