"""Run every benchmark and write one Markdown report: toolcrib side by side with the SDK's low-level server, the
SDK's bundled high-level server (MCPServer) and FastMCP, as ratios from one run (this machine is shared and
noisy: absolute times drift, ratios hold).

    benchmarks/run.sh                       # sets up benchmarks/.venv (with fastmcp) and writes docs/benchmarks.md
    python benchmarks/run.py --quick        # a smoke run (CI runs it through the test suite)

Sections: MCP call latency (in-memory, the server's part alone, stdio subprocess, HTTP loopback), tools/list with
10/100/1000 tools, resources/list with 10/100 resources and prompts/get (in-memory); cold (a fresh process's
first tools/list of 1,000 and 10,000 tools, and memory); Python API overhead; what metrics, request logs, spans,
an audit log and a command hook cost a call; concurrency, view build, discovery (0, 200 and 1,000 installed packs,
names and --json), start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import datetime
import gc
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import anyio  # noqa: E402
import bench_tasks  # noqa: E402
import peers  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from turns import TURN, medians_in_turns  # noqa: E402

Row = list[str]

PUBLISHED = HERE.parent / "docs" / "benchmarks.md"  # written by a whole run only, never a quick one


def fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def _delta(seconds: float) -> str:
    """A difference of times, with its sign."""
    return f"{'+' if seconds >= 0 else '-'}{fmt(abs(seconds))}"


def ratio(a: float, b: float | None) -> str:
    return f"{a / b:.2f}x" if b else "-"


async def _mean_of(op: Callable[[], Awaitable[Any]], iterations: int) -> float:
    clock = time.perf_counter
    start = clock()
    for _ in range(iterations):
        await op()
    return (clock() - start) / iterations


async def interleaved(ops: dict[str, Callable[[], Awaitable[Any]]], iterations: int, rounds: int,
                      mean: bool = False) -> dict[str, float]:
    """The median over rounds of each op's per-round median, the ops taking turns of ``TURN`` calls
    (``turns.medians_in_turns``), each round starting one further on. ``mean``: each op's per-round mean over a
    block of its own calls instead, which counts work done off the call's path (such as the audit log's writer
    thread) in the op that caused it, not in the op that happens to run next; the first of a round pays for what
    came before it (the collection of what the last round left)."""
    per_round: dict[str, list[float]] = {name: [] for name in ops}
    names = list(ops)
    for turn in range(rounds):
        order = names[turn % len(names):] + names[:turn % len(names)]
        if mean:
            for name in order:
                per_round[name].append(await _mean_of(ops[name], iterations))
        else:
            for name, value in (await medians_in_turns(ops, order, iterations)).items():
                per_round[name].append(value)
    return {name: statistics.median(values) for name, values in per_round.items()}


# -- MCP, in-memory ----------------------------------------------------------------------------------------------


COLUMNS = {  # peer -> its column in the MCP table
    "lowlevel": "SDK low-level, no middleware",
    "lowlevel-otel": "SDK low-level, as shipped (OTel middleware)",
    "mcpserver": "SDK MCPServer",
    "fastmcp": "FastMCP, defaults",
    "fastmcp-bare": "FastMCP, no dereferencing",
}

WORK = """What each side does for a call of `add`: **toolcrib** resolves the name in the agent's permission view,
validates the arguments against the tool's input schema (pydantic), runs the pipeline (argument rules, hooks;
none configured here), validates the result against the output schema and writes structured and text content;
tools/list is the view's wire list, built once per view (again after a reload). The **SDK low-level server**
runs hand-written handlers: `type(a) is int` instead of a schema, no output validation, a `ListToolsResult`
rebuilt from prebuilt `Tool` objects on each list; "as shipped" keeps the SDK's default OpenTelemetry middleware
(no tracer provider set: the API's no-op), "no middleware" clears it, as toolcrib does. **MCPServer** and
**FastMCP** build schemas from decorated functions and validate arguments with pydantic; FastMCP's default
adds its schema-dereferencing middleware, "no dereferencing" turns it off (`dereference_schemas=False`). Every
side declares the same output schema, so every client does the same validation. A sync prompt function runs in
a worker thread on MCPServer and FastMCP (as their sync tools do); toolcrib's pack declares it `inline` (it runs
on the event loop), as the low-level peer formats its prompt inline. Over HTTP every side checks a bearer token on
every request (the peers behind a small ASGI check, compared in constant time, as toolcrib compares), served by
uvicorn with no access log; toolcrib as shipped (`toolcrib serve --http`, no request lines by default). On a
2025-11-25 session every side answers through the SDK's streamable HTTP transport with its default, a stream of
events. Each call row is measured with a client of each era: 2026-07-28 (no session, `server/discover`) and
2025-11-25 (`initialize`, a session). The raw throughput clients are kept-alive HTTP/1.1 connections, one each,
that write a request made once and read the answer by its Content-Length with no HTTP library (so that the client
is not what runs out first), every answer checked; the SDK's throughput clients are the SDK's `Client`s in one
process, which on a 2-core machine take a core of their own. All servers and clients of a table stay alive
through its rounds, frozen out of the garbage collector's
scans (`gc.freeze`), so that each peer's times are its own work and not a collection of every peer's heap."""


REMOVED = """Issue 65 took out of the host what reached around the MCP SDK for a benchmark ratio, and kept what
earns its place (the precomputed schemas of `toolcrib.fastschema`, the 2026-07-28 HTTP exchange of
`toolcrib.mcp.exchange`, handlers run inline on the event loop, guarded by their CPU time). Each removal was
measured before and after, alternating, on the 2-core machine while a mutation run loaded one core:

