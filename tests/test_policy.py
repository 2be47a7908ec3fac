"""Policies as code in the one decision (``toolcrib_policy``): a pack's verdict hides from listing and refuses calls,
reads and gets; deny wins and a policy never reveals; its reason is shown wherever decisions are; it is asked once
per view and thing for listing and once per call with the final arguments and the principal; it fails closed."""

from __future__ import annotations

import threading
from typing import Any

import anyio
import pytest
from mcp import Client

import toolcrib
from conftest import cli, make_host
from docs_pack import CONFIG as DOCS_CONFIG
from docs_pack import Docs
from packs import FILES, Pack, Policy
from toolcrib import Deny, PolicyRequest
from toolcrib.errors import ToolError, UnknownToolError
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.oauth import Identity
from toolcrib.mcp.state import ServingState
from toolcrib.policy import principal_of

CONFIG = """
[agents.a.permissions]
plugins = { allow = ["files"] }
tools = { deny = ["files__touch"] }

[agents.b.permissions]
plugins = { allow = ["files"] }
tools = { allow = ["*"] }
"""


def test_a_policys_deny_hides_from_every_list_and_a_call_answers_as_for_a_tool_that_never_was() -> None:
    policy = Policy()
    host = make_host(CONFIG, {"files": FILES, "policy": policy})
    assert host.view("a").names == ["files__read", "files__write"]
    assert host.view("b").names == ["files__read", "files__rm", "files__touch", "files__write"]
    with pytest.raises(UnknownToolError) as hidden:
        host.view("a").call("files__rm", {"path": "x"})
    with pytest.raises(UnknownToolError) as never:
        host.view("a").call("files__nothing", {"path": "x"})
    assert str(hidden.value) == "Unknown tool: files__rm" and str(never.value) == "Unknown tool: files__nothing"
    # asked once per view and thing, only about what the rules let through: files__touch, which a's rules deny,
    # never (an Allow reveals nothing)
    listed = sorted((r.agent, r.name) for r in policy.asked if r.action == "list")
    assert listed == [("a", "files__read"), ("a", "files__rm"), ("a", "files__write"),
                      ("b", "files__read"), ("b", "files__rm"), ("b", "files__touch"), ("b", "files__write")]
    request = next(r for r in policy.asked if r.name == "files__rm" and r.agent == "a")
    assert (request.kind, request.namespace, request.source, request.source_kind, request.uri, request.mode,
            dict(request.principal), dict(request.arguments)) == (
        "tool", "files", "files", "pack", None, "default", {"kind": "agent"}, {})
    decision = host.explain("a", "files__rm")
    assert decision is not None and not decision.visible
    assert [(c.name, c.passed, c.detail) for c in decision.checks if c.name == "policy"] == [
        ("policy", False, "policy policy: agent a removes nothing")]
    shown = host.explain("b", "files__rm")
    assert shown is not None and [(c.name, c.passed, c.detail) for c in shown.checks if c.name == "policy"] == [
        ("policy", True, "no policy objects")]


def test_a_call_is_asked_about_once_with_the_arguments_that_really_run() -> None:
    policy = Policy()

    class Rewriter:
        @toolcrib.hookimpl
        def toolcrib_pre_tool_use(self, tool: str, arguments: Any) -> Any:
            if arguments.get("path") == "notes.txt":
                return toolcrib.Allow(updated_input={"path": "secret/notes.txt"})
            return None

    records: list[dict[str, Any]] = []

    class Audit:
        @toolcrib.hookimpl
        def toolcrib_audit(self, record: Any) -> None:
            records.append(dict(record))

    host = make_host(CONFIG, {"files": FILES, "policy": policy, "rewriter": Rewriter(), "audit": Audit()})

    async def main() -> None:
        view = host.view("b")
        refused = await view.call("files__read", {"path": "notes.txt"})
        assert (refused.is_error, refused.text) == (True, "Permission denied: policy policy: secret/ is nobody's")
        fine = await view.call("files__read", {"path": "other.txt"})
        assert "Permission denied" not in fine.text

    anyio.run(main)
    calls = [r for r in policy.asked if r.action == "call"]
    assert [dict(r.arguments) for r in calls] == [{"path": "secret/notes.txt"}, {"path": "other.txt"}]
    assert [(r["tool"], r["decision"], r["by"]) for r in records] == [
        ("files__read", "denied", "policy policy"), ("files__read", "allowed", "rules")]


def test_reads_and_gets_are_asked_about_with_their_uri_and_arguments() -> None:
    class Pages:
        @toolcrib.hookimpl
        def toolcrib_policy(self, request: PolicyRequest) -> Deny | None:
            if request.action == "read" and request.arguments.get("slug") == "install":
                return Deny("installing is for staff")
            if request.action == "get" and request.arguments.get("topic") == "secrets":
                return Deny("no reviews of secrets")
            return None

    host = make_host(DOCS_CONFIG, {"docs": Docs(), "pages": Pages()})

    async def main() -> None:
        view = host.view("a")
        assert (await view.read("docs://pages/intro"))[0]["text"] == "Welcome."
        with pytest.raises(ToolError) as read:
            await view.read("docs://pages/%69nstall")
        assert str(read.value) == "Permission denied: policy pages: installing is for staff"
        with pytest.raises(ToolError) as got:
            await view.get_prompt("docs__review", {"topic": "secrets"})
        assert str(got.value) == "Permission denied: policy pages: no reviews of secrets"
        assert (await view.get_prompt("docs__review", {"topic": "tests"}))["messages"][0]["content"]["text"] == \
            "Review the tests."

    anyio.run(main)


