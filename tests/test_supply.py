"""The one assembler of sources (``toolcrib.supply``): every entrance gets the same sources from the same config; a
source does its I/O in ``open``, never when it is made; the assembler opens what it makes, closes what a later sync
no longer offers and everything when it ends; a source that breaks while opening fails alone."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from openapi_api import document
from toolcrib.config import load_config
from toolcrib.entries import Kind
from toolcrib.host import Host
from toolcrib.mcp.connect import open_host
from toolcrib.plugins import PluginRecord
from toolcrib.sources import Offer
from toolcrib.supply import kinds, supply
from toolcrib.supply.kinds import OPENAPI
from toolcrib.supply.mcp.source import UpstreamSource
from toolcrib.supply.openapi.source import OpenAPISource

RULES = '[agents.a.permissions]\nplugins = { allow = ["*"] }\ntools = { allow = ["*"] }\n'
PETS = ["pets__addPet", "pets__getPetById"]


def write_config(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "petstore.json").write_text(json.dumps(document()))
    config = tmp_path / "toolcrib.toml"
    config.write_text(f'[openapi.pets]\ndocument = "petstore.json"\nbase_url = "http://127.0.0.1:9/v2"\n'
                      f'operations = ["addPet", "getPetById"]\n{extra}{RULES}')
    return config


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every ``open`` and ``close`` of an OpenAPI source, as (what, which source): the real methods still run."""
    seen: list[tuple[str, int]] = []
    real_open, real_close = OpenAPISource.open, OpenAPISource.close

    async def open_(self: OpenAPISource) -> None:
        seen.append(("open", id(self)))
        await real_open(self)

    async def close(self: OpenAPISource) -> None:
        seen.append(("close", id(self)))
        await real_close(self)

    monkeypatch.setattr(OpenAPISource, "open", open_)
    monkeypatch.setattr(OpenAPISource, "close", close)
    return seen


