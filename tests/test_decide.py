"""The one decision (``permissions.decide``) and the rules it reads, case by case, with exact reasons: what
mutation testing of permissions.py and patterns.py showed the other tests let through."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import textwrap
import threading
from typing import Any

import anyio
import pytest

import toolcrib
from conftest import cli, config_from, make_host
from packs import FILES, NOTES, Pack
from toolcrib.catalog import Entry
from toolcrib.entries import PACK, Provenance
from toolcrib.permissions import CallRules, Check, Named, compile_rules, decide, permitted
from toolcrib.supply.mcp import KIND as MCP
from toolcrib.tool import get_tool


def rules_of(text: str, agent: str = "a") -> Any:
    return compile_rules(config_from(text))[agent]


def call(host: toolcrib.Host, tool: str, approver: Any = None, agent: str = "a", **arguments: Any) -> Any:
    return anyio.run(lambda: host.call(agent, tool, arguments, approver=approver))


# -- other kinds than tools --------------------------------------------------------------------------------------


def test_named_decisions_say_why() -> None:
    rules = rules_of("""
        [agents.a.permissions]
        skills = { deny = ["secret*"] }
        subagents = { allow = ["b", "a", "c"] }
        [agents.b]
        [agents.c]
    """)
    pdf = decide(rules, Named("skills", "pdf"), detail=True)
    assert (pdf.kind, pdf.name, pdf.visible) == ("skill", "pdf", True)
    assert pdf.reason == "skill 'pdf': not matched by agents.a.permissions.skills.deny"
    secret = decide(rules, Named("skills", "secret-sauce"), detail=True)
    assert (secret.visible, secret.reason) == (False, "skill 'secret-sauce': denied by "
                                                      "agents.a.permissions.skills.deny 'secret*'")
    assert decide(rules, Named("subagents", "b"), detail=True).reason == (
        "agent 'b': allowed by agents.a.permissions.subagents.allow 'b'")
    itself = decide(rules, Named("subagents", "a"), detail=True)
    assert (itself.visible, itself.reason) == (False, "an agent is never offered itself")
    assert [(c.name, c.passed) for c in itself.checks] == [("rule", False)]
    back = decide(rules, Named("subagents", "c"), detail=True, chain=("c", "a"))
    assert (back.visible, back.reason) == (False, "it is one of the agents whose run led here, and a run never goes "
                                                  "back along its chain")
    assert decide(rules, Named("subagents", "c"), chain=("x", "a")).visible
    for quick in (decide(rules, Named("subagents", "a")), decide(rules, Named("subagents", "c"), chain=("c",))):
        assert (quick.agent, quick.visible, quick.checks, quick.kind) == ("a", False, (), "agent")
    assert decide(rules, Named("subagents", "a")).name == "a"
    allowed = decide(rules, Named("subagents", "b"))
    assert (allowed.agent, allowed.name, allowed.visible, allowed.checks, allowed.kind) == ("a", "b", True, (), "agent")
    server = decide(rules, Named("mcps", "time"), detail=True)
    assert (server.kind, server.visible, server.reason) == ("server", False, "server 'time': agents.a.permissions.mcps "
                                                            "is not set, so nothing of 'mcps' is allowed")
    assert server.to_json() == {"agent": "a", "server": "time", "visible": False, "checks": [
        {"check": "rule", "passed": False,
         "detail": "server 'time': agents.a.permissions.mcps is not set, so nothing of 'mcps' is allowed"}]}


def test_without_a_permissions_table_nothing_of_any_kind() -> None:
    rules = rules_of("[agents.a]\n")
    for subject in (Named("skills", "pdf"), Named("subagents", "b")):
        decision = decide(rules, subject, detail=True)
        assert (decision.visible, [c.name for c in decision.checks], decision.reason) == (
            False, ["permissions"], "agent 'a' has no [agents.a.permissions] table, so it sees nothing")
    for subject, kind in ((Named("skills", "pdf"), "skill"), (Named("subagents", "b"), "agent"),
                          (Named("tools", "x__y"), "tools")):  # ctx.permits(dimension, name) from a pack
        quick = decide(rules, subject)
        assert (quick.agent, quick.name, quick.visible, quick.checks, quick.kind) == ("a", subject.name, False, (),
                                                                                     kind)
    host = make_host("[agents.a]\n", {"files": FILES})
    explained = host.explain("a", "files__read")
    assert explained is not None and explained.to_json() == {"agent": "a", "tool": "files__read", "visible": False,
                                                             "checks": [{"check": "permissions", "passed": False,
                                                                         "detail": "agent 'a' has no "
                                                                         "[agents.a.permissions] table, so it sees "
                                                                         "nothing"}]}


def test_a_detailed_decision_stops_at_the_first_failing_check_unless_exhaustive() -> None:
    @toolcrib.resource("doc://guide", name="guide")
    def guide() -> str:
        return "guide"

    class Docs:
        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [guide]

    host = make_host('[agents.a.permissions]\nplugins = { deny = ["docs"] }\n', {"files": FILES, "docs": Docs()})
    rules = host.rules["a"]
    tool = decide(rules, host.catalog.entries["files__read"], detail=True)
    assert [(c.name, c.passed) for c in tool.checks] == [("source", True), ("tools", False)]
    item = decide(rules, host.catalog.resources["docs__guide"], detail=True)
    assert (item.kind, [(c.name, c.passed) for c in item.checks]) == ("resource", [("source", False)])
    every = decide(rules, host.catalog.resources["docs__guide"], detail=True, exhaustive=True)
    assert [(c.name, c.passed) for c in every.checks] == [("source", False), ("resources", False),
                                                          ("available", True)]
    bare = make_host("[agents.none]\n", {"docs": Docs()})
    assert decide(bare.rules["none"], bare.catalog.resources["docs__guide"]).kind == "resource"


def test_a_tool_the_lock_holds_back_is_hidden_first_and_the_hosts_own_tools_say_where_they_come_from() -> None:
    host = make_host('[agents.a.permissions]\nplugins = { allow = ["files"] }\ntools = { allow = ["*"] }\n'
                     'subagents = { allow = ["b"] }\n[agents.b]\n', {"files": FILES})
    rules = host.rules["a"]
    held = dataclasses.replace(host.catalog.entries["files__read"], held="its definition changed since the lock")
    quick = decide(rules, held)
    assert (quick.agent, quick.name, quick.visible, quick.checks, quick.kind) == ("a", "files__read", False, (),
                                                                                 "tool")
    detailed = decide(rules, held, detail=True)
    assert [(c.name, c.passed, c.detail) for c in detailed.checks] == [
        ("lock", False, "its definition changed since the lock")]
    every = decide(rules, held, detail=True, exhaustive=True)
    assert ([c.name for c in every.checks], every.visible) == (["lock", "source", "tools", "mode", "available"], False)
    notes = make_host('[agents.a.permissions]\nplugins = { allow = ["*"] }\nresources = { allow = ["*"] }\n',
                      {"notes": NOTES})
    page = dataclasses.replace(notes.catalog.resources["notes__today"], held="its definition changed since the lock")
    assert [(d.name, d.visible, d.kind) for d in (decide(notes.rules["a"], page),
                                                  decide(notes.rules["a"], page, detail=True))] == [
        ("notes__today", False, "resource"), ("notes__today", False, "resource")]
    # which availability checks are worth running: none for what the lock holds, none for an agent without rules
    assert (permitted(rules, host.catalog.entries["files__read"]), permitted(rules, held)) == (True, False)
    assert permitted(host.rules["b"], host.catalog.entries["files__read"]) is False
    own = host.explain("a", "toolcrib__run_agent")
    assert own is not None and (own.checks[0].name, own.checks[0].passed, own.checks[0].detail) == (
        "source", True, "the host's own tool: it is offered by what it serves (see available)")


def test_a_source_rule_is_asked_once_per_source_for_every_tool_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    """There are few sources and many tools: the source check is remembered per (dimension, source, origin), so a
    view of a pack's tools asks the ``plugins`` rule about the pack once, and once more for another plugin a tool
    comes from. The copy a request's token makes (``lacking``) shares what was remembered."""
    from toolcrib.permissions import DimensionRule

    host = make_host('[agents.a.permissions]\nplugins = { allow = ["files", "helper"] }\ntools = { allow = ["*"] }\n',
                     {"files": FILES})
    asked: list[tuple[str, str]] = []
    permits = DimensionRule.permits

    def counted(rule: DimensionRule, name: str, uri: str | None = None) -> Any:
        asked.append((rule.dimension, name))
        return permits(rule, name, uri)

    monkeypatch.setattr(DimensionRule, "permits", counted)
    rules = host.rules["a"]
    tools = [e for e in host.catalog.entries.values() if e.kind == "tool" and e.source == "files"]
    borrowed = dataclasses.replace(tools[0], definition=dataclasses.replace(tools[0].tool, origin="helper"))
    assert len(tools) > 1
    for entry in [*tools, *tools, borrowed, borrowed]:
        assert decide(rules, entry).visible
    assert rules.lacking(frozenset()).source_permits("plugins", "files") == (True, rules.dimensions["plugins"].match(
        "files"))
    assert [name for dimension, name in asked if dimension == "plugins"] == ["files", "files", "helper"]


