"""toolcrib-web against a real HTTP server on a loopback port (allowed explicitly in the test's settings)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
import toolcrib_web

import toolcrib
from toolcrib.config import parse_config

BODY = b"hello from the test server\n"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/file.txt":
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

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
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
