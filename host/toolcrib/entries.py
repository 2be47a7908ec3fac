"""What the catalog holds: ``Entry`` (a tool under its full name, with its provenance) and ``ItemEntry`` (a
resource, template or prompt). Plain data, so that the decision (``permissions``) and the views can use them
without importing how a catalog is built (plugin loading)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from toolcrib.declarations import Prompt, Resource
from toolcrib.tool import Tool


@dataclass(frozen=True, slots=True)
class Entry:
    """One tool in the catalog.

    ``dimension``/``source`` say which permission dimension governs its source (``plugins``/``orders`` for a pack,
    ``mcps``/``time`` for an upstream server; the host's own tools, ``kind == "builtin"``, are offered by what
    they serve instead). ``read_only`` and ``destructive`` are the annotations as the host trusts them: an
    untrusted upstream server's tool is never read-only and always destructive.
    """

    name: str
    namespace: str
    kind: str  # "pack" | "mcp" | "builtin"
    dimension: str
    source: str
    tool: Tool
    settings: Any = None
    trusted: bool = True
    distribution: str | None = None
    version: str | None = None
    curation: Any = None  # toolcrib.curation.Curation: what the operator changed of the tool its source serves
    held: str | None = None  # why the definition lock holds the tool back (toolcrib.lock), or None

    @property
    def read_only(self) -> bool:
        return self.trusted and self.tool.annotations.get("readOnlyHint") is True

    @property
    def destructive(self) -> bool:
        """MCP's reading: a tool that is not read-only is destructive unless it says destructiveHint=false."""
        if not self.trusted:
            return True
        if self.tool.annotations.get("readOnlyHint") is True:
            return False
        return self.tool.annotations.get("destructiveHint", True) is not False


@dataclass(frozen=True, slots=True)
class ItemEntry:
    """A resource, resource template or prompt in the catalog: ``what`` says which. ``name`` is its full name
    (``<namespace>__<name>``); a resource's URI (or a template's) is its pack's own, and owned by one namespace."""

    name: str
    namespace: str
    kind: str  # "pack" | "mcp" | "builtin"
    dimension: str  # the source's: "plugins" | "mcps"
    source: str
    item: Resource | Prompt
    settings: Any = None
    trusted: bool = True

    @property
    def what(self) -> str:
        if isinstance(self.item, Prompt):
            return "prompt"
        return "template" if self.item.is_template else "resource"

    @property
    def uri(self) -> str | None:
        return self.item.uri if isinstance(self.item, Resource) else None

    def to_wire(self) -> dict[str, Any]:
        return self.item.to_wire(self.name)
