"""Run every benchmark and write one Markdown report: toolcrib side by side with the SDK's low-level server, the
SDK's bundled high-level server (MCPServer) and FastMCP, as ratios from one run (this machine is shared and
noisy: absolute times drift, ratios hold).

    benchmarks/run.sh                       # sets up benchmarks/.venv (with fastmcp) and writes docs/benchmarks.md
    python benchmarks/run.py --quick        # a smoke run (CI runs it through the test suite)

Sections: MCP call latency (in-memory, stdio subprocess, HTTP loopback), tools/list with 10/100/1000 tools,
resources/list with 10/100 resources and prompts/get (in-memory),
Python API overhead, discovery (0 vs 200 installed packs), concurrency, view build, start-up.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import anyio  # noqa: E402
import peers  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402

Row = list[str]


def fmt(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def ratio(a: float, b: float | None) -> str:
    return f"{a / b:.2f}x" if b else "-"


async def _median_of(op: Callable[[], Awaitable[Any]], iterations: int) -> float:
    samples = []
    clock = time.perf_counter
    for _ in range(iterations):
        start = clock()
        await op()
        samples.append(clock() - start)
    return statistics.median(samples)


async def interleaved(ops: dict[str, Callable[[], Awaitable[Any]]], iterations: int, rounds: int) -> dict[str, float]:
    """The median over rounds of each op's per-round median; the ops take turns within every round."""
    per_round: dict[str, list[float]] = {name: [] for name in ops}
    for _ in range(rounds):
        for name, op in ops.items():
            per_round[name].append(await _median_of(op, iterations))
    return {name: statistics.median(values) for name, values in per_round.items()}


# -- MCP, in-memory ----------------------------------------------------------------------------------------------


def _peer_names() -> list[str]:
    return ["toolcrib", "lowlevel", "mcpserver"] + (["fastmcp"] if peers.fastmcp_available() else [])


@contextlib.asynccontextmanager
async def _clients(n: int, mode: str) -> AsyncIterator[dict[str, Client]]:
    async with contextlib.AsyncExitStack() as stack:
        clients = {}
        for peer in _peer_names():
            server = peers.lowlevel_of(peer, peers.BUILDERS[peer](n))
            client = await stack.enter_async_context(Client(server, mode=mode, cache=None))  # type: ignore[arg-type]
            await client.list_tools()  # primes the client's output-schema cache, as every real client has it
            clients[peer] = client
        yield clients