def test_explain_names_a_missing_dimension() -> None:
    host = make_host('[agents.a.permissions]\nplugins = { allow = ["files"] }\n', {"files": FILES})
    explained = host.explain("a", "files__read")
    assert explained is not None
    assert [(c.name, c.passed, c.detail) for c in explained.checks] == [
        ("source", True, "pack 'files': allowed by agents.a.permissions.plugins.allow 'files'"),
        ("tools", False, "agents.a.permissions.tools is not set, so nothing of 'tools' is allowed"),
        ("mode", True, "mode 'default' shows every permitted tool"),
        ("available", True, "the tool has no availability check"),
    ]


# -- the rules' part and availability ---------------------------------------------------------------------------


def test_availability_checks_run_only_for_tools_the_rules_permit() -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def counted(name: str) -> Any:
        def check(ctx: toolcrib.AvailabilityContext) -> bool:
            with lock:
                seen.append(f"{ctx.agent}:{name}")
            return True
        return check

    @toolcrib.tool(annotations={"readOnlyHint": True}, is_available=counted("ro"))
    def ro() -> str:
        """Read-only."""
        return "ro"

    @toolcrib.tool(is_available=counted("rw"))
    def rw() -> str:
        """Writes."""
        return "rw"

    @toolcrib.tool(annotations={"readOnlyHint": True}, is_available=counted("denied"))
    def denied() -> str:
        """Denied by name."""
        return "no"

    host = make_host("""
        [agents.a]
        [agents.a.permissions]
        plugins = { allow = ["p"] }
        tools = { deny = ["p__denied"] }
        [agents.planner]
        mode = "plan"
        [agents.planner.permissions]
        plugins = { allow = ["p"] }
        tools = { allow = ["*"] }
        [agents.other]
        [agents.other.permissions]
        plugins = { allow = ["q"] }
        tools = { allow = ["*"] }
    """, {"p": Pack(ro, rw, denied), "q": Pack()})
    assert host.view("a").names == ["p__ro", "p__rw"]
    assert host.view("planner").names == ["p__denied", "p__ro"]
    assert host.view("other").names == []
    assert sorted(seen) == ["a:ro", "a:rw", "planner:denied", "planner:ro"]  # each once; none for what is hidden


