"""Approvals out of band (``[agents.X] approvals``, ``[operator]``): a call an ``ask`` rule holds waits for an
operator, who answers on the operator endpoint of the HTTP front end (served in process here), or by a webhook's
signed link. The agent's client here declares no elicitation, as most agent frameworks' MCP clients do."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from html import unescape
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from approving import (
    AGENT,
    AGENT_TOKEN,
    CONFIG,
    ENV,
    INITIALIZE,
    OPERATOR_TOKEN,
    PACK,
    open_session,
    serve_http,
)
from conftest import config_from, until
from toolcrib import Host
from toolcrib.approvals import Desk, digest, link_key

OPERATOR = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


@asynccontextmanager
async def serving(tmp_path: Path, approvals: str = "operator", timeout: float = 60, operator: str = "",
                  env: dict[str, str] = ENV) -> AsyncIterator[tuple[Any, Any]]:
    """The HTTP app in process, with an agent session open (a client without elicitation); yields a function
    that calls a tool in that session, and an httpx client on the app."""
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    loaded = config_from(CONFIG.format(approvals=approvals, timeout=timeout, operator=operator), tmp_path)
    state = ServingState(Host(loaded, plugins={"t": PACK}, autoload=False, env={}))
    app = HttpApp(state, HttpOptions(), env=env)
    async with app.app.router.lifespan_context(app.app), httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000", timeout=60) as http:
        yield await open_session(http), http




async def first_pending(http: Any) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    async def listed() -> bool:
        found[:] = (await http.get("/operator/approvals", headers=OPERATOR)).json()["approvals"]
        return bool(found)

    await until(listed, "the call's approval is pending")
    return found[0]


def test_an_operator_approves_a_held_call_on_the_endpoint_bound_to_its_digest_once(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with serving(tmp_path) as (call, http), anyio.create_task_group() as tg:
            async def held() -> None:
                seen["result"] = await call("t__deploy", {"target": "prod"})

            tg.start_soon(held)
            pending = await first_pending(http)
            seen["pending"] = pending
            answer = f"/operator/approvals/{pending['id']}"
            seen["agent token"] = (await http.get("/operator/approvals", headers=AGENT)).status_code
            seen["no token"] = (await http.post(answer, json={"decision": "approve", "digest": pending["digest"]})
                                ).status_code
            seen["as a form"] = (await http.post(answer, headers=OPERATOR, data={
                "decision": "approve", "digest": pending["digest"]})).status_code  # a page elsewhere can post forms
            wrong = await http.post(answer, headers=OPERATOR, json={"decision": "approve", "digest": "0" * 64})
            seen["wrong digest"] = (wrong.status_code, wrong.json())
            bad = await http.post(answer, headers=OPERATOR, json={"decision": "maybe"})
            seen["bad body"] = (bad.status_code, bad.json())
            seen["no digest"] = (await http.post(answer, headers=OPERATOR, json={"decision": "approve"})).status_code
            seen["a list"] = (await http.post(answer, headers=OPERATOR, json=["approve"])).status_code
            seen["not json"] = (await http.post(answer, headers={**OPERATOR, "Content-Type": "text/plain"}, content=(
                json.dumps({"decision": "approve", "digest": pending["digest"]})))).status_code  # CORS-simple
            right = await http.post(answer, headers=OPERATOR, json={"decision": "approve", "digest": pending["digest"]})
            seen["approved"] = (right.status_code, right.json())
            again = await http.post(answer, headers=OPERATOR, json={"decision": "approve", "digest": pending["digest"]})
            seen["again"] = (again.status_code, again.json())
        return seen

    seen = anyio.run(main)
    pending = seen["pending"]
    assert set(pending) == {"id", "agent", "principal", "tool", "arguments", "rule", "call_id", "config_version",
                            "digest", "created", "expires"}
    assert (pending["agent"], pending["tool"], pending["arguments"], pending["rule"]) == (
        "a", "t__deploy", {"target": "prod"}, "ask rule 't__deploy'")
    assert pending["principal"] == {"kind": "token", "credential": "$TOK_A"}  # who, never the token
    assert re.fullmatch(r"call_[0-9a-f]{8}[0-9a-f]+", pending["call_id"])
    version = config_from(CONFIG.format(approvals="operator", timeout=60, operator=""), tmp_path).version
    assert pending["config_version"] == version  # the answer is bound to the config the call runs under
    assert pending["digest"] == digest("a", "t__deploy", {"target": "prod"}, version)
    assert seen["agent token"] == 401 and seen["no token"] == 401 and seen["as a form"] == 400
    assert seen["wrong digest"] == (409, {"error": "the approval's digest differs: it was shown for another call, or "
                                                   "for this call as it was before; list the pending approvals again"})
    assert seen["bad body"] == (400, {"error": 'expected {"decision": "approve" or "deny", "digest": "<the digest '
                                               'the pending approval shows>"}'})
    assert seen["no digest"] == 400 and seen["a list"] == 400
    assert seen["not json"] == 400  # only application/json: what a page elsewhere can send unasked is refused
    assert seen["approved"] == (200, {"status": "approved"})
    assert seen["again"] == (404, {"error": "no such pending approval: it was answered, it expired, or its call "
                                            "ended"})
    assert seen["result"] == (False, "deployed to prod")


def test_a_denied_or_unanswered_call_fails_saying_so(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with serving(tmp_path, operator="") as (call, http), anyio.create_task_group() as tg:
            async def held() -> None:
                seen["denied"] = await call("t__deploy", {"target": "prod"})

            tg.start_soon(held)
            pending = await first_pending(http)
            await http.post(f"/operator/approvals/{pending['id']}", headers=OPERATOR,
                            json={"decision": "deny", "digest": pending["digest"]})
        async with serving(tmp_path, timeout=0.2) as (call, http):
            seen["unanswered"] = await call("t__deploy", {"target": "prod"})
            seen["read-only"] = await call("t__status", {})  # no ask rule: no approval
        return seen

    seen = anyio.run(main)
    assert seen["denied"] == (True, "Permission denied: t__deploy needs approval (ask rule 't__deploy'), and the "
                                    "operator (token $TOK_OP) denied it.")
    assert seen["unanswered"] == (True, "Permission denied: t__deploy needs approval (ask rule 't__deploy'), and no "
                                        "operator answered within 0.2 s.")
    assert seen["read-only"] == (False, "all good")


def test_the_audit_record_says_which_operator_approved(tmp_path: Path) -> None:
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    text = '[host]\naudit_log = "audit.jsonl"\n' + CONFIG.format(approvals="operator", timeout=60, operator="")

    async def main() -> None:
        state = ServingState(Host(config_from(text, tmp_path), plugins={"t": PACK}, autoload=False, env={}))
        app = HttpApp(state, HttpOptions(), env=ENV)
        assert app.operator is not None
        desk = app.operator.desk
        async with anyio.create_task_group() as tg:
            tg.start_soon(state.host.call, "a", "t__deploy", {"target": "staging"})
            await until(desk.pending, "the approval is pending")
            pending = (await desk.pending())[0]
            assert await desk.answer(pending.id, True, pending.digest, "the operator (token $TOK_OP)") == "approved"
        state.host.close()

    anyio.run(main)
    record = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[0])
    assert (record["tool"], record["decision"], record["by"]) == (
        "t__deploy", "allowed", "approved by the operator (token $TOK_OP)")
    assert record["call_id"].startswith("call_")


async def _true(value: Any) -> bool:
    return bool(value)


def test_client_then_operator_asks_the_operator_only_when_the_client_cannot_answer(tmp_path: Path) -> None:
    async def main() -> tuple[bool, str]:
        async with serving(tmp_path, approvals="client-then-operator") as (call, http), \
                anyio.create_task_group() as tg:
            seen: dict[str, Any] = {}

            async def held() -> None:
                seen["result"] = await call("t__deploy", {"target": "prod"})

            tg.start_soon(held)
            pending = await first_pending(http)  # this client declared no elicitation
            await http.post(f"/operator/approvals/{pending['id']}", headers=OPERATOR,
                            json={"decision": "approve", "digest": pending["digest"]})
        return seen["result"]

    assert anyio.run(main) == (False, "deployed to prod")


def test_without_an_operator_endpoint_a_call_for_an_operator_is_denied_at_once(tmp_path: Path) -> None:
    loaded = config_from(CONFIG.format(approvals="operator", timeout=60, operator=""), tmp_path)
    host = Host(loaded, plugins={"t": PACK}, autoload=False, env={})  # the Python API, stdio: no endpoint here
    result = anyio.run(host.call, "a", "t__deploy", {"target": "prod"})
    assert (result.is_error, result.text) == (True, "Permission denied: t__deploy needs approval (ask rule "
                                              "'t__deploy'), and no operator can answer here: operators answer on "
                                              "the operator endpoint of `toolcrib serve --http` ([operator]).")


def test_the_operator_token_must_be_no_agents_and_must_be_set(tmp_path: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    from toolcrib.mcp.http import HttpApp, HttpOptions, ServeError
    from toolcrib.mcp.state import ServingState

    loaded = config_from(CONFIG.format(approvals="operator", timeout=60, operator=""), tmp_path)
    state = ServingState(Host(loaded, plugins={"t": PACK}, autoload=False, env={}))
    with pytest.raises(ServeError) as refused:
        HttpApp(state, HttpOptions(), env={"TOK_A": AGENT_TOKEN, "TOK_OP": AGENT_TOKEN})
    assert str(refused.value) == ("the operator token ($TOK_OP) is also agent 'a''s: an agent must never answer its "
                                  "own approvals; give the operator a token of its own")
    with caplog.at_level("WARNING", logger="toolcrib.mcp.http"):
        app = HttpApp(state, HttpOptions(), env={"TOK_A": AGENT_TOKEN})
    assert app.operator is None
    assert "the operator endpoint is not served: $TOK_OP is not set, so calls that need an operator's approval are " \
           "denied" in caplog.messages



def test_the_operator_token_is_checked_against_every_token_of_an_agent_that_rotates(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An agent with several token variables (rotation) may have none of them be the operator's; an agent whose
    variables are not set is no clash; an operator token of exactly the minimum length is not warned of."""
    from toolcrib.mcp.http import MIN_TOKEN_LENGTH, HttpApp, HttpOptions, ServeError
    from toolcrib.mcp.state import ServingState

    text = CONFIG.format(approvals="operator", timeout=60, operator="").replace(
        'token_env = "TOK_A"', 'token_env = ["TOK_A_OLD", "TOK_A_NEW"]') + \
        '[agents.quiet]\ntoken_env = "TOK_QUIET"\n[agents.none]\n'
    state = ServingState(Host(config_from(text, tmp_path), plugins={"t": PACK}, autoload=False, env={}))
    with pytest.raises(ServeError) as refused:
        HttpApp(state, HttpOptions(), env={"TOK_A_OLD": "x" * 32, "TOK_A_NEW": OPERATOR_TOKEN,
                                           "TOK_OP": OPERATOR_TOKEN})
    assert str(refused.value) == ("the operator token ($TOK_OP) is also agent 'a''s: an agent must never answer its "
                                  "own approvals; give the operator a token of its own")
    for length, warned in ((MIN_TOKEN_LENGTH, []), (MIN_TOKEN_LENGTH - 1, [
            f"the operator token is shorter than {MIN_TOKEN_LENGTH} characters; use a long random one"])):
        caplog.clear()
        with caplog.at_level("WARNING", logger="toolcrib.mcp.http"):  # TOK_QUIET is not set: no clash, no error
            app = HttpApp(state, HttpOptions(), env={"TOK_A_NEW": AGENT_TOKEN, "TOK_OP": "p" * length})
        assert app.operator is not None
        assert [m for m in caplog.messages if "operator token" in m] == warned


