"""Shared helpers: configs from text, hosts around inline packs, and real distributions on a path entry."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import os
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from redis_server import HANG_GUARD
from toolcrib.config import LoadedConfig, parse_config
from toolcrib.host import Host

ROOT = Path(__file__).resolve().parent.parent


def pytest_sessionstart(session: pytest.Session) -> None:
    """toolcrib's source byte-compiled once, the test modules' rewritten asserts kept; and each run starts with
    toolcrib's memo caches empty: mutmut forks its workers from a process that already ran every test, and a cached
    answer (a normalised URI, a compiled pattern) would hide a mutant of what computes it."""
    if "MUTANT_UNDER_TEST" not in os.environ:
        byte_compiled()
        # and pytest keeps the test modules it rewrote (their asserts) as it would without $PYTHONDONTWRITEBYTECODE:
        # else each run rewrites all ~100 of them again, about 5 s of a quick run
        sys.dont_write_bytecode = False
        return
    from toolcrib import patterns, uris
    from toolcrib.mcp import oauth

    for cached in (uris.normalize, patterns._parse, oauth._claim_pieces):
        cached.cache_clear()


QUICK = False  # the quick suite (`-m "not slow"`) runs, not a whole run: set as pytest starts


def pytest_configure(config: pytest.Config) -> None:
    global QUICK
    QUICK = config.getoption("markexpr", "") == "not slow" and "MUTANT_UNDER_TEST" not in os.environ


def examples(n: int) -> int:
    """How many examples a property test tries: ``n`` in a whole run (CI's) and under mutation testing, where each
    example is a chance to kill a mutant; a fifth of them in the quick suite, which is feedback while working."""
    return max(20, n // 5) if QUICK else n


def byte_compiled() -> None:
    """toolcrib's modules and its packs' byte-compiled, as pip compiles what it installs (an editable install is
    not): under $PYTHONDONTWRITEBYTECODE nothing else writes them, and every process a test starts (a `toolcrib
    serve`, a CLI run) would compile its ~70 modules again, about 0.2 s of its start. A module edited since is
    compiled again where it is imported, as Python always does for a stale one."""
    import compileall

    for folder in (ROOT / "host", *sorted((ROOT / "plugins").glob("*/src"))):
        compileall.compile_dir(folder, quiet=2)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that waits out a real deadline (``waits``) is slow too: out of the quick suite. Under mutation testing
    (benchmarks/mutation.sh), tests that start toolcrib in a subprocess are skipped: the child imports the mutated
    modules, whose trampolines need mutmut's own process. So are those that serve it through uvicorn in this
    process (uvicorn takes a trampolined app for an app factory)."""
    for item in items:
        if item.get_closest_marker("waits") is not None:
            item.add_marker(pytest.mark.slow)
    if "MUTANT_UNDER_TEST" not in os.environ:
        return
    skip = pytest.mark.skip(reason="starts toolcrib in a subprocess, which mutmut's trampolines cannot run in")
    for item in items:
        function = getattr(item, "function", None)
        info = getattr(item, "_fixtureinfo", None)  # and its fixtures' (a fixture that starts the replicas)
        fixtures = [d.func for defs in (info.name2fixturedefs.values() if info is not None else ()) for d in defs]
        for code in (function, *fixtures):
            try:
                source = inspect.getsource(code) if code is not None else ""
            except (OSError, TypeError):
                continue
            if "toolcrib.cli" in source or "start_http(" in source or "uvicorn_replicas(" in source or (
                    "HttpApp(" in source and "uvicorn.Server(" in source):
                item.add_marker(skip)
                break


def config_from(text: str, base_dir: Path | None = None, source: str = "toolcrib.toml") -> LoadedConfig:
    return parse_config(textwrap.dedent(text), source, base_dir or Path.cwd())


def generated_config(agents: Mapping[str, Any]) -> LoadedConfig:
    """A config of generated agents (the property and differential tests'): each ``{"mode", "permissions",
    "model"?}``, permissions' dimensions None where absent; checked to be valid."""
    from toolcrib.config import Config, check_config

    data: dict[str, Any] = {"models": {"vision-model": {"vision": True}, "text-model": {"vision": False}},
                            "agents": {}}
    for name, spec in agents.items():
        agent: dict[str, Any] = {"mode": spec["mode"], **({"model": spec["model"]} if "model" in spec else {})}
        if spec["mode"] == "bypassPermissions":
            agent["allow_dangerously_skip_permissions"] = True
        if spec["permissions"] is not None:
            agent["permissions"] = {k: v for k, v in spec["permissions"].items() if v is not None}
        data["agents"][name] = agent
    config = Config.model_validate(data)
    assert check_config(config, "generated") == []
    return LoadedConfig(config=config, source="generated", base_dir=Path.cwd())


def make_host(text: str, plugins: Mapping[str, Any] | None = None, base_dir: Path | None = None) -> Host:
    """A host around explicitly given packs only: installed entry points are not loaded."""
    return Host(config_from(text, base_dir), plugins=plugins or {}, autoload=False, env={})


@pytest.fixture
def dist_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """Make real distributions (a module plus a ``.dist-info`` with entry_points.txt) on a fresh path entry.

    ``make(dist, version, entry_points={"orders": "acme_orders"}, modules={"acme_orders": "source"})``
    """
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    created: list[str] = []

    def make(
        dist: str,
        version: str = "1.0",
        entry_points: Mapping[str, str] | None = None,
        modules: Mapping[str, str] | None = None,
        where: Path | None = None,
    ) -> Path:
        root = where or site
        for name, source in (modules or {}).items():
            path = root / (name.replace(".", "/") + ".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(textwrap.dedent(source), encoding="utf-8")
            created.append(name.partition(".")[0])
        info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n", encoding="utf-8")
        lines = ["[toolcrib]"] + [f"{k} = {v}" for k, v in (entry_points or {}).items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        (info / "RECORD").write_text("", encoding="utf-8")
        importlib.invalidate_caches()
        return root

    yield make
    for name in created:
        for mod in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[mod]
    importlib.invalidate_caches()


@pytest.fixture
def cli_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], str]:
    """``cli_config(text, "files=packs:FILES,...")``: write the config, make the CLI load just those test packs
    (named in $TOOLCRIB_PLUGINS as namespace=module:attr), and return the config's path."""

    def make(text: str, plugins: str) -> str:
        config = tmp_path / "toolcrib.toml"
        config.write_text(textwrap.dedent(text))
        monkeypatch.setenv("TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD", "1")
        monkeypatch.setenv("TOOLCRIB_PLUGINS", plugins)
        return str(config)

    return make


def cli(*args: str) -> tuple[int, str, str]:
    """Run the toolcrib CLI in-process: (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from toolcrib.cli import main

    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.stdout, result.stderr


def ours(records: list[Any], names: set[str]) -> dict[str, Any]:
    """The records of the packs a test made (other installed packs may be present)."""
    return {r.name: r for r in records if r.name in names}


NPM_CACHE = Path(__file__).parent / ".npm"
# Everything the tests take from the npm registry but the Inspector, pinned, installed by one npm run: Node 22 (the
# conformance suite's runtime), the official conformance suite, two reference MCP servers, and ReadMe's public OpenAPI
# documents (the OpenAPI source's tests and its conformance table).
# conformance-next is the suite's 0.2 line (a pre-release), installed beside 0.1 under an npm alias, for the scenarios
# only it has (the tasks extension's).
NPM_PACKAGES = ["node@22.23.3", "@modelcontextprotocol/conformance@0.1.16",
                "conformance-next@npm:@modelcontextprotocol/conformance@0.2.0-alpha.12",
                "@modelcontextprotocol/server-everything@2026.8.31",
                "@modelcontextprotocol/server-filesystem@2026.8.31", "@readme/oas-examples@8.2.2"]


def npm_packages() -> Path:
    """``tests/.npm/node_modules``, with NPM_PACKAGES installed (once; the test is skipped, saying why, when npm or
    the registry is not there)."""
    modules = NPM_CACHE / "node_modules"
    wanted = [modules / "node" / "bin" / "node", modules / "@modelcontextprotocol" / "conformance" / "dist",
              modules / "conformance-next" / "dist",
              modules / "@modelcontextprotocol" / "server-everything" / "dist",
              modules / "@modelcontextprotocol" / "server-filesystem" / "dist",
              modules / "@readme" / "oas-examples" / "3.1" / "yaml"]
    npm_install(NPM_CACHE, NPM_PACKAGES, wanted)
    return modules


def npm_install(cache: Path, packages: list[str], wanted: list[Path]) -> None:
    """Install npm ``packages`` (pinned) into ``cache`` once; skip the test, saying why, when npm or the registry
    is not there."""
    import shutil
    import subprocess

    if shutil.which("npm") is None:
        pytest.skip("npm is not installed: these tests need Node.js")
    failed = ""
    for _attempt in range(2):  # one retry: the registry is a network away
        if all(path.exists() for path in wanted):
            return
        cache.mkdir(exist_ok=True)
        proc = subprocess.run(["npm", "install", "--prefix", str(cache), *packages, "--no-audit", "--no-fund",
                               "--loglevel=error"], capture_output=True, text=True, timeout=900)
        failed = proc.stderr.strip()[-500:]
    if not all(path.exists() for path in wanted):
        pytest.skip(f"npm could not install {', '.join(packages)} (is the npm registry reachable?): {failed}")


def offered(sources: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """What sources offer, as (records, tools, everything else): what upstream tests look at before a host takes
    them."""
    offers = [source.offer() for source in sources]
    entries = [e for o in offers for e in o.entries]
    tools = [e for e in entries if e.kind == "tool"]
    return [o.record for o in offers], tools, [e for e in entries if e.kind != "tool"]


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real redis-server for the session (tests/redis_server.py); ``redis_url`` empties it for each test."""
    from redis_server import RedisServer

    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: Any) -> str:
    redis_server.flush()
    return str(redis_server.url)