def test_availability_checks_of_resources_prompts_and_scoped_names_run_only_where_permitted() -> None:
    """The same for what a resource or prompt rule hides (by name or by URI), what a scope the token lacks hides,
    and a pack's tool served from another plugin (``origin``): a source rule naming either lets it be asked."""
    seen: list[str] = []
    lock = threading.Lock()

    def counted(name: str) -> Any:
        def check(ctx: toolcrib.AvailabilityContext) -> bool:
            with lock:
                seen.append(name)
            return True
        return check

    def resource(uri: str, tag: str) -> Any:
        @toolcrib.resource(uri, name=tag, is_available=counted(tag))
        def body() -> str:
            return tag
        return body

    def prompt(tag: str) -> Any:
        @toolcrib.prompt(name=tag, is_available=counted(tag))
        def body() -> str:
            """Say it."""
            return tag
        return body

    @toolcrib.tool(is_available=counted("open"))
    def open_tool() -> str:
        """Open to all."""
        return "open"

    @toolcrib.tool(is_available=counted("scoped"))
    def scoped() -> str:
        """Hidden without the admin scope."""
        return "scoped"

    @toolcrib.tool(is_available=counted("borrowed"))
    def borrowed() -> str:
        """Served by the pack, from another plugin."""
        return "borrowed"

    class Items:
        @toolcrib.hookimpl
        def toolcrib_tools(self) -> list[Any]:
            return [open_tool, scoped, dataclasses.replace(get_tool(borrowed), origin="helper-plugin")]

        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [resource("doc://kept", "kept"), resource("doc://by-uri", "by_uri"),
                    resource("doc://by-name", "by_name"), resource("doc://scoped", "scoped_doc")]

        @toolcrib.hookimpl
        def toolcrib_prompts(self) -> list[Any]:
            return [prompt("hello"), prompt("secret")]

    host = make_host("""
        [oauth]
        issuer = "https://issuer.example"
        audience = "https://toolcrib.example/mcp"
        [agents.a.identity]
        claims = { sub = "*" }
        [agents.a.identity.needs_scope.admin]
        tools = ["p__scoped"]
        resources = ["doc://scoped"]
        [agents.a.permissions]
        plugins = { allow = ["p"] }
        tools = { allow = ["*"] }
        resources = { deny = ["doc://by-uri", "p__by_name"] }
        prompts = { deny = ["p__secret"] }
        [agents.lender.permissions]
        plugins = { allow = ["helper-plugin"] }
        tools = { allow = ["*"] }
    """, {"p": Items(), "q": Pack()})
    view = host.view("a", frozenset({"admin"}))
    assert (view.names, [r["uri"] for r in view.mcp_resources], [q["name"] for q in view.mcp_prompts]) == (
        ["p__borrowed", "p__open_tool"], ["doc://kept"], ["p__hello"])
    assert sorted(seen) == ["borrowed", "hello", "kept", "open"]
    seen.clear()
    assert host.view("a").names == ["p__borrowed", "p__open_tool", "p__scoped"]
    assert sorted(seen) == ["borrowed", "hello", "kept", "open", "scoped", "scoped_doc"]
    seen.clear()
    assert host.view("lender").names == ["p__borrowed"]  # the pack is not allowed, the plugin it serves from is
    assert seen == ["borrowed"]
    explained = host.explain("lender", "p__borrowed")
    assert explained is not None and explained.checks[0].detail == (
        "pack 'p' (its plugin 'helper-plugin'): allowed by agents.lender.permissions.plugins.allow 'helper-plugin'")