async def mcp_inmemory(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    calls = 100 if args.quick else 1000
    for mode in ("auto", "legacy"):
        async with _clients(10, mode) as clients:
            ops = {p: (lambda c=c, p=p: c.call_tool(_add(p), {"a": 2, "b": 3})) for p, c in clients.items()}
            result = await interleaved(ops, calls, args.rounds)
        rows.append(_peer_row(f"call, in-memory ({'2026-07-28' if mode == 'auto' else '2025-11-25'})", result))
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
    for peer in ("lowlevel", "mcpserver", "fastmcp"):
        value = result.get(peer)
        cells.append(f"{fmt(value)} ({ratio(base, value)})" if value else "not installed")
    return cells


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


def _config_file(directory: Path) -> Path:
    path = directory / "toolcrib.toml"
    path.write_text(peers.CONFIG.replace(f"[agents.{peers.AGENT}]\n",
                                         f'[agents.{peers.AGENT}]\ntoken_env = "BENCH_TOKEN"\n'))
    return path


def _stdio_params(peer: str, config: Path) -> StdioServerParameters:
    if peer == "toolcrib":
        args = ["-m", "toolcrib.cli", "serve", "--agent", peers.AGENT, "--config", str(config), "--no-reload"]
    else:
        args = [str(HERE / "peers.py"), peer, "stdio", "10"]
    return StdioServerParameters(command=sys.executable, args=args, env=_env())


@contextlib.contextmanager
def _http_server(peer: str, config: Path) -> Any:
    port = _free_port()
    if peer == "toolcrib":
        cmd = [sys.executable, "-m", "toolcrib.cli", "serve", "--http", "--port", str(port), "--config", str(config),
               "--no-reload"]
        url = f"http://127.0.0.1:{port}/agents/{peers.AGENT}/mcp"
    else:
        cmd = [sys.executable, str(HERE / "peers.py"), peer, "http", "10", str(port)]
        url = f"http://127.0.0.1:{port}/mcp"
    proc = subprocess.Popen(cmd, env=_env(BENCH_TOKEN="bench-token-0123456789"), stdout=subprocess.DEVNULL,
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
async def _http_client(url: str, token: bool) -> AsyncIterator[Client]:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": "Bearer bench-token-0123456789"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http, \
            Client(streamable_http_client(url, http_client=http), cache=None) as client:
        await client.list_tools()
        yield client


async def mcp_wire(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    calls = 30 if args.quick else 300
    with tempfile.TemporaryDirectory() as tmp:
        config = _config_file(Path(tmp))
        async with contextlib.AsyncExitStack() as stack:
            clients = {}
            for peer in _peer_names():
                client = Client(_stdio_params(peer, config), cache=None)
                clients[peer] = await stack.enter_async_context(client)
                await clients[peer].list_tools()
            ops = {p: (lambda c=c, p=p: c.call_tool(_add(p), {"a": 2, "b": 3})) for p, c in clients.items()}
            rows.append(_peer_row("call, stdio subprocess", await interleaved(ops, calls, args.rounds)))
        with contextlib.ExitStack() as servers:
            urls = {peer: servers.enter_context(_http_server(peer, config)) for peer in _peer_names()}
            async with contextlib.AsyncExitStack() as stack:
                clients = {p: await stack.enter_async_context(_http_client(u, p == "toolcrib"))
                           for p, u in urls.items()}
                ops = {p: (lambda c=c, p=p: c.call_tool(_add(p), {"a": 2, "b": 3})) for p, c in clients.items()}
                rows.append(_peer_row("call, HTTP loopback (stateful)", await interleaved(ops, calls, args.rounds)))
    return rows


# -- operations: what metrics, request logs and traces cost ----------------------------------------------------------


async def operations(args: argparse.Namespace) -> list[Row]:
    """An in-memory call (2026-07-28) with each of what an operator can switch on, against the same call without."""
    import io
    import logging

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState
    from toolcrib.observe import JsonFormatter, Metrics, requests_log

    calls = 100 if args.quick else 1000

    def server(**host_options: Any) -> Any:
        return build_server(ServingState(peers.toolcrib_host(10, **host_options)), peers.AGENT)

    rows: list[Row] = []
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
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    trace.set_tracer_provider(TracerProvider())  # an SDK, exporting nowhere
    async with contextlib.AsyncExitStack() as stack:
        servers = {"plain": server(), "traces": server()}
        servers["plain"].middleware.clear()  # the same call without the observing middleware
        servers["plain"].middleware.extend(m for m in servers["traces"].middleware if m.__name__ == "fast_paths")
        clients = {n: await stack.enter_async_context(Client(s, cache=None)) for n, s in servers.items()}
        ops = {n: (lambda c=c: c.call_tool("math__add", {"a": 2, "b": 3})) for n, c in clients.items()}
        result = await interleaved(ops, calls, args.rounds)
    MEASURED["ops traces"] = result["traces"] / result["plain"]
    rows.append(["call with spans (an OpenTelemetry SDK, no exporter)", fmt(result["traces"]), fmt(result["plain"]),
                 ratio(result["traces"], result["plain"])])
    return rows


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
        kind = "async" if name == "slow_async" else "sync (32 worker threads)"
        rows.append([f"100 concurrent 100 ms calls, {kind}", fmt(total), f"{total / 0.1:.1f}x one call"])
    return rows


def view_build(args: argparse.Namespace) -> list[Row]:
    import bench_views

    tools, agents = (1000, 20) if args.quick else (10_000, 100)
    entries = bench_views.catalog(tools)
    loaded = bench_views.config(agents, tools // 10)
    best = min(bench_views.build_all(entries, loaded) for _ in range(1 if args.quick else 3))
    return [[f"view build, {tools} tools x {agents} agents", fmt(best),
             f"{best / (tools * agents) * 1e6:.2f} us per decision"]]


def _time_command(cmd: list[str], env: dict[str, str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def discovery(args: argparse.Namespace) -> list[Row]:
    """``toolcrib tools --agent X`` with 0 and with 200 installed packs of 10 tools (real dist-info folders on a
    path entry, as pip leaves them), and with the 200 disabled in config."""
    packs = 20 if args.quick else 200
    runs = 3 if args.quick else 7
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        site.mkdir()
        for i in range(packs):
            module = f"benchpack{i:03d}"
            tools = "\n".join(textwrap.dedent(f'''
                @toolcrib.tool(annotations={{"readOnlyHint": True}})
                def tool{j}(a: int, b: int = 0) -> int:
                    """Tool {j} of pack {i}: adds two integers."""
                    return a + b
                ''') for j in range(10))
            listing = ", ".join(f"tool{j}" for j in range(10))
            (site / f"{module}.py").write_text(f"import toolcrib\n{tools}\n\n@toolcrib.hookimpl\n"
                                               f"def toolcrib_tools():\n    return [{listing}]\n")
            info = site / f"bench_pack_{i:03d}-1.0.dist-info"
            info.mkdir()
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: bench-pack-{i:03d}\nVersion: 1.0\n")
            (info / "entry_points.txt").write_text(f"[toolcrib]\nbp{i:03d} = {module}\n")
        config = Path(tmp) / "toolcrib.toml"
        config.write_text(peers.CONFIG)
        disabled = Path(tmp) / "disabled.toml"
        disabled.write_text(peers.CONFIG + "".join(f"\n[packs.bp{i:03d}]\nenabled = false\n" for i in range(packs)))
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
        cmd = [sys.executable, "-m", "toolcrib.cli", "tools", "--agent", peers.AGENT, "--config"]
        empty = _time_command([*cmd, str(config)], base_env, runs)
        with_site = {**base_env, "PYTHONPATH": str(site)}
        full = _time_command([*cmd, str(config)], with_site, runs)
        off = _time_command([*cmd, str(disabled)], with_site, runs)
    marginal = (full - empty) / packs
    MEASURED["per pack"] = marginal
    return [
        ["toolcrib tools, 0 extra packs", fmt(empty), ""],
        [f"toolcrib tools, {packs} packs of 10 tools", fmt(full), f"{fmt(marginal)} per pack"],
        [f"toolcrib tools, {packs} packs disabled in config", fmt(off), f"{fmt((off - empty) / packs)} per pack"],
    ]


def startup(args: argparse.Namespace) -> list[Row]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    runs = 3 if args.quick else 9
    plugins = _time_command([sys.executable, "-m", "toolcrib.cli", "plugins"], env, runs)
    bare = _time_command([sys.executable, "-c", "pass"], env, runs)
    return [["toolcrib plugins (built-in default config)", fmt(plugins), f"python -c pass: {fmt(bare)}"]]


# -- report ---------------------------------------------------------------------------------------------------------


def _goals() -> list[Row]:
    """The goals of the benchmarks issue, each as a ratio (or a time) from this run."""

    def peer_ratio(label: str, peer: str) -> float | None:
        mine, theirs = MEASURED.get(f"{label}|toolcrib"), MEASURED.get(f"{label}|{peer}")
        return mine / theirs if mine and theirs else None

    call = "call, in-memory (2026-07-28)"
    listing = "tools/list, 1000 tools, in-memory"
    goals: list[tuple[str, str, float | None, float, str]] = [
        ("MCP call vs the SDK's low-level server", "<= 1.00x", peer_ratio(call, "lowlevel"), 1.0, "x"),
        ("MCP call vs FastMCP", "<= 0.50x", peer_ratio(call, "fastmcp"), 0.5, "x"),
        ("tools/list of 1000 tools vs the low-level server", "<= 1.00x", peer_ratio(listing, "lowlevel"), 1.0, "x"),
        ("tools/list of 1000 tools vs FastMCP", "<= 0.30x", peer_ratio(listing, "fastmcp"), 0.3, "x"),
        ("Python API call vs a bare pydantic-validated call", "<= 3.00x", MEASURED.get("api ratio"), 3.0, "x"),
        ("discovery, marginal cost per pack of 10 tools", "<= 2 ms", MEASURED.get("per pack"), 0.002, "s"),
        ("100 concurrent 100 ms async calls", "<= 150 ms", MEASURED.get("slow_async"), 0.150, "s"),
        ("a call with metrics on (no trace exporter) vs without", "<= 1.05x", MEASURED.get("ops metrics"), 1.05,
         "x"),
    ]
    rows = []
    for name, target, value, limit, unit in goals:
        if value is None:
            rows.append([name, target, "not measured", "-"])
            continue
        shown = f"{value:.2f}x" if unit == "x" else fmt(value)
        rows.append([name, target, shown, "yes" if value <= limit else "**no**"])
    return rows


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations: proves the harness works")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--no-wire", action="store_true", help="skip the stdio and HTTP subprocess benchmarks")
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    args = parser.parse_args()
    args.rounds = args.rounds or (2 if args.quick else 5)
    started = time.perf_counter()
    mcp_rows = anyio.run(mcp_inmemory, args)
    if not args.no_wire:
        mcp_rows += anyio.run(mcp_wire, args)
    api_rows = anyio.run(python_api, args)
    ops_rows = anyio.run(operations, args)
    other = anyio.run(concurrency, args) + view_build(args) + discovery(args) + startup(args)
    cpu = platform.processor() or platform.machine()
    report = "\n\n".join([
        "# Benchmarks",
        f"Run on {datetime.date.today()}: {platform.system()} {platform.machine()} ({cpu}), {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {_versions()}. Each MCP number is the median over {args.rounds} "
        "interleaved rounds of the per-round median; ratios are toolcrib's time over the peer's (below 1.00x: "
        "toolcrib is faster). Reproduce with `benchmarks/run.sh`.",
        "## Goals",
        _table(["goal", "target", "measured", "met"], _goals()),
        "## MCP (the same `add` tool and output schema on every side)",
        _table(["measure", "toolcrib", "SDK low-level server", "SDK MCPServer", "FastMCP"], mcp_rows),
        "## Python API",
        _table(["measure", "toolcrib", "floor", "ratio"], api_rows),
        "## Operations (what each costs a call, in-memory, 2026-07-28)",
        _table(["measure", "with", "without", "ratio"], ops_rows),
        "## Concurrency, views, discovery, start-up",
        _table(["measure", "time", "note"], other),
        f"Total harness time: {time.perf_counter() - started:.0f} s.",
    ]) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
