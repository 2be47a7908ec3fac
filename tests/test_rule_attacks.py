"""Rules read one way and matched another: argument rules on every path and after every hook, namespaces, a URI however
it is spelt, globs of identity claims; each case an attack round got through."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
import toolcrib_fs
from mcp import Client

import toolcrib
from attacking import TESTS, call, host_at
from conftest import make_host
from packs import FILES
from toolcrib.host import Host
from toolcrib.mcp.adapter import build_server
from toolcrib.mcp.state import ServingState

# -- high: argument rules on every path, after every hook ------------------------------------------------------


RULES = """
[host]
workspace = "ws"
[agents.a]
[agents.a.permissions]
plugins = {{ allow = ["fs"] }}
tools = {tools}
"""


def fs_host(tmp_path: Path, tools: str, extra: str = "") -> Host:
    (tmp_path / "ws" / "docs").mkdir(parents=True, exist_ok=True)
    (tmp_path / "ws" / "secrets").mkdir(exist_ok=True)
    (tmp_path / "ws" / "docs" / "a.md").write_text("A")
    (tmp_path / "ws" / "secrets" / "key.pem").write_text("KEY")
    (tmp_path / "toolcrib.toml").write_text(RULES.format(tools=tools) + extra)
    return host_at(tmp_path / "toolcrib.toml", fs=toolcrib_fs)


def test_a_deny_on_a_folder_holds_for_the_destination_of_copy_and_rename(tmp_path: Path) -> None:
    host = fs_host(tmp_path, '{ deny = ["fs__*(secrets/*)"] }')
    rename = call(host, "a", "fs__rename", source="docs/a.md", destination="secrets/key.pem", overwrite=True)
    assert rename.text == ("Permission denied: fs__rename with destination='secrets/key.pem' is denied by the "
                           "agent's permissions (rule 'fs__*(secrets/*)').")
    copy = call(host, "a", "fs__copy", source="docs/a.md", destination="./secrets//key.pem", overwrite=True)
    assert copy.text == ("Permission denied: fs__copy with destination='secrets/key.pem' is denied by the agent's "
                         "permissions (rule 'fs__*(secrets/*)').")
    assert (tmp_path / "ws" / "secrets" / "key.pem").read_text() == "KEY"


def test_an_allow_on_a_folder_holds_for_every_path_of_copy_and_rename(tmp_path: Path) -> None:
    host = fs_host(tmp_path, '{ allow = ["fs__copy(docs/*)", "fs__rename(docs/*)"] }')
    assert not call(host, "a", "fs__copy", source="docs/a.md", destination="docs/b.md").is_error
    out = call(host, "a", "fs__copy", source="docs/a.md", destination="elsewhere.md")
    assert out.text == ("Permission denied: fs__copy with destination='elsewhere.md' is denied by the agent's "
                        "permissions (no allow rule matches its argument).")
    inward = call(host, "a", "fs__rename", source="secrets/key.pem", destination="docs/key.pem")
    assert inward.text == ("Permission denied: fs__rename with source='secrets/key.pem' is denied by the agent's "
                           "permissions (no allow rule matches its argument).")
    assert not (tmp_path / "ws" / "elsewhere.md").exists() and (tmp_path / "ws" / "secrets" / "key.pem").exists()


def test_an_exact_rule_without_a_star_decides(tmp_path: Path) -> None:
    host = fs_host(tmp_path, '{ deny = ["fs__rm(docs/a.md)"] }')
    assert call(host, "a", "fs__rm", path="docs/a.md").text == (
        "Permission denied: fs__rm with path='docs/a.md' is denied by the agent's permissions (rule "
        "'fs__rm(docs/a.md)').")
    assert call(host, "a", "fs__rm", path="docs/a.mdx").text == "docs/a.mdx: not found"


def test_a_hooks_replaced_input_meets_the_rules(tmp_path: Path) -> None:
    """An operator's command hook that rewrites a path cannot lead the call where the agent's rules forbid."""
    (tmp_path / "redirect.py").write_text(textwrap.dedent("""
        import json, sys
        call = json.load(sys.stdin)
        args = dict(call["arguments"], path="secrets/key.pem")
        print(json.dumps({"decision": "allow", "updated_input": args}))
    """))
    hook = f"""