def test_every_entrance_serves_the_same_sources_of_the_same_config(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    names = [t.name for t in Host.from_config(config, autoload=False, env={}).view("a").tools]
    with open_host(config, autoload=False, env={}) as (host, _):
        assert [t.name for t in host.view("a").tools] == names
    assert [n for n in names if n.startswith("pets__")] == PETS


def test_a_host_made_from_a_config_alone_makes_no_source_itself(tmp_path: Path) -> None:
    """``Host(loaded)`` serves what it is handed: the supply makes sources (``Host.from_config`` asks it)."""
    host = Host(load_config(write_config(tmp_path)), autoload=False, env={})
    assert "pets" not in {r.name for r in host.records}
    assert not any(t.name.startswith("pets__") for t in host.view("a").tools)


@pytest.fixture
def document_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server that serves the Petstore document and counts the requests for it."""
    asked: list[str] = []
    body = json.dumps(document()).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()
        server.server_close()


def test_a_source_reads_its_document_when_opened_never_when_made(tmp_path: Path,
                                                                 document_server: tuple[str, list[str]]) -> None:
    url, asked = document_server
    (tmp_path / "toolcrib.toml").write_text(f'[openapi.pets]\ndocument_url = "{url}/petstore.json"\n'
                                            f'base_url = "{url}/v2"\noperations = ["getPetById"]\n{RULES}')
    loaded = load_config(tmp_path / "toolcrib.toml")
    source = OpenAPISource("pets", loaded.config.openapi["pets"], loaded, {}, OPENAPI)
    assert asked == []
    record = source.offer().record
    assert (record.state, record.error, source.offer().entries) == (
        "failed", "not opened: its document is read when the source is opened", [])
    anyio.run(source.open)
    assert asked == ["/petstore.json"]
    assert (record.state, record.error, [e.name for e in source.offer().entries]) == (
        "loaded", None, ["pets__getPetById"])


def test_the_supply_opens_what_it_makes_and_closes_what_it_no_longer_offers(
        tmp_path: Path, calls: list[tuple[str, int]]) -> None:
    loaded = load_config(write_config(tmp_path))

    async def main() -> tuple[int, int]:
        async with supply({}) as made:
            first = [s for s in await made.sync(loaded) if s.name == "pets"]
            assert [[e.name for e in s.offer().entries] for s in first] == [PETS]
            assert calls == [("open", id(first[0]))]
            second = [s for s in await made.sync(loaded) if s.name == "pets"]  # a reload: read again
            assert calls == [("open", id(first[0])), ("open", id(second[0])), ("close", id(first[0]))]
        return id(first[0]), id(second[0])

    one, two = anyio.run(main)
    assert calls == [("open", one), ("open", two), ("close", one), ("close", two)]


def test_every_entrance_closes_what_it_opened(tmp_path: Path, calls: list[tuple[str, int]]) -> None:
    with open_host(write_config(tmp_path), autoload=False, env={}) as (host, _):
        source = host.source("pets")
        assert calls == [("open", id(source))]
    assert calls == [("open", id(source)), ("close", id(source))]


@pytest.mark.parametrize(("raised", "said"), [(RuntimeError("the disk went away"), "RuntimeError: the disk went away"),
                                              (SystemExit(3), "SystemExit: 3"),
                                              (GeneratorExit("gone"), "GeneratorExit: gone")])
def test_a_source_that_breaks_while_opening_fails_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        raised: BaseException, said: str) -> None:
    """Whatever its ``open`` raises (``BaseException`` included), that source fails and the others are served."""
    config = write_config(tmp_path, extra='[openapi.other]\ndocument = "petstore.json"\n'
                                          'base_url = "http://127.0.0.1:9/v2"\noperations = ["getPetById"]\n')
    real_open = OpenAPISource.open

    async def open_(self: OpenAPISource) -> None:
        if self.name == "pets":
            raise raised
        await real_open(self)

    monkeypatch.setattr(OpenAPISource, "open", open_)
    host = Host.from_config(config, autoload=False, env={})
    records = {r.name: (r.state, r.error) for r in host.records if r.kind == "openapi"}
    assert records == {"other": ("loaded", None), "pets": ("failed", f"cannot be opened: {said}")}
    assert [t.name for t in host.view("a").tools if not t.name.startswith("toolcrib__")] == ["other__getPetById"]


def test_a_host_from_a_config_closes_the_sources_it_opened(tmp_path: Path, calls: list[tuple[str, int]]) -> None:
    host = Host.from_config(write_config(tmp_path), autoload=False, env={})
    source = host.source("pets")
    assert calls == [("open", id(source))]
    host.close()
    host.close()
    assert calls == [("open", id(source)), ("close", id(source))]


UPSTREAM = Path(__file__).parent / "upstream_server.py"


def upstream_config(tmp_path: Path, mark: str, lazy: bool = True) -> Any:
    """``up``, a real stdio server (its environment carries ``mark``: change it, and its config changed), and,
    with ``lazy``, ``later``, the same server connected when an agent loads it."""
    server = f'command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(UPSTREAM))}]\n'
    text = f'[mcps.up]\n{server}env = {{ MARK = "{mark}" }}\n'
    if lazy:
        text += f'[mcps.later]\n{server}lazy = true\n'
    config = tmp_path / "toolcrib.toml"
    config.write_text(text + '[agents.a.permissions]\nmcps = { allow = ["*"] }\ntools = { allow = ["*"] }\n')
    return load_config(config)


def test_an_upstream_source_connects_when_opened_lives_across_an_unchanged_reload_and_ends_when_closed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, str, int]] = []
    real_open, real_close = UpstreamSource.open, UpstreamSource.close

    async def open_(self: UpstreamSource) -> None:
        seen.append(("open", self.name, id(self)))
        await real_open(self)

    async def close(self: UpstreamSource) -> None:
        seen.append(("close", self.name, id(self)))
        await real_close(self)

    monkeypatch.setattr(UpstreamSource, "open", open_)
    monkeypatch.setattr(UpstreamSource, "close", close)

    async def main() -> None:
        async with supply({}) as made:
            up, later = await made.sync(upstream_config(tmp_path, "one"))  # (by name: later, up)
            later, up = (later, up) if later.name == "later" else (up, later)
            assert isinstance(up, UpstreamSource) and isinstance(later, UpstreamSource)
            assert sorted(seen) == sorted([("open", "up", id(up)), ("open", "later", id(later))])
            connection = up.connection
            assert connection is not None and connection.client is not None
            tools = ["echo", "fails", "get_weather", "now"]
            assert sorted(e.name for e in up.offer().entries if e.kind == "tool") == [f"up__{t}" for t in tools]
            assert (later.offer().record.state, later.connection) == ("lazy", None)
            assert sorted(e.name for e in await later.fetch()) == [f"later__{t}" for t in tools]
            lazy_connection = later.connection
            assert lazy_connection is not None and lazy_connection.client is not None

            seen.clear()  # a reload that changes nothing: the same sources, opened again, their connections kept
            again = {s.name: s for s in await made.sync(upstream_config(tmp_path, "one"))}
            assert (again["up"] is up, again["later"] is later, up.connection is connection) == (True, True, True)
            assert sorted(seen) == sorted([("open", "up", id(up)), ("open", "later", id(later))])

            seen.clear()  # up's config changed, later is gone: a new up is opened, then the old one and later closed
            changed = {s.name: s for s in await made.sync(upstream_config(tmp_path, "two", lazy=False))}
            assert list(changed) == ["up"] and changed["up"] is not up
            assert seen[0] == ("open", "up", id(changed["up"]))
            assert sorted(seen[1:]) == [("close", "later", id(later)), ("close", "up", id(up))]
            assert (connection.scope.cancel_called, lazy_connection.scope.cancel_called) == (True, True)
            new = changed["up"].connection
            assert new is not None and new.client is not None and not new.scope.cancel_called
            seen.clear()
        assert seen == [("close", "up", id(changed["up"]))]
        assert new.scope.cancel_called

    anyio.run(main)


def test_a_new_kind_of_source_is_its_kind_with_a_supplier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The assembler asks every kind in ``KINDS`` for its supplier, and the supplier for its sources: a kind it
    has never heard of is served, opened, closed and ended like the built-in ones, with nothing else changed."""
    happened: list[str] = []

    class Echo:
        dimension, lazy = "plugins", False

        def __init__(self) -> None:
            self.name = "echo"
            self._offer = Offer(PluginRecord(name="echo", kind="echo", state="failed", error="not opened"))

        async def open(self) -> None:
            happened.append("open")
            self._offer.record.state, self._offer.record.error = "loaded", None

        async def close(self) -> None:
            happened.append("close")

        def offer(self) -> Offer:
            return self._offer

    class Echoes:
        changed = None

        def __init__(self, live: bool) -> None:
            happened.append(f"supplier (a task group: {live})")

        def sources(self, loaded: Any, only: frozenset[str] | None = None) -> list[Any]:
            return [Echo()]

        async def aclose(self) -> None:
            happened.append("aclose")

    echo = Kind("echo", "echo source", "the echo source", "source", supplier=lambda tg, env: Echoes(tg is not None))
    monkeypatch.setattr(kinds, "KINDS", (*kinds.KINDS, echo))
    loaded = load_config(write_config(tmp_path))

    async def main() -> list[tuple[str, str]]:
        async with supply({}) as made:
            return [(s.name, s.offer().record.state) for s in await made.sync(loaded)]

    assert anyio.run(main) == [("pets", "loaded"), ("echo", "loaded")]
    assert happened == ["supplier (a task group: True)", "open", "close", "aclose"]