- **`toolcrib.mcp.early`** answered a 2026-07-28 client's `server/discover` and `tools/list` while the SDK was
  still being imported (a second implementation of the SDK's answers). At 1,000 tools the first tools/list went
  from 0.56-0.61x the low-level server's to 1.25-1.62x, and the first tools/call from 1.12-1.24x to 1.25-1.62x
  (`cd benchmarks && python -c "import run, anyio; print(anyio.run(run._process_starts, 1000, 5))"`): the first
  list now waits for the SDK's import, as the call always did. The cold rows above are without it.
- **`toolcrib.mcp.session_posts`** answered a 2025-11-25 session's plain requests in their POSTs as one JSON body
  (a subclass of the SDK's transport and eight of its privates), while the low-level server streamed: it compared
  unlike answers, and brought a keep-alive bug. Like for like, both streaming (`cd benchmarks && python
  bench_session_http.py`), a call went from 0.47-0.51x the low-level server's to 1.03-1.04x.
- **The `server_info_stamp` override** (and its read of the SDK's private `_server_info_stamp_source`): what the
  SDK answers itself now pays its own deep copy of the identity, about 9 us; a call, resources/list and
  prompts/list measured before and after were within the noise (248-320 us and 249-260 us for a call).
- **`pipes.Nearby` and the 200 us read spin** (a long-lived hook's process woken on the writer's CPU through
  `ctypes` on `sched_getcpu`, and its answer looked for before waiting asleep): a Python API call with a matching
  long-lived hook (`cd benchmarks && python bench_hook.py`) was 117-194 us before and 97-189 us after with a
  Python hook, 86-153 us and 72-99 us with `cat`. On an idle machine they bought the 35-40 us of a wake-up on an
  idle CPU; on a loaded one, nothing."""


def _peer_names() -> list[str]:
    found = ["toolcrib", "lowlevel", "lowlevel-otel", "mcpserver"]
    return found + (["fastmcp", "fastmcp-bare"] if peers.fastmcp_available() else [])


@contextlib.asynccontextmanager
async def _clients(n: int, mode: str) -> AsyncIterator[dict[str, Client]]:
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for peer in _peer_names():
            server = peers.lowlevel_of(peer, peers.BUILDERS[peer](n))
            client = await stack.enter_async_context(Client(server, mode=mode, cache=None))  # type: ignore[arg-type]
            await client.list_tools()  # primes the client's output-schema cache, as every real client has it
            clients[peer] = client
        # Every peer's servers and clients stay alive for the interleaved rounds: frozen, they are not what the
        # collector scans in each measured operation (else the heap of all peers together taxes whoever allocates).
        with _frozen():
            yield clients


@contextlib.contextmanager
def _frozen() -> Iterator[None]:
    """What is alive now out of the collector's scans while measuring: every peer's servers and clients stay alive
    for the interleaved rounds, and would otherwise tax whoever allocates when the collector runs."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _server_side(samples: list[float]) -> Any:
    """A middleware put first on a server: how long the server takes over each tools/call, from the request
    parsed to the result returned (what the client, the in-memory streams and the SDK's runner cost is not in it)."""

    async def timed(ctx: Any, call_next: Any) -> Any:
        start = time.perf_counter()
        try:
            return await call_next(ctx)
        finally:
            if ctx.method == "tools/call":
                samples.append(time.perf_counter() - start)

    return timed


async def mcp_inmemory(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    calls = 100 if args.quick else 1000
    for mode in ("auto", "legacy"):
        async with _clients(10, mode) as clients:
            ops = {p: (lambda c=c, p=p: c.call_tool(_add(p), {"a": 2, "b": 3})) for p, c in clients.items()}
            result = await interleaved(ops, calls, args.rounds)
        rows.append(_peer_row(f"call, in-memory ({'2026-07-28' if mode == 'auto' else '2025-11-25'})", result))
    async with contextlib.AsyncExitStack() as stack:
        samples: dict[str, list[float]] = {}
        clients = {}
        for peer in _peer_names():
            server = peers.lowlevel_of(peer, peers.BUILDERS[peer](10))
            server.middleware.insert(0, _server_side(samples.setdefault(peer, [])))
            clients[peer] = await stack.enter_async_context(Client(server, cache=None))  # type: ignore[arg-type]
            await clients[peer].list_tools()
        ops = {p: (lambda c=c, p=p: c.call_tool(_add(p), {"a": 2, "b": 3})) for p, c in clients.items()}
        await interleaved(ops, calls, args.rounds)
    rows.append(_peer_row("call, in-memory (2026-07-28): the server's part only",
                          {p: statistics.median(v) for p, v in samples.items()}))
    for n in (10, 100, 1000):
        iterations = {10: 100, 100: 30, 1000: 5}[n] // (5 if args.quick else 1) or 1
        async with _clients(n, "auto") as clients:
            ops = {p: (lambda c=c: c.list_tools()) for p, c in clients.items()}
            result = await interleaved(ops, iterations, args.rounds)
        rows.append(_peer_row(f"tools/list, {n} tools, in-memory", result))
    for n in (10, 100):
        iterations = {10: 100, 100: 30}[n] // (5 if args.quick else 1) or 1
        async with _clients(n, "auto") as clients:
            ops = {p: (lambda c=c: c.list_resources()) for p, c in clients.items()}
            result = await interleaved(ops, iterations, args.rounds)
        rows.append(_peer_row(f"resources/list, {n} resources, in-memory", result))
    async with _clients(10, "auto") as clients:
        ops = {p: (lambda c=c, p=p: c.get_prompt(_greet(p), {"name": "Ada"})) for p, c in clients.items()}
        result = await interleaved(ops, calls, args.rounds)
    rows.append(_peer_row("prompts/get, in-memory", result))
    return rows


def _greet(peer: str) -> str:
    return "math__greet" if peer == "toolcrib" else "greet"


def _add(peer: str) -> str:
    return "math__add" if peer == "toolcrib" else "add"  # toolcrib names it <pack>__<tool>


MEASURED: dict[str, float] = {}  # what the goals table reads


def _peer_row(label: str, result: dict[str, float]) -> Row:
    base = result["toolcrib"]
    for peer, value in result.items():
        MEASURED[f"{label}|{peer}"] = value
    cells = [label, fmt(base)]
    for peer in COLUMNS:
        value = result.get(peer)
        cells.append(f"{fmt(value)} ({ratio(base, value)})" if value else "-")
    return cells


# -- cold: a fresh process's first list, and memory -----------------------------------------------------------------


ERAS = (("auto", "2026-07-28"), ("legacy", "2025-11-25"))  # a client's mode, and the protocol it speaks


def cold(args: argparse.Namespace) -> list[Row]:
    """Fresh processes of each side: from process start to the first tools/list and the first tools/call over
    stdio, for a client of each era, and the server process's peak memory; then, in fresh processes with the SDK
    imported, building the server with N tools (and N resources) and its first tools/list, and a warm one. The
    median of a few processes."""
    import json

    rows: list[Row] = []
    for n, runs in ((1000, 3), (10_000, 3)) if not args.quick else ((1000, 1),):
        found: dict[str, dict[str, float]] = {}
        for peer in ("toolcrib", "lowlevel"):
            samples = [json.loads(subprocess.run([sys.executable, "-m", "peers", peer, "cold", str(n)],
                                                 env=_env(), check=True, capture_output=True, text=True).stdout)
                       for _ in range(runs)]
            found[peer] = {key: statistics.median(s[key] for s in samples) for key in samples[0]}
            found[peer]["built and listed"] = found[peer]["build"] + found[peer]["first"]
            for key, value in found[peer].items():
                MEASURED[f"cold {n} {key}|{peer}"] = value
        for mode, era in ERAS:
            starts = anyio.run(_process_starts, n, runs, mode)
            for peer, (listed, called, peak) in starts.items():
                MEASURED[f"cold {n} {era} start|{peer}"] = listed
                MEASURED[f"cold {n} {era} call|{peer}"] = called
                MEASURED[f"cold {n} {era} server_mb|{peer}"] = peak
            (mine_list, mine_call, mine_mb), (their_list, their_call, their_mb) = starts["toolcrib"], starts["lowlevel"]
            rows += [
                [f"{n} tools, {era}: process start to the first tools/list answered (stdio, the SDK's client)",
                 fmt(mine_list), fmt(their_list), ratio(mine_list, their_list),
                 "the interpreter, imports (the mcp SDK's on both sides), discovery and the view, the client's "
                 "handshake, then the list"],
                [f"{n} tools, {era}: process start to the first tools/call answered (the same processes)",
                 fmt(mine_call), fmt(their_call), ratio(mine_call, their_call), "all of the above, then the call"],
                [f"{n} tools, {era}: the server process's peak memory, after that list and call",
                 f"{mine_mb:.0f} MB", f"{their_mb:.0f} MB", ratio(mine_mb, their_mb),
                 "`VmHWM` of the server process alone"],
            ]
        mine, theirs = found["toolcrib"], found["lowlevel"]
        rows += [
            [f"{n} tools: building the server, then its first tools/list (one process)",
             fmt(mine["built and listed"]), fmt(theirs["built and listed"]),
             ratio(mine["built and listed"], theirs["built and listed"]),
             f"of which building: {fmt(mine['build'])} and {fmt(theirs['build'])}; toolcrib decorates the "
             "functions, then builds the host, the agent's view and its lists (as `toolcrib serve` does before it "
             "answers), the low-level peer builds `Tool` models directly and serialises them on the first list"],
            [f"{n} tools: warm tools/list, same process", fmt(mine["warm"]), fmt(theirs["warm"]),
             ratio(mine["warm"], theirs["warm"]), ""],
        ]
    return rows


async def _process_starts(n: int, runs: int, mode: str = "auto") -> dict[str, tuple[float, float, float]]:
    """From starting a server process over stdio to its first tools/list's answer, and then to its first
    tools/call's, as an MCP client of ``mode``'s era sees a server start, and the server process's own peak memory
    then (the medians of ``runs``, the two sides taking turns): toolcrib's ``serve --agent`` with the bench pack of
    ``n`` tools, and the low-level peer's process (which never imports toolcrib)."""
    found: dict[str, list[tuple[float, float, float]]] = {"toolcrib": [], "lowlevel": []}
    with tempfile.TemporaryDirectory() as tmp:
        config = _config_file(Path(tmp))
        for _ in range(runs):
            for peer, values in found.items():
                params = _stdio_params(peer, config, n)
                before = _children()
                started = time.perf_counter()
                async with Client(params, mode=mode, cache=None) as client:
                    listed = await client.list_tools()
                    first_list = time.perf_counter() - started
                    called = await client.call_tool(listed.tools[0].name, {"a": 2, "b": 3})
                    values.append((first_list, time.perf_counter() - started, _peak_mb(_children() - before)))
                assert len(listed.tools) == n, (peer, len(listed.tools))
                assert called.structured_content == {"result": 5}, (peer, called)
    return {peer: tuple(statistics.median(v[i] for v in values) for i in range(3))  # type: ignore[misc]
            for peer, values in found.items()}


def _children() -> set[Path]:
    """This process's child processes, as their /proc folders."""
    return {stat.parent for stat in Path("/proc").glob("[0-9]*/stat") if _ppid(stat) == os.getpid()}


def _peak_mb(started: set[Path]) -> float:
    """The peak resident memory (``VmHWM``) of the one process a stdio client started, the server: its memory
    alone, not the client's that holds its parsed answers."""
    assert len(started) == 1, started
    for line in (started.pop() / "status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _ppid(stat: Path) -> int:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


# -- MCP, over the wire --------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update({"PYTHONPATH": str(HERE) + os.pathsep + env.get("PYTHONPATH", ""),
                "TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD": "1", "TOOLCRIB_PLUGINS": "math=bench_pack:PACK",
                "BENCH_TOOLS": "10"})
    env.update(extra)
    return env


BENCH_TOKEN = "bench-token-0123456789"  # every HTTP server of the benchmarks checks it (peers.bearer_checked)


def _config_file(directory: Path) -> Path:
    path = directory / "toolcrib.toml"
    path.write_text(peers.CONFIG.replace(f"[agents.{peers.AGENT}]\n",
                                         f'[agents.{peers.AGENT}]\ntoken_env = "BENCH_TOKEN"\n'))
    return path


def _stdio_params(peer: str, config: Path, n: int = 10) -> StdioServerParameters:
    if peer == "toolcrib":
        args = ["-m", "toolcrib.cli", "serve", "--agent", peers.AGENT, "--config", str(config), "--no-reload"]
    else:
        args = ["-m", "peers", peer, "stdio", str(n)]  # -m: from its bytecode, as toolcrib imports it
    return StdioServerParameters(command=sys.executable, args=args, env=_env(BENCH_TOOLS=str(n)))


@contextlib.contextmanager
def _http_server(peer: str, config: Path) -> Any:
    port = _free_port()
    if peer == "toolcrib":
        cmd = [sys.executable, "-m", "toolcrib.cli", "serve", "--http", "--port", str(port), "--config", str(config),
               "--no-reload"]
        url = f"http://127.0.0.1:{port}/agents/{peers.AGENT}/mcp"
    else:
        cmd = [sys.executable, "-m", "peers", peer, "http", "10", str(port)]
        url = f"http://127.0.0.1:{port}/mcp"
    proc = subprocess.Popen(cmd, env=_env(BENCH_TOKEN=BENCH_TOKEN), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.asynccontextmanager
async def _http_client(url: str, token: bool | str, mode: str = "auto") -> AsyncIterator[Client]:
    """A client of ``url``: with the benchmarks' static token (True), another bearer token (a string), or none;
    ``mode`` "auto" speaks 2026-07-28 (no session), "legacy" 2025-11-25 (a session)."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    bearer = token if isinstance(token, str) else BENCH_TOKEN if token else None
    headers = {"Authorization": f"Bearer {bearer}"} if bearer else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http), mode=mode, cache=None) as client:
        await client.list_tools()
        yield client


async def mcp_wire(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    calls = 30 if args.quick else 300
    with tempfile.TemporaryDirectory() as tmp:
        config = _config_file(Path(tmp))
        for mode, _era in ERAS:
            async with contextlib.AsyncExitStack() as stack:
                clients = {}
                for peer in _peer_names():
                    client = Client(_stdio_params(peer, config), mode=mode, cache=None)
                    clients[peer] = await stack.enter_async_context(client)
                    await clients[peer].list_tools()
                ops = {p: (lambda c=c, p=p: c.call_tool(_add(p), {"a": 2, "b": 3})) for p, c in clients.items()}
                rows.append(_peer_row(STDIO_CALLS[mode], await interleaved(ops, calls, args.rounds)))
        with contextlib.ExitStack() as servers:
            urls = {peer: servers.enter_context(_http_server(peer, config)) for peer in _peer_names()}
            for mode, _era in ERAS:
                async with contextlib.AsyncExitStack() as stack:
                    clients = {p: await stack.enter_async_context(_http_client(u, True, mode)) for p, u in urls.items()}
                    ops = {p: (lambda c=c, p=p: c.call_tool(_add(p), {"a": 2, "b": 3})) for p, c in clients.items()}
                    rows.append(_peer_row(HTTP_CALLS[mode], await interleaved(ops, calls, args.rounds)))
            seconds = 0.5 if args.quick else 2.0
            for clients_n in (1, 10, 50):
                found = await _throughputs(urls, clients_n, seconds, 1 if args.quick else 3)
                rows.append(_throughput_row(_throughput_label(clients_n), found))
            for clients_n in (10, 50):
                found = await _sdk_throughputs(urls, clients_n, seconds, 1 if args.quick else 3)
                rows.append(_throughput_row(_throughput_label(clients_n, sdk=True), found))
    return rows


STDIO_CALLS = {"auto": "call, stdio subprocess (2026-07-28)", "legacy": "call, stdio subprocess (2025-11-25)"}
HTTP_CALLS = {"auto": "call, HTTP loopback (2026-07-28, no session), a bearer token on every side",
              "legacy": "call, HTTP loopback (2025-11-25, a session), a bearer token on every side"}


def _throughput_label(clients: int, sdk: bool = False) -> str:
    return (f"throughput, HTTP loopback (2026-07-28), {clients} client{'s' if clients > 1 else ''}"
            f"{' of the SDK (one process)' if sdk else ', raw'}, as shipped")


async def _sdk_throughputs(urls: dict[str, str], clients_n: int, seconds: float, rounds: int) -> dict[str, float]:
    """Calls answered per second with ``clients_n`` of the SDK's clients (2026-07-28, each its own HTTP connection
    pool) calling at once for ``seconds``, each peer in turn, the median of ``rounds``. The clients run in this
    process, so on a 2-core machine they take one core: the row says what a server gives an SDK client fleet,
    not the server's ceiling (the raw rows)."""
    found: dict[str, list[float]] = {peer: [] for peer in urls}

    async def calling(client: Client, peer: str, end: float, done: list[int]) -> None:
        while time.perf_counter() < end:
            called = await client.call_tool(_add(peer), {"a": 2, "b": 3})
            assert called.structured_content == {"result": 5}, (peer, called)
            done[0] += 1

    for _ in range(rounds):
        for peer, url in urls.items():
            done = [0]
            async with contextlib.AsyncExitStack() as stack:
                clients = [await stack.enter_async_context(_http_client(url, True)) for _ in range(clients_n)]
                started = time.perf_counter()
                async with anyio.create_task_group() as tg:
                    for client in clients:
                        tg.start_soon(calling, client, peer, started + seconds, done)
                found[peer].append(done[0] / (time.perf_counter() - started))
    return {peer: statistics.median(values) for peer, values in found.items()}


async def realistic(args: argparse.Namespace) -> list[Row]:
    """A realistic call: the fs pack's ``fs__read_file`` of a 10 KB file against a hand-written read on the
    low-level server (``bench_read.py``), in memory and over stdio."""
    import bench_read

    calls = 30 if args.quick else 300
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as folder:
        workspace = Path(folder).resolve()
        (workspace / "notes.txt").write_text(bench_read.TEXT)
        for label, clients in (("fs__read_file, 10 KB, in memory", bench_read.memory_clients),
                               ("fs__read_file, 10 KB, stdio", bench_read.stdio_clients)):
            async with clients(workspace) as opened:
                found = await bench_read.measure(opened, calls, args.rounds)
            result = {peer: statistics.median(values) for peer, values in found.items()}
            for peer, value in result.items():
                MEASURED[f"{label}|{peer}"] = value
            rows.append([label, fmt(result["toolcrib"]), fmt(result["lowlevel"]),
                         ratio(result["toolcrib"], result["lowlevel"])])
    return rows


def _modern_call(peer: str, n: int) -> bytes:
    """A 2026-07-28 tools/call of ``add`` as one POST body (what the SDK's client sends, without a session)."""
    from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
        "name": _add(peer), "arguments": {"a": 2, "b": 3},
        "_meta": {PROTOCOL_VERSION_META_KEY: "2026-07-28", CLIENT_INFO_META_KEY: {"name": "bench", "version": "1"},
                  CLIENT_CAPABILITIES_META_KEY: {}}}}).encode()