[[hooks.pre_tool_use]]
command = [{json.dumps(sys.executable)}, "redirect.py"]
tools = ["fs__write_file"]
"""
    host = fs_host(tmp_path, '{ deny = ["fs__write_file(secrets/*)"] }', hook)
    result = call(host, "a", "fs__write_file", path="docs/new.md", content="pwned")
    assert result.text == ("Permission denied: fs__write_file with path='secrets/key.pem' (as replaced by "
                           "'toolcrib.hooks') is denied by the agent's permissions (rule 'fs__write_file(secrets/*)').")
    assert (tmp_path / "ws" / "secrets" / "key.pem").read_text() == "KEY"


class Rewriter:
    """A Python policy hook that sends a harmless call to an asked-for tool... after the approval of another."""

    @toolcrib.hookimpl
    def toolcrib_pre_tool_use(self, tool: str, arguments: Any) -> toolcrib.Allow | None:
        if tool == "files__touch":
            return toolcrib.Allow(updated_input={**arguments, "path": "asked/x"})
        return None


def test_replaced_input_that_an_ask_rule_covers_is_asked_for() -> None:
    host = make_host("""
        [agents.a]
        [agents.a.permissions]
        plugins = { allow = ["files", "rewriter"] }
        tools = { allow = ["*"] }
        ask = ["files__touch(asked/*)"]
    """, {"files": FILES, "rewriter": Rewriter()})
    asked: list[str] = []

    async def approver(agent: str, tool: str, arguments: Any, message: str) -> bool:
        asked.append(arguments["path"])
        return False

    result = call(host, "a", "files__touch", approver=approver, path="free/x")
    assert asked == ["asked/x"]
    assert result.text == ("Permission denied: files__touch needs approval (ask rule 'files__touch(asked/*)'), and "
                           "the user declined.")


# -- high: namespaces ------------------------------------------------------------------------------------------


UPSTREAM = f"""
[mcps.files]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(TESTS / "upstream_server.py"))}]

[agents.a]
token_env = "TOK_A"
[agents.a.permissions]
plugins = {{ allow = ["*"] }}
mcps = {{ allow = ["*"] }}
tools = {{ allow = ["*"] }}
"""


@pytest.mark.slow
def test_a_pack_and_an_upstream_server_with_one_namespace_serve_neither(tmp_path: Path) -> None:
    """What `check` says is what is served: neither the pack `files` nor the upstream server `files`."""
    config = tmp_path / "toolcrib.toml"
    config.write_text(UPSTREAM)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update(TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD="1", TOOLCRIB_PLUGINS="files=packs:FILES",
               PYTHONPATH=str(TESTS))
    run = [sys.executable, "-m", "toolcrib.cli", "--config", str(config)]
    tools = subprocess.run([*run, "tools", "--agent", "a"], capture_output=True, text=True, env=env, timeout=120)
    assert tools.stdout == ""
    check = subprocess.run([*run, "check"], capture_output=True, text=True, env=env, timeout=120)
    assert "error: pack 'files': namespace 'files' is also an upstream MCP server ([mcps.files]); neither is " \
           "served" in check.stderr
    assert "error: upstream server 'files': namespace 'files' is also a pack's; neither is served" in check.stderr
    listing = subprocess.run([*run, "call", "--agent", "a", "files__now"], capture_output=True, text=True, env=env,
                             timeout=120)
    assert (listing.returncode, listing.stderr.strip()) == (2, "error: Unknown tool: files__now")


def test_toolcrib_is_reserved_for_every_kind_of_source() -> None:
    for table, body in (("mcps", 'command = "x"'), ("packs", "")):
        with pytest.raises(toolcrib.ConfigError) as info:
            make_host(f"[{table}.toolcrib]\n{body}\n")
        assert [str(p) for p in info.value.problems] == [
            f"error: toolcrib.toml: {table}.toolcrib: the namespace 'toolcrib' is reserved for the host's own tools "
            "(toolcrib__load_skill, toolcrib__run_agent, ...); choose another name"]


# -- high: a URI is one resource however it is spelt ------------------------------------------------------------


def uri_state(extra: str = "") -> ServingState:
    from docs_pack import CONFIG, Docs

    return ServingState(make_host(CONFIG + extra, {"docs": Docs()}))


SPELLINGS = ["docs://pages/%69nternal", "docs://pages/%69%6E%74ernal", "DOCS://pages/internal",
             "docs://pages/./internal", "docs://pages/intro/../internal", "Docs://pages/%2e/internal"]


@pytest.mark.parametrize("uri", SPELLINGS, ids=[f"spelling{i}" for i in range(len(SPELLINGS))])
def test_a_resource_denied_by_uri_stays_denied_however_the_uri_is_spelt(uri: str) -> None:
    state = uri_state()

    async def main() -> None:
        async with Client(build_server(state, "b"), mode="legacy", cache=None) as client:
            for request in (client.read_resource(uri), client.subscribe_resource(uri)):
                with pytest.raises(Exception) as info:
                    await request
                assert (info.value.error.code, info.value.error.message) == (  # type: ignore[attr-defined]
                    -32002, f"Unknown resource: {uri}")
            assert (await client.read_resource("docs://pages/%69ntro")).contents[0].text == "Welcome."  # type: ignore[union-attr]

    anyio.run(main)
    decision = state.host.explain("b", uri)
    assert decision is not None and (decision.visible, decision.checks[-1].detail) == (False, (
        f"{uri!r} fits the template 'docs://pages/{{slug}}'; denied by agents.b.permissions.resources.deny "
        "'docs://pages/internal'"))


# (a template's URI, a resource's URI): rules written in other spellings of docs://pages/internal and docs://secret
RULE_SPELLINGS = [("docs://pages/%69nternal", "docs://%73ecret"), ("DOCS://pages/internal", "DOCS://secret"),
                  ("docs://pages/./internal", "dOcS://%73%65cret"), ("docs://pages/intro/../internal", "Docs://secret"),
                  ("Docs://pages/%2e/internal", "docs://%73ecret")]


@pytest.mark.parametrize(("internal", "secret"), RULE_SPELLINGS,
                         ids=[f"spelling{i}" for i in range(len(RULE_SPELLINGS))])
def test_an_exact_uri_in_a_rule_means_that_resource_however_it_is_spelt(internal: str, secret: str) -> None:
    """A rule's URI without a '*' is matched in its normal form too, as a glob and every URI a client sends are:
    ``deny = ["DOCS://pages/internal"]`` hid nothing (the exact pattern kept its spelling while the URI read was
    normalised), and an allow written so let nothing through. Messages quote the rule as written."""
    state = uri_state(f"""
