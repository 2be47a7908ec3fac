"""toolcrib-media: availability through agent views, and a real HTTP server as the images endpoint."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest
import toolcrib_media

import toolcrib
from toolcrib.config import parse_config

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
SEEN: list[dict[str, Any]] = []


class Images(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # images to view by URL
        found = {"/cat.png": (PNG, "image/png"), "/page.html": (b"<html></html>", "text/html")}.get(self.path)
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", "/cat.png")
            self.end_headers()
            return
        data, kind = found or (b"no", "text/plain")
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if body["prompt"] == "fail":
            reply, status = b'{"error": {"message": "content policy"}}', 400
        elif body["prompt"] == "inline":
            reply, status = json.dumps({"data": [{"b64_json": base64.b64encode(PNG).decode()}]}).encode(), 200
        else:
            reply, status = json.dumps({"data": [{"url": f"https://img.example/{i}.png"}
                                                 for i in range(body["n"])]}).encode(), 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Images)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def config(settings: str) -> str:
    return f"""
[host]
workspace = "ws"

[models.vl]
vision = true
[models.text]
vision = false

[packs.media]
{settings}

[agents.seer]
model = "vl"
[agents.seer.permissions]
plugins = {{ allow = ["media"] }}
tools = {{ allow = ["*"] }}

[agents.blind]
model = "text"
[agents.blind.permissions]
plugins = {{ allow = ["media"] }}
tools = {{ allow = ["*"] }}

