"""What the catalog holds: ``Entry``, one thing a source offers (a tool, a resource, a resource template or a
prompt) under its full name, with its provenance. Plain data, so that the decision (``permissions``) and the views
can use it without importing how a catalog is built (plugin loading)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolcrib.declarations import Prompt, Resource
from toolcrib.tool import Tool

RULE_DIMENSION = {"tool": "tools", "resource": "resources", "template": "resources", "prompt": "prompts"}
"""The permission dimension whose rule names an entry of each kind (beside its source's dimension)."""


SUPPLIERS = {"pack": "pack", "mcp": "upstream server", "openapi": "OpenAPI document", "builtin": "the host"}
"""What each kind of source is called in a message (an ``Entry``'s ``supplier``, a ``PluginRecord``'s ``kind``)."""


def kind_of(definition: Tool | Resource | Prompt) -> str:
    if isinstance(definition, Tool):
        return "tool"
    if isinstance(definition, Prompt):
        return "prompt"
    return "template" if definition.is_template else "resource"


@dataclass(frozen=True, slots=True)
class Entry:
    """One tool, resource, template or prompt in the catalog: ``definition`` is what its source declared, ``kind``
    says which of the four it is.

    ``supplier`` says what kind of source offers it (``"pack"``, ``"mcp"`` for an upstream server, ``"openapi"``
    for an OpenAPI document, ``"builtin"``
    for the host's own, which are offered by what they serve instead of by a source); ``dimension``/``source`` say
    which permission dimension governs that source (``plugins``/``orders`` for a pack, ``mcps``/``time`` for an
    upstream server). ``read_only`` and ``destructive`` are a tool's annotations as the host trusts them: an
    untrusted upstream server's tool is never read-only and always destructive.
    """

    name: str
    namespace: str
    supplier: str  # "pack" | "mcp" | "openapi" | "builtin" (SUPPLIERS)
    dimension: str
    source: str
    definition: Tool | Resource | Prompt
    settings: Any = None
    trusted: bool = True
    distribution: str | None = None
    version: str | None = None
    curation: Any = None  # toolcrib.curation.Curation: what the operator changed of the tool its source serves
    held: str | None = None  # why the definition lock holds the tool back (toolcrib.lock), or None
    # from the definition, once (the decision reads them for every entry of every view):
    kind: str = field(init=False)  # "tool" | "resource" | "template" | "prompt"
    uri: str | None = field(init=False)  # a resource's URI (or a template's); None for a tool or a prompt
    is_available: Any = field(init=False)  # the definition's availability check, or None

    def __post_init__(self) -> None:
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
        return self.trusted and self.tool.annotations.get("readOnlyHint") is True

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
