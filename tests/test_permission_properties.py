"""Property tests of the permission rules over generated configs and catalogs (hypothesis).

Properties: listed names == callable names, and a call of anything else fails exactly like a call of a
nonexistent tool (for resources and prompts too: listed == readable or gettable); the rules agree with a naive
reference evaluator; deny wins; no permissions => nothing;
adding an allow never hides and adding a deny never reveals; agents are isolated; pattern order is irrelevant.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from fnmatch import fnmatchcase
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import examples, generated_config
from toolcrib import tool
from toolcrib.calls import Pipeline
from toolcrib.config import LoadedConfig
from toolcrib.declarations import get_prompt, get_resource
from toolcrib.entries import PACK, Entry, Provenance
from toolcrib.errors import UnknownToolError
from toolcrib.permissions import compile_rules
from toolcrib.plugins import get_plugin_manager
from toolcrib.supply.mcp import KIND as MCP
from toolcrib.view import build_view

# Small alphabets, so that generated rules and catalogs meet often.
NAMESPACES = ["fs", "web", "orders"]
TOOLS = ["read", "rm", "get"]
MODES = ["default", "plan", "acceptEdits", "dontAsk", "bypassPermissions"]


def _declare(read_only: bool, availability: str) -> Any:
    checks = {
        "none": None,
        "yes": lambda ctx: True,
        "no": lambda ctx: False,
        "vision": lambda ctx: "vision" in ctx.capabilities,
        "raises": lambda ctx: 1 / 0,
    }
    return tool(f"t_{int(read_only)}_{availability}", "A generated tool.", {}, lambda args: "ok",
                {"annotations": {"readOnlyHint": read_only}, "is_available": checks[availability]})


AVAILABILITY = ["none", "yes", "no", "vision", "raises"]
POOL = {(ro, av): _declare(ro, av) for ro in (True, False) for av in AVAILABILITY}

ORIGINS = [None, "llm-tools-a", "llm-tools-b"]  # the installed plugin a pack serves a tool from (the llm pack's)

entries_st = st.dictionaries(
    keys=st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(TOOLS)),
    values=st.tuples(st.booleans(), st.sampled_from(AVAILABILITY), st.sampled_from(["pack", "mcp"]), st.booleans(),
                     st.sampled_from(ORIGINS)),
    min_size=1,
    max_size=9,
)


def _patterns(dimension: str) -> st.SearchStrategy[str]:
    if dimension in ("plugins", "mcps"):
        names = st.sampled_from(NAMESPACES)
        found = st.one_of(st.just("*"), names, names.map(lambda n: n[:1] + "*"), names.map(lambda n: "*" + n[-1:]))
        if dimension == "plugins":
            found = st.one_of(found, st.sampled_from(["llm-tools-a", "llm-tools-*", "*-b"]))
        return found
    full = st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(TOOLS)).map(lambda t: f"{t[0]}__{t[1]}")
    return st.one_of(
        st.just("*"),
        full,
        st.sampled_from(NAMESPACES).map(lambda n: n + "__*"),
        st.sampled_from(TOOLS).map(lambda t: "*__" + t),
        full.map(lambda n: n.upper()),  # never matches: names are case-sensitive
        full.map(lambda n: n + "(a*)"),  # a specifier: restricts calls, never hides
    )


def _rule(dimension: str) -> st.SearchStrategy[dict[str, list[str]] | None]:
    patterns = st.lists(_patterns(dimension), max_size=4)
    return st.one_of(
        st.none(),
        patterns.map(lambda p: {"allow": p}),
        patterns.map(lambda p: {"allow": [*p, "*"]}),
        patterns.map(lambda p: {"deny": p}),
        patterns.map(lambda p: {"deny": p}),
    )


agent_st = st.fixed_dictionaries({
    "model": st.sampled_from(["vision-model", "text-model"]),
    "mode": st.sampled_from(MODES),
    "permissions": st.one_of(
        st.none(),
        st.fixed_dictionaries({dim: _rule(dim) for dim in ("plugins", "mcps", "tools")}),
    ),
})
agents_st = st.dictionaries(st.sampled_from(["a", "b", "c"]), agent_st, min_size=1, max_size=3)


def _catalog(spec: dict[tuple[str, str], tuple[bool, str, str, bool, str | None]]) -> dict[str, Entry]:
    entries = {}
    for (ns, name), (read_only, availability, kind, trusted, origin) in spec.items():
        full = f"{ns}__{name}"
        tool = POOL[(read_only, availability)]
        if kind == "pack" and origin is not None:
            tool = dataclasses.replace(tool, origin=origin)
        provenance = Provenance(ns, PACK) if kind == "pack" else Provenance(ns, MCP, "mcps", trusted=trusted)
        entries[full] = Entry(name=full, provenance=provenance, definition=tool)
    return dict(sorted(entries.items()))


def _visible(loaded: LoadedConfig, entries: dict[str, Entry]) -> dict[str, list[str]]:
    pipeline = Pipeline(get_plugin_manager(), loaded, {})
    return {agent: build_view(rules, entries.values(), pipeline).names
            for agent, rules in compile_rules(loaded).items()}


def _reference(agent: dict[str, Any], entry: Entry) -> bool:
    """A naive evaluator written from SPEC section 4, independent of toolcrib.permissions."""
    permissions = agent["permissions"]
    if permissions is None:
        return False

    def permitted(rule: dict[str, list[str]] | None, name: str) -> bool:
        if rule is None:
            return False
        if "allow" in rule:
            return any(fnmatchcase(name, p.split("(")[0]) for p in rule["allow"])
        return not any(fnmatchcase(name, p) for p in rule["deny"] if "(" not in p)

    source_rule = permissions.get("plugins" if entry.supplier is PACK else "mcps")
    source_ok = permitted(source_rule, entry.source)
    origin = entry.tool.origin
    if origin is not None and source_rule is not None:  # a pack's tool from another plugin is of both
        if "allow" in source_rule:
            source_ok = source_ok or permitted(source_rule, origin)
        else:
            source_ok = source_ok and permitted(source_rule, origin)
    if not source_ok or not permitted(permissions.get("tools"), entry.name):
        return False
    read_only = entry.tool.annotations.get("readOnlyHint") is True and entry.trusted
    if agent["mode"] == "plan" and not read_only:
        return False
    kind = entry.tool.name.split("_")[2]
    if kind == "vision":
        return agent["model"] == "vision-model"
    return kind in ("none", "yes")


SETTINGS = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A specifier deny restricts calls and never hides; a plan agent sees an untrusted server's readOnlyHint as nothing.
SPECIFIER_DENY = {"a": {"model": "text-model", "mode": "default",
                        "permissions": {"plugins": {"allow": ["*"]}, "mcps": {"allow": ["*"]},
                                        "tools": {"deny": ["fs__read(a*)"]}}}}
UNTRUSTED_PLAN = {"a": {"model": "vision-model", "mode": "plan",
                        "permissions": {"plugins": {"allow": ["*"]}, "mcps": {"allow": ["*"]},
                                        "tools": {"allow": ["*"]}}}}


@settings(max_examples=examples(500), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(agents=SPECIFIER_DENY, spec={("fs", "read"): (True, "none", "pack", True, None)})
@example(agents=UNTRUSTED_PLAN, spec={("fs", "read"): (True, "none", "mcp", False, None),
                                      ("web", "get"): (True, "vision", "mcp", True, None)})
@given(agents=agents_st, spec=entries_st)
def test_rules_agree_with_the_reference_and_deny_wins(agents: dict[str, Any], spec: Any) -> None:
    loaded = generated_config(agents)
    entries = _catalog(spec)
    visible = _visible(loaded, entries)
    for agent, names in visible.items():
        assert names == sorted(names)
        expected = [n for n, e in entries.items() if _reference(agents[agent], e)]
        assert names == expected
        permissions = agents[agent]["permissions"]
        if permissions is None:
            assert names == []
            continue
        for name in names:
            entry = entries[name]
            source_rule = permissions.get("plugins" if entry.supplier is PACK else "mcps") or {}
            tools_rule = permissions.get("tools") or {}
            assert not any(fnmatchcase(entry.source, p) for p in source_rule.get("deny", []))
            if entry.tool.origin is not None:
                assert not any(fnmatchcase(entry.tool.origin, p) for p in source_rule.get("deny", []))
            assert not any(fnmatchcase(name, p) for p in tools_rule.get("deny", []) if "(" not in p)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agents=agents_st, spec=entries_st)
def test_callable_names_equal_listed_names(agents: dict[str, Any], spec: Any) -> None:
    loaded = generated_config(agents)
    entries = _catalog(spec)
    pipeline = Pipeline(get_plugin_manager(), loaded, {})
    views = {a: build_view(r, entries.values(), pipeline) for a, r in compile_rules(loaded).items()}

    async def probe() -> None:
        for view in views.values():
            callable_names = []
            for name in [*entries, "fs__never_installed"]:
                try:
                    await view.call(name, {})
                except UnknownToolError as exc:
                    assert exc.args == (f"Unknown tool: {name}",)
                else:
                    callable_names.append(name)
            assert callable_names == view.names

    anyio.run(probe)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agents=agents_st, spec=entries_st, query=st.sampled_from(
    ["read", "rm", "get", "fs", "web orders", "fs__rm", "orders__get", "/.*/", "/rm|read/", "generated tool", ""]))
def test_a_search_finds_only_what_the_agent_sees(agents: dict[str, Any], spec: Any, query: str) -> None:
    """Whatever the rules and the query (a word, a served name of a hidden tool, a regex matching every name), a
    view's search returns only tools of its own list, in the order of no hidden one."""
    loaded = generated_config(agents)
    entries = _catalog(spec)
    pipeline = Pipeline(get_plugin_manager(), loaded, {})
    for rules in compile_rules(loaded).values():
        view = build_view(rules, entries.values(), pipeline)
        found = [tool["name"] for tool in view.search(query, k=20)]
        assert set(found) <= set(view.names), (found, view.names)
        assert len(found) == len(set(found))
        if query == "/.*/":
            assert found == view.names[:20]  # a regex matching every name: the whole list, in its order


