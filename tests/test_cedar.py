"""Cedar as a policy source ([policy] cedar, the toolcrib[cedar] extra): evaluated by Cedar itself (cedarpy) in the
one decision; the TOML rules' Cedar translation decides every generated case as the rules do (a differential test);
policies are validated against the published schema."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import toolcrib
from conftest import cli, examples, generated_config, make_host
from packs import FILES
from toolcrib.cedar import NO_PERMIT, SCHEMA, CedarPolicy, export, validate
from toolcrib.declarations import get_prompt, get_resource, prompt, resource
from toolcrib.entries import PACK, Entry, Provenance
from toolcrib.errors import UnknownToolError
from toolcrib.permissions import compile_rules, permitted
from toolcrib.policy import request_for
from toolcrib.supply.mcp import KIND as MCP

# -- the differential test: the TOML rules and their Cedar translation ---------------------------------------------

NAMESPACES = ["fs", "web", "orders"]
TOOLS = ["read", "rm"]
ORIGINS = [None, "llm-tools-a"]


def _tool(read_only: bool, origin: str | None) -> Any:
    declared = toolcrib.tool(f"t_{int(read_only)}", "A generated tool.", {}, lambda args: "ok",
                             {"annotations": {"readOnlyHint": read_only}})
    return dataclasses.replace(declared, origin=origin) if origin else declared


def _item(ns: str, what: str) -> Any:
    def fixed() -> str:
        return "x"

    def templated(id: str) -> str:
        return id

    if what == "prompt":
        return get_prompt(prompt(name="review", description="A prompt.")(fixed))
    if what == "template":
        return get_resource(resource(f"{ns}://t/{{id}}", name="page", description="A template.")(templated))
    return get_resource(resource(f"{ns}://readme", name="readme", description="A resource.")(fixed))


KINDS = [*TOOLS, "prompt", "template", "resource"]
entries_st = st.lists(st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(KINDS), st.booleans(),
                                st.sampled_from(["pack", "mcp"]), st.booleans(), st.sampled_from(ORIGINS)),
                      min_size=1, max_size=10)


def _entries(spec: list[Any]) -> list[Entry]:
    found: dict[tuple[str, str], Entry] = {}
    for ns, what, read_only, kind, trusted, origin in spec:
        provenance = Provenance(ns, PACK) if kind == "pack" else Provenance(ns, MCP, "mcps", trusted=trusted)
        if what in TOOLS:
            definition = _tool(read_only, origin if kind == "pack" else None)
            name = f"{ns}__{what}"
        else:
            definition = _item(ns, what)
            name = f"{ns}__{ {'prompt': 'review', 'template': 'page', 'resource': 'readme'}[what]}"
        found.setdefault((ns, name), Entry(name=name, provenance=provenance, definition=definition))
    return list(found.values())


def _patterns(dimension: str) -> st.SearchStrategy[str]:
    if dimension in ("plugins", "mcps"):
        names = st.sampled_from([*NAMESPACES, *(["llm-tools-a", "llm-*"] if dimension == "plugins" else [])])
        return st.one_of(st.just("*"), names, names.map(lambda n: n[:1] + "*"))
    items = {"tools": TOOLS, "resources": ["readme", "page"], "prompts": ["review"]}[dimension]
    full = st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(items)).map(lambda t: f"{t[0]}__{t[1]}")
    options = [st.just("*"), full, st.sampled_from(NAMESPACES).map(lambda n: n + "__*"), full.map(str.upper)]
    if dimension == "tools":
        options.append(full.map(lambda n: n + "(a*)"))  # a specifier: restricts calls, never hides
    if dimension == "resources":
        options += [st.sampled_from(NAMESPACES).map(lambda n: n + "://*"), st.just("*://readme"),
                    st.sampled_from(NAMESPACES).map(lambda n: n + "://t/{id}")]
    return st.one_of(*options)


def _rule(dimension: str) -> st.SearchStrategy[dict[str, list[str]] | None]:
    patterns = st.lists(_patterns(dimension), max_size=3)
    return st.one_of(st.none(), patterns.map(lambda p: {"allow": p}), patterns.map(lambda p: {"deny": p}))


agents_st = st.dictionaries(st.sampled_from(["a", "b"]), st.fixed_dictionaries({
    "mode": st.sampled_from(["default", "plan", "acceptEdits"]),
    "permissions": st.one_of(st.none(), st.fixed_dictionaries(
        {dim: _rule(dim) for dim in ("plugins", "mcps", "tools", "resources", "prompts")})),
}), min_size=1, max_size=2)


ALL = {"plugins": {"allow": ["*"]}, "mcps": {"allow": ["*"]}, "tools": {"allow": ["*"]},
       "resources": {"allow": ["*"]}, "prompts": {"allow": ["*"]}}


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agents=agents_st, spec=entries_st)
# a tool a pack serves from another plugin: an allow naming that plugin lets it through, a deny naming it hides it
@example(agents={"a": {"mode": "default", "permissions": {**ALL, "plugins": {"allow": ["llm-*"]}}},
                 "b": {"mode": "default", "permissions": {**ALL, "plugins": {"deny": ["llm-tools-a"]}}}},
         spec=[("fs", "read", True, "pack", True, "llm-tools-a"), ("web", "read", True, "pack", True, None)])
# plan mode keeps read-only tools (an untrusted server's readOnlyHint is not believed), and every resource
@example(agents={"a": {"mode": "plan", "permissions": ALL}},
         spec=[("fs", "read", True, "mcp", False, None), ("fs", "rm", True, "mcp", True, None),
               ("web", "read", False, "pack", True, None), ("web", "resource", False, "pack", True, None)])
# an allow with a specifier lets its tool through (its calls are restricted); a deny with one hides nothing
@example(agents={"a": {"mode": "default", "permissions": {**ALL, "tools": {"allow": ["fs__rm(a*)"]}}}},
         spec=[("fs", "rm", False, "pack", True, None), ("fs", "read", True, "pack", True, None)])
# a resource's rule matches its full name or its URI; a deny with a specifier hides nothing
@example(agents={"a": {"mode": "default", "permissions": {**ALL, "resources": {"deny": ["fs://*"]},
                                                          "tools": {"deny": ["fs__rm(a*)"]}}},
                 "b": {"mode": "default", "permissions": {**ALL, "resources": {"allow": ["web__page"]}}}},
         spec=[("fs", "resource", True, "pack", True, None), ("web", "template", True, "pack", True, None),
               ("fs", "rm", False, "pack", True, None)])
def test_the_toml_rules_and_their_cedar_translation_decide_every_case_alike(agents: Any, spec: Any) -> None:
    loaded = generated_config(agents)
    rules = compile_rules(loaded)
    entries = _entries(spec)
    text = export(rules)
    assert validate(text, "export") == []
    policy = CedarPolicy(text, entries, {name: r.mode for name, r in rules.items()})
    for agent, agent_rules in rules.items():
        for entry in entries:
            toml = permitted(agent_rules, entry)
            cedar = policy(request_for(entry, agent, "list", agent_rules.mode)) is None
            assert cedar == toml, (agent, entry.name, text)


# -- Cedar in the host ---------------------------------------------------------------------------------------------

POLICIES = """
@id("reviewers read")
permit (principal == Toolcrib::Agent::"b", action, resource)
when { resource is Toolcrib::Tool && resource.read_only };

