"""What Cedar costs in the one decision: one agent's view of 1,000 tools built under its TOML rules alone, and
under a 20-policy Cedar file (with the TOML rules letting everything through, as an operator who moves to Cedar
writes them); and a Python API call's decision, the same two ways. Medians, the two sides taking turns.

    cd benchmarks && python bench_policy.py [--tools 1000] [--builds 30] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import bench_views
from turns import medians_in_turns

from toolcrib.calls import Pipeline
from toolcrib.config import Config, LoadedConfig
from toolcrib.entries import Entry
from toolcrib.permissions import compile_rules
from toolcrib.plugins import get_plugin_manager
from toolcrib.view import build_view

# The TOML side: 20 patterns over packs and tools; the Cedar side: the same agent's rules let everything through,
# and 20 policies decide (10 permits by namespace, 10 forbids by name).
TOML_RULES = {"plugins": {"allow": [f"pack{i}*" for i in range(10)]},
              "tools": {"deny": [f"pack{i}__tool{i % 10}" for i in range(10)]}}
CEDAR = "\n".join(
    [f'permit (principal == Toolcrib::Agent::"bench", action, resource) when {{ resource.namespace like "pack{i}*" }};'
     for i in range(10)]
    + [f'forbid (principal, action, resource) when {{ resource.name == "pack{i}__tool{i % 10}" }};' for i in range(10)])


def _loaded(permissions: dict[str, Any], cedar: Path | None) -> LoadedConfig:
    data: dict[str, Any] = {"agents": {"bench": {"permissions": permissions}}}
    if cedar is not None:
        data["policy"] = {"cedar": str(cedar)}
    return LoadedConfig(Config.model_validate(data), "bench", cedar.parent if cedar is not None else Path.cwd())


def _sides(entries: dict[str, Entry], folder: Path) -> dict[str, tuple[Any, Any]]:
    """Each side's (rules, pipeline), the Cedar side's rules holding its policy as the host gives it."""
    import dataclasses

    from toolcrib.cedar import CedarPolicy

    (folder / "policies.cedar").write_text(CEDAR)
    sides = {}
    for name, loaded in (("toml", _loaded(TOML_RULES, None)),
                         ("cedar", _loaded({"plugins": {"allow": ["*"]}, "tools": {"allow": ["*"]}},
                                           folder / "policies.cedar"))):
        pipeline = Pipeline(get_plugin_manager(), loaded, {})
        rules = compile_rules(loaded)["bench"]
        if name == "cedar":
            policy = CedarPolicy(CEDAR, entries.values(), {"bench": "default"})
            pipeline.policies = dataclasses.replace(pipeline.policies, hooks=(policy,))
            rules = dataclasses.replace(rules, policies=pipeline.policies)
        sides[name] = (rules, pipeline)
    return sides


def measure(tools: int = 1000, builds: int = 30, calls: int = 2000) -> dict[str, float]:
    """{"build toml", "build cedar": seconds a view build takes; "call toml", "call cedar": seconds a call takes;
    "visible": tools each view shows (the same on both sides)}."""
    entries = bench_views.catalog(tools)
    with tempfile.TemporaryDirectory() as folder:
        sides = _sides(entries, Path(folder))
    views = {name: build_view(rules, entries.values(), pipeline) for name, (rules, pipeline) in sides.items()}
    assert views["toml"].names == views["cedar"].names, "the two sides must decide alike"
    times: dict[str, list[float]] = {"toml": [], "cedar": []}
    for _ in range(builds):
        for name, (rules, pipeline) in sides.items():
            start = time.perf_counter()
            build_view(rules, entries.values(), pipeline)
            times[name].append(time.perf_counter() - start)
    tool = next(name for name in views["toml"].names if not name.endswith("0"))

    async def calling() -> dict[str, float]:
        ops = {name: (lambda v=view: v.call(tool, {"x": 1})) for name, view in views.items()}
        return await medians_in_turns(ops, ["toml", "cedar"], calls)

    called = anyio.run(calling)
    return {"build toml": statistics.median(times["toml"]), "build cedar": statistics.median(times["cedar"]),
            "call toml": called["toml"], "call cedar": called["cedar"], "visible": len(views["toml"].names)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tools", type=int, default=1000)
    parser.add_argument("--builds", type=int, default=30)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    found = measure(args.tools, args.builds, args.calls)
    print(f"{args.tools} tools, {found['visible']:.0f} visible")
    print(f"view build: TOML {found['build toml'] * 1e3:.2f} ms, Cedar {found['build cedar'] * 1e3:.2f} ms "
          f"({found['build cedar'] / found['build toml']:.2f}x)")
    print(f"call: TOML {found['call toml'] * 1e6:.1f} us, Cedar {found['call cedar'] * 1e6:.1f} us "
          f"(+{(found['call cedar'] - found['call toml']) * 1e6:.1f} us)")


if __name__ == "__main__":
    main()
