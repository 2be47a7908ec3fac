"""What the core may know of a kind of source, and nothing more: one ``Kind`` each, in ``KINDS``. The catalog, the
decision, the lock, the view and the host ask this table (``toolcrib.sources.Kind``: what a kind is called in a
message, the namespaces its config claims, its ``check`` warnings, the packs it serves itself) and name no kind
themselves; a new kind of source is its own folder here and one more line in ``KINDS``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolcrib.entries import BUILTIN, PACK, Kind
from toolcrib.supply.mcp import KIND as MCP
from toolcrib.supply.openapi import KIND as OPENAPI

if TYPE_CHECKING:
    from toolcrib.config import Config

KINDS = (PACK, BUILTIN, MCP, OPENAPI)


def kind_named(name: str) -> Kind:
    """The kind a record's ``kind`` or an entry's ``supplier`` names (a pack's, for a name no kind has)."""
    for known in KINDS:
        if known.name == name:
            return known
    return PACK


def namespaces_claimed(config: Config) -> dict[str, str]:
    """Every namespace a configured source takes, each with where it is configured."""
    return {ns: where for known in KINDS for ns, where in known.claims(config).items()}


__all__ = ["BUILTIN", "KINDS", "MCP", "OPENAPI", "PACK", "Kind", "kind_named", "namespaces_claimed"]