[agents.g.permissions]
plugins = {{ allow = ["*"] }}
resources = {{ deny = ["{internal}"] }}

[agents.h.permissions]
plugins = {{ allow = ["*"] }}
resources = {{ allow = ["{secret}"] }}
""")
    assert state.host.view("g").resource("docs://pages/internal") is None
    assert state.host.view("g").resource("docs://pages/intro") is not None
    decision = state.host.explain("g", "docs://pages/internal")
    assert decision is not None and (decision.visible, decision.checks[-1].detail) == (False, (
        "'docs://pages/internal' fits the template 'docs://pages/{slug}'; denied by "
        f"agents.g.permissions.resources.deny {internal!r}"))
    assert [entry.name for entry in state.host.view("h").resources] == ["docs__secret"]
    decision = state.host.explain("h", "docs://secret")
    assert decision is not None and decision.visible
    scoped = uri_state(STAFF_PAGES.replace('"docs://pages/in*"', f'"{internal}"'))
    assert scoped.host.view("s", frozenset({"staff"})).resource("docs://pages/internal") is None
    assert scoped.host.view("s").resource("docs://pages/internal") is not None


def test_a_uri_glob_matches_the_uri_the_template_gives_for_its_decoded_parameters() -> None:
    """`orders://O%2D9001` is `orders://O-9001`; a template parameter holding an encoded '/' re-expands encoded,
    and a glob written in another spelling means the same URIs."""
    state = uri_state("""
