"""What a client of the HTTP app tries on every route, the ones reachable with no credential first: a body dripped a
byte at a time, bodies too deep or too large. The real app in process, driven as raw ASGI (so a body can be dripped
exactly as a slow client would)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import pytest

from approving import AGENT_TOKEN, CONFIG, ENV, OPERATOR_TOKEN, PACK
from conftest import config_from
from toolcrib import Host

pytest.importorskip("jinja2")

ROUTES = [  # (method, path, headers): what anyone may post, and what an agent or the operator may
    ("POST", "/console/login", {"content-type": "application/x-www-form-urlencoded"}),
    ("POST", "/operator/approvals/x/approve", {"content-type": "application/x-www-form-urlencoded"}),
    ("POST", "/agents/a/tools/t__deploy", {"content-type": "application/json",
                                           "authorization": f"Bearer {AGENT_TOKEN}"}),
    ("POST", "/operator/approvals/x", {"content-type": "application/json",
                                       "authorization": f"Bearer {OPERATOR_TOKEN}"}),
    ("POST", "/agents/a/mcp", {"content-type": "application/json", "authorization": f"Bearer {AGENT_TOKEN}",
                               "accept": "application/json, text/event-stream"}),
]


def app_of(tmp_path: Path) -> Any:
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    loaded = config_from(CONFIG.format(approvals="operator", timeout=60, operator="console = true"), tmp_path)
    state = ServingState(Host(loaded, plugins={"t": PACK}, autoload=False, env={}))
    return HttpApp(state, HttpOptions(openapi=True), env=ENV)


@pytest.mark.parametrize(("method", "path", "headers"), ROUTES)
def test_every_route_s_body_has_one_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture, method: str, path: str,
                                             headers: dict[str, str]) -> None:
    """A body dripped a byte at a time and never finished: every route ends the request at the one deadline for
    the whole body, set where the app is entered (the console's sign-in and a link's form need no credential)."""
    from toolcrib.mcp import http

    monkeypatch.setattr(http, "BODY_SECONDS", 0.2)
    app = app_of(tmp_path)
    sent: list[dict[str, Any]] = []

    async def drip() -> dict[str, Any]:
        await anyio.sleep(0.05)
        return {"type": "http.request", "body": b"{", "more_body": True}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"host", b"127.0.0.1:8000"), *((k.encode(), v.encode()) for k, v in headers.items())],
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8000), "state": {}}

    async def main() -> None:
        async with app.app.router.lifespan_context(app.app):
            with anyio.fail_after(30):  # a guard against hanging, not a measure: the deadline is 0.2 s
                await app(scope, drip, send)

    with caplog.at_level(logging.WARNING, "toolcrib.serve"):
        anyio.run(main)
    assert [r.getMessage() for r in caplog.records if r.name == "toolcrib.serve"] == [
        "a request body did not come whole within 0.2 seconds; the request is ended"]


def test_a_body_nested_past_what_python_parses_is_a_bad_body_like_any_other(tmp_path: Path) -> None:
    import httpx2

    app = app_of(tmp_path)
    deep = b"[" * 200_000 + b"]" * 200_000

    async def main() -> list[tuple[int, Any]]:
        async with app.app.router.lifespan_context(app.app), httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as http:
            face = await http.post("/agents/a/tools/t__deploy", content=deep, headers=dict(ROUTES[2][2]))
            answer = await http.post("/operator/approvals/x", content=deep, headers=dict(ROUTES[3][2]))
            return [(face.status_code, face.json()), (answer.status_code, answer.json())]

    face, answer = anyio.run(main)
    assert face == (400, {"content": [{"type": "text", "text": "the request body must be a JSON object: the tool's "
                                       "arguments, by name"}], "isError": True})
    assert answer == (400, {"error": 'expected {"decision": "approve" or "deny", "digest": "<the digest the pending '
                                     'approval shows>"}'})