[agents.modelless]
[agents.modelless.permissions]
plugins = {{ allow = ["media"] }}
tools = {{ allow = ["*"] }}
"""


def host_for(tmp_path: Path, settings: str = "") -> toolcrib.Host:
    (tmp_path / "ws").mkdir(exist_ok=True)
    return toolcrib.Host(parse_config(config(settings), "toolcrib.toml", tmp_path),
                         plugins={"media": toolcrib_media}, autoload=False, env={})


def call(host: toolcrib.Host, tool: str, agent: str = "seer", **args: Any) -> toolcrib.ToolResult:
    return anyio.run(lambda: host.call(agent, f"media__{tool}", args))


def test_availability_follows_the_model_and_the_settings(tmp_path: Path, endpoint: str) -> None:
    bare = host_for(tmp_path)
    assert bare.view("seer").names == ["media__view_image"]
    assert bare.view("blind").names == []
    assert bare.explain("blind", "media__view_image").reason == (
        "not available: model 'text' has no vision capability ([models.\"text\"] vision = true gives it)")
    assert bare.explain("modelless", "media__view_image").reason == (  # not "model None"
        'not available: the agent names no model; one with vision = true ([models."<id>"]) can look at images')
    assert bare.explain("seer", "media__generate_image").reason == (
        "not available: no image models are configured ([packs.media] image_models and default_image_model)")
    configured = host_for(tmp_path, f'base_url = "{endpoint}"\nimage_models = ["m1", "m2"]\n'
                                    'default_image_model = "m1"')
    assert configured.view("seer").names == ["media__generate_image", "media__view_image"]
    assert configured.view("blind").names == ["media__generate_image"]


def test_settings_are_validated(tmp_path: Path) -> None:
    host = host_for(tmp_path, 'image_models = ["a"]\ndefault_image_model = "b"')
    assert [str(p) for p in host.catalog.problems if "media" in p.where] == [
        "error: toolcrib.toml: packs.media: default_image_model 'b' is not one of image_models"]
    assert host.view("seer").names == []


def test_view_image(tmp_path: Path) -> None:
    host = host_for(tmp_path)
    (tmp_path / "ws" / "pic.png").write_bytes(PNG)
    (tmp_path / "ws" / "notes.txt").write_text("not an image")
    assert call(host, "view_image", path_or_url="pic.png").to_wire()["content"] == [
        {"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"}]
    assert call(host, "view_image", path_or_url="notes.txt").text == (
        "notes.txt: not an image this tool shows (PNG, JPEG, GIF or WEBP)")
    assert call(host, "view_image", path_or_url="../secret.png").is_error
    with pytest.raises(toolcrib.UnknownToolError):
        call(host, "view_image", agent="blind", path_or_url="pic.png")


def test_generate_image_calls_the_configured_endpoint(tmp_path: Path, endpoint: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_IMAGES_KEY", "sk-test")
    host = host_for(tmp_path, f'base_url = "{endpoint}"\napi_key_env = "TEST_IMAGES_KEY"\n'
                              'image_models = ["m1", "m2"]\ndefault_image_model = "m1"')
    SEEN.clear()
    result = json.loads(call(host, "generate_image", prompt="a red fox", n=2).text)
    assert result == {"model": "m1", "images": [{"url": "https://img.example/0.png"},
                                                {"url": "https://img.example/1.png"}],
                      "hint": toolcrib_media.HINT}
    assert SEEN == [{"path": "/v1/images/generations", "auth": "Bearer sk-test",
                     "body": {"model": "m1", "prompt": "a red fox", "n": 2, "size": "1024x1024"}}]
    inline = json.loads(call(host, "generate_image", prompt="inline", model="m2").text)
    path = inline["images"][0]["path"]
    assert path.startswith("generated/") and path.endswith(".png")
    assert (tmp_path / "ws" / path).read_bytes() == PNG
    assert call(host, "generate_image", prompt="fail").text == (
        'the image service answered HTTP 400: {"error": {"message": "content policy"}}')
    assert call(host, "generate_image", prompt="x", model="m9").text == (
        "model 'm9' is not one of the configured image models: m1, m2")


def test_view_image_fetches_a_url_through_the_same_defences_as_the_web_pack(tmp_path: Path, endpoint: str) -> None:
    server = endpoint.removeprefix("http://").removesuffix("/v1")
    image = [{"type": "image", "data": base64.b64encode(PNG).decode(), "mimeType": "image/png"}]
    refused = host_for(tmp_path)
    assert call(refused, "view_image", path_or_url=f"http://{server}/cat.png").text == (
        "127.0.0.1 resolves to a loopback address; fetches from private networks are refused (an operator can "
        "allow them in [packs.media])")
    host = host_for(tmp_path, f'allowed_private_hosts = ["{server}"]\nmax_image_bytes = 1000')
    assert call(host, "view_image", path_or_url=f"http://{server}/moved").to_wire()["content"] == image
    assert call(host, "view_image", path_or_url=f"http://{server}/page.html").text == (
        f"http://{server}/page.html: not an image this tool shows (PNG, JPEG, GIF or WEBP); it is text/html")
    small = host_for(tmp_path, f'allowed_private_hosts = ["{server}"]\nmax_image_bytes = 10')
    assert call(small, "view_image", path_or_url=f"http://{server}/cat.png").text == (
        f"http://{server}/cat.png is {len(PNG)} bytes, more than the limit of 10")


def test_view_image_links_an_image_url_where_the_operator_says_clients_fetch_them(tmp_path: Path,
                                                                                  endpoint: str) -> None:
    server = endpoint.removeprefix("http://").removesuffix("/v1")
    host = host_for(tmp_path, f'allowed_private_hosts = ["{server}"]\nlink_urls = true')
    assert call(host, "view_image", path_or_url=f"http://{server}/moved").to_wire()["content"] == [{
        "type": "resource_link", "uri": f"http://{server}/cat.png", "name": "cat.png", "mimeType": "image/png",
        "description": f"an image (image/png, {len(PNG)} bytes)"}]  # where the redirect led, checked as an image
    assert call(host, "view_image", path_or_url=f"http://{server}/page.html").text == (
        f"http://{server}/page.html: not an image this tool shows (PNG, JPEG, GIF or WEBP); it is text/html")
    (tmp_path / "ws" / "dot.png").write_bytes(PNG)  # a workspace path has no URL a client could fetch: inlined
    assert call(host, "view_image", path_or_url="dot.png").to_wire()["content"][0]["type"] == "image"
