"""Upstream MCP servers as a source (``[mcps.<namespace>]``): their tools appear as ``<namespace>__<tool>``, their
resources, resource templates and prompts pass through the same way (``resources`` and ``prompts`` rules), every text
cleaned as a tool's is. Their annotations are untrusted unless the operator marks the server ``trusted = true``.

- ``connections``: the pool of open connections (``UpstreamPool``), the only module that imports the SDK's client.
  Each server is connected by a task of its own (the SDK's client holds a task group for the life of the
  connection), started when its source is opened, listed once, and kept open; ``UpstreamPool.sources`` gives the
  same source (and connection) again across reloads while its config is unchanged, and closing a source ends it. A
  server that cannot be started or does not answer within its ``timeout`` is reported as failed; the others are
  unaffected. A lazy server connects when an agent loads it.
- ``conversion``: what a server lists, as catalog entries (tools, resources, templates, prompts).
- ``runners``: how a call reaches the server, and how the server's questions during it reach the agent's client.
- ``source``: one configured server as a ``toolcrib.sources.Source``.
- ``isolated``: a pack run in a confined process of its own, served to the host as an upstream stdio server;
  ``confinement`` and ``confined``: what a confined server or isolated pack may reach, and the launcher that
  confines it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from toolcrib.entries import Kind

if TYPE_CHECKING:
    from anyio.abc import TaskGroup

    from toolcrib.config import LoadedConfig
    from toolcrib.errors import Problem
    from toolcrib.plugins import PluginRecord
    from toolcrib.supply.mcp.connections import UpstreamPool


def _warnings(loaded: LoadedConfig, governing: frozenset[str]) -> list[Problem]:
    from toolcrib.supply.mcp.problems import warnings

    return warnings(loaded, governing)


def _unserved(loaded: LoadedConfig, given: Collection[str]) -> list[PluginRecord]:
    from toolcrib.supply.mcp.isolated import unserved

    return unserved(loaded, given)


def _pool(tg: TaskGroup | None, env: Mapping[str, str] | None) -> UpstreamPool | None:
    """The pool its sources' connections live in: only where an event loop is kept for them (``tg``)."""
    if tg is None:
        return None
    from toolcrib.supply.mcp.connections import UpstreamPool

    return UpstreamPool(tg, KIND)


KIND = Kind("mcp", "upstream server", "the upstream MCP server", "server", "mcps", table=lambda config: config.mcps,
            where="an upstream MCP server ([mcps.{ns}])", warnings=_warnings,
            withheld=lambda loaded: loaded.isolated_packs(), unserved=_unserved, supplier=_pool)
"""Upstream servers, confined ones, and the isolated packs they serve (as packs: ``withheld`` from the host)."""

__all__ = ["KIND"]