def test_a_tool_and_a_prompt_of_one_name_each_have_their_own_availability() -> None:
    """One pack may name a tool and a prompt alike (``greet``): each is one entry of its own kind, and the answer of
    one's availability check is never taken for the other's."""

    @toolcrib.tool(is_available=lambda ctx: True)
    def greet() -> str:
        """Greet someone."""
        return "hello"

    @toolcrib.prompt(name="greet", is_available=lambda ctx: "no greeting prompt today")
    def greet_prompt() -> str:
        """A greeting."""
        return "Say hello."

    class Greeter:
        @toolcrib.hookimpl
        def toolcrib_tools(self) -> list[Any]:
            return [greet]

        @toolcrib.hookimpl
        def toolcrib_prompts(self) -> list[Any]:
            return [greet_prompt]

    host = make_host('[agents.a.permissions]\nplugins = { allow = ["greeter"] }\ntools = { allow = ["*"] }\n'
                     'prompts = { allow = ["*"] }\n', {"greeter": Greeter()})
    tool, prompt = host.catalog.entries["greeter__greet"], host.catalog.prompts["greeter__greet"]
    assert (tool.kind, prompt.kind, tool.name == prompt.name) == ("tool", "prompt", True)
    view = host.view("a")
    assert (view.names, [p.name for p in view.prompts]) == (["greeter__greet"], [])
    explained = decide(host.rules["a"], prompt, detail=True)
    assert (explained.kind, explained.reason) == ("prompt", "not available: no greeting prompt today")


def test_an_entry_says_what_it_is_and_refuses_to_be_taken_for_another_kind() -> None:
    @toolcrib.resource("doc://guide", name="guide")
    def guide() -> str:
        return "guide"

    @toolcrib.resource("doc://pages/{page}", name="pages")
    def pages(page: str) -> str:
        return page

    class Docs:
        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [guide, pages]

    host = make_host("[agents.a]\n", {"files": FILES, "docs": Docs()})
    tool, fixed, template = (host.catalog.entries["files__read"], host.catalog.resources["docs__guide"],
                             host.catalog.resources["docs__pages"])
    assert [(e.kind, e.supplier, e.uri, e.read_only, e.destructive) for e in (tool, fixed, template)] == [
        ("tool", PACK, None, True, False), ("resource", PACK, "doc://guide", True, False),
        ("template", PACK, "doc://pages/{page}", True, False)]
    with pytest.raises(TypeError, match=r"^'docs__guide' is a resource, not a tool$"):
        fixed.tool  # noqa: B018
    with pytest.raises(TypeError, match=r"^'files__read' is a tool, not a prompt$"):
        tool.prompt  # noqa: B018
    with pytest.raises(TypeError, match=r"^'files__read' is a tool, not a resource$"):
        tool.resource  # noqa: B018
    with pytest.raises(TypeError, match=r"^'files__read' is a tool$"):
        tool.item  # noqa: B018
    assert dataclasses.replace(fixed, definition=tool.tool).kind == "tool"  # the kind follows the definition


def test_a_check_after_one_that_hangs_is_still_asked_once(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    asked: list[str] = []

    @toolcrib.tool(annotations={"readOnlyHint": True}, is_available=lambda ctx: release.wait())
    def a_hangs() -> str:
        """Hangs."""
        return "x"

    @toolcrib.tool(annotations={"readOnlyHint": True}, is_available=lambda ctx: asked.append("b") or True)
    def b_after() -> str:
        """Answers."""
        return "x"

    @toolcrib.tool(annotations={"readOnlyHint": True}, is_available=lambda ctx: asked.append("c") or "not today")
    def c_last() -> str:
        """Answers no."""
        return "x"

    try:
        host = make_host('[host]\navailability_timeout = 0.2\n[agents.a.permissions]\nplugins = { allow = ["*"] }\n'
                         'tools = { allow = ["*"] }\n', {"p": Pack(a_hangs, b_after, c_last)})
        with caplog.at_level(logging.WARNING, logger="toolcrib.permissions"):
            assert host.view("a").names == ["p__b_after"]
        assert asked == ["b", "c"]
        assert [r.getMessage() for r in caplog.records] == [
            "is_available of p__a_hangs gave no answer within 0.2 seconds for agent 'a'; the tool is hidden"]
        explained = host.explain("a", "p__c_last")
        assert explained is not None and explained.reason == "not available: not today"
        hung = [t for t in threading.enumerate() if t.name == "toolcrib-availability"]
        assert hung and all(t.daemon for t in hung)  # a check that never returns does not hold the process open
    finally:
        release.set()


def test_a_check_that_answers_within_its_time_is_waited_for(caplog: pytest.LogCaptureFixture) -> None:
    """The whole of ``availability_timeout`` is the check's, under a second too: one that takes a moment to answer
    is waited for, not counted as hanging."""
    import time

    def slow(ctx: toolcrib.AvailabilityContext) -> bool:
        time.sleep(0.1)
        return True

    @toolcrib.tool(annotations={"readOnlyHint": True}, is_available=slow)
    def pondered() -> str:
        """Answers after a moment."""
        return "x"

    host = make_host('[host]\navailability_timeout = 0.9\n[agents.a.permissions]\nplugins = { allow = ["*"] }\n'
                     'tools = { allow = ["*"] }\n', {"p": Pack(pondered)})
    with caplog.at_level(logging.WARNING, logger="toolcrib.permissions"):
        assert host.view("a").names == ["p__pondered"]
    assert caplog.records == []


def test_a_check_that_raises_is_logged_and_a_check_sees_the_agent_model_and_mode(
        caplog: pytest.LogCaptureFixture) -> None:
    seen: list[tuple[str, str | None, str]] = []

    def raises(ctx: toolcrib.AvailabilityContext) -> bool:
        raise RuntimeError("no licence server")

    def looks(ctx: toolcrib.AvailabilityContext) -> bool:
        seen.append((ctx.agent, ctx.model, ctx.mode))
        return True

    @toolcrib.tool(annotations={"readOnlyHint": True}, is_available=raises)
    def broken() -> str:
        """Broken check."""
        return "x"

    @toolcrib.tool(annotations={"readOnlyHint": True}, is_available=looks)
    def fine() -> str:
        """Looks at who asks."""
        return "x"

    host = make_host('[models.m]\n[agents.a]\nmodel = "m"\nmode = "plan"\n[agents.a.permissions]\n'
                     'plugins = { allow = ["*"] }\ntools = { allow = ["*"] }\n', {"p": Pack(broken, fine)})
    with caplog.at_level(logging.DEBUG, logger="toolcrib.permissions"):
        assert host.view("a").names == ["p__fine"]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "is_available of p__broken raised RuntimeError for agent 'a'; the tool is hidden"),
        ("DEBUG", "is_available of p__broken raised")]
    assert caplog.records[1].exc_info is not None and str(caplog.records[1].exc_info[1]) == "no licence server"
    assert seen == [("a", "m", "plan")]


