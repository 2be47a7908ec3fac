"""toolcrib's side of the benchmarks: the pack with ``add`` and fillers (peers.py has what every side shares), its
host, and the pack as a module for a ``toolcrib serve`` process: ``TOOLCRIB_PLUGINS=math=bench_pack:PACK``, its size
from ``$BENCH_TOOLS`` (default 10). Only toolcrib's builders import it, so that no peer's process imports toolcrib."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from peers import AGENT, CONFIG, PROMPTS, _add_tool, _doc, _prompt, names

import toolcrib


class BenchPack:
    """A toolcrib pack with ``add`` and fillers (and, for concurrency, 100 ms tools), N resources and the
    prompts."""

    def __init__(self, n: int, extra: list[Any] | None = None) -> None:
        self.tools = [toolcrib.tool(annotations={"readOnlyHint": True})(_add_tool(name)) for name in names(n)]
        self.tools += extra or []
        self.resources = [toolcrib.resource(f"bench://doc/{i}", mime_type="text/plain")(_doc(i)) for i in range(n)]
        # quick and never waiting, as the low-level peer's inline formatting: declared inline (no worker thread)
        self.prompts = [toolcrib.prompt(inline=True)(_prompt(name)) for name in PROMPTS]

    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[Any]:
        return self.tools

    @toolcrib.hookimpl
    def toolcrib_resources(self) -> list[Any]:
        return self.resources

    @toolcrib.hookimpl
    def toolcrib_prompts(self) -> list[Any]:
        return self.prompts


def toolcrib_host(n: int, extra: list[Any] | None = None, config: str = "", **options: Any) -> toolcrib.Host:
    """The bench pack's host; ``config`` is TOML put before the agent's (``[host]`` keys, hooks)."""
    from toolcrib.config import parse_config

    return toolcrib.Host(parse_config(config + CONFIG, "bench", Path.cwd()), plugins={"math": BenchPack(n, extra)},
                         autoload=False, env={}, **options)


def __getattr__(name: str) -> Any:
    if name == "PACK":  # made when a serve process loads it, not when a benchmark imports this module
        global PACK
        PACK = BenchPack(int(os.environ.get("BENCH_TOOLS", "10")))
        return PACK
    raise AttributeError(name)


__all__ = ["AGENT", "BenchPack", "toolcrib_host"]
