"""What isolating a pack costs (``[packs.fs] isolate = true``): an MCP client calls ``fs__cwd`` on ``toolcrib serve``
over stdio, with the fs pack in the host's process and with it in a confined process of its own; the ratio of the
warm calls (medians of interleaved rounds), and the start-up of each (spawn to the first tools/list).

    .venv/bin/python benchmarks/bench_isolation.py [--calls N] [--rounds N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

CONFIG = """
[host]
workspace = "{workspace}"

[packs.fs]
isolate = {isolate}

[agents.bench.permissions]
plugins = {{ allow = ["fs"] }}
tools = {{ allow = ["fs__cwd"] }}
"""


def params(folder: Path, isolate: bool) -> StdioServerParameters:
    path = folder / f"{'isolated' if isolate else 'in-process'}.toml"
    path.write_text(CONFIG.format(workspace=folder / "ws", isolate=str(isolate).lower()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    return StdioServerParameters(command=sys.executable, args=["-m", "toolcrib", "serve", "--agent", "bench",
                                                               "--config", str(path), "--no-reload"], env=env)


async def main(calls: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "ws").mkdir()
        started: dict[str, float] = {}
        async with contextlib.AsyncExitStack() as stack:
            clients = {}
            for name, isolate in (("in process", False), ("isolated", True)):
                begun = time.perf_counter()
                clients[name] = await stack.enter_async_context(Client(params(folder, isolate), cache=None))
                tools = (await clients[name].list_tools()).tools
                started[name] = time.perf_counter() - begun
                assert [t.name for t in tools] == ["fs__cwd"], tools
            medians: dict[str, list[float]] = {name: [] for name in clients}
            for _ in range(rounds):
                for name, client in clients.items():
                    samples = []
                    for _ in range(calls):
                        begun = time.perf_counter()
                        result = await client.call_tool("fs__cwd", {})
                        samples.append(time.perf_counter() - begun)
                        assert not result.is_error, result
                    medians[name].append(statistics.median(samples))
    warm = {name: statistics.median(values) for name, values in medians.items()}
    print("| measure | fs in process | fs isolated | ratio |\n|---|---:|---:|---:|")
    print(f"| warm call (stdio, fs__cwd) | {warm['in process'] * 1e3:.2f} ms | {warm['isolated'] * 1e3:.2f} ms | "
          f"{warm['isolated'] / warm['in process']:.2f}x |")
    print(f"| start-up to the first tools/list | {started['in process'] * 1e3:.0f} ms | "
          f"{started['isolated'] * 1e3:.0f} ms | +{(started['isolated'] - started['in process']) * 1e3:.0f} ms |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)  # this many, and rounds: shorter runs vary by +-15% here
    parser.add_argument("--rounds", type=int, default=9)
    arguments = parser.parse_args()
    anyio.run(main, arguments.calls, arguments.rounds)