def test_the_principal_is_who_the_request_acts_for_never_its_token() -> None:
    oauth = Identity("oauth", subject="alice", client="bot", issuer="https://idp.example", scopes=frozenset({"b", "a"}),
                     claims={"sub": "alice", "groups": ["staff"], "exp": 1.5})
    assert principal_of(oauth) == {"kind": "oauth", "subject": "alice", "client": "bot", "issuer": "https://idp.example",
                                   "scopes": ["a", "b"], "claims": {"sub": "alice", "groups": ["staff"], "exp": 1.5}}
    assert "claims" not in oauth.record() and "staff" not in repr(oauth)
    assert principal_of(Identity("token", credential="$TOK")) == {"kind": "token", "credential": "$TOK"}
    assert principal_of(None) is None


# -- fail closed -------------------------------------------------------------------------------------------------

RELEASE = threading.Event()


class Broken:
    """One policy per way of failing, each for one tool."""

    @toolcrib.hookimpl
    def toolcrib_policy(self, request: PolicyRequest) -> Any:
        if request.name == "files__rm":
            raise SystemExit(3)
        if request.name == "files__touch":
            return "no"
        if request.name == "files__write":
            RELEASE.wait()  # (released when the test ends)
        return None


def test_a_policy_that_raises_answers_nonsense_or_hangs_denies_and_the_rest_go_on() -> None:
    RELEASE.clear()  # (a run of the suite before this one in the process, as mutmut's, set it)
    try:
        host = make_host(CONFIG + "\n[policy]\ntimeout = 0.2\n", {"files": FILES, "broken": Broken()})
        assert host.view("b").names == ["files__read"]
        details = {name: next(c.detail for c in host.explain("b", name).checks if c.name == "policy")  # type: ignore[union-attr]
                   for name in ("files__rm", "files__touch", "files__write")}
        assert details == {"files__rm": "policy broken: raised SystemExit (fail closed)",
                           "files__touch": "policy broken: answered str, not toolcrib.Deny or None (fail closed)",
                           "files__write": "policy broken: no answer within 0.2 seconds (fail closed)"}
        problems = [str(p) for p in host.problems() if p.where == "policy 'broken'"]
        assert problems[:3] == [
            "warning: policy 'broken': raised SystemExit (list files__rm for agent 'b'); denied, fail closed",
            "warning: policy 'broken': answered str, not toolcrib.Deny or None (list files__touch for agent 'b'); "
            "denied, fail closed",
            "warning: policy 'broken': no answer within 0.2 seconds (list files__write for agent 'b'); denied, fail "
            "closed"]
    finally:
        RELEASE.set()


def test_an_async_policy_denies() -> None:
    class Waiting:
        @toolcrib.hookimpl
        async def toolcrib_policy(self, request: PolicyRequest) -> None:
            return None

    host = make_host(CONFIG, {"files": FILES, "waiting": Waiting()})
    assert host.view("b").names == []
    decision = host.explain("b", "files__read")
    assert decision is not None and [c.detail for c in decision.checks if c.name == "policy"] == [
        "policy waiting: answered an awaitable, not toolcrib.Deny or None (fail closed)"]


def test_the_policys_reason_is_shown_by_explain_and_tools_all(cli_config: Any) -> None:
    path = cli_config(CONFIG, "files=packs:FILES,policy=packs:FILES_POLICY")
    code, out, _ = cli("--config", path, "explain", "--agent", "a", "files__rm")
    assert (code, out.splitlines()[0], out.splitlines()[4]) == (
        1, "files__rm is hidden from agent 'a' (mode 'default').",
        "  policy      FAIL  policy policy: agent a removes nothing")
    code, out, _ = cli("--config", path, "tools", "--agent", "a", "--all")
    assert code == 0 and [line for line in out.splitlines() if "files__rm" in line] == [
        "hidden   files__rm  (policy policy: agent a removes nothing)"]


def test_the_console_and_mcp_clients_see_the_same_view_and_the_console_says_why() -> None:
    from toolcrib.mcp.console import _agent_page

    host = make_host(CONFIG, {"files": FILES, "policy": Policy()})

    async def main() -> list[str]:
        async with Client(build_server(ServingState(host), "a"), mode="legacy", cache=None) as client:
            return sorted(t.name for t in (await client.list_tools()).tools)

    assert anyio.run(main) == host.view("a").names == ["files__read", "files__write"]
    page = _agent_page(host, "a")
    assert [t["name"] for t in page["tools"]] == ["files__read", "files__write"]
    assert page["hidden"] == [{"name": "files__rm", "reason": "policy policy: agent a removes nothing"},
                              {"name": "files__touch", "reason": "denied by agents.a.permissions.tools.deny "
                                                                 "'files__touch'"}]