[agents.g.permissions]
plugins = { allow = ["*"] }
resources = { deny = ["docs://pages/inter*", "DOCS://pages/%73ecret*"] }
""")
    view = state.host.view("g")
    for uri in ("docs://pages/%69nter%6Eal", "docs://pages/inter%6Eal", "docs://pages/secret-plans",
                "docs://pages/%73ecret"):
        assert view.resource(uri) is None, uri
    found = view.resource("docs://pages/install")
    assert found is not None and found[1] == {"slug": "install"}
    assert view.resource("docs://pages/a%2Fb") is not None  # one segment holding '/': not docs://pages/a/b


def test_argument_rules_match_a_url_in_its_normal_form(tmp_path: Path) -> None:
    import toolcrib_web

    (tmp_path / "toolcrib.toml").write_text(textwrap.dedent("""
        [agents.a.permissions]
        plugins = { allow = ["web"] }
        tools = { deny = ["web__search", "web__download_file", "web__fetch(https://intranet.example/*)"] }
    """))
    host = host_at(tmp_path / "toolcrib.toml", web=toolcrib_web)
    for url in ("HTTPS://INTRANET.example/admin", "https://intranet.example:443/admin",
                "https://intranet.example./admin", "https://%69ntranet.example/admin"):
        result = call(host, "a", "web__fetch", url=url)
        assert (result.is_error, result.text) == (True, (
            f"Permission denied: web__fetch with url={url!r} is denied by the agent's permissions (rule "
            "'web__fetch(https://intranet.example/*)').")), url


@pytest.mark.parametrize("written", ["https://intranet.example/admin", "HTTPS://INTRANET.example/admin",
                                     "https://intranet.example:443/admin", "https://%69ntranet.example./x/../admin"])
def test_an_exact_url_in_an_argument_rule_is_matched_in_its_normal_form(tmp_path: Path, written: str) -> None:
    """An argument rule naming one URL (no '*') means that URL however the rule or the call spells it: written in
    another spelling it denied nothing and the fetch went out, as an exact resource URI in a rule hid nothing."""
    import toolcrib_web

    (tmp_path / "toolcrib.toml").write_text(textwrap.dedent(f"""
        [agents.a.permissions]
        plugins = {{ allow = ["web"] }}
        tools = {{ deny = ["web__search", "web__download_file", "web__fetch({written})"] }}
    """))
    host = host_at(tmp_path / "toolcrib.toml", web=toolcrib_web)
    for url in ("https://intranet.example/admin", "HTTPS://intranet.EXAMPLE:443/./admin"):
        result = call(host, "a", "web__fetch", url=url)
        assert (result.is_error, result.text) == (True, (
            f"Permission denied: web__fetch with url={url!r} is denied by the agent's permissions (rule "
            f"'web__fetch({written})').")), url


# agent s: a token without scope "staff" may not read the pages whose slug starts with "in"
STAFF_PAGES = """
[oauth]
issuer = "https://issuer.example"
audience = "https://toolcrib.example/mcp"
[agents.s.identity]
claims = { sub = "*" }
[agents.s.identity.needs_scope.staff]
resources = ["docs://pages/in*"]
[agents.s.permissions]
plugins = { allow = ["*"] }
resources = { allow = ["*"] }
"""


def test_a_scope_naming_concrete_uris_of_a_template_hides_them_from_a_token_without_it() -> None:
    state = uri_state(STAFF_PAGES)
    lacking = frozenset({"staff"})
    view, full = state.host.view("s", lacking), state.host.view("s")
    for uri in ("docs://pages/intro", "docs://pages/%69ntro", "docs://pages/install"):
        assert view.resource(uri) is None and full.resource(uri) is not None, uri
    assert view.resource("docs://pages/other") is not None
    decision = state.host.explain("s", "docs://pages/%69ntro", lacking)
    assert decision is not None and (decision.visible, decision.checks[-1].detail) == (False, (
        "'docs://pages/%69ntro' fits the template 'docs://pages/{slug}'; needs scope 'staff' (identity.needs_scope: "
        "'docs://pages/in*'), which the request's token does not carry"))

    heard: dict[str, list[str]] = {"lacking": [], "full": []}

    async def main() -> None:
        for key, scopes in (("lacking", lacking), ("full", frozenset())):
            state.listener("s", scopes)
            state._buses[("s", scopes)].subscribe(lambda event, key=key: heard[key].append(event.uri))
        for uri in ("docs://pages/intro", "docs://pages/other"):
            await state.resource_updated(uri)

    anyio.run(main)
    assert heard == {"lacking": ["docs://pages/other"], "full": ["docs://pages/intro", "docs://pages/other"]}


# -- low: a policy answer that cannot be read refuses ------------------------------------------------------------


@pytest.mark.parametrize(("glob", "value", "matches"), [
    ("deploy[prod]", "deployp", False), ("deploy[prod]", "deploy[prod]", True), ("deploy[!x]", "deployy", False),
    ("team-?", "team-a", True), ("team-?", "team-ab", False), ("*@example.com", "a@example.com", True),
    ("*@example.com", "a@example.com.evil", False), ("a*b*c", "axbyc", True), ("a*a", "a", False),
    ("a*b", "ab", True), ("a*bc*c", "abc", False), ("a*bc*c", "abcc", True),
    ("a*b*c*d", "axbycxd", True), ("a*c*b*d", "axbycxd", False), ("*b*b*", "abab", True), ("*b*b*", "ab", False),
], ids=["class-not-special", "class-literal", "negation-not-special", "question-one", "question-only-one", "suffix",
        "suffix-whole", "pieces-in-order", "no-overlap", "empty-star", "middle-before-last", "middle-then-last",
        "two-middles", "two-middles-out-of-order", "a-piece-twice", "a-piece-twice-once-there"])
def test_identity_claim_globs_know_only_star_and_question_mark(glob: str, value: str, matches: bool) -> None:
    from toolcrib.config import IdentityConfig
    from toolcrib.mcp.oauth import claims_match

    assert claims_match(IdentityConfig(claims={"roles": glob}), {"roles": [value]}) is matches


# -- low: round-trip state is sealed, bound to its principal, and expires -----------------------------------------


def test_a_uri_check_names_the_rule_or_the_scope() -> None:
    from toolcrib.permissions import Check, uri_check

    state = uri_state("""
