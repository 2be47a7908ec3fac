"""The contract between the host and whatever supplies tools, resources, templates and prompts: ``Source``.

Every supplier is a ``Source``. Entry-point packs, tool folders, the host's own tools and llm plugins are pluggy
plugins (``toolcrib.plugins``), each a ``toolcrib.catalog.PackSource`` whose hooks are called one plugin at a time;
every other supplier is a ``Source`` handed to the ``Host``: upstream MCP servers
(``toolcrib.supply.mcp.source.UpstreamSource``), and what comes next (an OpenAPI document, a pack run in a process of
its own). The catalog, the decision and the pipeline know only what a source
offers: entries (``toolcrib.entries``) whose tools carry their runners (``toolcrib.runner``), so nothing in the core
changes for a new kind of source.

A source has a name (its namespace, which operators' rules of its ``dimension`` name), an async lifecycle
(``open`` before it offers, ``close`` when the host that used it is gone: a connection, a child process), what it
offers now (``offer``), and ``fetch`` for what it offers on demand: a lazy source offers nothing up front, and an
agent allowed it loads its tools when it needs them (``toolcrib__load_mcp``, ``Context.server``).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from toolcrib.entries import Entry, Kind

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from toolcrib.config import LoadedConfig
    from toolcrib.content import ToolResult
    from toolcrib.plugins import PluginRecord


@dataclass
class Offer:
    """What a source offers the catalog now: its record (what ``toolcrib plugins`` and ``check`` show, the same
    object for the host's life, so the catalog's verdicts on it are seen everywhere) and its entries: tools,
    resources, templates and prompts alike."""

    record: PluginRecord
    entries: list[Entry] = field(default_factory=list)


@runtime_checkable
class Source(Protocol):
    """A supplier of entries. ``dimension`` is the permission dimension that governs it (``"mcps"`` for an
    upstream server, ``"plugins"`` for a pack); each of its entries carries the same ``dimension`` and ``source``.
    """

    @property
    def name(self) -> str: ...

    @property
    def dimension(self) -> str: ...

    @property
    def lazy(self) -> bool:
        """It offers its tools on demand (``fetch``), not up front."""
        ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    def offer(self) -> Offer: ...

    async def fetch(self, name: str | None = None) -> list[Entry]:
        """Its entries as it offers them now (connecting first, for a lazy one: its tools); with ``name`` (a full
        name), only those of that name, if it has any."""
        ...

    async def read(self, uri: str) -> ToolResult:
        """One of its resources, as embedded resource content (a lazy server's, through ``Context.server``)."""
        ...


class Supplier(Protocol):
    """What makes one kind's sources for an assembler (``toolcrib.supply.Supply``), sync after sync: ``sources``
    gives the sources ``loaded`` configures, not opened (one it gave before may be given again, to be opened again
    and kept); ``changed`` is what a live source calls when what it offers changed (the serving state reloads);
    ``aclose`` ends what it still holds. A kind's ``Kind.supplier`` makes one."""

    changed: Callable[[], Coroutine[Any, Any, Any]] | None

    def sources(self, loaded: LoadedConfig, only: frozenset[str] | None = None) -> list[Source]: ...

    async def aclose(self) -> None: ...


MakeSupplier = Callable[["TaskGroup | None", "Mapping[str, str] | None"], "Supplier | None"]
"""A kind's maker of its ``Supplier``, given the task group its live sources run in (None where no event loop is
kept for them: it answers None if its sources need one) and the environment credentials are read from."""


__all__ = ["Kind", "MakeSupplier", "Offer", "Source", "Supplier"]