async def _throughputs(urls: dict[str, str], clients_n: int, seconds: float, rounds: int) -> dict[str, float]:
    """Calls answered per second with ``clients_n`` clients calling at once for ``seconds``, each peer in turn, the
    median of ``rounds``. Each client is one kept-alive HTTP/1.1 connection writing a request made once and reading
    the answer with no HTTP library (an HTTP library's own work per request was what a 2-core machine ran out of,
    so that every server above its pace read alike); every answer is checked."""
    from urllib.parse import urlsplit

    found: dict[str, list[float]] = {peer: [] for peer in urls}
    done: list[int] = []

    async def client(peer: str, url: str, connected: list[int], go: asyncio.Event, end: list[float]) -> None:
        where = urlsplit(url)
        body = _modern_call(peer, 1)
        request = (f"POST {where.path} HTTP/1.1\r\nHost: {where.netloc}\r\nAuthorization: Bearer {BENCH_TOKEN}\r\n"
                   "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                   f"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {_add(peer)}\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        reader, writer = await asyncio.open_connection(where.hostname, where.port)
        try:
            await _answer(reader, writer, request, peer)  # connected and answered once before the clock starts
            connected.append(1)
            await go.wait()
            while time.perf_counter() < end[0]:
                await _answer(reader, writer, request, peer)
                done.append(1)
        finally:
            writer.close()

    for _ in range(rounds):
        for peer, url in urls.items():
            done.clear()
            connected: list[int] = []
            go = asyncio.Event()
            end = [0.0]
            async with anyio.create_task_group() as tg:
                for _ in range(clients_n):
                    tg.start_soon(client, peer, url, connected, go, end)
                while len(connected) < clients_n:
                    await anyio.sleep(0.01)
                started = time.perf_counter()
                end[0] = started + seconds
                go.set()
            found[peer].append(len(done) / (time.perf_counter() - started))
    return {peer: statistics.median(values) for peer, values in found.items()}


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, peer: str) -> None:
    """One request on a kept-alive connection, and its answer read whole (by its Content-Length) and checked."""
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    answer = await reader.readexactly(length)
    assert head.startswith(b"HTTP/1.1 200") and b'"structuredContent":{"result":5}' in answer.replace(b" ", b""), \
        (peer, head[:200], answer[:300])


def _throughput_row(label: str, result: dict[str, float]) -> Row:
    """Calls per second; the ratio is toolcrib's over the peer's (above 1.00x: toolcrib answers more)."""
    base = result["toolcrib"]
    for peer, value in result.items():
        MEASURED[f"{label}|{peer}"] = value
    return [label, f"{base:.0f}/s", *(f"{result[p]:.0f}/s ({base / result[p]:.2f}x more)" if p in result else "-"
                                      for p in COLUMNS)]