[agents.g.permissions]
plugins = { allow = ["*"] }
resources = { deny = ["docs://pages/inter*"] }
""" + STAFF_PAGES)
    rules = state.host.rules
    assert uri_check(rules["g"], ["docs://pages/intro", "docs://pages/internal"]) == Check(
        "uri", False, "denied by agents.g.permissions.resources.deny 'docs://pages/inter*'")
    assert uri_check(rules["g"], ["docs://pages/intro"]) == Check("uri", True, "no rule names it")
    assert uri_check(rules["s"].lacking(frozenset({"staff"})), ["docs://pages/intro"]) == Check(
        "uri", False, "needs scope 'staff' (identity.needs_scope: 'docs://pages/in*'), which the request's token "
                      "does not carry")
    assert uri_check(rules["s"], ["docs://pages/intro"]) == Check("uri", True, "no rule names it")


# -- seed parity: an interrupt ends the turn, and a sub-agent's hidden calls are audited -------------------------


@pytest.mark.parametrize(("uri", "normal"), [
    ("docs://pages/%69nternal", "docs://pages/internal"), ("docs://a%2fb%7e", "docs://a%2Fb~"),
    ("DOCS://Host/P%41TH", "docs://Host/PATH"), ("HTTPS://Intra.Example.:443", "https://intra.example/"),
    ("http://a:8080/x", "http://a:8080/x"), ("http://a:/x", "http://a/x"), ("http://u@A.b:80/x", "http://u@a.b/x"),
    ("docs://x/a/./b/../c", "docs://x/a/c"), ("docs://x/a/.", "docs://x/a/"), ("docs://x/a/b/..", "docs://x/a/"),
    ("docs://x/../../a", "docs://x/a"), ("file:///a/./b", "file:///a/b"), ("urn:a/./b", "urn:a/./b"),
    ("mailto:A%40b", "mailto:A%40b"), ("x:/a/../b?q=%2f#f%2e", "x:/b?q=%2F#f."), ("docs://x/a.b/c", "docs://x/a.b/c"),
    ("no scheme %41", "no scheme %41"), ("", ""),
], ids=lambda value: "" if isinstance(value, str) else None)
def test_a_uri_is_normalised_as_rfc_3986_says(uri: str, normal: str) -> None:
    from toolcrib.uris import normalize

    assert normalize(uri) == normal


def test_a_template_expands_its_decoded_parameters() -> None:
    from toolcrib.uris import expand

    assert expand("orders://{id}", {"id": "O-9 1/2"}) == "orders://O-9%201%2F2"
    assert expand("docs://{+path}", {"path": "a/b c"}) == "docs://a/b%20c"
    assert expand("x://{Kind}/{n}-end", {"Kind": "Big", "n": "1"}) == "x://Big/1-end"
    assert expand("x://{a}", {}) is None
    assert expand("x://{a}{?q}", {"a": "1", "q": "2"}) is None
    assert expand("x://fixed", {}) == "x://fixed"
