"""toolcrib-web against a real HTTP server on a loopback port (allowed explicitly in the test's settings)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import pytest
import toolcrib_web

import toolcrib
from toolcrib.config import parse_config

BODY = b"hello from the test server\n"
PAGE = """<!doctype html><html><head><title>Orders \u2014 help</title><style>p { color: red }</style>
<script>track()</script></head><body><nav><a href="/">Home</a> | <a href="/x">Menu</a></nav>
<main><h1>Looking up an order</h1><p>Call <code>lookup_order</code> with the order's <b>id</b>.</p>
<ul><li>O-1001: shipped</li><li>O-1002: pending</li></ul></main><footer>(c) shop</footer></body></html>"""


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/page.html":
            self._send(200, PAGE.encode(), "text/html; charset=utf-8")
        elif self.path == "/to-page":
            self.send_response(302)
            self.send_header("Location", "/page.html")
            self.end_headers()
        elif self.path == "/data.json":
            self._send(200, b'{"answer": 42}', "application/json")
        elif self.path == "/pixel.png":
            self._send(200, b"\x89PNG\r\n\x1a\n" + b"\0" * 20, "image/png")
        elif self.path.startswith("/search?"):
            query = parse_qs(urlsplit(self.path).query)
            assert query["format"] == ["json"]
            results = [{"title": f"{query['q'][0]} #{n}", "url": f"https://example.com/{n}", "content": f"snippet {n}"}
                       for n in range(12)] + [{"title": "no url"}]
            self._send(200, json.dumps({"query": query["q"][0], "results": results}).encode(), "application/json")
        elif self.path == "/file.txt":
            self._send(200, BODY)
        elif self.path == "/big":
            self._send(200, b"x" * 5000)
        elif self.path == "/liar":  # says it is small, sends a lot
            self.send_response(200)
            self.send_header("Content-Length", "10")
            self.end_headers()
            self.wfile.write(b"y" * 5000)
        elif self.path == "/slow":
            self.send_response(200)
            self.end_headers()
            for _ in range(100):
                self.wfile.write(b"z")
                self.wfile.flush()
                time.sleep(0.05)
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/file.txt")
            self.end_headers()
        elif self.path == "/redirect-away":  # to an address that is not allowed
            self.send_response(302)
            self.send_header("Location", f"http://localhost:{self.server.server_address[1]}/file.txt")
            self.end_headers()
        elif self.path == "/loop":
            self.send_response(302)
            self.send_header("Location", "/loop")
            self.end_headers()
        else:
            self._send(404, b"no")

    def _send(self, status: int, body: bytes, content_type: str | None = None) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def host_for(tmp_path: Path, settings: str, tools: str = '{ allow = ["*"] }') -> toolcrib.Host:
    (tmp_path / "ws").mkdir(exist_ok=True)
    config = f"""