@contextlib.contextmanager
def traced() -> Iterator[Any]:
    """A tracer provider (the OpenTelemetry SDK's, exporting to memory; yielded is its exporter) for the process, as
    a launcher sets one up. After, the API's own is put back (the API lets a process set one once, so it is swapped
    in place), and the MCP SDK's module-level tracer is unbound: a proxy binds to the first provider it sees and
    would keep sending the client's spans (and their trace context, in every request's _meta) to this one in every
    later test."""
    from mcp.shared import _otel
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    previous = trace._TRACER_PROVIDER
    trace._TRACER_PROVIDER = provider
    try:
        yield exporter
    finally:
        trace._TRACER_PROVIDER = previous
        if isinstance(_otel._tracer, trace.ProxyTracer):
            _otel._tracer._real_tracer = None


# -- helpers the test modules share (none imports another test module's) -----------------------------------


def problems(text: str) -> list[str]:
    """What the config ``text`` is refused for, each problem as ``str`` gives it."""
    from toolcrib.config import ConfigError

    with pytest.raises(ConfigError) as info:
        parse_config(textwrap.dedent(text), "conf.toml", Path("/cfg"))
    return [str(p) for p in info.value.problems]


async def redis_command(url: str, *command: Any) -> Any:
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    try:
        return await client.execute_command(*command)
    finally:
        await client.aclose()


async def until(predicate: Any, what: str) -> None:
    """Wait (a hang guard only, never a measured limit) until ``predicate()`` holds."""
    deadline = time.monotonic() + HANG_GUARD
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0.02)


def sse_messages(text: str) -> list[Any]:
    """The JSON-RPC messages of an answer on a session: one JSON body (an answer that came first), or the data of
    a stream of events (priming events, whose data is empty, left out)."""
    if text.startswith("{"):
        return [json.loads(text)]
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