@SETTINGS
@given(agents=agents_st, spec=entries_st, data=st.data())
def test_adding_an_allow_never_hides_and_adding_a_deny_never_reveals(agents: Any, spec: Any, data: Any) -> None:
    entries = _catalog(spec)
    before = _visible(generated_config(agents), entries)
    agent = data.draw(st.sampled_from(sorted(agents)))
    permissions = agents[agent]["permissions"]
    if permissions is None:
        return
    dimension = data.draw(st.sampled_from(["plugins", "mcps", "tools"]))
    rule = permissions.get(dimension)
    if rule is None:
        return
    changed = copy.deepcopy(agents)
    kind = "allow" if "allow" in rule else "deny"
    changed[agent]["permissions"][dimension][kind].append(data.draw(_patterns(dimension)))
    after = _visible(generated_config(changed), entries)
    if kind == "allow":
        assert set(before[agent]) <= set(after[agent])
    else:
        assert set(after[agent]) <= set(before[agent])
    for other in agents:
        if other != agent:
            assert after[other] == before[other]  # agents are isolated


@SETTINGS
@given(agents=agents_st, spec=entries_st, seed=st.randoms())
def test_pattern_order_is_irrelevant(agents: Any, spec: Any, seed: Any) -> None:
    entries = _catalog(spec)
    shuffled = copy.deepcopy(agents)
    for agent in shuffled.values():
        for rule in (agent["permissions"] or {}).values():
            if rule:
                seed.shuffle(next(iter(rule.values())))
    assert _visible(generated_config(shuffled), entries) == _visible(generated_config(agents), entries)