[host]
workspace = "ws"
[packs.web]
{settings}
[agents.a]
[agents.a.permissions]
plugins = {{ allow = ["web"] }}
tools = {tools}
"""
    return toolcrib.Host(parse_config(config, "toolcrib.toml", tmp_path), plugins={"web": toolcrib_web},
                         autoload=False, env={})


def call(host: toolcrib.Host, **args: Any) -> toolcrib.ToolResult:
    return anyio.run(lambda: host.call("a", "web__download_file", args))


@pytest.fixture
def allowed(tmp_path: Path, server: str) -> toolcrib.Host:
    return host_for(tmp_path, f'allowed_private_hosts = ["{server.replace("127.0.0.1", "127.0.0.1")}"]\n'
                              "max_bytes = 1000\ntimeout = 2")


def test_download_into_the_workspace(allowed: toolcrib.Host, server: str, tmp_path: Path) -> None:
    result = call(allowed, url=f"http://{server}/file.txt", path="downloads/a.txt")
    assert result.structured_content == {"url": f"http://{server}/file.txt", "path": "downloads/a.txt",
                                         "bytes": len(BODY), "content_type": None}
    assert (tmp_path / "ws/downloads/a.txt").read_bytes() == BODY
    assert call(allowed, url=f"http://{server}/file.txt", path="downloads/a.txt").text == (
        "downloads/a.txt: already exists")
    assert not call(allowed, url=f"http://{server}/redirect", path="downloads/a.txt", overwrite=True).is_error


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/", "http://localhost/", "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://2130706433/",
    "http://0177.0.0.1/", "http://0.0.0.0/", "http://169.254.169.254/latest/meta-data/", "http://10.0.0.1/",
    "http://192.168.1.1/", "http://172.16.0.1/", "http://100.64.0.1/", "http://[fd00::1]/",
])
def test_private_addresses_are_refused_by_default(tmp_path: Path, url: str) -> None:
    result = call(host_for(tmp_path, ""), url=url, path="x")
    assert result.is_error
    assert "address; downloads from private networks are refused (an operator can allow them in [packs.web])" in \
        result.text, result.text
    assert not (tmp_path / "ws" / "x").exists()


@pytest.mark.parametrize(("url", "message"), [
    ("file:///etc/passwd", "only http and https URLs can be downloaded, not 'file'"),
    ("ftp://example.com/x", "only http and https URLs can be downloaded, not 'ftp'"),
    ("http://user:secret@example.com/", "URLs with credentials (user:password@host) are not accepted"),
    ("/etc/passwd", "only http and https URLs can be downloaded, not 'a bare path'"),
])
def test_bad_urls(tmp_path: Path, url: str, message: str) -> None:
    assert call(host_for(tmp_path, ""), url=url, path="x").text == message


def test_every_redirect_hop_is_checked(allowed: toolcrib.Host, server: str, tmp_path: Path) -> None:
    result = call(allowed, url=f"http://{server}/redirect-away", path="x")
    assert result.text == ("localhost resolves to a loopback address; downloads from private networks are refused "
                           "(an operator can allow them in [packs.web])")
    assert call(allowed, url=f"http://{server}/loop", path="x").text == "more than 5 redirects"
    assert not (tmp_path / "ws" / "x").exists()


@pytest.mark.parametrize(("tools", "why"), [
    ('{ deny = ["web__download_file(*/file.txt)"] }', "rule 'web__download_file(*/file.txt)'"),
    ('{ allow = ["web__download_file(http://SERVER/redirect)", "web__download_file(downloads/*)"] }',
     "no allow rule matches it"),
])
def test_url_rules_hold_for_every_redirect_hop(tmp_path: Path, server: str, tools: str, why: str) -> None:
    """An agent allowed one URL (or denied one) cannot reach another through a redirect: each hop meets the URL
    rules as if the agent had asked for it."""
    host = host_for(tmp_path, f'allowed_private_hosts = ["{server}"]', tools.replace("SERVER", server))
    result = call(host, url=f"http://{server}/redirect", path="downloads/x")
    assert result.text == (f"Permission denied: web__download_file went on to url='http://{server}/file.txt', which "
                           f"the agent's permissions deny ({why}).")
    assert not (tmp_path / "ws" / "downloads" / "x").exists()
    if "allow" in tools:  # the destination is a rule subject too: a path no allow rule names is refused
        denied = call(host, url=f"http://{server}/redirect", path="elsewhere/x")
        assert denied.text == ("Permission denied: web__download_file with path='elsewhere/x' is denied by the "
                               "agent's permissions (no allow rule matches its argument).")


def test_caps_leave_no_partial_file(allowed: toolcrib.Host, server: str, tmp_path: Path) -> None:
    assert call(allowed, url=f"http://{server}/big", path="big").text == (
        f"http://{server}/big is 5000 bytes, more than the limit of 1000")
    liar = call(allowed, url=f"http://{server}/liar", path="liar")
    assert not liar.is_error and liar.structured_content["bytes"] == 10  # type: ignore[index]
    assert call(allowed, url=f"http://{server}/slow", path="slow").text == (
        "the download took longer than 2 seconds; nothing was saved")
    assert call(allowed, url=f"http://{server}/missing", path="m").text == (
        f"http://{server}/missing answered HTTP 404 Not Found")
    leftovers = sorted(p.name for p in (tmp_path / "ws").iterdir())
    assert leftovers == ["liar"]


def test_destination_is_confined(allowed: toolcrib.Host, server: str, tmp_path: Path) -> None:
    (tmp_path / "ws" / "out").symlink_to(tmp_path)
    url = f"http://{server}/file.txt"
    assert call(allowed, url=url, path="../escaped.txt").text == (
        "'../escaped.txt': '..' is not allowed; paths stay inside the workspace")
    assert call(allowed, url=url, path="out/escaped.txt").text == (
        "out: goes through a symbolic link, which file tools do not follow")
    assert not (tmp_path / "escaped.txt").exists()


def test_allow_private_networks(tmp_path: Path, server: str) -> None:
    host = host_for(tmp_path, "allow_private_networks = true")
    assert not call(host, url=f"http://{server}/file.txt", path="f").is_error


# -- web__fetch and web__search --------------------------------------------------------------------------------


def fetch(host: toolcrib.Host, **args: Any) -> toolcrib.ToolResult:
    return anyio.run(lambda: host.call("a", "web__fetch", args))


def test_fetch_reads_a_page_as_markdown(tmp_path: Path, server: str) -> None:
    host = host_for(tmp_path, f'allowed_private_hosts = ["{server}"]')
    result = fetch(host, url=f"http://{server}/to-page")
    assert (result.is_error, result.text) == (False, (
        f"http://{server}/page.html\n\n# Orders \u2014 help\n\n# Looking up an order\n\n"
        "Call `lookup_order` with the order's **id**.\n\n* O-1001: shipped\n* O-1002: pending"))
    assert fetch(host, url=f"http://{server}/data.json").text == f'http://{server}/data.json\n\n{{"answer": 42}}'
    assert fetch(host, url=f"http://{server}/pixel.png").text == (
        f"http://{server}/pixel.png is image/png, not a page to read; web__download_file saves it as a file")
    cut = fetch(host, url=f"http://{server}/big", max_chars=100).text
    assert cut == f"http://{server}/big\n\n{'x' * 100}\n\n[cut at 100 of 5000 characters]"


def test_fetch_has_the_same_defences_as_downloads(tmp_path: Path, server: str) -> None:
    assert fetch(host_for(tmp_path, ""), url=f"http://{server}/page.html").text == (
        "127.0.0.1 resolves to a loopback address; fetches from private networks are refused (an operator can "
        "allow them in [packs.web])")
    assert fetch(host_for(tmp_path, ""), url="file:///etc/passwd").text == (
        "only http and https URLs can be fetched, not 'file'")
    denied = host_for(tmp_path, f'allowed_private_hosts = ["{server}"]', '{ deny = ["web__fetch(*/page.html)"] }')
    assert fetch(denied, url=f"http://{server}/to-page").text == (
        f"Permission denied: web__fetch went on to url='http://{server}/page.html', which the agent's permissions "
        "deny (rule 'web__fetch(*/page.html)').")
    small = host_for(tmp_path, f'allowed_private_hosts = ["{server}"]\nmax_page_bytes = 100')
    assert fetch(small, url=f"http://{server}/big").text == (
        f"http://{server}/big is 5000 bytes, more than the limit of 100")


def test_search_needs_a_backend_and_says_so(tmp_path: Path) -> None:
    host = host_for(tmp_path, "")
    assert "web__search" not in host.view("a").names
    explained = host.explain("a", "web__search")
    assert explained is not None and explained.reason == (
        "not available: no search backend: set [packs.web] search_url to a SearXNG instance")


def test_search_asks_the_backend_and_gives_results(tmp_path: Path, server: str) -> None:
    host = host_for(tmp_path, f'search_url = "http://{server}"\nsearch_results = 3')
    result = anyio.run(lambda: host.call("a", "web__search", {"query": "order status"}))
    assert result.structured_content == {"query": "order status", "results": [
        {"title": f"order status #{n}", "url": f"https://example.com/{n}", "snippet": f"snippet {n}"}
        for n in range(3)]}