def test_a_check_that_never_returns_does_not_keep_the_process_alive(tmp_path: Any) -> None:
    """The thread a hung check is left on is a daemon: the process ends when its work does."""
    script = tmp_path / "hang.py"
    script.write_text(textwrap.dedent("""
        import threading
        import toolcrib
        from toolcrib.config import parse_config
        from pathlib import Path

        @toolcrib.tool(is_available=lambda ctx: threading.Event().wait())
        def stuck() -> str:
            \"\"\"Never available.\"\"\"
            return "x"

        class Pack:
            @toolcrib.hookimpl
            def toolcrib_tools(self):
                return [stuck]

        text = '[host]\\navailability_timeout = 0.1\\n[agents.a.permissions]\\nplugins = { allow = ["*"] }\\n'
        text += 'tools = { allow = ["*"] }\\n'
        host = toolcrib.Host(parse_config(text, "t", Path.cwd()), plugins={"p": Pack()}, autoload=False, env={})
        print(host.view("a").names)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)  # a deadlock
    assert (done.returncode, done.stdout) == (0, "[]\n"), done.stderr  # guard, not a time limit


@pytest.mark.parametrize(("answer", "visible", "reason"), [
    (True, True, "is_available said yes"),
    (False, False, "is_available said no"),
    ("", False, "is_available said no"),
    ("  ", False, "is_available said no"),
    ("no GPU", False, "not available: no GPU"),
    (None, False, "is_available returned None; expected True, False or a reason (hidden: fail closed)"),
    (1, False, "is_available returned 1; expected True, False or a reason (hidden: fail closed)"),
])
def test_what_an_availability_check_answers(answer: Any, visible: bool, reason: str) -> None:
    @toolcrib.tool(annotations={"readOnlyHint": True}, is_available=lambda ctx: answer)
    def checked() -> str:
        """Checked."""
        return "x"

    host = make_host('[agents.a.permissions]\nplugins = { allow = ["*"] }\ntools = { allow = ["*"] }\n',
                     {"p": Pack(checked)})
    explained = host.explain("a", "p__checked")
    assert explained is not None
    assert (explained.visible, explained.checks[-1].detail) == (visible, reason)
    assert ("p__checked" in host.view("a")) is visible


def test_plan_mode_says_why_an_untrusted_servers_read_only_hint_does_not_count() -> None:
    spec = get_tool(toolcrib.tool(name="now", description="The time.", annotations={"readOnlyHint": True})(
        lambda: "12:00"))
    assert spec is not None
    rules = rules_of('[agents.a]\nmode = "plan"\n[agents.a.permissions]\nmcps = { allow = ["*"] }\n'
                     'tools = { allow = ["*"] }\n')
    for trusted, passed, detail in [
        (False, False, "plan mode shows only read-only tools; upstream server 'time' is not trusted, so its "
                       "readOnlyHint does not count (set trusted = true to trust it)"),
        (True, True, "plan mode, and the tool is annotated read-only"),
    ]:
        entry = Entry(name="time__now", provenance=Provenance("time", MCP, "mcps", trusted=trusted), definition=spec)
        decision = decide(rules, entry, detail=True)
        assert (decision.visible, decision.checks[2].name, decision.checks[2].passed, decision.checks[2].detail) == (
            passed, "mode", passed, detail)
    writes = get_tool(toolcrib.tool(name="set", description="Set the time.")(lambda: "x"))
    assert writes is not None
    for trusted in (True, False):  # not read-only at all: trust does not come into it
        entry = Entry(name="time__set", provenance=Provenance("time", MCP, "mcps", trusted=trusted),
                      definition=writes)
        assert decide(rules, entry, detail=True).checks[2].detail == (
            "plan mode shows only tools annotated read-only (readOnlyHint), and this one is not")


# -- call rules ----------------------------------------------------------------------------------------------------


def test_each_rule_subject_of_a_call_is_read_even_when_an_earlier_one_is_absent() -> None:
    rules = CallRules(subjects=("source", "destination"), allow=(), deny=(), ask=())
    assert rules.values({"destination": "b.txt"}) == [("destination", "b.txt")]
    assert rules.values({"source": ["cp", "-r"], "destination": 3}) == [("source", "cp -r"), ("destination", "3")]


def test_scopes_a_request_lacks_hide_nothing_from_an_agent_without_an_identity() -> None:
    host = make_host('[agents.a.permissions]\nplugins = { allow = ["files"] }\ntools = { allow = ["*"] }\n',
                     {"files": FILES})
    assert host.view("a", frozenset({"admin"})).names == host.view("a").names == [
        "files__read", "files__rm", "files__touch", "files__write"]


def test_a_bare_allow_beside_a_specifier_leaves_the_tool_unrestricted() -> None:
    host = make_host('[agents.a.permissions]\nplugins = { allow = ["files"] }\n'
                     'tools = { allow = ["files__read", "files__read(docs/*)", "files__write(docs/*)"] }\n',
                     {"files": FILES})
    assert call(host, "files__read", path="anywhere").text == "contents of anywhere"
    assert call(host, "files__write", path="anywhere", text="x").text == (
        "Permission denied: files__write with path='anywhere' is denied by the agent's permissions (no allow rule "
        "matches its argument).")
    vt = host.view("a").lookup("files__read")
    assert vt is not None and vt.call_rules is None  # nothing to check


@toolcrib.tool(rule_subject=("command", "target"))
def run(command: list[str], target: str | None = None) -> str:
    """Run a command, maybe against a target."""
    return " ".join(command) + (f" -> {target}" if target else "")


def test_an_argv_subject_is_matched_as_the_command_line_it_spells_and_every_subject_counts() -> None:
    host = make_host('[agents.a.permissions]\nplugins = { allow = ["cmd"] }\n'
                     'tools = { allow = ["cmd__run(git status*)", "cmd__run(main)"] }\n', {"cmd": Pack(run)})
    assert call(host, "cmd__run", command=["git", "status", "--short"]).text == "git status --short"
    assert call(host, "cmd__run", command=["git", "status"], target="main").text == "git status -> main"
    assert call(host, "cmd__run", command=["git", "status; rm -rf /"]).text == (
        "Permission denied: cmd__run with command=['git', 'status; rm -rf /'] is denied by the agent's permissions "
        "(no allow rule matches its argument).")  # quoted as "git 'status; rm -rf /'", which no rule allows
    assert call(host, "cmd__run", command=["git", "status"], target="dev").text == (
        "Permission denied: cmd__run with target='dev' is denied by the agent's permissions (no allow rule matches "
        "its argument).")


def test_a_rule_and_a_subject_are_compared_in_one_spelling_an_argv_included() -> None:
    """A specifier and the argument it meets both go through ``uris.normalize`` (a URI's spelling changes nothing):
    a command line that reads as one is no exception, or a deny written ``FOO:bar`` would miss ``["FOO:bar"]``."""
    host = make_host('[agents.a.permissions]\nplugins = { allow = ["cmd"] }\n'
                     'tools = { deny = ["cmd__run(FOO:bar --x)", "cmd__run(HTTP://Example.org/*)"] }\n',
                     {"cmd": Pack(run)})
    assert call(host, "cmd__run", command=["FOO:bar", "--x"]).text == (
        "Permission denied: cmd__run with command=['FOO:bar', '--x'] is denied by the agent's permissions (rule "
        "'cmd__run(FOO:bar --x)').")
    assert call(host, "cmd__run", command=["git", "status"], target="http://example.org:80/a").text == (
        "Permission denied: cmd__run with target='http://example.org:80/a' is denied by the agent's permissions (rule "
        "'cmd__run(HTTP://Example.org/*)').")
    assert call(host, "cmd__run", command=["FOO:bar", "--y"]).text == "FOO:bar --y"


@toolcrib.tool(rule_subject="path")
def maybe(path: str | None = None) -> str:
    """Act on a path, or on nothing."""
    return f"acted on {path}"


def test_a_call_without_its_subject_meets_allow_deny_and_ask_rules_closed() -> None:
    for tools, ask, expected, docs_refused in [
        ('{ allow = ["m__maybe(docs/*)"] }', "[]", "Permission denied: m__maybe with this call is denied by the "
                                                   "agent's permissions (no allow rule matches its argument).", False),
        ('{ deny = ["m__maybe(secrets/*)"] }', "[]", "Permission denied: m__maybe with this call is denied by the "
                                                     "agent's permissions (rule 'm__maybe(secrets/*)').", False),
        ('{ allow = ["*"] }', '["m__maybe(docs/*)"]', "Permission denied: m__maybe needs approval (ask rule "
                                                      "'m__maybe(docs/*)'), and no approver could answer (the client "
                                                      "does not support elicitation and no approval hook decided).",
         True),
    ]:
        host = make_host(f'[agents.a.permissions]\nplugins = {{ allow = ["m"] }}\ntools = {tools}\nask = {ask}\n',
                         {"m": Pack(maybe)})
        assert call(host, "m__maybe").text == expected
        assert call(host, "m__maybe", path="docs/x").is_error is docs_refused


def test_writes_and_destructive_selectors_choose_by_annotations() -> None:
    asked: list[str] = []

    async def approver(agent: str, tool: str, arguments: Any, message: str) -> bool:
        asked.append(tool)
        return True

    for selector, expected in (("@writes", ["files__rm", "files__touch", "files__write"]),
                               ("@destructive", ["files__rm", "files__write"])):
        asked.clear()
        host = make_host(f'[agents.a.permissions]\nplugins = {{ allow = ["files"] }}\ntools = {{ allow = ["*"] }}\n'
                         f'ask = ["{selector}"]\n', {"files": FILES})
        for tool in ("files__read", "files__touch", "files__write", "files__rm"):
            assert not call(host, tool, approver=approver, path="x", **({"text": "y"} if tool == "files__write"
                                                                        else {})).is_error
        assert sorted(asked) == expected


def test_a_redirect_the_rules_allow_goes_on() -> None:
    """ctx.check_rules lets a value through that the rules allow, refuses one they deny, and one an ask rule holds."""
    hops: list[str] = []

    @toolcrib.tool(rule_subject="url")
    def fetch(url: str, ctx: toolcrib.Context) -> str:
        """Follow a URL's redirects."""
        for hop in (url + "/next", url + "/next/last"):
            ctx.check_rules(url=hop)
            hops.append(hop)
        return "fetched"

    base = '[agents.a.permissions]\nplugins = { allow = ["w"] }\n'
    ok = make_host(base + 'tools = { allow = ["w__fetch(https://ok/*)"] }\n', {"w": Pack(fetch)})
    assert call(ok, "w__fetch", url="https://ok/a").text == "fetched"
    assert hops == ["https://ok/a/next", "https://ok/a/next/last"]
    hops.clear()
    denied = make_host(base + 'tools = { deny = ["w__fetch(*/last)"] }\n', {"w": Pack(fetch)})
    assert call(denied, "w__fetch", url="https://ok/a").text == (
        "Permission denied: w__fetch went on to url='https://ok/a/next/last', which the agent's permissions deny "
        "(rule 'w__fetch(*/last)').")
    asked = make_host(base + 'tools = { allow = ["*"] }\nask = ["w__fetch(*/next)"]\n', {"w": Pack(fetch)})
    assert call(asked, "w__fetch", url="https://ok/a", approver=lambda *a: anyio.sleep(0)).text == (
        "w__fetch went on to url='https://ok/a/next', which needs approval (ask rule 'w__fetch(*/next)'); call "
        "w__fetch again with it to be asked.")
    hops.clear()
    approved = make_host(base + 'tools = { allow = ["*"] }\nask = ["w__fetch(*/next*)"]\n'
                         'approve = ["w__fetch(https://ok/*)"]\n', {"w": Pack(fetch)})
    assert call(approved, "w__fetch", url="https://ok/a").text == "fetched"  # pre-approved hops go on
    assert hops == ["https://ok/a/next", "https://ok/a/next/last"]


# -- patterns ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pattern", "name", "matches"), [
    ("*a*b*", "aba", True),  # the first 'a' is the one to take: taking the last leaves no 'b' after it
    ("*ab*ab*", "ab", False),  # two pieces need two places, not one found twice
    ("*ab*ab*", "abab", True),
    ("x*y*x", "xyx", True),
    ("x*y*x", "xy", False),
    ("a*a", "a", False),
    ("*", "", True),
    ("fs__*", "fs__", True),
    ("fs__*_file", "fs__file", False),
])
def test_globs_take_each_piece_at_its_leftmost_place_after_the_last(pattern: str, name: str, matches: bool) -> None:
    from toolcrib.patterns import Glob

    glob = Glob.of(pattern)
    assert glob is not None and glob.matches(name) is matches


def test_a_pattern_that_is_not_a_string_says_what_it_is() -> None:
    from toolcrib.patterns import PatternError, parse

    with pytest.raises(PatternError, match=r"^a pattern must be a string, not int$"):
        parse("tools", 7)


def test_explain_json_of_a_tool(cli_config: Any) -> None:
    config = cli_config('[agents.a.permissions]\nplugins = { allow = ["files"] }\n'
                        'tools = { allow = ["files__write(docs/*)"] }\nask = ["files__write(docs/private/*)"]\n',
                        "files=packs:FILES")
    code, out, _ = cli("explain", "--config", config, "--agent", "a", "--json", "files__write")
    assert code == 0
    assert json.loads(out) == {
        "agent": "a", "tool": "files__write", "visible": True,
        "checks": [
            {"check": "source", "passed": True, "detail": "pack 'files': allowed by agents.a.permissions.plugins.allow "
                                                          "'files'"},
            {"check": "tools", "passed": True, "detail": "allowed by agents.a.permissions.tools.allow "
                                                         "'files__write(docs/*)'"},
            {"check": "mode", "passed": True, "detail": "mode 'default' shows every permitted tool"},
            {"check": "available", "passed": True, "detail": "the tool has no availability check"},
        ],
        "call_rules": {"subjects": ["path"], "deny": [], "allow": ["files__write(docs/*)"],
                       "ask": ["files__write(docs/private/*)"], "approve": []},
    }


def test_a_resource_hidden_as_unconfinable_says_so_in_its_decision() -> None:
    """An availability check's reason of kind unconfinable (``toolcrib check`` reports what it hides) keeps that
    kind for a resource as for a tool."""
    from toolcrib.sandbox import Unconfinable

    @toolcrib.resource("doc://confined", name="confined", is_available=lambda ctx: Unconfinable("it could reach x"))
    def confined() -> str:
        return "c"

    class Items:
        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [confined]

    host = make_host("""
        [agents.a.permissions]
        plugins = { allow = ["p"] }
        resources = { allow = ["*"] }
    """, {"p": Items()})
    decision = host.explain("a", "doc://confined")
    assert decision is not None and decision.visible is False
    assert decision.checks[-1] == Check("available", False, "not available: it could reach x", "unconfinable")


def test_check_reports_the_tools_hidden_as_unconfinable_for_each_agent_that_would_see_them() -> None:
    """``toolcrib check``'s warning names the agents whose rules permit the tool (its check is asked for them)
    and not the agent whose rules hide it anyway; a tool hidden for another reason is no warning."""
    from toolcrib.sandbox import Unconfinable

    @toolcrib.tool(is_available=lambda ctx: Unconfinable("its programs could reach the config"))
    def run_it() -> str:
        """Runs."""
        return "ran"

    @toolcrib.tool(is_available=lambda ctx: "no display")
    def show_it() -> str:
        """Shows."""
        return "shown"

    host = make_host("""
        [agents.a.permissions]
        plugins = { allow = ["p"] }
        tools = { allow = ["*"] }
        [agents.b.permissions]
        plugins = { allow = ["p"] }
        tools = { allow = ["p__*"] }
        [agents.c.permissions]
        plugins = { allow = ["p"] }
        tools = { deny = ["p__run_it"] }
    """, {"p": Pack(run_it, show_it)})
    warnings = [str(p) for p in host.problems() if p.where.startswith("tool ")]
    assert warnings == ["warning: tool 'p__run_it': hidden from a, b: not available: its programs could reach the "
                        "config"]


def test_a_sub_agents_tool_list_asks_its_availability_through_the_budgeted_runner() -> None:
    """What a sub-agent is offered is checked again within the chain that runs it (a tool that describes itself
    per agent): on the availability worker, not the caller's thread, and a check that raises hides the tool
    (fail closed) instead of failing the run."""
    asked: list[tuple[str, str]] = []

    def flaky(ctx: toolcrib.AvailabilityContext) -> bool:
        asked.append((ctx.agent, threading.current_thread().name))
        if len(asked) > 1:
            raise RuntimeError("not this time")
        return True

    @toolcrib.tool(is_available=flaky, describe=lambda ctx: f"Helps {ctx.agent}.")
    def helper_tool() -> str:
        """Helps."""
        return "helped"

    @toolcrib.tool
    def delegate_list(ctx: toolcrib.Context) -> list[str]:
        """What the helper agent would be offered."""
        delegate = ctx.subagent("helper")
        assert delegate is not None
        return [t["name"] for t in delegate.tools()]

    class Pack:
        @toolcrib.hookimpl
        def toolcrib_tools(self) -> list[Any]:
            return [helper_tool, delegate_list]

    host = make_host("""
        [agents.boss.permissions]
        plugins = { allow = ["p"] }
        tools = { allow = ["p__delegate_list"] }
        subagents = { allow = ["helper"] }
        [agents.helper]
        description = "Helps out."
        [agents.helper.permissions]
        plugins = { allow = ["p"] }
        tools = { allow = ["p__helper_tool"] }
    """, {"p": Pack()})
    assert [t.name for t in host.view("helper").tools] == ["p__helper_tool"]  # the view's own check said yes
    result = anyio.run(host.view("boss").call, "p__delegate_list", {})
    assert (result.is_error, result.structured_content) == (False, {"result": []})
    assert asked == [("helper", "toolcrib-availability"), ("helper", "toolcrib-availability")]


def test_a_view_decides_its_resources_and_prompts_at_the_first_look_as_it_decides_its_tools() -> None:
    """A client lists its tools first: building a view and its tool list decides no resource, template or prompt;
    the first look at any decides them all, by ``decide``, once."""

    @toolcrib.resource("docs://open", mime_type="text/plain")
    def open_doc() -> str:
        return "open"

    @toolcrib.resource("docs://secret")
    def secret_doc() -> str:
        return "secret"

    @toolcrib.resource("docs://pages/{page}")
    def page(page: str) -> str:
        return page

    @toolcrib.prompt
    def review(code: str) -> str:
        """Review code."""
        return code

    class Docs:
        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [open_doc, secret_doc, page]

        @toolcrib.hookimpl
        def toolcrib_prompts(self) -> list[Any]:
            return [review]

    host = make_host("""
[agents.a.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
resources = { allow = ["docs__open_doc", "docs://pages/*"] }
prompts = { allow = ["docs__review"] }
""", plugins={"docs": Docs(), "files": FILES})
    view = host.view("a")
    view.prepare()
    assert [t["name"] for t in view.listed_tools] == [vt.name for vt in view.tools] != []
    assert "_others" not in vars(view)
    assert [e.name for e in view.resources] == ["docs__open_doc"]
    assert [e.name for e in view.templates] == ["docs__page"]
    assert [e.name for e in view.prompts] == ["docs__review"]
    assert view.served_prompts == {"docs__review": "docs__review"}
    assert view.resource("docs://open") is not None and view.resource("docs://secret") is None
    assert view.prompt("docs__review") is not None
    rules = host.rules["a"]
    every = [*host.catalog.resources.values(), *host.catalog.prompts.values()]
    assert sorted(e.name for e in every if decide(rules, e).visible) == ["docs__open_doc", "docs__page", "docs__review"]