@pytest.mark.parametrize("mode", MODES)
def test_no_mode_reveals_what_the_lists_hide(mode: str) -> None:
    agents = {"a": {"model": "vision-model", "mode": mode,
                    "permissions": {"plugins": {"allow": ["*"]}, "mcps": {"allow": ["*"]},
                                    "tools": {"deny": ["fs__*"]}}}}
    entries = _catalog({("fs", "read"): (True, "none", "pack", True, None),
                        ("web", "get"): (True, "none", "pack", True, None)})
    assert _visible(generated_config(agents), entries) == {"a": ["web__get"]}


# -- resources and prompts: the same rules, over full names and URIs ---------------------------------------------

RESOURCE_NAMES = ["readme", "logo"]
PROMPT_NAMES = ["review", "plan"]


def _item(ns: str, what: str, name: str) -> Entry:
    from toolcrib.declarations import prompt, resource

    def fixed() -> str:
        return f"{ns}:{name}"

    def templated(id: str) -> str:
        return f"{ns}:{id}"

    if what == "prompt":
        spec: Any = get_prompt(prompt(name=name, description="A generated prompt.")(fixed))
    elif what == "template":
        spec = get_resource(resource(f"{ns}://t/{{id}}", name=name, description="A template.")(templated))
    else:
        spec = get_resource(resource(f"{ns}://{name}", name=name, description="A resource.")(fixed))
    assert spec is not None
    return Entry(name=f"{ns}__{name}", provenance=Provenance(ns, PACK), definition=spec)


ITEM_POOL = {(ns, what, name): _item(ns, what, name)
             for ns in NAMESPACES
             for what, names in (("resource", RESOURCE_NAMES), ("template", ["page"]), ("prompt", PROMPT_NAMES))
             for name in names}