def test_without_an_env_given_the_operator_token_is_read_from_the_processs_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    loaded = config_from(CONFIG.format(approvals="operator", timeout=60, operator=""), tmp_path)
    state = ServingState(Host(loaded, plugins={"t": PACK}, autoload=False, env={}))
    monkeypatch.setenv("TOK_OP", OPERATOR_TOKEN)
    monkeypatch.setenv("TOK_A", AGENT_TOKEN)
    app = HttpApp(state, HttpOptions())
    assert app.operator is not None and app.operator.token == OPERATOR_TOKEN


def test_a_console_without_its_templates_says_how_to_install_them(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib.mcp.http import HttpApp, HttpOptions, ServeError
    from toolcrib.mcp.state import ServingState

    loaded = config_from(CONFIG.format(approvals="operator", timeout=60, operator="console = true"), tmp_path)
    state = ServingState(Host(loaded, plugins={"t": PACK}, autoload=False, env={}))
    monkeypatch.setitem(sys.modules, "jinja2", None)  # as when toolcrib[console] is not installed
    with pytest.raises(ServeError) as refused:
        HttpApp(state, HttpOptions(), env=ENV)
    assert str(refused.value) == ("console = true needs Jinja2, which renders the console's pages, and it is not "
                                  "installed: pip install 'toolcrib[console]'")


class _Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []
    paths: list[str] = []
    answer = 204  # what the receiver answers the webhook (a 302 sends it to /elsewhere)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Hook.paths.append(self.path)
        _Hook.received.append(json.loads(body))
        self.send_response(_Hook.answer)
        if _Hook.answer == 302:
            self.send_header("Location", "/elsewhere")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[str]:
    """A real local HTTP receiver for the webhook (``_Hook``): the ``[operator] webhook`` line that names it."""
    _Hook.received, _Hook.paths, _Hook.answer = [], [], 204
    receiver = HTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        yield f'webhook = "http://127.0.0.1:{receiver.server_address[1]}/hook"'
    finally:
        receiver.shutdown()
        _Hook.answer = 204


def test_a_webhook_is_sent_each_pending_approval_with_signed_one_time_links_that_a_preview_cannot_answer(
        tmp_path: Path, webhook: str) -> None:
    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with serving(tmp_path, operator=webhook) as (call, http), anyio.create_task_group() as tg:
            async def held() -> None:
                seen["result"] = await call("t__deploy", {"target": "<prod>"})

            tg.start_soon(held)
            await until(lambda: _true(_Hook.received), "the webhook is sent the pending approval")
            sent = _Hook.received[0]
            seen["sent"] = sent
            approve = sent["approve_url"].removeprefix("http://127.0.0.1:8000")
            forged = re.sub(r"sig=[0-9a-f]+", "sig=" + "0" * 64, approve)
            refused = await http.get(forged)
            seen["forged"] = refused.status_code
            seen["forged page"] = re.findall(r"<(?:h1|p)>(.*?)</", refused.text)
            seen["other host"] = (await http.get(approve, headers={"Host": "evil.example"})).status_code
            seen["deny page"] = (await http.get(sent["deny_url"].removeprefix("http://127.0.0.1:8000"))).status_code
            crossed = approve.replace("/approve?", "/deny?")  # a link answers with its own decision only
            seen["crossed"] = (await http.get(crossed)).status_code
            page = await http.get(approve)  # what a chat app's preview does: answers nothing
            seen["page"] = (page.status_code, page.headers["content-security-policy"], page.text)
            seen["rows"] = [" ".join(unescape(re.sub(r"<[^>]+>", " ", row)).split())
                            for row in re.findall(r"<tr>(.*?)</tr>", page.text, re.S)]
            seen["still pending"] = len((await http.get("/operator/approvals", headers=OPERATOR)).json()["approvals"])
            signature = approve.split("sig=")[1]
            confirmed = await http.post(approve.split("?")[0], data={"sig": signature})
            seen["confirmed"] = (confirmed.status_code, re.findall(r"<p>(.*?)</p>", confirmed.text))
            seen["reused"] = (await http.post(approve.split("?")[0], data={"sig": signature})).status_code
            seen["large"] = (await http.post(approve.split("?")[0], data={"sig": "x" * 5000})).status_code
        return seen

    seen = anyio.run(main)
    sent = seen["sent"]
    assert sent["event"] == "approval_pending" and sent["tool"] == "t__deploy"
    assert sent["arguments"] == {"target": "<prod>"}
    assert re.fullmatch(rf"http://127\.0\.0\.1:8000/operator/approvals/{re.escape(sent['id'])}/approve\?sig=[0-9a-f]{{64}}",
                        sent["approve_url"])
    assert sent["deny_url"].split("?")[0].endswith(f"/{sent['id']}/deny")
    assert OPERATOR_TOKEN not in json.dumps(sent) and AGENT_TOKEN not in json.dumps(sent)
    assert seen["forged"] == 404 and seen["crossed"] == 404
    assert seen["forged page"] == ["Nothing to answer", "This link answers nothing: the approval was answered, it "
                                                        "expired, its call ended, or the link is not valid."]
    assert seen["other host"] == 421 and seen["deny page"] == 200  # Host checked as for agents; each link its own
    status, policy, text = seen["page"]
    assert status == 200 and styled_by_its_hash(text, policy)
    assert "&lt;prod&gt;" in text and "<prod>" not in text  # argument values escaped
    assert '<form method="post">' in text and '<button type="submit">Approve</button>' in text
    assert OPERATOR_TOKEN not in text
    assert seen["still pending"] == 1
    assert seen["rows"][:5] == ["Agent a", "Who token $TOK_A", "Tool t__deploy",
                                'Arguments { "target": "<prod>" }', "Asked by ask rule 't__deploy'"]
    assert re.fullmatch(r"Call call_[0-9a-f]+", seen["rows"][5])
    assert re.fullmatch(r"Expires \d\d:\d\d:\d\d UTC", seen["rows"][6])
    assert seen["confirmed"] == (200, ["t__deploy for agent a is approved."])
    assert seen["reused"] == 404 and seen["large"] == 400
    assert seen["result"] == (False, "deployed to <prod>")


def test_an_agent_cannot_fill_the_operators_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most MAX_PENDING calls of one agent wait for an operator; the next is denied at once, saying so."""
    from toolcrib import approvals
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    monkeypatch.setattr(approvals, "MAX_PENDING", 2)
    monkeypatch.setattr("toolcrib.calls.MAX_PENDING", 2)
    text = CONFIG.format(approvals="operator", timeout=60, operator="")
    state = ServingState(Host(config_from(text, tmp_path), plugins={"t": PACK}, autoload=False, env={}))
    app = HttpApp(state, HttpOptions(), env=ENV)
    assert app.operator is not None

    async def main() -> tuple[int, Any]:
        async with anyio.create_task_group() as tg:
            for target in ("one", "two"):
                tg.start_soon(state.host.call, "a", "t__deploy", {"target": target})

            async def both() -> bool:
                return len(await app.operator.desk.pending()) == 2  # type: ignore[union-attr]

            await until(both, "two calls wait")
            third = await state.host.call("a", "t__deploy", {"target": "three"})
            tg.cancel_scope.cancel()
        return len(await app.operator.desk.pending()), (third.is_error, third.text)  # type: ignore[union-attr]

    assert anyio.run(main) == (0, (True, "Permission denied: t__deploy needs approval (ask rule 't__deploy'), and "
                                         "agent 'a' already has 2 calls waiting for an operator; try again when "
                                         "they are answered."))


@pytest.mark.parametrize("status", [500, 302, 300])
def test_a_webhook_that_fails_or_redirects_is_logged_and_the_call_still_waits_for_its_answer(
        tmp_path: Path, status: int, webhook: str, caplog: pytest.LogCaptureFixture) -> None:
    _Hook.answer = status
    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with serving(tmp_path, operator=webhook) as (call, http), anyio.create_task_group() as tg:
            async def held() -> None:
                seen["result"] = await call("t__deploy", {"target": "prod"})

            tg.start_soon(held)
            pending = await first_pending(http)
            seen["id"] = pending["id"]
            await until(lambda: _true(caplog.messages), "the webhook's answer is logged")
            if status == 302:
                await http.post(f"/operator/approvals/{pending['id']}", headers=OPERATOR,
                                json={"decision": "approve", "digest": pending["digest"]})
            else:  # its deny link still works, though the webhook's receiver failed
                deny = _Hook.received[0]["deny_url"].removeprefix("http://127.0.0.1:8000")
                page = await http.get(deny)
                seen["button"] = re.findall(r'<button type="submit">(\w+)</button>', page.text)
                answered = await http.post(deny.split("?")[0], data={"sig": deny.split("sig=")[1]})
                seen["answered"] = re.findall(r"<p>(.*?)</p>", answered.text)
                seen["bad form"] = re.findall(r"<p>(.*?)</p>", (await http.post(
                    deny.split("?")[0], content=b"sig=x", headers={"Content-Type": "text/plain"})).text)
        return seen

    with caplog.at_level("WARNING", logger="toolcrib.mcp.operator"):
        seen = anyio.run(main)
    if status == 302:
        assert seen["result"] == (False, "deployed to prod")
    else:
        assert seen["button"] == ["Deny"] and seen["answered"] == ["t__deploy for agent a is denied."]
        assert seen["bad form"] == ["Expected the page's own form."]
        assert seen["result"] == (True, "Permission denied: t__deploy needs approval (ask rule 't__deploy'), and "
                                        "the operator (webhook link) denied it.")
    assert _Hook.paths == ["/hook"]  # a redirect is not followed: the webhook goes where it was configured, only
    assert caplog.messages == [f"the approvals webhook answered {status} for approval {seen['id']}"]


def test_a_desk_answer_is_taken_once_and_an_expired_approval_is_gone() -> None:
    desk = Desk(b"k" * 32)

    async def main() -> list[Any]:
        seen: list[Any] = []
        async with anyio.create_task_group() as tg:
            async def ask() -> None:
                seen.append(await desk.ask("a", None, "t__x", {"n": 1}, "ask rule 't__x'", "call_1", "v1", 60))

            tg.start_soon(ask)
            await until(desk.pending, "pending")
            pending = (await desk.pending())[0]
            seen.append(await desk.answer(pending.id, False, pending.digest, "op"))
            seen.append(await desk.answer(pending.id, True, pending.digest, "op"))
        seen.append(await desk.ask("a", None, "t__x", {"n": 1}, "r", "call_2", "v1", 0.05))
        seen.append(await desk.pending())
        return seen

    assert anyio.run(main) == ["approved", "no such pending approval: it was answered, it expired, or its call ended",
                               (False, "op"), (None, ""), []]
    assert digest("a", "t", {"x": 1, "y": 2}, "v") == digest("a", "t", {"y": 2, "x": 1}, "v")  # canonical
    assert digest("a", "t", {"x": 1}, "v") != digest("a", "t", {"x": 1}, "w")  # the config version is bound too


def test_toolcrib_approvals_says_what_it_lacks(cli_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import cli

    plain = cli_config("[agents.a]\n", "t=approving:PACK")
    assert cli("approvals", "--config", plain)[0::2] == (
        2, "error: the config has no [operator] table: approvals go to the agents' clients\n")
    path = cli_config(CONFIG.format(approvals="operator", timeout=60, operator=""), "t=approving:PACK")
    monkeypatch.delenv("TOK_OP", raising=False)
    assert cli("approvals", "--config", path)[0::2] == (
        2, "error: $TOK_OP is not set: the operator endpoint needs the operator token\n")
    monkeypatch.setenv("TOK_OP", OPERATOR_TOKEN)
    code, _, err = cli("approvals", "--config", path, "--url", "http://127.0.0.1:9")  # nothing listens there
    assert code == 1 and err.startswith("error: the operator endpoint at http://127.0.0.1:9 cannot be reached: ")


# -- end to end: `toolcrib serve --http`, an MCP client without elicitation, `toolcrib approvals` ----------------




@pytest.mark.slow
def test_a_framework_client_without_elicitation_has_its_call_approved_with_toolcrib_approvals(
        tmp_path: Path) -> None:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    config = tmp_path / "toolcrib.toml"
    config.write_text(CONFIG.format(approvals="operator", timeout=120, operator=""))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update(ENV, TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD="1", TOOLCRIB_PLUGINS="t=approving:PACK",
               PYTHONPATH=str(Path(__file__).parent) + os.pathsep + env.get("PYTHONPATH", ""))
    proc, base, _ = serve_http(config, env)

    def approvals(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "toolcrib.cli", "approvals", "--config", str(config), "--url",
                               base, *args], capture_output=True, text=True, env=env, timeout=60)

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {AGENT_TOKEN}"}, timeout=120)
        async with http, Client(streamable_http_client(f"{base}/agents/a/mcp", http_client=http)) as client, \
                anyio.create_task_group() as tg:
            async def held() -> None:
                result = await client.call_tool("t__deploy", {"target": "prod\u202e\x9b"})  # hidden: marked
                seen["result"] = (result.is_error, result.content[0].text)  # type: ignore[union-attr]

            tg.start_soon(held)
            listed: list[subprocess.CompletedProcess[str]] = []

            async def pending() -> bool:
                listed[:] = [await anyio.to_thread.run_sync(approvals)]
                return listed[0].stdout.startswith("no call") is False and listed[0].returncode == 0

            await until(pending, "`toolcrib approvals` lists the call")
            seen["listed"] = listed[0].stdout
            approval_id = listed[0].stdout.split()[0]
            seen["approved"] = await anyio.to_thread.run_sync(approvals, "approve", approval_id)
            seen["again"] = await anyio.to_thread.run_sync(approvals, "approve", approval_id)
        return seen

    try:
        seen = anyio.run(main)
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    lines = seen["listed"].splitlines()
    assert re.fullmatch(r"[\w-]+  agent a \(token \$TOK_A\) calls t__deploy \(ask rule 't__deploy'\), expires "
                        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", lines[0]), lines
    assert lines[1] == '  arguments: {"target": "prod\u27e8U+202E\u27e9\u27e8U+009B\u27e9"}'  # ⟨U+202E⟩: not as it is
    assert re.fullmatch(r"  call call_[0-9a-f]+, digest [0-9a-f]{16}", lines[2])
    assert (seen["approved"].returncode, seen["approved"].stdout) == (
        0, 'approved: t__deploy for agent a {"target": "prod\u27e8U+202E\u27e9\u27e8U+009B\u27e9"}\n')
    assert (seen["again"].returncode, seen["again"].stderr) == (
        1, f"error: no call waits for approval {lines[0].split()[0]!r} (`toolcrib approvals` lists them)\n")
    assert seen["result"] == (False, "deployed to prod\u202e\x9b")


# -- across replicas: the pending approvals on Redis ([cluster]) ------------------------------------------------


def test_a_call_held_on_one_replica_is_listed_and_approved_on_another(tmp_path: Path, redis_url: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two replicas (a config file, serving state and Redis connection each): the call waits on the first, the
    operator lists and answers on the second, the first runs it; of two answers one counts."""
    from conftest import redis_command
    from replicas import http_replicas

    monkeypatch.setenv("TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("TOOLCRIB_PLUGINS", "t=approving:PACK")
    text = f'[cluster]\nredis_url = "{redis_url}"\nkey_prefix = "ap:"\n' + CONFIG.format(
        approvals="operator", timeout=60, operator="")
    first, second = tmp_path / "one.toml", tmp_path / "two.toml"
    first.write_text(text)
    second.write_text(text)

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with http_replicas([first, second], ENV) as (one, two), anyio.create_task_group() as tg:
            call = await open_session(one)

            async def held() -> None:
                seen["result"] = await call("t__deploy", {"target": "eu"})

            tg.start_soon(held)
            pending = await first_pending(two)  # listed on the replica that does not hold the call
            seen["pending"] = (pending["tool"], pending["arguments"], pending["agent"], pending["principal"],
                               pending["rule"], pending["call_id"].startswith("call_"),
                               pending["digest"] == digest("a", "t__deploy", {"target": "eu"},
                                                           pending["config_version"]))
            seen["keys"] = sorted(k.decode() for k in await redis_command(redis_url, "KEYS", "ap:approval*"))
            answers = [two.post(f"/operator/approvals/{pending['id']}", headers=OPERATOR,
                                json={"decision": "approve", "digest": pending["digest"]}),
                       one.post(f"/operator/approvals/{pending['id']}", headers=OPERATOR,
                                json={"decision": "deny", "digest": pending["digest"]})]
            seen["answers"] = sorted([(await a).status_code for a in answers])
        seen["left"] = await redis_command(redis_url, "KEYS", "ap:approval*")
        return seen

    seen = anyio.run(main)
    assert seen["pending"] == ("t__deploy", {"target": "eu"}, "a", {"kind": "token", "credential": "$TOK_A"},
                               "ask rule 't__deploy'", True, True)
    assert [re.sub(r":[\w-]{16}$", ":<id>", k) for k in seen["keys"]] == ["ap:approval:<id>", "ap:approvals",
                                                                                 "ap:approvals:agent:a"]
    assert seen["answers"] == [200, 404]  # the first answer counts; the second finds it answered
    assert seen["result"] == (False, "deployed to eu")
    assert seen["left"] == []


def test_while_redis_is_unreachable_no_call_is_held_and_the_endpoint_says_so(tmp_path: Path) -> None:
    from redis_server import RedisServer
    from toolcrib.cluster import Store
    from toolcrib.config import ClusterConfig
    from toolcrib.mcp.fleet import RedisDesk

    server = RedisServer(tmp_path / "redis").start()

    async def main() -> list[Any]:
        store = Store(ClusterConfig(redis_url=server.url, timeout=0.5))
        await store.open()
        desk = RedisDesk(store, b"k" * 32)
        server.stop()
        seen: list[Any] = []
        for step in (lambda: desk.ask("a", None, "t__x", {}, "r", "c", "v", 5), desk.pending):
            try:
                seen.append(await step())
            except Exception as exc:
                seen.append(type(exc).__name__)
        await store.close()
        return seen

    try:
        assert anyio.run(main) == ["DeskUnreachable", "DeskUnreachable"]
    finally:
        server.stop()


def test_an_access_token_of_the_operator_identity_answers_and_one_that_acts_as_an_agent_never_does(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """[operator.identity] with [oauth], against a real local token issuer: the operator's access token lists and
    answers (the audit's by names its subject and client); an agent's, or one that matches both identities, is
    refused, and the console signs in the operator's only."""
    from issuer import Issuer
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    with Issuer() as issuer:
        text = (f'[oauth]\nissuer = "{issuer.url}"\naudience = "http://127.0.0.1:8000"\n' +
                CONFIG.format(approvals="operator", timeout=60, operator='console = true\n[operator.identity]\n'
                              'claims = { groups = "ops" }\nscopes = ["approve"]') +
                '[agents.a.identity]\nclaims = { client_id = "agent-bot" }\n')
        state = ServingState(Host(config_from(text, tmp_path), plugins={"t": PACK}, autoload=False, env={}))
        app = HttpApp(state, HttpOptions(), env=ENV)

        def token(client: str, groups: list[str], scope: str = "approve") -> dict[str, str]:
            return {"Authorization": "Bearer " + issuer.sign({"sub": "alice", "client_id": client, "groups": groups,
                                                              "scope": scope, "aud": "http://127.0.0.1:8000"})}

        async def main() -> dict[str, Any]:
            seen: dict[str, Any] = {}
            async with app.app.router.lifespan_context(app.app), httpx2.AsyncClient(
                    transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as http, \
                    anyio.create_task_group() as tg:
                ops = token("ops-cli", ["ops"])
                seen["tokens"] = [(await http.get("/operator/approvals", headers=headers)).status_code for headers in (
                    ops, token("ops-cli", ["ops"], scope="read"), token("agent-bot", ["staff"]),
                    token("agent-bot", ["ops"]), token("stranger", ["staff"]))]
                # the operator's; without its scope; an agent's; both; neither (the issuer's, with the scope)
                nameless = issuer.sign({"groups": ["ops"], "scope": "approve", "aud": "http://127.0.0.1:8000"})
                seen["nameless"] = await app._operator_identity(nameless)
                login = await http.post("/console/login", data={"token": ops["Authorization"][7:]})
                seen["console"] = login.status_code

                async def held() -> None:
                    seen["result"] = await state.host.call("a", "t__deploy", {"target": "eu"})

                tg.start_soon(held)
                found: list[dict[str, Any]] = []

                async def listed() -> bool:
                    found[:] = (await http.get("/operator/approvals", headers=ops)).json()["approvals"]
                    return bool(found)

                await until(listed, "the call's approval is pending")
                answer = await http.post(f"/operator/approvals/{found[0]['id']}", headers=ops,
                                         json={"decision": "deny", "digest": found[0]["digest"]})
                seen["answer"] = answer.status_code
            return seen

        with caplog.at_level("WARNING", logger="toolcrib.mcp.http"):
            seen = anyio.run(main)
    assert seen["tokens"] == [200, 401, 401, 401, 401]
    assert seen["nameless"] == "?, client ?"  # an operator's token that names no subject and no client
    assert "an access token that acts as agent 'a' was refused as the operator" in caplog.messages
    assert seen["console"] == 303 and seen["answer"] == 200
    result = seen["result"]
    assert (result.is_error, result.text) == (True, "Permission denied: t__deploy needs approval (ask rule "
                                              "'t__deploy'), and the operator (alice, client ops-cli) denied it.")


def test_the_digest_and_the_link_key_are_spelled_out_so_every_replica_and_version_agrees() -> None:
    """Replicas on one Redis, and a host restarted on a newer toolcrib, must compute the same digest for the same
    call and the same link key for the same token: both are fixed here, byte for byte."""
    import hashlib
    import hmac

    canonical = '["a","t__x",{"a":[1,2],"b":"é"},"v1"]'  # sorted keys, no spaces, UTF-8 as it is
    assert digest("a", "t__x", {"b": "é", "a": [1, 2]}, "v1") == hashlib.sha256(canonical.encode()).hexdigest()
    assert digest("a", "t__x", {"b": b"raw"}, "v1") == hashlib.sha256(
        b'["a","t__x",{"b":"b\'raw\'"},"v1"]').hexdigest()  # what JSON cannot say, by its repr
    assert link_key("op-token") == hmac.new(b"op-token", b"toolcrib approval links", hashlib.sha256).digest()


def test_a_pending_approval_shows_its_times_and_survives_a_store_round_trip() -> None:
    from toolcrib.approvals import Pending

    pending = Pending("id1", "a", {"kind": "token"}, "t__x", {"n": 1}, "ask rule 't__x'", "call_1", "v1",
                      1_700_000_000.0, 1_700_000_300.0)
    shown = pending.public()
    assert (shown["created"], shown["expires"]) == ("2023-11-14T22:13:20Z", "2023-11-14T22:18:20Z")
    again = Pending.from_record(json.loads(json.dumps(pending.record())))
    assert (again.version, again.created, again.expires, again.digest) == ("v1", 1_700_000_000.0,
                                                                             1_700_000_300.0, pending.digest)


def test_an_expired_approval_cannot_be_fetched_nor_answered_and_a_desk_without_a_key_checks_no_link() -> None:
    from toolcrib.approvals import Pending

    async def main() -> list[Any]:
        desk = Desk()  # no link key: no webhook links
        past = Pending("old", "a", None, "t__x", {}, "r", "c", "v", 0.0, 1.0)
        desk._pending["old"] = past
        live = Pending("new", "a", None, "t__x", {}, "r", "c", "v", 0.0, 9e99)
        desk._pending["new"] = live
        return [await desk.get("old"), await desk.answer("old", True, past.digest, "op"),
                [p.id for p in await desk.pending()], await desk.check_link("new", "approve", "0" * 64)]

    assert anyio.run(main) == [None, "no such pending approval: it was answered, it expired, or its call ended",
                               ["new"], None]


def test_a_notifier_that_fails_is_logged_by_the_approval_s_id(caplog: pytest.LogCaptureFixture) -> None:
    desk = Desk()

    async def broken(pending: Any) -> None:
        raise RuntimeError("the webhook is down")

    desk.notify.append(broken)

    async def main() -> tuple[bool | None, str]:
        return await desk.ask("a", None, "t__x", {}, "r", "call_1", "v", 0.01)

    with caplog.at_level("ERROR", logger="toolcrib.approvals"):
        assert anyio.run(main) == (None, "")
    assert len(caplog.records) == 1
    assert re.fullmatch(r"telling of pending approval [\w-]{16} failed", caplog.records[0].getMessage())
    assert caplog.records[0].exc_info is not None and str(caplog.records[0].exc_info[1]) == "the webhook is down"


# -- the operator endpoint on its own: every answer exact -------------------------------------------------------


def operator_app(desk: Desk, url: str | None = None) -> Any:
    """The operator endpoint's routes over ``desk``, with the operator token ``op-secret`` ($OP), as an ASGI app."""
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.applications import Starlette

    from toolcrib.config import OperatorConfig
    from toolcrib.mcp.operator import OperatorEndpoint

    endpoint = OperatorEndpoint(desk, OperatorConfig(token_env="OP", url=url), "op-secret",
                                TransportSecurityMiddleware())
    return Starlette(routes=endpoint.routes()), endpoint


async def held(desk: Desk, tg: Any, target: str = "prod") -> Any:
    """A call held on ``desk`` (its answer lands in the returned list), and its pending approval."""
    answers: list[Any] = []

    async def ask() -> None:
        answers.append(await desk.ask("a", None, "t__deploy", {"target": target}, "ask rule 't__deploy'", "call_1",
                                      "v1", 60))

    tg.start_soon(ask)
    await until(desk.pending, "pending")
    return (await desk.pending())[0], answers


def answered(answers: list[Any]) -> Any:
    async def check() -> bool:
        return bool(answers)

    return check


def test_the_operator_endpoint_refuses_exactly_and_reports_a_denial() -> None:
    import httpx2

    desk = Desk(link_key("op-secret"))
    app, _ = operator_app(desk)

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://localhost") as http, \
                anyio.create_task_group() as tg:
            pending, answers = await held(desk, tg)
            for name, headers in (("none", {}), ("agent", {"Authorization": "Bearer tok-a"}),
                                  ("not latin-1", {"Authorization": "Bearer op-s\u00e9cr\u20ac"})):
                refused = await http.get("/operator/approvals", headers={
                    k: v.encode() for k, v in headers.items()})
                seen[name] = (refused.status_code, refused.json(), refused.headers.get("www-authenticate"))
            seen["post to the list"] = (await http.post("/operator/approvals", headers={
                "Authorization": "Bearer op-secret"}, json={})).status_code
            denied = await http.post(f"/operator/approvals/{pending.id}", headers={"Authorization": "Bearer op-secret"},
                                     json={"decision": "deny", "digest": pending.digest})
            seen["denied"] = (denied.status_code, denied.json())
            await until(answered(answers), "the call has its answer")
            seen["answer"] = answers[0]
        return seen

    seen = anyio.run(main)
    refusal = (401, {"error": "invalid_token", "error_description": "this endpoint needs Authorization: Bearer <the "
                     "operator token>"}, 'Bearer error="invalid_token"')
    assert seen["none"] == seen["agent"] == seen["not latin-1"] == refusal
    assert seen["post to the list"] == 405
    assert seen["denied"] == (200, {"status": "denied"})
    assert seen["answer"] == (False, "the operator (token $OP)")


def test_a_link_without_its_signature_or_with_another_form_answers_nothing() -> None:
    import httpx2

    desk = Desk(link_key("op-secret"))
    app, endpoint = operator_app(desk, url="https://ops.example")

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://localhost") as http, \
                anyio.create_task_group() as tg:
            pending, answers = await held(desk, tg)
            link = f"/operator/approvals/{pending.id}/approve"
            for name, response in (
                    ("no sig", await http.get(link)), ("no sig posted", await http.post(link, data={"other": "1"})),
                    ("json posted", await http.post(link, json={"sig": "x"}))):
                seen[name] = (response.status_code, response.text)
            good = endpoint.links(pending)["approve_url"].split("sig=")[1]
            approved = await http.post(link, data={"sig": good})
            seen["approved"] = (approved.status_code, approved.text)
            again = await http.post(link, data={"sig": good})
            seen["again"] = again.status_code
            await until(answered(answers), "the call has its answer")
        return seen

    seen = anyio.run(main)
    page = ('<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{0}</title><meta name="referrer" '
            'content="same-origin"><meta name="viewport" content="width=device-width, initial-scale=1"><style/>'
            '</head><body><h1>{0}</h1>{1}</body></html>')
    nothing = page.format("Nothing to answer", "<p>This link answers nothing: the approval was answered, it expired, "
                          "its call ended, or the link is not valid.</p>")
    for name in ("no sig", "no sig posted", "json posted", "approved"):
        seen[name] = (seen[name][0], unstyled(seen[name][1]))
    assert seen["no sig"] == seen["no sig posted"] == (404, nothing)
    assert seen["json posted"] == (400, page.format("Refused", "<p>Expected the page's own form.</p>"))
    assert seen["approved"] == (200, page.format("Call approved", "<p>t__deploy for agent a is approved.</p>"))
    assert seen["again"] == 404


def unstyled(page: str) -> str:
    """A link's page with its inline style taken out (``<style/>`` left): what the tests compare word for word."""
    return re.sub(r"<style>[^<]*</style>", "<style/>", page)


def styled_by_its_hash(page: str, policy: str) -> bool:
    """Whether the page's one inline style is what its Content-Security-Policy allows, by hash, and nothing else."""
    import base64
    import hashlib

    style = re.findall(r"<style>([^<]*)</style>", page)
    digest = base64.b64encode(hashlib.sha256(style[0].encode()).digest()).decode() if len(style) == 1 else ""
    return policy == f"default-src 'none'; style-src 'sha256-{digest}'; form-action 'self'" and bool(style[0])


def test_a_link_s_page_shows_the_call_and_keeps_itself_from_caches_frames_and_other_sites() -> None:
    import httpx2

    desk = Desk(link_key("op-secret"))
    app, endpoint = operator_app(desk, url="https://ops.example/")  # a trailing slash: no // in the links

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://localhost") as http, \
                anyio.create_task_group() as tg:
            pending, answers = await held(desk, tg, "prød")
            links = endpoint.links(pending)
            seen["links"] = (links, pending.id, desk.signature(pending, "approve"), desk.signature(pending, "deny"))
            page = await http.get(links["deny_url"].removeprefix("https://ops.example"))
            seen["page"] = (page.status_code, page.text, {k: page.headers[k] for k in (
                "cache-control", "x-frame-options", "content-security-policy")}, pending.public()["expires"])
            await desk.answer(pending.id, True, pending.digest, "op")
            await until(answered(answers), "the call has its answer")
        return seen

    seen = anyio.run(main)
    links, approval, approve_sig, deny_sig = seen["links"]
    assert links == {"approve_url": f"https://ops.example/operator/approvals/{approval}/approve?sig={approve_sig}",
                     "deny_url": f"https://ops.example/operator/approvals/{approval}/deny?sig={deny_sig}"}
    status, text, headers, expires = seen["page"]
    rows = [("Agent", "a"), ("Who", "-"), ("Tool", "t__deploy"), ("Arguments", '{\n  "target": "prød"\n}'),
            ("Asked by", "ask rule 't__deploy'"), ("Call", "call_1"), ("Expires", f"{expires[11:19]} UTC")]
    table = "".join(f"<tr><th>{k}</th><td><pre>{v}</pre></td></tr>" for k, v in rows).replace("\"", "&quot;")
    table = table.replace("'", "&#x27;")
    assert status == 200 and styled_by_its_hash(text, headers["content-security-policy"])
    assert unstyled(text) == (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Deny this call?</title><meta '
        'name="referrer" content="same-origin"><meta name="viewport" content="width=device-width, initial-scale=1">'
        '<style/></head><body><h1>Deny this call?</h1>'
        f'<table>{table}</table><form method="post"><input type="hidden" name="sig" value="{deny_sig}">'
        '<button type="submit">Deny</button></form></body></html>')
    assert {k: v for k, v in headers.items() if k != "content-security-policy"} == {
        "cache-control": "no-store", "x-frame-options": "DENY"}


def test_a_link_answered_elsewhere_meanwhile_says_so() -> None:
    """Two operators press one link's button at once: the second finds the approval taken between its check of the
    link and its answer."""
    import httpx2

    class Racing(Desk):
        async def check_link(self, approval_id: str, decision: str, signature: str) -> Any:
            found = await super().check_link(approval_id, decision, signature)
            if found is not None:
                await self.answer(approval_id, True, found.digest, "the other operator")
            return found

    desk = Racing(link_key("op-secret"))
    app, endpoint = operator_app(desk, url="https://ops.example")

    async def main() -> tuple[int, str]:
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://localhost") as http, \
                anyio.create_task_group() as tg:
            pending, answers = await held(desk, tg)
            url = endpoint.links(pending)["approve_url"].removeprefix("https://ops.example")
            late = await http.post(url.split("?")[0], data={"sig": url.split("sig=")[1]})
            await until(answered(answers), "the call has its answer")
            return late.status_code, late.text

    status, text = anyio.run(main)
    assert status == 404
    assert "<title>Nothing to answer</title>" in text
    assert text.endswith("<h1>Nothing to answer</h1><p>no such pending approval: it was answered, it expired, or its "
                         "call ended.</p></body></html>")


def test_a_webhook_task_is_kept_and_its_failure_logged_with_the_approval(caplog: pytest.LogCaptureFixture) -> None:
    from mcp.server.transport_security import TransportSecurityMiddleware

    from toolcrib.config import OperatorConfig
    from toolcrib.mcp.operator import OperatorEndpoint

    desk = Desk(link_key("op-secret"))
    kept: list[Any] = []
    OperatorEndpoint(desk, OperatorConfig(token_env="OP", webhook="http://127.0.0.1:9/hook"), "op-secret",
                     TransportSecurityMiddleware(), keep=kept.append)

    async def main() -> tuple[Any, str]:
        async with anyio.create_task_group() as tg:
            pending, _ = await held(desk, tg)
            await until(lambda: _true(caplog.messages), "the webhook's failure is logged")
            await desk.answer(pending.id, False, pending.digest, "op")
        return kept, pending.id

    with caplog.at_level("WARNING", logger="toolcrib.mcp.operator"):
        tasks, approval = anyio.run(main)
    assert len(tasks) == 1 and tasks[0].done()
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith(f"the approvals webhook could not be told of approval {approval}: ")
    assert "connect" in caplog.messages[0].lower()


@pytest.mark.parametrize(("body", "content_type", "expected"), [
    ("sig=abc&x=", "application/x-www-form-urlencoded; charset=utf-8", {"sig": "abc", "x": ""}),
    ("a=" + "b" * (4096 - 2), "application/x-www-form-urlencoded", {"a": "b" * 4094}),  # exactly the limit
    ("a=" + "b" * (4096 - 1), "application/x-www-form-urlencoded", None),
    ("&".join(f"f{i}=1" for i in range(20)), "application/x-www-form-urlencoded", {f"f{i}": "1" for i in range(20)}),
    ("&".join(f"f{i}=1" for i in range(21)), "application/x-www-form-urlencoded", None),  # too many fields
    ("sig=abc", "text/plain", None),
    ("sig=\xff", "application/x-www-form-urlencoded", None),  # not UTF-8 (one byte 0xff)
])
def test_a_small_form_is_small_urlencoded_and_utf_8(body: str, content_type: str, expected: Any) -> None:
    from starlette.requests import Request

    from toolcrib.mcp.operator import small_form

    async def main() -> Any:
        data = body.encode("latin-1")

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": data, "more_body": False}

        scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"content-type", content_type.encode())]}
        return await small_form(Request(scope, receive))

    assert anyio.run(main) == expected


def test_an_approval_id_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """`toolcrib approvals approve -x...` would be read as an option (one id in 64 once failed that way)."""
    import secrets

    from toolcrib import approvals

    drawn = iter(["-Xy3kq3Jx0aZ1bQe", "kq3Jx0aZ1bQe4pLm"])
    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: next(drawn))
    assert approvals.new_id() == "kq3Jx0aZ1bQe4pLm"


def test_with_an_operator_endpoint_the_probes_and_the_agents_routes_are_still_served(tmp_path: Path) -> None:
    """The operator's routes are added to the app's, not put in their place: the probes answer, and an agent is
    reached through the router too (an app under a root path)."""
    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    loaded = config_from(CONFIG.format(approvals="operator", timeout=60, operator=""), tmp_path)
    app = HttpApp(ServingState(Host(loaded, plugins={"t": PACK}, autoload=False, env={})), HttpOptions(), env=ENV)

    async def main() -> list[int]:
        codes = []
        async with app.app.router.lifespan_context(app.app):
            for root in ("", "/tc"):
                async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app, root_path=root),
                                              base_url="http://127.0.0.1:8000", timeout=60) as http:
                    codes += [(await http.get(f"{root}{path}")).status_code for path in ("/healthz", "/readyz")]
                    codes.append((await http.post(f"{root}/agents/a/mcp", json=INITIALIZE,
                                                  headers=AGENT)).status_code)
                    codes.append((await http.get(f"{root}/operator/approvals", headers=OPERATOR)).status_code)
        return codes

    assert anyio.run(main) == [200, 200, 200, 200] * 2
