"""A Python API call of ``math__add`` with a matching long-lived pre-tool-use hook (the benchmarks' Python script,
and ``cat``, a compiled program answering at once), against the call without: the median of 7 rounds of 2,000.

    cd benchmarks && python bench_hook.py
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import peers
import run


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "resident.py").write_text(run.LONG_LIVED_HOOK)
        script = (f'[[hooks.pre_tool_use]]\ncommand = [{json.dumps(sys.executable)}, '
                  f'{json.dumps(str(Path(tmp, "resident.py")))}]\ntools = ["math__*"]\nprocess = "long-lived"\n')
        cat = '[[hooks.pre_tool_use]]\ncommand = ["cat"]\ntools = ["math__*"]\nprocess = "long-lived"\n'
        views = {"plain": peers.toolcrib_host(10).view(peers.AGENT),
                 "python hook": peers.toolcrib_host(10, config=script).view(peers.AGENT),
                 "cat hook": peers.toolcrib_host(10, config=cat).view(peers.AGENT)}
        rounds: dict[str, list[float]] = {name: [] for name in views}
        for view in views.values():
            await view.call("math__add", {"a": 2, "b": 3})  # (each hook's process started)
        for _ in range(7):
            for name, view in views.items():
                started = time.perf_counter()
                for _ in range(2000):
                    await view.call("math__add", {"a": 2, "b": 3})
                rounds[name].append((time.perf_counter() - started) / 2000)
        for name, times in rounds.items():
            print(f"{name}: {statistics.median(times) * 1e6:.1f} us")


if __name__ == "__main__":
    anyio.run(main)