def test_what_a_request_says_of_a_tool_a_resource_and_a_prompt() -> None:
    from toolcrib.policy import request_for

    host = make_host(DOCS_CONFIG, {"docs": Docs(), "files": FILES})
    tool = host.catalog.entries["docs__chatty"]
    readme = host.catalog.resources["docs__readme"]
    page = host.catalog.resources["docs__page"]
    listed = request_for(tool, "a", "list")
    assert (listed.mode, listed.kind, listed.uri, listed.read_only, dict(listed.annotations)) == (
        "default", "tool", None, False, {})
    files = request_for(make_host(CONFIG, {"files": FILES}).catalog.entries["files__read"], "a", "call", "plan",
                        {"path": "x"})
    assert (files.mode, files.read_only, dict(files.annotations), dict(files.arguments)) == (
        "plan", True, {"readOnlyHint": True}, {"path": "x"})
    assert (request_for(readme, "a", "list").uri, dict(request_for(readme, "a", "list").annotations)) == (
        "docs://readme", {})
    assert request_for(page, "a", "read", uri="docs://pages/intro").uri == "docs://pages/intro"
    assert request_for(page, "a", "list").uri == "docs://pages/{slug}"


class CallTimeBroken:
    """Lists everything; at call time raises, hangs or answers with an awaitable, by the call's path."""

    @toolcrib.hookimpl
    def toolcrib_policy(self, request: PolicyRequest) -> Any:
        if request.action != "call":
            return None
        path = request.arguments.get("path")
        if path == "raise":
            raise KeyboardInterrupt  # (contained: only the operator's own Ctrl-C is not)
        if path == "hang":
            RELEASE.wait()
        return None


def test_at_call_time_a_policy_that_raises_or_hangs_refuses_the_call_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    RELEASE.clear()
    try:
        host = make_host(CONFIG + "\n[policy]\ntimeout = 0.2\n", {"files": FILES, "broken": CallTimeBroken()})

        async def main() -> list[str]:
            view = host.view("b")
            return [(await view.call("files__read", {"path": path})).text for path in ("raise", "hang", "fine")]

        with caplog.at_level("ERROR", logger="toolcrib.policy"):
            assert anyio.run(main) == [
                "Permission denied: policy broken: raised KeyboardInterrupt (fail closed)",
                "Permission denied: policy broken: no answer within 0.2 seconds (fail closed)",
                "contents of fine"]
    finally:
        RELEASE.set()
    logged = [(r.getMessage(), r.exc_info is not None) for r in caplog.records if r.name == "toolcrib.policy"]
    assert logged == [
        ("toolcrib_policy of 'broken' raised KeyboardInterrupt (call files__read for agent 'b'); denied (fail closed)",
         True),
        ("toolcrib_policy of 'broken' no answer within 0.2 seconds (call files__read for agent 'b'); denied (fail "
         "closed)", False)]


def test_the_failures_check_lists_are_bounded() -> None:
    from toolcrib.policy import MAX_FAILURES

    many = Pack(*[toolcrib.tool(f"t{i}", "A tool.", {}, lambda args: "ok") for i in range(MAX_FAILURES + 20)])

    class Raising:
        @toolcrib.hookimpl
        def toolcrib_policy(self, request: PolicyRequest) -> None:
            raise RuntimeError("no")

    host = make_host(CONFIG.replace('"files"', '"many"'), {"many": many, "raising": Raising()})
    assert host.view("b").names == []
    assert len(host.pipeline.policies.failures) == MAX_FAILURES
    hundredth = sorted(f"many__t{i}" for i in range(MAX_FAILURES + 20))[MAX_FAILURES - 1]  # (asked by name)
    assert host.pipeline.policies.failures[-1] == (
        "raising", f"raised RuntimeError (list {hundredth} for agent 'b'); denied, fail closed")


def test_an_async_policys_answer_is_closed_not_left_unawaited(recwarn: pytest.WarningsRecorder) -> None:
    import gc

    class Waiting:
        @toolcrib.hookimpl
        async def toolcrib_policy(self, request: PolicyRequest) -> None:
            return None

    assert make_host(CONFIG, {"files": FILES, "waiting": Waiting()}).view("b").names == []
    gc.collect()
    assert [str(w.message) for w in recwarn if "never awaited" in str(w.message)] == []


def test_an_inline_policy_that_raises_denies() -> None:
    """Cedar's policies run inline (on the calling thread, no timeout: an evaluation always ends); one that raises
    all the same denies, as a pack's does."""
    from toolcrib.policy import Policies, request_for

    class Inline:
        plugin = "inline"
        inline = True

        def __call__(self, request: PolicyRequest) -> None:
            raise MemoryError

    entry = make_host(CONFIG, {"files": FILES}).catalog.entries["files__read"]
    assert anyio.run(Policies((Inline(),)).decide, request_for(entry, "b", "call")) == (
        False, "policy inline: raised MemoryError (fail closed)")