items_st = st.sets(st.sampled_from(sorted(ITEM_POOL)), min_size=1, max_size=12).map(
    lambda keys: [ITEM_POOL[k] for k in sorted(keys)])


def _item_patterns(dimension: str) -> st.SearchStrategy[str]:
    names = [*RESOURCE_NAMES, "page"] if dimension == "resources" else PROMPT_NAMES
    full = st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(names)).map(lambda t: f"{t[0]}__{t[1]}")
    options = [st.just("*"), full, st.sampled_from(NAMESPACES).map(lambda n: n + "__*"), full.map(str.upper)]
    if dimension == "resources":
        uri = st.tuples(st.sampled_from(NAMESPACES), st.sampled_from(RESOURCE_NAMES)).map(lambda t: f"{t[0]}://{t[1]}")
        options += [uri, st.sampled_from(NAMESPACES).map(lambda n: n + "://*"), st.just("*://logo"),
                    st.sampled_from(NAMESPACES).map(lambda n: n + "://t/7"),  # one URI a template serves
                    st.sampled_from(NAMESPACES).map(lambda n: n + "://t/*")]
    return st.one_of(*options)


def _item_rule(dimension: str) -> st.SearchStrategy[dict[str, list[str]] | None]:
    patterns = st.lists(_item_patterns(dimension), max_size=4)
    return st.one_of(st.none(), patterns.map(lambda p: {"allow": p}), patterns.map(lambda p: {"deny": p}))


item_agents_st = st.dictionaries(st.sampled_from(["a", "b"]), st.fixed_dictionaries({
    "model": st.just("text-model"),
    "mode": st.sampled_from(MODES),
    "permissions": st.fixed_dictionaries({"plugins": _rule("plugins"), "resources": _item_rule("resources"),
                                          "prompts": _item_rule("prompts")}),
}), min_size=1, max_size=2)


def _item_reference(permissions: dict[str, Any], item: Entry) -> bool:
    """SPEC section 4 for items, written naively: the source rule, then the item's dimension rule, matched
    against its full name or its URI (an allow that matches either lets it through, a deny that matches either
    hides it). Modes do not hide what only reads."""

    def matches(pattern: str) -> bool:
        return fnmatchcase(item.name, pattern) or (item.uri is not None and fnmatchcase(item.uri, pattern))

    source = permissions.get("plugins")
    if source is None or ("allow" in source and not any(fnmatchcase(item.source, p) for p in source["allow"])):
        return False
    if "deny" in source and any(fnmatchcase(item.source, p) for p in source["deny"]):
        return False
    rule = permissions.get("prompts" if item.kind == "prompt" else "resources")
    if rule is None:
        return False
    if "allow" in rule:
        return any(matches(p) for p in rule["allow"])
    return not any(matches(p) for p in rule["deny"])


@SETTINGS
@given(agents=item_agents_st, items=items_st)
def test_items_listed_are_exactly_those_readable_or_gettable_and_the_rest_are_unknown(agents: Any,
                                                                                     items: Any) -> None:
    from toolcrib.errors import UnknownPromptError, UnknownResourceError

    loaded = generated_config(agents)
    pipeline = Pipeline(get_plugin_manager(), loaded, {})
    views = {a: build_view(r, items, pipeline) for a, r in compile_rules(loaded).items()}

    async def probe() -> None:
        for agent, view in views.items():
            permissions = agents[agent]["permissions"]
            listed = [e.name for e in (*view.resources, *view.templates, *view.prompts)]
            assert sorted(listed) == sorted(i.name for i in items if _item_reference(permissions, i))
            deny = [p for p in (permissions.get("resources") or {}).get("deny", [])]
            for ns in NAMESPACES:
                for uri in [f"{ns}://{n}" for n in RESOURCE_NAMES] + [f"{ns}://t/7", f"{ns}://nothing"]:
                    fixed = uri in {e.uri for e in view.resources}
                    by_template = any(t.item.match(uri) is not None for t in view.templates) and not any(
                        fnmatchcase(uri, p) for p in deny)  # a deny naming the URI hides it even so
                    try:
                        await view.read(uri)
                    except UnknownResourceError as exc:
                        assert exc.args == (f"Unknown resource: {uri}",)
                        assert not (fixed or by_template)
                    else:
                        assert fixed or by_template
                for name in PROMPT_NAMES:
                    full = f"{ns}__{name}"
                    try:
                        await view.get_prompt(full)
                    except UnknownPromptError as exc:
                        assert exc.args == (f"Unknown prompt: {full}",)
                        assert full not in listed
                    else:
                        assert full in listed

    anyio.run(probe)