@id("no removals by oauth")
forbid (principal, action == Toolcrib::Action::"call", resource)
when { context.principal.kind == "oauth" && resource.name == "files__write" };

permit (principal == Toolcrib::Agent::"b", action,
        resource == Toolcrib::Tool::"files__write");
"""

CONFIG = """
[policy]
cedar = "policies.cedar"

[agents.b.permissions]
plugins = { allow = ["files"] }
tools = { allow = ["*"] }
"""


def cedar_host(tmp_path: Path, policies: str = POLICIES, config: str = CONFIG, **plugins: Any) -> Any:
    (tmp_path / "policies.cedar").write_text(policies)
    return make_host(config, {"files": FILES, **plugins}, base_dir=tmp_path)


def test_a_cedar_policy_decides_listing_and_calls_and_explain_says_which_policy(tmp_path: Path) -> None:
    host = cedar_host(tmp_path)
    assert host.view("b").names == ["files__read", "files__write"]  # read-only, or permitted by name
    decision = host.explain("b", "files__rm")
    assert decision is not None and [(c.name, c.passed, c.detail) for c in decision.checks if c.name == "policy"] == [
        ("policy", False, "policy cedar: " + "no Cedar policy permits it (Cedar denies by default)")]
    with pytest.raises(UnknownToolError):
        host.view("b").call("files__rm", {"path": "x"})

    async def main() -> None:
        result = await host.view("b").call("files__read", {"path": "nothing.txt"})
        assert "Permission denied" not in result.text

    anyio.run(main)


def test_a_forbid_names_itself_and_sees_the_principal(tmp_path: Path) -> None:
    from toolcrib.mcp.oauth import Identity
    from toolcrib.policy import principal_of

    host = cedar_host(tmp_path)
    policy = host.pipeline.policies.hooks[0]
    entry = host.catalog.entries["files__write"]
    oauth = principal_of(Identity("oauth", subject="alice", scopes=frozenset({"files"}),
                                  claims={"sub": "alice", "exp": 1.5, "nothing": None}))  # (no Cedar value)
    denied = policy(request=request_for(entry, "b", "call", "default", {"path": "x"}, oauth))
    assert denied == toolcrib.Deny("forbidden by forbid 'no removals by oauth'")
    assert policy(request=request_for(entry, "b", "call", "default", {"path": "x"}, None)) is None


def test_check_validates_the_policies_against_the_schema(tmp_path: Path, cli_config: Any) -> None:
    bad = 'permit (principal, action, resource) when { resource.nmae == "x" };\nforbid (principal, action, resource'
    assert [p.message.split(":")[0] for p in validate(bad, "toolcrib.toml: policy.cedar")] == [
        "the policies do not parse"]
    typo = 'permit (principal, action, resource) when { resource is Toolcrib::Tool && resource.nmae == "x" };'
    problems = validate(typo, "toolcrib.toml: policy.cedar")
    assert len(problems) == 1 and problems[0].severity == "error" and "nmae" in problems[0].message
    assert validate(POLICIES, "x") == []


EXPORTED = """\
[agents.b]
mode = "plan"
[agents.b.permissions]
plugins = { allow = ["*"] }
tools = { allow = ["*"] }
resources = { deny = ["docs://secret"] }
prompts = { allow = ["docs__review"] }
[agents.none]
"""


def test_the_schema_and_the_export_are_printed_by_the_cli(cli_config: Any) -> None:
    path = cli_config(EXPORTED, "")
    code, out, _ = cli("--config", path, "policy", "schema")
    assert (code, out) == (0, SCHEMA)
    code, out, _ = cli("--config", path, "policy", "export", "--cedar")
    assert code == 0 and validate(out, "export") == []
    assert out.splitlines()[2:] == [
        '@id("agent b")',
        'permit (principal == Toolcrib::Agent::"b", action, resource)',
        "when {",
        '  (resource.source_kind == "builtin" || (resource.dimension == "plugins" && ((resource.source like "*") || '
        '(resource.origin != "" && (resource.origin like "*"))))) &&',
        "  (",
        '    (resource is Toolcrib::Tool && ((resource.name like "*")) && (resource.read_only || resource.name == '
        '"toolcrib__call_tool")) ||',
        '    (resource is Toolcrib::Resource && !((resource.name == "docs://secret") || (resource.uri == '
        '"docs://secret"))) ||',
        '    (resource is Toolcrib::Template && !((resource.name == "docs://secret") || (resource.uri == '
        '"docs://secret"))) ||',
        '    (resource is Toolcrib::Prompt && ((resource.name == "docs__review")))',
        "  )",
        "};",
        "// agent 'none' has no permissions table: it sees nothing"]


def test_a_policy_file_that_is_missing_or_does_not_validate_stops_the_config(tmp_path: Path) -> None:
    with pytest.raises(toolcrib.ConfigError) as missing:
        make_host(CONFIG, {"files": FILES}, base_dir=tmp_path)
    assert [str(p) for p in missing.value.problems] == [
        f"error: toolcrib.toml: policy.cedar: cannot read {tmp_path / 'policies.cedar'}: [Errno 2] No such file or "
        f"directory: '{tmp_path / 'policies.cedar'}'"]
    with pytest.raises(toolcrib.ConfigError) as typo:
        cedar_host(tmp_path, 'forbid (principal, action, resource) when { resource is Toolcrib::Tool && '
                             'resource.nmae == "files__rm" };')
    assert [str(p) for p in typo.value.problems] == [
        "error: toolcrib.toml: policy.cedar: does not validate against toolcrib's schema: [policy0] for policy "
        "`policy0`, attribute `nmae` on entity type `Toolcrib::Tool` not found"]


def test_check_reports_a_policy_file_that_does_not_parse(tmp_path: Path, cli_config: Any) -> None:
    path = cli_config(CONFIG, "files=packs:FILES")
    (tmp_path / "policies.cedar").write_text("permit (principal, action")
    code, _, err = cli("--config", path, "check")
    assert code == 2 and err.startswith("error: ") and "policy.cedar: the policies do not parse: " in err


def test_the_worked_example_in_the_operator_guide_decides_as_it_says(tmp_path: Path) -> None:
    import re

    from packs import Pack
    from toolcrib.mcp.oauth import Identity
    from toolcrib.policy import principal_of

    guide = (Path(__file__).parent.parent / "docs" / "operators.md").read_text()
    example = re.findall(r"```cedar\n(.*?)```", guide, flags=re.S)
    assert len(example) == 1 and validate(example[0], "operators.md") == []
    config = re.search(r"```toml\n(\[policy\]\ncedar = .*?)```", guide, flags=re.S)
    assert config is not None
    host = cedar_host(tmp_path, example[0], config.group(1), orders=Pack(*FILES.tools[:2]))
    assert host.view("reviewer").names == ["files__read", "orders__read"]
    assert host.view("support").names == ["orders__read", "orders__write"]
    policy = host.pipeline.policies.hooks[0]
    write_order = host.catalog.entries["orders__write"]

    def call_by(identity: Identity | None) -> Any:
        return policy(request=request_for(write_order, "support", "call", "default", {}, principal_of(identity)))

    assert call_by(Identity("oauth", subject="sam", scopes=frozenset({"orders"}))) == toolcrib.Deny(
        "forbidden by forbid 'destructive calls need admin'")
    assert call_by(Identity("oauth", subject="ann", scopes=frozenset({"admin"}))) is None
    assert call_by(Identity("token", credential="$TOK")) is None
    assert call_by(None) is None


def test_a_policy_cedar_cannot_evaluate_denies_where_cedar_alone_would_allow(tmp_path: Path) -> None:
    """Cedar skips a policy whose evaluation errs (this one validates, then overflows): alone it would allow what
    the forbid was meant to stop. toolcrib denies (fail closed) and says why."""
    host = cedar_host(tmp_path, 'permit (principal, action, resource);\n@id("overflow")\n'
                                'forbid (principal, action, resource) when { 9223372036854775807 + 1 > 0 };\n')
    assert host.view("b").names == []
    decision = host.explain("b", "files__read")
    assert decision is not None and [c.detail for c in decision.checks if c.name == "policy"] == [
        "policy cedar: Cedar could not evaluate a policy (denied, fail closed): error while evaluating policy "
        "`policy1`: integer overflow while attempting to add the values `9223372036854775807` and `1`"]


def test_serving_reloads_when_the_policies_change_and_keeps_the_old_ones_when_the_new_do_not_validate(
        tmp_path: Path) -> None:
    from redis_server import HANG_GUARD
    from toolcrib.config import load_config
    from toolcrib.host import Host
    from toolcrib.mcp.state import ServingState

    (tmp_path / "policies.cedar").write_text(POLICIES)
    config = tmp_path / "toolcrib.toml"
    config.write_text(CONFIG)

    def make() -> Host:
        return Host(load_config(config, {}), plugins={"files": FILES}, autoload=False, env={})

    state = ServingState(make(), make_host=make)
    reloads: list[bool] = []
    reload = state.reload

    async def counted(**kwargs: Any) -> bool:
        reloads.append(await reload(**kwargs))
        return reloads[-1]

    state.reload = counted  # type: ignore[method-assign]

    async def names_become(expected: list[str]) -> None:
        with anyio.fail_after(HANG_GUARD):
            while state.view("b").names != expected:
                await anyio.sleep(0.02)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(state.watch, config, 0.02)
            await anyio.wait_all_tasks_blocked()  # (the watch has taken the files' stamps)
            assert state.view("b").names == ["files__read", "files__write"]
            (tmp_path / "policies.cedar").write_text(POLICIES + '\npermit (principal, action, resource);\n')
            await names_become(["files__read", "files__rm", "files__touch", "files__write"])
            reloaded = state.host
            assert reloads == [True]
            (tmp_path / "policies.cedar").write_text('forbid (principal, action, resource) when { resource.nmae };')
            with anyio.fail_after(HANG_GUARD):  # a reload is tried, refused, and the policies in force stay
                while len(reloads) < 2:
                    await anyio.sleep(0.02)
            assert reloads == [True, False]
            assert state.host is reloaded and state.view("b").names[:2] == ["files__read", "files__rm"]
            tg.cancel_scope.cancel()

    anyio.run(main)


def test_a_thing_loaded_after_the_policies_is_decided_from_its_request_alike() -> None:
    """A lazy server's tool is not among the entities the policy was given: it is decided from the request, as
    the same tool among them would be."""
    policies = """
