"""Python API call overhead: the full pipeline (view.call) vs a bare pydantic-validated function call.

    python benchmarks/bench_api.py [--calls 20000] [--rounds 5]

Both sides do the same work on ``add(a, b)``: validate {"a": 1, "b": 2} with a pydantic model, call the async
function, and (for toolcrib) resolve the name, apply the pipeline and normalize the result. Rounds interleave
the two so machine noise hits both alike; the ratio of medians is the number that matters.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import anyio
from pydantic import BaseModel, ConfigDict

import toolcrib
from toolcrib.config import parse_config
from toolcrib.host import Host


@toolcrib.tool(annotations={"readOnlyHint": True})
async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Pack:
    @toolcrib.hookimpl
    def toolcrib_tools(self) -> list[object]:
        return [add]


class AddArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    a: int
    b: int


async def plain_add(a: int, b: int) -> int:
    return a + b


CONFIG = """
[agents.bench]
[agents.bench.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
"""


async def measure(calls: int, rounds: int) -> tuple[list[float], list[float]]:
    host = Host(parse_config(CONFIG, "bench", Path.cwd()), plugins={"math": Pack()}, autoload=False, env={})
    view = host.view("bench")
    args = {"a": 1, "b": 2}
    floor, pipeline = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            m = AddArgs.model_validate(args)
            await plain_add(m.a, m.b)
        floor.append((time.perf_counter() - start) / calls)
        start = time.perf_counter()
        for _ in range(calls):
            await view.call("math__add", args)
        pipeline.append((time.perf_counter() - start) / calls)
    return floor, pipeline


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    floor, pipeline = anyio.run(measure, args.calls, args.rounds)
    f, p = statistics.median(floor), statistics.median(pipeline)
    print(f"bare pydantic-validated call: {f * 1e6:.2f} us")
    print(f"toolcrib view.call:           {p * 1e6:.2f} us  ({p / f:.2f}x the bare call)")


if __name__ == "__main__":
    main()