# -- outputs obey the same decision ---------------------------------------------------------------------------------

# every URI a probe tool's result points at: the items' own, one a template serves, one nothing serves, another
# spelling of one, and a web page
LINKED = [*(f"{ns}://{n}" for ns in NAMESPACES for n in [*RESOURCE_NAMES, "t/7", "nothing"]),
          *(f"{ns.upper()}://%6Cogo" for ns in NAMESPACES), "https://example.com/"]


@functools.cache
def _probe() -> Entry:
    from toolcrib import EmbeddedResource, ResourceLink

    def point(args: Any) -> list[Any]:
        return [block for uri in LINKED for block in (ResourceLink(uri, "r"), EmbeddedResource(uri, text="x"))]

    probe = tool("links", "Point at resources.", {}, point, {"annotations": {"readOnlyHint": True}})
    return Entry(name="probe__links", provenance=Provenance("probe", MCP, "mcps", trusted=True), definition=probe)


@SETTINGS
@given(agents=item_agents_st, items=items_st)
def test_no_result_ever_carries_a_uri_the_view_hides(agents: Any, items: Any) -> None:
    """What a tool hands an agent is decided as resources/read decides it: a link or embedded resource stays
    where the agent may read its URI, or where no source serves it and no deny rule names it; everything else is
    taken out (``AgentView.withhold``)."""
    from toolcrib.errors import UnknownResourceError
    from toolcrib.uris import normalize

    for spec in agents.values():
        spec["permissions"] = {**spec["permissions"], "mcps": {"allow": ["probe"]}, "tools": {"allow": ["probe__*"]}}
    loaded = generated_config(agents)
    pipeline = Pipeline(get_plugin_manager(), loaded, {})
    served = {e.uri for e in items if e.kind == "resource"}
    templated = {e.source for e in items if e.kind == "template"}

    async def probe() -> None:
        for agent, rules in compile_rules(loaded).items():
            view = build_view(rules, [*items, _probe()], pipeline)
            deny = (agents[agent]["permissions"].get("resources") or {}).get("deny", [])
            expected = []
            for uri in LINKED:
                try:
                    await view.read(uri)
                    readable = True
                except UnknownResourceError:
                    readable = False
                normal = normalize(uri)
                is_served = normal in served or (normal.split("://")[0] in templated and "://t/" in normal)
                if readable or not (is_served or any(fnmatchcase(normal, p) for p in deny)):
                    expected.append(uri)
            result = await view.call("probe__links")
            got = [block.get("uri") or block["resource"]["uri"] for block in result.content]
            assert got == [uri for uri in expected for _ in range(2)]

    anyio.run(probe)


# -- the glob matcher itself ----------------------------------------------------------------------------------


@settings(max_examples=examples(2000), deadline=None)
@given(pattern=st.text(alphabet="ab*\n.(", max_size=8), subject=st.text(alphabet="ab\n.(", max_size=12))
@example(pattern="a*a", subject="a")
@example(pattern="*ab*ab", subject="abab")
@example(pattern="a*b*a", subject="aba")
@example(pattern="*a*ab", subject="ab")  # the middle piece may not reuse the last one
def test_globs_match_exactly_what_a_regex_of_their_pieces_matches(pattern: str, subject: str) -> None:
    """Specifiers match model-written arguments, so globs are matched without backtracking; they must still
    mean what the regex ``(?s:piece.*piece...)`` means, newlines and regex metacharacters included."""
    import re

    from toolcrib.patterns import Glob

    reference = re.compile("(?s:" + ".*".join(re.escape(piece) for piece in pattern.split("*")) + ")")
    glob = Glob.of(pattern)
    got = glob.matches(subject) if glob is not None else subject == pattern
    assert got == (reference.fullmatch(subject) is not None)


def test_a_specifier_against_a_huge_adversarial_argument_is_answered() -> None:
    """With regexes, this took minutes of event-loop time (quadratic in the argument). No time is asserted: a
    regression shows as a test that does not end."""
    from toolcrib import patterns

    rule = patterns.parse("tools", "shell__exec(*rm*-rf*)")
    assert rule.matches_subject("rm" * 500_000) is False
    assert rule.matches_subject("rm" * 500_000 + " -rf /") is True


# -- compiled specifiers (patterns.Specifiers) against the patterns one by one ---------------------------------------