permit (principal, action, resource) when { resource is Toolcrib::Tool && resource.read_only };
permit (principal, action, resource) when { resource is Toolcrib::Resource && resource.uri like "docs://*" };
forbid (principal, action, resource in Toolcrib::Namespace::"web");
"""
    entries = [Entry(name=f"{ns}__{name}", provenance=Provenance(ns, PACK), definition=_tool(read_only, None))
               for ns in ("fs", "web") for name, read_only in (("read", True), ("rm", False))]
    entries.append(Entry(name="docs__readme", provenance=Provenance("docs", PACK),
                         definition=_item("docs", "resource")))
    known = CedarPolicy(policies, entries, {"a": "default"})
    unknown = CedarPolicy(policies, [], {})
    verdicts = [(e.name, known(request_for(e, "a", "list")), unknown(request_for(e, "a", "list"))) for e in entries]
    assert [(name, k is None) for name, k, _ in verdicts] == [
        ("fs__read", True), ("fs__rm", False), ("web__read", False), ("web__rm", False), ("docs__readme", True)]
    assert all(k == u for _, k, u in verdicts)


# -- what Cedar is given of each request: every attribute the schema names reaches it ---------------------------------

EVERY_FIELD = """
permit (principal, action == Toolcrib::Action::"list", resource is Toolcrib::Tool)
when { principal.mode == "default" && principal.name == "a" };
permit (principal, action == Toolcrib::Action::"call", resource is Toolcrib::Tool)
when { context.mode == "acceptEdits" && context.principal has scopes && context.principal.scopes.contains("files") };
permit (principal, action == Toolcrib::Action::"read", resource is Toolcrib::Template)
when { context has uri && context.uri == "docs://t/7" };
permit (principal, action == Toolcrib::Action::"list", resource is Toolcrib::Template)
when { !(context has uri) && resource.source_kind == "pack" && resource.dimension == "plugins" &&
  resource.origin == "" && resource.source == "docs" };
