"""View build: N tools x M agents through the one decision function (issue: permissions and views).

    python benchmarks/bench_views.py [--tools 10000] [--agents 100]

Agents get a mix of rules (allow-all, pack allow-lists, deny-lists with globs, plan mode), and one tool in
ten has an availability check, so the numbers include the common work of a real config.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from toolcrib import tool
from toolcrib.calls import Pipeline
from toolcrib.catalog import Entry
from toolcrib.config import Config, LoadedConfig
from toolcrib.entries import PACK, Provenance
from toolcrib.permissions import compile_rules
from toolcrib.plugins import get_plugin_manager
from toolcrib.view import build_view


def catalog(n_tools: int, per_pack: int = 10) -> dict[str, Entry]:
    plain = tool("t", "A tool.", {"x": int}, lambda a: a.x, {"annotations": {"readOnlyHint": True}})
    checked = tool("c", "A checked tool.", {"x": int}, lambda a: a.x,
                   {"is_available": lambda ctx: "vision" in ctx.capabilities})
    entries = {}
    for i in range(n_tools):
        ns = f"pack{i // per_pack}"
        name = f"{ns}__tool{i % per_pack}"
        entries[name] = Entry(name=name, provenance=Provenance(ns, PACK), definition=checked if i % 10 == 0 else plain)
    return dict(sorted(entries.items()))


def config(n_agents: int, n_packs: int) -> LoadedConfig:
    agents: dict[str, Any] = {}
    for i in range(n_agents):
        kind = i % 4
        if kind == 0:
            permissions = {"plugins": {"allow": ["*"]}, "tools": {"allow": ["*"]}}
        elif kind == 1:
            permissions = {"plugins": {"allow": [f"pack{j}" for j in range(0, n_packs, 7)]},
                           "tools": {"deny": ["*__tool3", "pack1*"]}}
        elif kind == 2:
            permissions = {"plugins": {"deny": ["pack2*"]}, "tools": {"allow": ["*__tool1*", "pack9__*"]}}
        else:
            permissions = {"plugins": {"allow": ["*"]}, "tools": {"allow": ["*"]}}
        agents[f"agent{i}"] = {"model": "vl" if i % 2 else "text", "mode": "plan" if kind == 3 else "default",
                               "permissions": permissions}
    data = {"models": {"vl": {"vision": True}, "text": {}}, "agents": agents}
    return LoadedConfig(Config.model_validate(data), "bench", Path.cwd())


def build_all(entries: dict[str, Entry], loaded: LoadedConfig) -> float:
    """Seconds to compile the rules and build every agent's view."""
    start = time.perf_counter()
    rules = compile_rules(loaded)
    pipeline = Pipeline(get_plugin_manager(), loaded, {})
    for r in rules.values():
        build_view(r, entries.values(), pipeline)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tools", type=int, default=10_000)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    entries = catalog(args.tools)
    loaded = config(args.agents, args.tools // 10)
    times = []
    for _ in range(args.rounds):
        start = time.perf_counter()
        rules = compile_rules(loaded)
        pipeline = Pipeline(get_plugin_manager(), loaded, {})
        views = [build_view(r, entries.values(), pipeline) for r in rules.values()]
        times.append(time.perf_counter() - start)
    visible = sum(len(v) for v in views)
    best = min(times)
    decisions = args.tools * args.agents
    print(f"view build: {args.tools} tools x {args.agents} agents = {decisions} decisions, {visible} visible")
    print(f"  best {best:.2f} s, median {statistics.median(times):.2f} s, "
          f"{best / decisions * 1e6:.2f} us per decision, {best / args.agents * 1e3:.1f} ms per agent view")


if __name__ == "__main__":
    main()