_PIECES = st.sampled_from(["a", "b", "ab", "ba", "/", "docs/", ".md", "rm -rf", "é"])
_SPECIFIER = st.lists(st.one_of(_PIECES, st.just("*")), min_size=1, max_size=5).map("".join)
_SUBJECT = st.lists(_PIECES, max_size=6).map("".join)


@settings(max_examples=examples(400), deadline=None)
@given(specifiers=st.lists(_SPECIFIER, min_size=1, max_size=12), subject=_SUBJECT)
@example(specifiers=["a*", "ab*", "*b", "a*b", "*a*"], subject="ab")
@example(specifiers=["*", "ab"], subject="ab")
@example(specifiers=["ab*ab", "a*"], subject="ab")  # a prefix found whose glob does not match: the next one does
def test_compiled_specifiers_find_the_first_pattern_that_matches_as_one_by_one(specifiers: list[str],
                                                                               subject: str) -> None:
    from toolcrib import patterns

    parsed = tuple(patterns.parse("tools", f"fs__write({s})") for s in specifiers)
    expected = next((i for i, p in enumerate(parsed) if p.matches_subject(subject)), None)
    assert patterns.Specifiers(parsed).first(subject) == expected
    assert fnmatchcase(subject, specifiers[expected].replace("[", "[[]")) if expected is not None else True


def test_compiled_specifiers_pass_over_a_pattern_without_one() -> None:
    """A bare tool pattern among specifiers names no subject: the ones after it are still found, by their index."""
    from toolcrib import patterns

    parsed = tuple(patterns.parse("tools", text) for text in ("fs__write", "fs__write(docs/*)", "fs__write(*.md)"))
    compiled = patterns.Specifiers(parsed)
    assert [compiled.first(s) for s in ("docs/a", "notes.md", "fs__write", "")] == [1, 2, None, None]


def test_a_glob_is_tried_only_on_a_subject_that_holds_its_longest_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    """The screen in front of the general globs: a subject that holds none of their longest pieces ("aaaa" of
    ``*zz*aaaa*``, "b" of ``*b*``) reaches no glob, even one holding the shorter piece "zz"; a subject that holds
    one is tried against them in order, and matched as before."""
    from toolcrib import patterns

    compiled = patterns.Specifiers((patterns.parse("tools", "t(*zz*aaaa*)"), patterns.parse("tools", "t(*b*)")))
    tried: list[tuple[str, str]] = []
    matches = patterns.Glob.matches

    def counted(glob: patterns.Glob, text: str) -> bool:
        tried.append(("*".join((glob.first, *glob.middle, glob.last)), text))
        return matches(glob, text)

    monkeypatch.setattr(patterns.Glob, "matches", counted)
    assert [compiled.first(s) for s in ("zz", "xx", "aaaazz", "zzaaaa", "zb")] == [None, None, None, 0, 1]
    assert tried == [("*zz*aaaa*", "aaaazz"), ("*b*", "aaaazz"), ("*zz*aaaa*", "zzaaaa"), ("*zz*aaaa*", "zb"),
                     ("*b*", "zb")]


@settings(max_examples=examples(300), deadline=None)
@given(deny=st.lists(_SPECIFIER, max_size=6), allow=st.lists(_SPECIFIER, max_size=6),
       subjects=st.lists(st.one_of(st.none(), _SUBJECT), min_size=2, max_size=2))
def test_call_rules_decide_as_the_patterns_one_by_one(deny: list[str], allow: list[str],
                                                      subjects: list[str | None]) -> None:
    from toolcrib import patterns
    from toolcrib.permissions import CallRules

    rules = CallRules(subjects=("source", "destination"), deny=tuple(patterns.parse("tools", f"t({s})") for s in deny),
                      allow=tuple(patterns.parse("tools", f"t({s})") for s in allow), ask=())
    arguments = {k: v for k, v in zip(("source", "destination"), subjects, strict=True) if v is not None}
    values = rules.values(arguments)

    def one_by_one() -> tuple[str, Any, str | None]:  # CallRules.check as it read before it was compiled
        for pattern in rules.deny:
            if not values:
                return "deny", pattern, None
            for name, text in values:
                if pattern.matches_subject(text):
                    return "deny", pattern, name
        if rules.allow:
            if not values:
                return "deny", None, None
            for name, text in values:
                if not any(p.matches_subject(text) for p in rules.allow):
                    return "deny", None, name
        return "ok", None, None

    assert rules.check(arguments) == one_by_one()
