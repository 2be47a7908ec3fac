"""What the catalog holds: ``Entry``, one thing a source offers (a tool, a resource, a resource template or a
prompt) under its full name, with its provenance. Plain data, so that the decision (``permissions``) and the views
can use it without importing how a catalog is built (plugin loading)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from toolcrib.declarations import Prompt, Resource
from toolcrib.tool import Tool

if TYPE_CHECKING:
    from toolcrib.config import Config, LoadedConfig
    from toolcrib.errors import Problem
    from toolcrib.plugins import PluginRecord

RULE_DIMENSION = {"tool": "tools", "resource": "resources", "template": "resources", "prompt": "prompts"}
"""The permission dimension whose rule names an entry of each kind (beside its source's dimension)."""


def _no_table(config: Config) -> Mapping[str, Any]:
    return {}


def _no_warnings(loaded: LoadedConfig, governing: frozenset[str]) -> list[Problem]:
    return []


def _none_withheld(loaded: LoadedConfig) -> frozenset[str]:
    return frozenset()


def _none_unserved(loaded: LoadedConfig, given: Collection[str]) -> list[PluginRecord]:
    return []


@dataclass(frozen=True)
class Kind:
    """A kind of source, as the core sees it.

    ``name`` is its records' ``kind`` and its entries' ``supplier``, ``dimension`` the permission dimension whose
    rules name its sources (none: the host's own); ``label`` names one of its sources in a message
    (``upstream server 'github'``), ``the`` in a namespace's description, ``noun`` in a hint (``rename the
    server``). ``table`` gives its config table (namespace -> that source's config, disabled ones too: the names
    its rules may use), and ``where`` describes an enabled one in a clash (``{ns}`` its namespace): a kind with a
    table claims its namespaces from every pack. ``warnings`` are its ``toolcrib check`` warnings (``governing``:
    the names of what governs the host), ``withheld`` the packs it serves itself (never imported by the host), and
    ``unserved`` a failed record for each of those a host was given no source for (``given``: the sources' names).
    ``supplier`` makes what makes its sources (``toolcrib.sources.MakeSupplier``; none: the host loads them
    itself, as pluggy plugins).
    """

    name: str
    label: str
    the: str
    noun: str
    dimension: str | None = "plugins"
    table: Callable[[Config], Mapping[str, Any]] = _no_table
    where: str = ""
    warnings: Callable[[LoadedConfig, frozenset[str]], list[Problem]] = _no_warnings
    withheld: Callable[[LoadedConfig], frozenset[str]] = _none_withheld
    unserved: Callable[[LoadedConfig, Collection[str]], list[PluginRecord]] = _none_unserved
    supplier: Callable[[Any, Any], Any] | None = None  # (toolcrib.sources.MakeSupplier)

    def claims(self, config: Config) -> dict[str, str]:
        """The namespaces its enabled sources take, each with where it is configured."""
        if not self.where:
            return {}
        return {ns: self.where.format(ns=ns) for ns, table in self.table(config).items() if table.enabled}


PACK = Kind("pack", "pack", "the pack", "pack")
"""Packs (entry points, tool folders, llm plugins): the pluggy plugins the host loads itself."""
BUILTIN = Kind("builtin", "the host", "toolcrib's", "pack", dimension=None)
"""The host's own tools (``toolcrib__*``), offered by what they serve rather than by a source."""


def kind_of(definition: Tool | Resource | Prompt) -> str:
    if isinstance(definition, Tool):
        return "tool"
    if isinstance(definition, Prompt):
        return "prompt"
    return "template" if definition.is_template else "resource"


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a source's entries come from: one per source, shared by all it offers.

    ``namespace`` is the first half of each full name, ``kind`` the kind of source (``PACK``, ``BUILTIN`` for the
    host's own, which are offered by what they serve rather than by a source, or one of
    ``toolcrib.supply.kinds.KINDS``), ``dimension``/``source`` the permission dimension whose rules govern it and the
    name they give it (``plugins``/``orders`` for a pack, ``mcps``/``time`` for an upstream server; ``source`` is the
    namespace unless given). ``trusted``: whether the host believes what it says of its tools (their annotations).
    ``distribution`` and ``version`` installed it; ``where`` it is configured or found (an entry point, a config
    table, a folder)."""

    namespace: str
    kind: Kind
    dimension: str = "plugins"
    source: str = ""
    trusted: bool = True
    distribution: str | None = None
    version: str | None = None
    where: str = ""

    def __post_init__(self) -> None:
        if not self.source:
            object.__setattr__(self, "source", self.namespace)


@dataclass(frozen=True, slots=True)
class Entry:
    """One tool, resource, template or prompt in the catalog: ``definition`` is what its source declared, ``kind``
    says which of the four it is, ``provenance`` where it comes from (``namespace``, ``supplier``, ``dimension``,
    ``source``, ``distribution`` and ``version`` read it). ``trusted`` says whether the host believes the tool's
    annotations: its source's trust, unless the operator's curation vouched for them. ``read_only`` and
    ``destructive`` are a tool's annotations as the host trusts them: an untrusted upstream server's tool is never
    read-only and always destructive.
    """

    name: str
    provenance: Provenance
    definition: Tool | Resource | Prompt
    settings: Any = None
    trusted: bool | None = None  # (its provenance's unless given: never None once made)
    curation: Any = None  # toolcrib.curation.Curation: what the operator changed of the tool its source serves
    held: str | None = None  # why the definition lock holds the tool back (toolcrib.lock), or None
    app_of: tuple[Entry, ...] = ()  # a resource that is the MCP App (ui://) of these tools: hidden with them
    # from the definition, once (the decision reads them for every entry of every view):
    kind: str = field(init=False)  # "tool" | "resource" | "template" | "prompt"
    uri: str | None = field(init=False)  # a resource's URI (or a template's); None for a tool or a prompt
    is_available: Any = field(init=False)  # the definition's availability check, or None

    @property
    def namespace(self) -> str:
        return self.provenance.namespace

    @property
    def supplier(self) -> Kind:
        """The kind of source that offers it."""
        return self.provenance.kind

    @property
    def dimension(self) -> str:
        return self.provenance.dimension

    @property
    def source(self) -> str:
        return self.provenance.source

    @property
    def distribution(self) -> str | None:
        return self.provenance.distribution

    @property
    def version(self) -> str | None:
        return self.provenance.version

    def __post_init__(self) -> None:
        if self.trusted is None:
            object.__setattr__(self, "trusted", self.provenance.trusted)
        definition = self.definition
        object.__setattr__(self, "kind", kind_of(definition))
        object.__setattr__(self, "uri", definition.uri if isinstance(definition, Resource) else None)
        object.__setattr__(self, "is_available", definition.is_available)

    @property
    def tool(self) -> Tool:
        """The definition of a tool (an entry of another kind has none)."""
        if self.kind == "tool":
            return self.definition  # type: ignore[return-value]
        raise TypeError(f"{self.name!r} is a {self.kind}, not a tool")

    @property
    def item(self) -> Resource | Prompt:
        """The definition of a resource, template or prompt."""
        if isinstance(self.definition, Tool):
            raise TypeError(f"{self.name!r} is a tool")
        return self.definition

    @property
    def resource(self) -> Resource:
        """The definition of a resource or template."""
        if isinstance(self.definition, Resource):
            return self.definition
        raise TypeError(f"{self.name!r} is a {self.kind}, not a resource")

    @property
    def prompt(self) -> Prompt:
        """The definition of a prompt."""
        if isinstance(self.definition, Prompt):
            return self.definition
        raise TypeError(f"{self.name!r} is a {self.kind}, not a prompt")

    @property
    def read_only(self) -> bool:
        if self.kind != "tool":
            return True  # reading changes nothing
        return self.trusted is True and self.tool.annotations.get("readOnlyHint") is True

    @property
    def destructive(self) -> bool:
        """MCP's reading: a tool that is not read-only is destructive unless it says destructiveHint=false."""
        if self.kind != "tool":
            return False
        if not self.trusted:
            return True
        if self.tool.annotations.get("readOnlyHint") is True:
            return False
        return self.tool.annotations.get("destructiveHint", True) is not False

    def to_wire(self) -> dict[str, Any]:
        """A resource's, template's or prompt's list entry (a tool's is its view's: ``ViewTool.to_mcp``)."""
        return self.item.to_wire(self.name)