async def identity(args: argparse.Namespace) -> list[Row]:
    """A call over HTTP loopback with an OAuth access token (an RS256 JWT, the issuer's keys read from a JWKS file
    once) against the same call with a static token, on one ``toolcrib serve --http``, interleaved."""
    import json

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm

    calls = 30 if args.quick else 300
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = {**json.loads(RSAAlgorithm.to_jwk(key.public_key())), "kid": "bench", "use": "sig", "alg": "RS256"}
    issuer, audience = "https://issuer.bench.example", "https://toolcrib.bench.example"
    token = jwt.encode({"iss": issuer, "aud": audience, "sub": "bench-client", "exp": int(time.time()) + 3600},
                       key, algorithm="RS256", headers={"kid": "bench"})
    with tempfile.TemporaryDirectory() as tmp:
        config = _config_file(Path(tmp))
        (Path(tmp) / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
        config.write_text(f'[oauth]\nissuer = "{issuer}"\naudience = "{audience}"\njwks_file = "jwks.json"\n'
                          + config.read_text() + f'\n[agents.{peers.AGENT}.identity]\nclaims = {{ sub = "bench-*" }}\n')
        with _http_server("toolcrib", config) as url:
            async with _http_client(url, True) as static, _http_client(url, token) as oauth:
                ops = {n: (lambda c=c: c.call_tool("math__add", {"a": 2, "b": 3}))
                       for n, c in (("static", static), ("oauth", oauth))}
                result = await interleaved(ops, calls, args.rounds)
    MEASURED["oauth call"] = result["oauth"] / result["static"]
    return [["call, HTTP loopback, with an OAuth access token (RS256, keys cached) instead of a static token",
             fmt(result["oauth"]), fmt(result["static"]), ratio(result["oauth"], result["static"])]]


# -- operations: what metrics, request logs and traces cost ----------------------------------------------------------


def _specifiers() -> Row:
    """The argument rules of one call on a tool with 250 specifiers that do not match it (compiled together)."""
    import timeit

    from toolcrib import patterns
    from toolcrib.permissions import CallRules

    rules = CallRules(subjects=("path",), allow=(), ask=(), deny=tuple(
        patterns.parse("tools", f"fs__write_file({p})") for i in range(125) for p in (f"dir{i}/*", f"*rm{i} -rf*")))
    arguments = {"path": "docs/readme.md", "content": "x"}
    n = 20000
    took = min(timeit.repeat(lambda: rules.check(arguments), number=n, repeat=5)) / n
    MEASURED["specifiers 250"] = took
    return ["the argument rules of a call on a tool with 250 specifiers (125 prefixes, 125 other globs)", fmt(took),
            "-", "-"]


LONG_LIVED_HOOK = """
import json, os, sys
for line in sys.stdin.buffer:  # as docs/operators.md writes one: bytes in, one os.write out
    call = json.loads(line)
    answer = {} if call["arguments"].get("a") != 13 else {"decision": "deny", "message": "not 13"}
    os.write(1, json.dumps(answer).encode() + b"\\n")
"""


async def operations(args: argparse.Namespace) -> list[Row]:
    """An in-memory call (2026-07-28) with each of what an operator can switch on, against the same call without."""
    import io
    import logging

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState
    from toolcrib.observe import JsonFormatter, Metrics, requests_log

    calls = 100 if args.quick else 1000

    def server(config: str = "", **host_options: Any) -> Any:
        return build_server(ServingState(peers.toolcrib_host(10, config=config, **host_options)), peers.AGENT)

    rows: list[Row] = [_specifiers()]
    with tempfile.TemporaryDirectory() as tmp:
        audited = f'[host]\naudit_log = "{tmp}/audit.jsonl"\n'
        hooked = '[[hooks.pre_tool_use]]\ncommand = ["true"]\ntools = ["other__*"]\n'
        Path(tmp, "resident.py").write_text(LONG_LIVED_HOOK)
        matching = '[[hooks.pre_tool_use]]\ncommand = ["true"]\ntools = ["math__*"]\n'
        long_lived = (f'[[hooks.pre_tool_use]]\ncommand = [{json.dumps(sys.executable)}, '
                      f'{json.dumps(str(Path(tmp, "resident.py")))}]\ntools = ["math__*"]\nprocess = "long-lived"\n')
        # the least any hook process can cost: a compiled program answering at once (the call's line echoed back,
        # an object that decides nothing)
        echoing = '[[hooks.pre_tool_use]]\ncommand = ["cat"]\ntools = ["math__*"]\nprocess = "long-lived"\n'
        result: dict[str, float] = {}
        plain_of: dict[str, float] = {}  # the call without, measured in the same group
        # Three groups, each with its own call without: what works off the call's path (the audit log's writer
        # thread; starting and reaping a process per call) in means over blocks of its own calls, each apart so
        # that its work is not counted in a neighbour's means; the rest in medians, in turns.
        for group, mean in (({"plain": server(), "audit": server(audited)}, True),
                            ({"plain": server(), "per-call hook": server(matching)}, True),
                            ({"plain": server(), "hook": server(hooked), "long-lived hook": server(long_lived),
                              "echoing hook": server(echoing)}, False)):
            async with contextlib.AsyncExitStack() as stack:
                clients = {n: await stack.enter_async_context(Client(s, cache=None)) for n, s in group.items()}
                ops = {n: (lambda c=c: c.call_tool("math__add", {"a": 2, "b": 3})) for n, c in clients.items()}
                with _frozen():
                    found = await interleaved(ops, calls, args.rounds, mean=mean)
            plain = found.pop("plain")
            result.update(found)
            plain_of.update(dict.fromkeys(found, plain))
        views = {"plain": peers.toolcrib_host(10).view(peers.AGENT),
                 "audit": peers.toolcrib_host(10, config=audited).view(peers.AGENT),
                 "hook": peers.toolcrib_host(10, config=hooked).view(peers.AGENT)}
        with _frozen():
            api = await interleaved({n: (lambda v=v: v.call("math__add", {"a": 2, "b": 3}))
                                     for n, v in views.items()}, calls * 10, args.rounds, mean=True)
        own = await _hook_own_part(long_lived, calls * 10, args.rounds)
    for name, label in (("per-call hook", "a matching command hook run per call (`true`)"),
                        ("long-lived hook", "a matching long-lived command hook (a Python script)"),
                        ("echoing hook", "a matching long-lived hook answering at once (`cat`: a compiled program; "
                         "the call it echoes back decides nothing)")):
        MEASURED[f"ops {name}"] = result[name] / plain_of[name]
        rows.append([f"call with {label}", fmt(result[name]), fmt(plain_of[name]),
                     ratio(result[name], plain_of[name])])
    MEASURED["ops long-lived own"] = own["hooked"] - own["plain"]
    rows.append(["Python API call with a matching long-lived hook whose process answers at once (toolcrib's own "
                 "part of a hook)", fmt(own["hooked"]), fmt(own["plain"]), ratio(own["hooked"], own["plain"])])
    for name, label in (("audit", "an audit log"), ("hook", "a command hook that matches no call")):
        MEASURED[f"ops {name}"] = result[name] / plain_of[name]
        MEASURED[f"ops {name} api"] = api[name] / api["plain"]
        rows.append([f"call with {label}", fmt(result[name]), fmt(plain_of[name]),
                     ratio(result[name], plain_of[name])])
        rows.append([f"Python API call with {label} (a loop that never waits)", fmt(api[name]), fmt(api["plain"]),
                     ratio(api[name], api["plain"])])
    requests_log.propagate = False
    sink = logging.StreamHandler(io.StringIO())
    sink.setFormatter(JsonFormatter())
    async with contextlib.AsyncExitStack() as stack:
        servers = {"plain": server(), "metrics": server(metrics=Metrics())}
        requests_log.addHandler(sink)
        requests_log.setLevel(logging.INFO)
        servers["JSON request log"] = server()  # built while the log listens: it has the observing middleware
        clients = {n: await stack.enter_async_context(Client(s, cache=None)) for n, s in servers.items()}
        ops = {n: (lambda c=c: c.call_tool("math__add", {"a": 2, "b": 3})) for n, c in clients.items()}
        result = await interleaved(ops, calls, args.rounds)
        requests_log.removeHandler(sink)
        requests_log.setLevel(logging.NOTSET)
    for name in ("metrics", "JSON request log"):
        MEASURED[f"ops {name}"] = result[name] / result["plain"]
        rows.append([f"call with {name}", fmt(result[name]), fmt(result["plain"]), ratio(result[name],
                                                                                          result["plain"])])
    # An SDK, exporting nowhere, for this row only: the API lets a process set its provider once, and a provider
    # left set would have every later row's client trace (and send a trace context in every request's _meta). The
    # MCP SDK's module-level tracer (a proxy, bound to the first provider it sees) is unbound after, for the same
    # reason.
    from mcp.shared import _otel
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    previous = trace._TRACER_PROVIDER
    trace._TRACER_PROVIDER = TracerProvider()
    try:
        async with contextlib.AsyncExitStack() as stack:
            servers = {"plain": server(), "traces": server()}
            servers["plain"].middleware.clear()  # the same call without the observing middleware
            servers["plain"].middleware.extend(m for m in servers["traces"].middleware if m.__name__ == "fast_paths")
            clients = {n: await stack.enter_async_context(Client(s, cache=None)) for n, s in servers.items()}
            ops = {n: (lambda c=c: c.call_tool("math__add", {"a": 2, "b": 3})) for n, c in clients.items()}
            result = await interleaved(ops, calls, args.rounds)
    finally:
        trace._TRACER_PROVIDER = previous
        if isinstance(_otel._tracer, trace.ProxyTracer):
            _otel._tracer._real_tracer = None
    MEASURED["ops traces"] = result["traces"] / result["plain"]
    rows.append(["call with spans (an OpenTelemetry SDK, no exporter)", fmt(result["traces"]), fmt(result["plain"]),
                 ratio(result["traces"], result["plain"])])
    tasks = await bench_tasks.overhead(calls, args.rounds)
    MEASURED["ops task"] = tasks["task"] / tasks["plain"]
    rows.append(["call as an MCP task: the tools/call that makes it, then tasks/get until it is completed "
                 "(`benchmarks/bench_tasks.py`)", fmt(tasks["task"]), fmt(tasks["plain"]),
                 ratio(tasks["task"], tasks["plain"])])
    return rows


async def _hook_own_part(config: str, calls: int, rounds: int) -> dict[str, float]:
    """A Python API call with and without a matching long-lived hook whose process's answer is made instant (its
    exchange replaced by ``{}`` at once): what toolcrib itself does for a hook (the call's JSON line, the policy's
    arguments as JSON, the hook's answer read and applied), without the hook program's own time or its waking."""
    from toolcrib.default_plugins import hooks

    async def at_once(_self: Any, _call: bytes) -> tuple[int, bytes, bytes]:
        return 0, b"{}", b""

    views = {"plain": peers.toolcrib_host(10).view(peers.AGENT),
             "hooked": peers.toolcrib_host(10, config=config).view(peers.AGENT)}
    asked = hooks._LongLived.ask
    hooks._LongLived.ask = at_once  # type: ignore[method-assign]
    try:
        with _frozen():
            return await interleaved({n: (lambda v=v: v.call("math__add", {"a": 2, "b": 3}))
                                      for n, v in views.items()}, calls, rounds, mean=True)
    finally:
        hooks._LongLived.ask = asked  # type: ignore[method-assign]


async def cluster(args: argparse.Namespace) -> list[Row]:
    """A Python API call under a rate limit counted on a loopback Redis (``[cluster]``) against the same limit in
    memory, and a call with no limit with ``[cluster]`` set against one without it."""
    import shutil
    import subprocess

    from toolcrib.cluster import limiter
    from toolcrib.config import parse_config

    program = shutil.which("redis-server")
    if program is None:
        return [["call with a fleet-wide rate limit (Redis)", "not measured", "-", "redis-server is not installed"]]
    calls = 200 if args.quick else 2000
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        redis = subprocess.Popen([program, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                                  "no", "--dir", tmp], stdout=subprocess.DEVNULL)
        try:
            for _ in range(200):
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        break
                except OSError:
                    time.sleep(0.05)
            shared = f'[cluster]\nredis_url = "redis://127.0.0.1:{port}/0"\n'
            limited = '[agents.bench.limits]\nrate = "100000000/minute"\n'
            configs = {"memory": limited, "redis": shared + limited, "cluster, no limit": shared, "plain": ""}
            async with contextlib.AsyncExitStack() as stack:
                views = {}
                for name, text in configs.items():
                    book, _ = await stack.enter_async_context(limiter(parse_config(
                        text + peers.CONFIG, "bench", Path.cwd())))
                    views[name] = peers.toolcrib_host(10, config=text, limits=book).view(peers.AGENT)
                ops = {n: (lambda v=v: v.call("math__add", {"a": 2, "b": 3})) for n, v in views.items()}
                result = await interleaved(ops, calls, args.rounds)
            sessions = await _sessions_on_redis(Path(tmp), shared, 30 if args.quick else 300, args.rounds)
            tasks = await bench_tasks.overhead(calls // 2, args.rounds, f"redis://127.0.0.1:{port}/0")
        finally:
            redis.terminate()
            redis.wait(30)
    MEASURED["redis limit delta"] = result["redis"] - result["memory"]
    MEASURED["cluster no limit"] = result["cluster, no limit"] / result["plain"]
    MEASURED["redis session delta"] = sessions["redis"] - sessions["memory"]
    MEASURED["redis task"] = tasks["task on Redis"] / tasks["plain"]
    return [["Python API call with a fleet-wide rate limit (loopback Redis) vs the same limit in memory",
             fmt(result["redis"]), fmt(result["memory"]), _delta(result["redis"] - result["memory"])],
            ["Python API call with no limit, [cluster] set vs not", fmt(result["cluster, no limit"]),
             fmt(result["plain"]), ratio(result["cluster, no limit"], result["plain"])],
            ["call over a 2025-11-25 HTTP session, sessions and events on Redis vs in memory", fmt(sessions["redis"]),
             fmt(sessions["memory"]), _delta(sessions["redis"] - sessions["memory"])],
            ["call as an MCP task, its record on loopback Redis ([cluster]) vs the plain call (in memory: "
             f"{ratio(tasks['task'], tasks['plain'])})", fmt(tasks["task on Redis"]), fmt(tasks["plain"]),
             ratio(tasks["task on Redis"], tasks["plain"])]]


async def _sessions_on_redis(folder: Path, shared: str, calls: int, rounds: int) -> dict[str, float]:
    """A call over one HTTP loopback session (the SDK client, 2025-11-25) to a ``serve --http`` whose sessions and
    events are on Redis (``[cluster]``), and to one that keeps them in memory, interleaved."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    plain = _config_file(folder)
    clustered = folder / "clustered.toml"
    clustered.write_text(shared + plain.read_text())
    with _http_server("toolcrib", plain) as memory_url, _http_server("toolcrib", clustered) as redis_url:
        async with contextlib.AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers={"Authorization": "Bearer bench-token-0123456789"}, timeout=60))
            clients = {}
            for name, url in (("memory", memory_url), ("redis", redis_url)):
                clients[name] = await stack.enter_async_context(Client(
                    streamable_http_client(url, http_client=http), mode="legacy", cache=None))
                await clients[name].list_tools()
            ops = {n: (lambda c=c: c.call_tool("math__add", {"a": 2, "b": 3})) for n, c in clients.items()}
            return await interleaved(ops, calls, rounds)


# -- Python API, concurrency, views, discovery, start-up ------------------------------------------------------------


async def python_api(args: argparse.Namespace) -> list[Row]:
    import bench_api

    floor, pipeline = await bench_api.measure(2000 if args.quick else 20000, args.rounds)
    f, p = statistics.median(floor), statistics.median(pipeline)
    MEASURED["api ratio"] = p / f
    return [["view.call vs a bare pydantic-validated call (`add -> int`)", fmt(p), fmt(f), ratio(p, f)]]


async def concurrency(args: argparse.Namespace) -> list[Row]:
    import toolcrib

    extra = [toolcrib.tool(name="slow_async")(peers._add_tool("slow_async", sleep=0.1)),
             toolcrib.tool(name="slow_sync")(peers._add_tool("slow_sync", sync=True, sleep=0.1))]
    view = peers.toolcrib_host(1, extra).view(peers.AGENT)
    rows = []
    for name in ("slow_async", "slow_sync"):
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for _ in range(100):
                tg.start_soon(view.call, f"math__{name}", {"a": 1, "b": 2})
        total = time.perf_counter() - start
        MEASURED[name] = total
        kind = "async" if name == "slow_async" else "sync (default: 128 worker threads)"
        rows.append([f"100 concurrent 100 ms calls, {kind}", fmt(total), f"{total / 0.1:.1f}x one call"])
    return rows


def view_build(args: argparse.Namespace) -> list[Row]:
    import bench_policy
    import bench_views

    tools, agents = (1000, 20) if args.quick else (10_000, 100)
    entries = bench_views.catalog(tools)
    loaded = bench_views.config(agents, tools // 10)
    best = min(bench_views.build_all(entries, loaded) for _ in range(1 if args.quick else 3))
    cedar = bench_policy.measure(1000, 5 if args.quick else 30, 500 if args.quick else 3000)
    MEASURED["cedar build"] = cedar["build cedar"] / cedar["build toml"]
    MEASURED["cedar call delta"] = cedar["call cedar"] - cedar["call toml"]
    return [[f"view build, {tools} tools x {agents} agents", fmt(best),
             f"{best / (tools * agents) * 1e6:.2f} us per decision"],
            ["one view of 1,000 tools under a 20-policy Cedar file vs 20 TOML patterns (`benchmarks/bench_policy.py`)",
             fmt(cedar["build cedar"]), f"{ratio(cedar['build cedar'], cedar['build toml'])} the TOML rules' "
             f"{fmt(cedar['build toml'])}"],
            ["a Python API call decided by that Cedar file vs by the TOML rules, p50", fmt(cedar["call cedar"]),
             f"+{fmt(cedar['call cedar'] - cedar['call toml'])} over {fmt(cedar['call toml'])}"]]


SEARCH_QUERIES = ["add two numbers", "greet someone", "math", "echo text", "tool 5123", "/math__add_1.*/",
                  "weather forecast", "read a file", "sum", "math__tool_0042"]


def _held_by(build: Callable[[], Any]) -> tuple[int, int | None]:
    """The bytes of Python objects that what ``build`` returns holds (tracemalloc), and of SQLite's allocator
    (``sqlite3_memory_used`` of the library Python's sqlite3 is linked to; None where it is not found). The
    resident set says little here: freed memory of earlier work is reused."""
    import ctypes
    import sqlite3  # noqa: F401  (maps the library)
    import tracemalloc

    used = None
    with open("/proc/self/maps") as maps:  # the very library _sqlite3 uses, not another copy of SQLite
        library = next((line.split()[-1] for line in maps if "libsqlite3" in line.split()[-1]), None)
    if library is not None:
        used = ctypes.CDLL(library).sqlite3_memory_used
        used.restype = ctypes.c_int64
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0], used() if used else 0
    kept = build()
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before[0], (used() - before[1]) if used else None
    tracemalloc.stop()
    del kept
    return held


def bench_search_text() -> str:
    """The tool search section's text: the set, and what was tried for ranking and what each gained."""
    import bench_search

    return (f"The labelled set of `benchmarks/catalog/` (how it was made: its README.md): {bench_search.summary()}. "
            "Each engine ranks the same tools for the same queries; the held-out split is what no ranking choice "
            "looked at. *toolcrib* is `AgentView.search` (BM25 over SQLite FTS5, name, keywords, description and "
            "arguments weighed apart; with the `toolcrib-vectors` package installed, BM25 and word vectors "
            "together), *toolcrib without the vectors* the same as without that package, *bm25* Okapi BM25 "
            "(`rank_bm25`) over name, description and argument names, *fts5* "
            "SQLite FTS5 with its defaults over the same text, *fastmcp* FastMCP's `BM25SearchTransform` (not run "
            "at 10,000 tools: it builds its index anew on every query). What was tried, on the tuning split at "
            "10,000 tools: BM25's field weights (name 1-3, description 0.5-1.5, arguments 0-1: within 1 point of "
            "recall@5 of each other, so they stay); word vectors from all-MiniLM-L6-v2's word-piece table, summed "
            "with inverse document frequency, fused with BM25 (+3 points recall@5 on the tuning split, +2.4 held "
            "out, kept as `toolcrib-vectors` 0.1); the same table reduced to 64, 128 or 192 dimensions (equal "
            "within a point fused; 128 kept, 3.6 MB); a model2vec distillation of the model (0.79 recall@5 alone "
            "against the raw table's 0.82: dropped); the whole MiniLM model on each tool (0.92 recall@5 alone on "
            "the tuning split, but minutes to embed 10,000 tools on two cores and PyTorch to install: not kept); "
            "the whole model on the query only, against tool vectors trained to its space (0.78 alone: dropped); "
            "the word-piece vectors trained so that a text's sum points where the whole model embeds it, on 88,402 "
            "public APIs' operations none of which is in this set (model2vec's tokenlearn in small, "
            "`plugins/toolcrib-vectors/make_vectors.py`; at 10,000 tools +0.4 points recall@5 and +1.7 MRR@10 on "
            "the tuning split, +0.9 and +1.8 held out, +2 recall@1 at every size: kept as `toolcrib-vectors` 0.2; "
            "the pull toward the starting table, 0.001 to 0.1, within half a point); reciprocal rank fusion "
            "instead of adding normalised scores (2 points lower: dropped); summing the vectors of every text at "
            "once in numpy (30% off the vectors' build on the bench pack's short texts, 5% on this set's: not "
            "worth its code).")


def tool_search(args: argparse.Namespace) -> tuple[list[Row], list[Row]]:
    """Tool search: its quality on the labelled set of ``catalog/`` (``bench_search``: real servers' tools padded
    with real APIs' operations, at 1,000, 2,000 and 10,000 tools) beside plain BM25, SQLite FTS5 and FastMCP's BM25
    transform; its speed and memory at 10,000 tools, and in the worst case (the bench pack's 10,000 alike
    descriptions, where every query word that is in them matches every tool); the index's build against the view's
    own; the first tools/list of an agent that searches. Returns the quality table's rows and the others."""
    import bench_pack
    import bench_search

    import toolcrib
    from toolcrib import search
    from toolcrib.config import parse_config
    from toolcrib.search import ToolIndex
    from toolcrib.view import estimated_tokens

    sizes = (1000,) if args.quick else bench_search.SIZES
    engines = [e for e in bench_search.ENGINES if e != "fastmcp" or peers.fastmcp_available()]
    measured = bench_search.measure(sizes, engines)
    with_vectors = search._vectors() is not None
    for row in measured:
        if row["tools"] == max(sizes):
            MEASURED[f"search r5 {row['engine']}"] = row["held"]["r5"]
            MEASURED[f"search mrr {row['engine']}"] = row["held"]["mrr"]
    named = {"toolcrib": "toolcrib (BM25 and word vectors)" if with_vectors else "toolcrib (BM25)",
             "toolcrib-bm25": "toolcrib without the vectors (BM25)"}
    if not with_vectors:
        measured = [row for row in measured if row["engine"] != "toolcrib-bm25"]  # (the same as toolcrib's)
    quality = [[f"{row['tools']:,} tools: {named.get(row['engine'], row['engine'])}",
                *("{r1:.3f} / {r5:.3f} / {mrr:.3f}".format(**row[split]) for split in ("held", "tune", "hard"))]
               for row in measured]  # (quality only: each number is the same in every run; speed is below)
    tools, queries = bench_search.load()
    n = max(sizes)
    many = bench_search.pool(tools, queries, n)
    index = ToolIndex(many)
    index.search("x", 1)
    texts = [q.text for q in queries]
    first: list[float] = []  # the first round: most words asked for the first time (each word's scores are kept)
    rounds = 1 if args.quick else 5
    p50, p95 = bench_search.timed(lambda q: index.search(q, 5), texts, rounds, first)

    def searched() -> ToolIndex:  # (timed apart: tracemalloc slows what it traces)
        fresh = ToolIndex(many)
        for query in texts:
            fresh.search(query, 5)
        return fresh

    python, sqlite = _held_by(searched)
    MEASURED["search p95"] = p95
    rows = [[f"tool search, {n} tools (the labelled set's): a search, p50 / p95 over the {len(texts)} labelled "
             f"queries, {rounds} round{'s' * (rounds > 1)}", f"{fmt(p50)} / {fmt(p95)}",
             "BM25 and word vectors (toolcrib-vectors)" if with_vectors else "BM25 alone"],
            [f"tool search, {n} tools: a search, p50 / p95 of the first round (a fresh index: each word's scores are "
             "asked of FTS5 at its first search)", "{} / {}".format(*map(fmt, bench_search.p50_p95(first))), ""],
            [f"tool search, {n} tools: memory of the index after a round of the queries",
             f"{(python + (sqlite or 0)) / n / 1024:.2f} KiB per tool", f"Python's {python / n / 1024:.2f} KiB (the "
             "scores kept and the vectors included), SQLite's " + (f"{sqlite / n / 1024:.2f} KiB" if sqlite is not
                                                                   None else "not found")]]
    builds, indexes = [], []
    for _ in range(1 if args.quick else 3):  # best of three of each: a collection of the cyclic GC adds 100 ms
        host = peers.toolcrib_host(n)
        gc.collect()
        started = time.perf_counter()
        view = host.view(peers.AGENT)
        assert view.mcp_tools
        builds.append(time.perf_counter() - started)
        started = time.perf_counter()
        view.search("x", 1)  # the index is built at the first search
        indexes.append(time.perf_counter() - started)
    built, indexed = min(builds), min(indexes)
    MEASURED["search index"] = indexed / built
    worst_p50, worst_p95 = bench_search.timed(lambda q: view.search(q, 5), SEARCH_QUERIES, 5 if args.quick else 50)
    searching = toolcrib.Host(parse_config(peers.CONFIG.replace(
        f"[agents.{peers.AGENT}]\n", f"[agents.{peers.AGENT}]\ntool_search = {{ listed = [] }}\n"), "bench",
        Path.cwd()), plugins={"math": bench_pack.BenchPack(n)}, autoload=False, env={}).view(peers.AGENT)
    first_list = estimated_tokens(searching.listed_tools)
    MEASURED["search first list"] = first_list
    return quality, [
        *rows,
        [f"tool search, {n} tools: the view's build (with its tools/list)", fmt(built), ""],
        [f"tool search, {n} tools: the index's build, at the first search", fmt(indexed), f"{indexed / built:.2f}x "
         "the view's"],
        [f"tool search, {n} alike tools (the worst case): a search, p50 / p95 over {len(SEARCH_QUERIES)} kinds of "
         "query", f"{fmt(worst_p50)} / {fmt(worst_p95)}", ""],
        [f"tool search, {n} tools: the first tools/list of an agent that searches", f"{first_list} tokens",
         f"estimated: 4 characters of compact JSON a token; {len(searching.listed_tools)} tools listed, "
         f"{estimated_tokens(view.mcp_tools)} tokens for the whole list"]]


def _time_command(cmd: list[str], env: dict[str, str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _in_turns(base: tuple[list[str], dict[str, str]], other: tuple[list[str], dict[str, str]], runs: int,
              count: int) -> tuple[float, float, float]:
    """The two commands' medians, run in turns, and the marginal cost of each of ``count`` things ``other`` has
    more: the median of the paired differences over ``count``. Taken in turns, a machine that speeds up or slows
    down over the minutes weighs on both alike (apart, one slow minute for the baseline once made 200 packs
    disabled in config cost 1.4 ms each)."""
    first: list[float] = []
    second: list[float] = []
    for _ in range(runs):
        first.append(_time_command(*base, 1))
        second.append(_time_command(*other, 1))
    marginal = statistics.median(b - a for a, b in zip(first, second, strict=True)) / count
    return statistics.median(first), statistics.median(second), marginal


def _site(root: Path, packs: int) -> Path:
    """A path entry with ``packs`` installed packs of 10 tools (real dist-info folders, as pip leaves them)."""
    site = root / f"site{packs}"
    site.mkdir()
    for i in range(packs):
        module = f"benchpack{i:04d}"
        tools = "\n".join(textwrap.dedent(f'''
            @toolcrib.tool(annotations={{"readOnlyHint": True}})
            def tool{j}(a: int, b: int = 0) -> int:
                """Tool {j} of pack {i}: adds two integers."""
                return a + b
            ''') for j in range(10))
        listing = ", ".join(f"tool{j}" for j in range(10))
        (site / f"{module}.py").write_text(f"import toolcrib\n{tools}\n\n@toolcrib.hookimpl\n"
                                           f"def toolcrib_tools():\n    return [{listing}]\n")
        info = site / f"bench_pack_{i:04d}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: bench-pack-{i:04d}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[toolcrib]\nbp{i:04d} = {module}\n")
    # pip compiles what it installs to bytecode; without it every run would compile 1,000 modules (0.3 ms a pack),
    # and nothing would cache them when $PYTHONDONTWRITEBYTECODE is set.
    compileall.compile_dir(site, quiet=1)
    return site


def discovery(args: argparse.Namespace) -> list[Row]:
    """``toolcrib tools --agent X`` (names only) and ``--json`` (every schema, as tools/list gives them) with 0, 200
    and (in a full run) 1,000 installed packs of 10 tools, and with the 200 disabled in config. Each command is a
    fresh process: imports, discovery, config, views."""
    counts = [20] if args.quick else [200, 1000]
    runs = 3 if args.quick else 5
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "toolcrib.toml"
        config.write_text(peers.CONFIG)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
        cmd = [sys.executable, "-m", "toolcrib.cli", "tools", "--agent", peers.AGENT, "--config", str(config)]
        as_json = [*cmd, "--json"]
        for packs in counts:
            env = {**base_env, "PYTHONPATH": str(_site(Path(tmp), packs))}
            empty, full, marginal = _in_turns((cmd, base_env), (cmd, env), runs, packs)
            MEASURED[f"per pack {packs}"] = marginal
            if packs == counts[0]:
                rows.append(["toolcrib tools, 0 extra packs", fmt(empty), ""])
            rows.append([f"toolcrib tools, {packs} packs of 10 tools", fmt(full), f"{fmt(marginal)} per pack"])
            if packs == counts[0]:
                empty_json, full_json, MEASURED["per pack json"] = _in_turns((as_json, base_env), (as_json, env),
                                                                            runs, packs)
                rows += [["toolcrib tools --json, 0 extra packs", fmt(empty_json), ""],
                         [f"toolcrib tools --json, {packs} packs of 10 tools", fmt(full_json),
                          f"{fmt(MEASURED['per pack json'])} per pack"]]
                disabled = Path(tmp) / "disabled.toml"
                disabled.write_text(peers.CONFIG + "".join(f"\n[packs.bp{i:04d}]\nenabled = false\n"
                                                           for i in range(packs)))
                off_cmd = [sys.executable, "-m", "toolcrib.cli", "tools", "--agent", peers.AGENT, "--config",
                           str(disabled)]
                _, off, off_marginal = _in_turns((cmd, base_env), (off_cmd, env), runs, packs)
                rows.append([f"toolcrib tools, {packs} packs disabled in config", fmt(off),
                             f"{fmt(off_marginal)} per pack"])
    return rows


def startup(args: argparse.Namespace) -> list[Row]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    runs = 3 if args.quick else 9
    plugins = _time_command([sys.executable, "-m", "toolcrib.cli", "plugins"], env, runs)
    bare = _time_command([sys.executable, "-c", "pass"], env, runs)
    return [["toolcrib plugins (built-in default config)", fmt(plugins), f"python -c pass: {fmt(bare)}"]]


# -- report ---------------------------------------------------------------------------------------------------------


def _run_apart(args: argparse.Namespace) -> dict[str, list[Row]]:
    """One whole run in a process of its own: what an earlier run left (its heap, threads, processes) cannot
    weigh on it."""
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run.json"
        flags = ["--rounds", str(args.rounds), *(["--quick"] if args.quick else []),
                 *(["--no-wire"] if args.no_wire else [])]
        subprocess.run([sys.executable, __file__, "--emit", str(out), *flags], check=True, stdout=subprocess.DEVNULL)
        found: dict[str, list[Row]] = json.loads(out.read_text())
    return found


def _measure_all(args: argparse.Namespace) -> dict[str, list[Row]]:
    """One whole run: every table's rows, and the goals they meet."""
    MEASURED.clear()
    mcp_rows = anyio.run(mcp_inmemory, args)
    if not args.no_wire:
        mcp_rows += anyio.run(mcp_wire, args)
    realistic_rows = anyio.run(realistic, args) if not args.no_wire else []
    api_rows = anyio.run(python_api, args)
    ops_rows = anyio.run(operations, args)
    if not args.no_wire:
        ops_rows += anyio.run(identity, args)
    cold_rows = cold(args)
    search_rows, search_other = tool_search(args)
    other = anyio.run(concurrency, args) + view_build(args) + search_other + discovery(args) + startup(args)
    ops_rows += anyio.run(cluster, args, backend="asyncio")  # last: its Redis must not disturb the rows above
    return {"mcp": mcp_rows, "realistic": realistic_rows, "cold": cold_rows, "api": api_rows, "ops": ops_rows,
            "search": search_rows, "other": other, "goals": _goals()}


_QUANTITY = re.compile(r"([0-9][0-9,]*(?:\.[0-9]+)?) ?(us|ms|s|/s|MB|KiB|x)?")


def _quantities(row: Row) -> list[float]:
    """The leading number of each cell of ``row`` but its label, in one unit (seconds for times)."""
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
    found = []
    for cell in row[1:]:
        match = _QUANTITY.match(cell.strip("*"))
        if match is not None:
            found.append(float(match.group(1).replace(",", "")) * scale.get(match.group(2) or "", 1.0))
    return found


def _noisy(rows: list[Row], others: list[list[Row]]) -> list[Row]:
    """``rows`` with each row whose numbers differ by more than 20% in another run marked noisy, naming what that
    run gave (its second cell: toolcrib's, or the measured value of a goal)."""
    marked = []
    for row in rows:
        row = list(row)
        for other in others:
            twin = next((o for o in other if o[0] == row[0]), None)
            if twin is None:
                continue
            pairs = zip(_quantities(row), _quantities(twin), strict=False)
            if any(a > 0 and b > 0 and max(a, b) / min(a, b) > 1.2 for a, b in pairs):
                cell = 2 if len(row) == 4 and row[1].startswith(("<", ">", "-")) else 1  # a goal: its value
                row[0] += f" *(noisy: another run gave {twin[cell]})*"
                break
        marked.append(row)
    return marked


def _goals() -> list[Row]:
    """The goals of the benchmarks issue, each as a ratio (or a time) from this run."""

    def peer_ratio(label: str, peer: str) -> float | None:
        mine, theirs = MEASURED.get(f"{label}|toolcrib"), MEASURED.get(f"{label}|{peer}")
        return mine / theirs if mine and theirs else None

    listing = "tools/list, 1000 tools, in-memory"
    slow_sync = MEASURED.get("slow_sync")
    # What of toolcrib's call is not its server's part: the SDK's client, dispatcher and runner, which both sides
    # pay alike. Over the low-level server's whole call it is the ratio a server part costing nothing would reach.
    call = "call, in-memory (2026-07-28)"
    whole, own = MEASURED.get(f"{call}|toolcrib"), MEASURED.get(f"{call}: the server's part only|toolcrib")
    lowlevel = MEASURED.get(f"{call}|lowlevel")
    floor = (whole - own) / lowlevel if whole and own and lowlevel else None
    calls = [(f"call, in-memory ({era})", "in memory", era) for _mode, era in ERAS] + \
        [(STDIO_CALLS[mode], "over stdio", era) for mode, era in ERAS] + \
        [(HTTP_CALLS[mode], "over HTTP", era) for mode, era in ERAS]
    goals: list[tuple[str, str, float | None, float, str]] = [
        *((f"MCP call {where}, {era}, vs the low-level server", "<= 0.90x", peer_ratio(label, "lowlevel"), 0.9, "x")
          for label, where, era in calls),
        ("the server's part of an in-memory call (2026-07-28) vs the low-level server's", "<= 0.50x",
         peer_ratio(call + ": the server's part only", "lowlevel"), 0.5, "x"),
        *((f"HTTP throughput, {n} clients{' of the SDK' if sdk else ', raw'}, vs {name}", ">= 1.50x",
           _over(MEASURED.get(f"{_throughput_label(n, sdk)}|toolcrib"),
                 MEASURED.get(f"{_throughput_label(n, sdk)}|{peer}")), 1.5, "minx")
          for sdk in (False, True) for n in (10, 50)
          for peer, name in (("lowlevel", "the low-level server"), ("mcpserver", "MCPServer"))),
        *((f"process start to the first tools/call answered, {n:,} tools, {era}, vs the low-level server",
           "<= 1.00x", peer_ratio(f"cold {n} {era} call", "lowlevel"), 1.0, "x")
          for n in (1000, 10_000) for _mode, era in ERAS),
        *((f"the server process's peak memory, 10,000 tools, {era}, vs the low-level server's", "<= 0.90x",
           peer_ratio(f"cold 10000 {era} server_mb", "lowlevel"), 0.9, "x") for _mode, era in ERAS),
        ("`fs__read_file` of 10 KB vs the low-level server, in memory", "<= 1.00x",
         peer_ratio("fs__read_file, 10 KB, in memory", "lowlevel"), 1.0, "x"),
        ("`fs__read_file` of 10 KB vs the low-level server, stdio", "<= 1.00x",
         peer_ratio("fs__read_file, 10 KB, stdio", "lowlevel"), 1.0, "x"),
        ("prompts/get vs the low-level server", "<= 1.00x", peer_ratio("prompts/get, in-memory", "lowlevel"), 1.0,
         "x"),
        ("250 argument specifiers on one tool, the check of a call", "<= 10 us", MEASURED.get("specifiers 250"),
         0.00001, "s"),
        ("the SDK's share of toolcrib's call (client, dispatcher, runner) vs the low-level server's whole call: the "
         "best a server part costing nothing would reach", "-", floor, 1.0, "x"),
        ("tools/list of 1000 tools vs the low-level server without middleware, warm", "<= 0.70x",
         peer_ratio(listing, "lowlevel"), 0.7, "x"),
        ("`toolcrib tools --json`, marginal cost per pack of 10 tools (200 packs)", "<= 2 ms",
         MEASURED.get("per pack json"), 0.002, "s"),
        ("discovery, marginal cost per pack of 10 tools (1,000 packs)", "<= 1 ms", MEASURED.get("per pack 1000"),
         0.001, "s"),
        ("100 concurrent 100 ms sync calls vs one call", "<= 1.50x", slow_sync / 0.1 if slow_sync else None, 1.5,
         "x"),
        ("100 concurrent 100 ms async calls", "<= 150 ms", MEASURED.get("slow_async"), 0.150, "s"),
        ("MCP call with an audit log vs without", "<= 1.30x", MEASURED.get("ops audit"), 1.3, "x"),
        ("MCP call with a command hook matching no call vs without", "<= 1.05x", MEASURED.get("ops hook"), 1.05, "x"),
        ("MCP call with a matching long-lived command hook vs without (reported: a hook's cost is its own)", "-",
         MEASURED.get("ops long-lived hook"), 1.20, "x"),
        ("MCP call with a matching long-lived hook whose process answers at once (`cat`) vs without: the least a "
         "hook process costs here", "-", MEASURED.get("ops echoing hook"), 1.20, "x"),
        ("toolcrib's own part of a matching long-lived hook (its process answering at once), Python API", "-",
         MEASURED.get("ops long-lived own"), 1.0, "s"),
        ("MCP call with metrics on (no trace exporter) vs without", "<= 1.05x", MEASURED.get("ops metrics"), 1.05,
         "x"),
        ("Python API call vs a bare pydantic-validated call", "<= 3.00x", MEASURED.get("api ratio"), 3.0, "x"),
        ("HTTP call with an OAuth access token vs a static token (keys cached)", "<= 1.10x",
         MEASURED.get("oauth call"), 1.1, "x"),
        ("call with a fleet-wide rate limit on a loopback Redis, p50 over the in-memory limit", "<= 1 ms",
         MEASURED.get("redis limit delta"), 0.001, "s"),
        ("call with no limit, [cluster] set vs not", "<= 1.05x", MEASURED.get("cluster no limit"), 1.05, "x"),
        ("call over a 2025-11-25 HTTP session with its events on Redis, p50 over in memory", "<= 1 ms",
         MEASURED.get("redis session delta"), 0.001, "s"),
        ("tool search at 10,000 tools (the labelled set's), p95", "<= 5 ms", MEASURED.get("search p95"), 0.005, "s"),
        ("tool search recall@5, held-out queries, 10,000 tools", ">= 0.90", MEASURED.get("search r5 toolcrib"), 0.9,
         "min"),
        ("tool search MRR@10, held-out queries, 10,000 tools", ">= 0.80", MEASURED.get("search mrr toolcrib"), 0.8,
         "min"),
        ("tool search recall@5 vs plain BM25, held-out queries, 10,000 tools", ">= 1.00x",
         _over(MEASURED.get("search r5 toolcrib"), MEASURED.get("search r5 bm25")), 1.0, "minx"),
        ("tool search MRR@10 vs plain BM25, held-out queries, 10,000 tools", ">= 1.00x",
         _over(MEASURED.get("search mrr toolcrib"), MEASURED.get("search mrr bm25")), 1.0, "minx"),
        ("first tools/list of an agent that searches, 10,000 tools", "<= 2,000 tokens",
         MEASURED.get("search first list"), 2000, "tokens"),
        ("tool search index build vs the view's build", "<= 0.50x", MEASURED.get("search index"), 0.5, "x"),
        ("view build, 1,000 tools, a 20-policy Cedar file vs the TOML rules", "<= 2.00x", MEASURED.get("cedar build"),
         2.0, "x"),
        ("a call's decision by that Cedar file over the TOML rules, p50", "<= 50 us", MEASURED.get("cedar call delta"),
         50e-6, "s"),
    ]
    rows = []
    for name, target, value, limit, unit in goals:
        if value is None:
            rows.append([name, target, "not measured", "-"])
            continue
        shown = f"{value:.2f}x" if unit in ("x", "minx") else f"{value:.3f}" if unit == "min" else \
            f"{value:,.0f}" if unit == "tokens" else fmt(value)
        rows.append([name, target, shown, "-" if target == "-" else verdict(value, limit, unit)])
    return rows


def verdict(value: float, limit: float, unit: str) -> str:
    """Whether a goal is met: a time, a delta or a ratio at or below zero is noise (a run that measured less than
    nothing), never a goal met by accident."""
    if not unit.startswith("min") and value <= 0:
        return "**no** (noise: at or below zero)"
    met = value >= limit if unit.startswith("min") else value <= limit
    return "yes" if met else "**no**"


def _over(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _table(header: Row, rows: list[Row]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _versions() -> str:
    names = ["toolcrib", "mcp", "fastmcp", "pydantic", "anyio", "uvicorn"]
    found = []
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found.append(f"{name} {metadata.version(name)}")
    return ", ".join(found)


def _byte_compiled() -> None:
    """toolcrib's modules and its packs' byte-compiled before anything is measured, as pip compiles what it
    installs: the benchmarks' install is editable, which pip does not compile, and under $PYTHONDONTWRITEBYTECODE
    nothing caches them, so every toolcrib process started would compile its own source (~0.2 s of a start that
    no peer pays: the SDK's modules come compiled from their wheels)."""
    for folder in (HERE.parent / "host", *sorted((HERE.parent / "plugins").glob("*/src"))):
        compileall.compile_dir(folder, quiet=2)
    compileall.compile_dir(HERE, maxlevels=0, quiet=2)  # the peers and the bench pack, each side's process imports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations: proves the harness works")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--no-wire", action="store_true", help="skip the stdio and HTTP subprocess benchmarks")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--runs", type=int, default=None, help="whole runs (default 2; 1 with --quick): a row whose "
                        "runs differ by more than 20%% is marked noisy")
    parser.add_argument("--emit", type=Path, help=argparse.SUPPRESS)  # one run's tables as JSON (a run of --runs)
    args = parser.parse_args()
    args.rounds = args.rounds or (2 if args.quick else 5)
    _byte_compiled()
    if args.emit:
        args.emit.write_text(json.dumps(_measure_all(args)))
        return
    started = time.perf_counter()
    load_before = os.getloadavg()
    count = args.runs or (1 if args.quick else 2)
    runs = [_measure_all(args)] if count == 1 else [_run_apart(args) for _ in range(count)]
    tables = {name: _noisy(rows, [other[name] for other in runs[1:]]) for name, rows in runs[0].items()}
    mcp_rows, cold_rows, api_rows, ops_rows, other = (tables[k] for k in ("mcp", "cold", "api", "ops", "other"))
    load_after = os.getloadavg()
    cpu = platform.processor() or platform.machine()
    report = "\n\n".join([
        "# Benchmarks",
        f"Run on {datetime.date.today()}: {platform.system()} {platform.machine()} ({cpu}), {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {_versions()}. Load average (1 min) {load_before[0]:.2f} before the "
        f"run and {load_after[0]:.2f} after it. Each MCP number is the median over {args.rounds} rounds of the "
        f"per-round median, the peers taking turns of {TURN} calls (so that what the machine does meanwhile falls on "
        "each alike); ratios are toolcrib's time over the peer's (below 1.00x: toolcrib is faster). Reproduce with "
        "`benchmarks/run.sh`.",
        "## Goals",
        f"Measured in {len(runs)} whole run{'s' if len(runs) > 1 else ''}; the values are the first run's, and a "
        "row marked *noisy* differed by more than 20% in another (its value there is given).",
        _table(["goal", "target", "measured", "met"], tables["goals"]),
        "## MCP, warm (the same `add` tool and output schema on every side)",
        WORK.replace("\n", " "),
        _table(["measure", "toolcrib", *COLUMNS.values()], mcp_rows),
        "## A realistic call (`benchmarks/bench_read.py`)",
        "toolcrib serves the fs pack's `fs__read_file` (the path confined to the workspace by descriptor-relative "
        "opens, binary sniffing, line selection; the pack declares it `inline`: it runs on the event loop); the SDK's "
        "low-level server a hand-written `read_file` that resolves the path, checks it stays in the workspace and "
        "reads it in its async handler. Both read the same 10 KB text file.",
        _table(["measure", "toolcrib", "SDK low-level, no middleware", "ratio"], tables["realistic"]),
        "## Cold: a fresh process (toolcrib and the SDK's low-level server without middleware)",
        "toolcrib's server is built as `toolcrib serve` builds it: the host with the served agent's lists "
        "(`toolcrib.mcp.state.build_lists`), what the build leaves alive frozen out of the garbage collector's scans "
        "(`toolcrib.view.freeze_builds`); the low-level server's process builds its `Tool` models with the "
        "collector as Python leaves it. The first row, process start to the first answer, is the sum that counts.",
        _table(["measure", "toolcrib", "SDK low-level", "ratio", "note"], cold_rows),
        "## Python API",
        _table(["measure", "toolcrib", "floor", "ratio"], api_rows),
        "## Operations (what each costs a call, in-memory, 2026-07-28)",
        "The audit log and command hook rows are means over each round (they count the audit log's writer thread, "
        "which a median leaves out); the others are medians.",
        _table(["measure", "with", "without", "ratio"], ops_rows),
        "## Tool search (`benchmarks/bench_search.py`)",
        bench_search_text(),
        _table(["tools: engine", "held out: recall@1 / recall@5 / MRR@10", "tuning split", "hard queries"],
               tables["search"]),
        "## Concurrency, views, discovery, start-up",
        _table(["measure", "time", "note"], other),
        "## What was removed, and what it cost",
        re.sub(r"(?<!\n)\n(?!\n|- )[ \t]*", " ", REMOVED),  # its paragraphs and items, each one line
        f"Total harness time: {time.perf_counter() - started:.0f} s.",
    ]) + "\n"
    print(report)
    out = written_to(args.out, args.quick)
    if out is not None:
        out.write_text(report)
    elif args.out is not None:
        print(f"(a quick run: {PUBLISHED} is the published page, and is not written)", file=sys.stderr)


def written_to(out: Path | None, quick: bool) -> Path | None:
    """Where the report goes: ``out``, unless this is a quick run and ``out`` is the published page."""
    if out is None or (quick and out.resolve() == PUBLISHED.resolve()):
        return None
    return out


if __name__ == "__main__":
    main()
