"""A ``Host`` with its upstream MCP servers connected, for code that is not async (the CLI's commands): the
upstream client (``toolcrib.supply.mcp``) makes sources; this module hands them to a host."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from anyio.from_thread import BlockingPortal, start_blocking_portal

from toolcrib.config import LoadedConfig, load_config
from toolcrib.host import Host
from toolcrib.supply import closed, opened, supply


def needed_by(agent: str, *also: str) -> Callable[[LoadedConfig], frozenset[str]]:
    """The upstream servers ``agent`` may reach: those its ``mcps`` rule permits, and those of every agent it may
    hand a task to, and theirs (plus the namespaces ``also`` names that are servers). What a command about one
    agent connects."""

    def needed(loaded: LoadedConfig) -> frozenset[str]:
        from toolcrib.permissions import compile_rules, permits

        rules = compile_rules(loaded)
        agents, todo = set(), [agent]
        while todo:
            name = todo.pop()
            if name in agents or name not in rules:
                continue
            agents.add(name)
            todo += [other for other in rules if permits(rules[name], "subagents", other)]
        found = {ns for ns in loaded.config.mcps for a in agents if permits(rules[a], "mcps", ns)}
        found |= {ns for ns in also if ns in loaded.config.mcps}
        return frozenset(found)

    return needed


@contextlib.contextmanager
def open_host(
    path: str | os.PathLike[str] | None = None, *, servers: Callable[[LoadedConfig], frozenset[str]] | None = None,
    **kwargs: Any,
) -> Iterator[tuple[Host, BlockingPortal | None]]:
    """A ``Host`` for code that is not async, with its upstream MCP servers connected while the block runs (with
    ``servers``, only those it names for the loaded config: ``needed_by``).

    Yields the host and, when servers are connected, the portal their connections live on: calls must go through
    it (``portal.call(host.call, agent, tool, arguments)``).
    """
    loaded = load_config(path, kwargs.get("env"))
    only = servers(loaded) if servers is not None else None
    if not loaded.isolated_packs() and not any(c.enabled and (only is None or ns in only)
                                               for ns, c in loaded.config.mcps.items()):
        static = opened(loaded, kwargs.get("env"))
        host = Host(loaded, sources=static, **kwargs)
        try:
            yield host, None
        finally:
            host.close()
            closed(static)
        return
    with start_blocking_portal() as portal, portal.wrap_async_context_manager(supply(kwargs.get("env"))) as made:
        host = Host(loaded, sources=portal.call(made.sync, loaded, only), **kwargs)
        try:
            yield host, portal
        finally:
            host.close()
