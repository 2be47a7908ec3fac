"""A call over HTTP on a 2025-11-25 session (the SDK's client, a bearer token on every side): toolcrib against the
SDK's low-level server, each in a process of its own, the two taking turns; the medians of each round.

    cd benchmarks && python bench_session_http.py [--calls 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
from pathlib import Path

import anyio
import run


async def main(calls: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = run._config_file(Path(tmp))
        with contextlib.ExitStack() as servers:
            urls = {peer: servers.enter_context(run._http_server(peer, config)) for peer in ("toolcrib", "lowlevel")}
            async with contextlib.AsyncExitStack() as stack:
                clients = {p: await stack.enter_async_context(run._http_client(u, True, "legacy"))
                           for p, u in urls.items()}
                ops = {p: (lambda c=c, p=p: c.call_tool(run._add(p), {"a": 2, "b": 3})) for p, c in clients.items()}
                found = await run.interleaved(ops, calls, rounds)
    mine, theirs = found["toolcrib"], found["lowlevel"]
    print(f"toolcrib {mine * 1e6:.0f} us, low-level {theirs * 1e6:.0f} us, {mine / theirs:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    anyio.run(main, args.calls, args.rounds)