forbid (principal, action, resource is Toolcrib::Tool) when { resource.annotations has readOnlyHint &&
  resource.annotations has destructiveHint && resource.annotations has idempotentHint &&
  resource.annotations has openWorldHint && resource.annotations has title && resource.annotations.title == "Every" };
@id("not the web")
forbid (principal, action, resource is Toolcrib::Tool) when { resource.namespace == "web" };
@id("nor its reader")
forbid (principal, action, resource is Toolcrib::Tool) when { resource.name == "web__read" };
"""


def test_cedar_is_given_every_attribute_the_schema_names() -> None:
    from toolcrib.mcp.oauth import Identity
    from toolcrib.policy import principal_of

    every = toolcrib.tool("every", "All the hints.", {}, lambda args: "ok", {"annotations": {
        "readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "openWorldHint": False,
        "title": "Every"}})
    entries = [Entry(name="fs__read", provenance=Provenance("fs", PACK), definition=_tool(True, None)),
               Entry(name="fs__every", provenance=Provenance("fs", PACK), definition=every),
               Entry(name="web__read", provenance=Provenance("web", PACK), definition=_tool(True, None)),
               Entry(name="docs__page", provenance=Provenance("docs", PACK), definition=_item("docs", "template"))]
    assert validate(EVERY_FIELD, "every") == []
    policy = CedarPolicy(EVERY_FIELD, entries, {"a": "default", "b": "default"})
    read, every_entry, web, page = entries

    def allowed(entry: Entry, agent: str = "a", action: str = "list", mode: str = "default",
                principal: Any = None, uri: str | None = None) -> bool:
        return policy(request_for(entry, agent, action, mode, {}, principal, uri)) is None

    assert (allowed(read), allowed(read, "b"), allowed(every_entry), allowed(web)) == (True, False, False, False)
    files = principal_of(Identity("oauth", subject="s", scopes=frozenset({"files"})))
    other = principal_of(Identity("oauth", subject="s", scopes=frozenset({"other"})))
    assert (allowed(read, action="call", mode="acceptEdits", principal=files),
            allowed(read, action="call", mode="default", principal=files),
            allowed(read, action="call", mode="acceptEdits", principal=other)) == (True, False, False)
    assert (allowed(page, action="read", uri="docs://t/7"), allowed(page, action="read", uri="docs://t/8"),
            allowed(page, action="list")) == (True, False, True)
    assert policy(request_for(web, "a", "list")) == toolcrib.Deny(
        "forbidden by forbid 'not the web', forbid 'nor its reader'")
    assert policy(request_for(every_entry, "a", "list")) == toolcrib.Deny("forbidden by forbid #4")  # (its place)
    # the same, for things Cedar was not given (a lazy server's), from their requests
    lazy = CedarPolicy(EVERY_FIELD, [], {})
    assert [lazy(request_for(e, "a", "list")) is None for e in entries] == [True, False, False, True]


def test_an_untrusted_servers_read_only_claim_is_not_what_cedar_sees() -> None:
    """read_only is the host's belief: a lazy, untrusted server's tool that claims readOnlyHint is not read-only."""
    claimed = _tool(True, None)
    entry = Entry(name="up__read", provenance=Provenance("up", MCP, "mcps", trusted=False), definition=claimed)
    trusted = Entry(name="up__read", provenance=Provenance("up", MCP, "mcps", trusted=True), definition=claimed)
    policies = "permit (principal, action, resource) when { resource is Toolcrib::Tool && resource.read_only };"
    for policy in (CedarPolicy(policies, [entry], {}), CedarPolicy(policies, [], {})):
        assert policy(request_for(entry, "a", "list")) == toolcrib.Deny(NO_PERMIT)
    assert CedarPolicy(policies, [], {})(request_for(trusted, "a", "list")) is None


def test_two_errors_are_both_named_and_strings_are_written_as_cedar_reads_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from toolcrib.cedar import _string

    erring = ('permit (principal, action, resource);\n'
              'forbid (principal, action, resource) when { 9223372036854775807 + 1 > 0 };\n'
              'forbid (principal, action, resource) when { 9223372036854775807 * 2 > 0 };\n')
    denied = CedarPolicy(erring, [], {})(request_for(_entries([("fs", "read", True, "pack", True, None)])[0],
                                                          "a", "list"))
    assert denied == toolcrib.Deny(
        "Cedar could not evaluate a policy (denied, fail closed): error while evaluating policy `policy1`: integer "
        "overflow while attempting to add the values `9223372036854775807` and `1`; error while evaluating policy "
        "`policy2`: integer overflow while attempting to multiply the values `9223372036854775807` and `2`")
    quoted = 'a"b\\c'
    checked = ("permit (principal, action, resource) when { resource is Toolcrib::Tool && resource.name == "
               f"{_string(quoted)} }};")
    assert validate(checked, "x") == []
    tool = Entry(name='a"b\\c', provenance=Provenance("a", PACK), definition=_tool(True, None))
    assert CedarPolicy(checked, [], {})(request_for(tool, "a", "list")) is None
    monkeypatch.setitem(sys.modules, "cedarpy", None)  # (not installed)
    with pytest.raises(ImportError) as missing:
        validate("", "x")
    assert str(missing.value) == "[policy] cedar needs the cedar extra: pip install 'toolcrib[cedar]'"
