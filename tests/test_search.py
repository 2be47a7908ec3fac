"""``AgentView.search`` (``toolcrib.search``): BM25 over the tools one agent sees, on the real fs pack's 13 tools."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
import toolcrib_fs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from conftest import ROOT, cli, examples, make_host
from toolcrib import search
from toolcrib.search import SearchError, ToolIndex, words

_IMPORTED_VECTORS = search._vectors  # (before the fixture below stands in for it)
EVERYTHING = '[agents.a.permissions]\nplugins = { allow = ["*"] }\ntools = { allow = ["*"] }\n'
NO_REMOVING = '[agents.a.permissions]\nplugins = { allow = ["*"] }\ntools = { deny = ["fs__rm", "fs__mv*"] }\n'


@pytest.fixture(autouse=True)
def _bm25_alone(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests rank by BM25 alone, as without the toolcrib-vectors package, unless they ask ``with_vectors``."""
    if "with_vectors" not in request.fixturenames:
        monkeypatch.setattr(search, "_vectors", lambda: None)


@pytest.fixture
def with_vectors() -> None:
    if search._vectors() is None:
        pytest.skip("toolcrib-vectors is not installed (pip install -e plugins/toolcrib-vectors)")


def found(query: str, k: int = 3, config: str = EVERYTHING) -> list[str]:
    view = make_host(config, {"fs": toolcrib_fs}).view("a")
    return [tool["name"] for tool in view.search(query, k)]


@pytest.mark.parametrize(("query", "expected"), [
    ("read a file", ["fs__read_file", "fs__write_file", "fs__find_text"]),
    ("search text in files", ["fs__find_text", "fs__edit", "fs__write_file"]),
    ("move a file", ["fs__rename", "fs__read_file", "fs__write_file"]),
    ("list directory", ["fs__ls", "fs__copy", "fs__cwd"]),
    ("replace text", ["fs__edit", "fs__find_text", "fs__write_file"]),
    ("glob", ["fs__glob", "fs__find_text"]),  # the name first, then an argument of that name
    ("readFile", ["fs__read_file", "fs__write_file", "fs__find_text"]),  # camelCase is two words
])
def test_tools_are_ranked_by_their_names_descriptions_and_arguments(query: str, expected: list[str]) -> None:
    assert found(query) == expected


def test_a_query_is_whole_words_stemmed_as_the_index_is_and_words_that_say_nothing_of_a_tool_are_left_out() -> None:
    assert found("files") == found("file") == ["fs__read_file", "fs__write_file", "fs__find_text"]  # stemmed
    assert found("how do I read a file") == found("read file")  # stop words left out
    assert found("how do I") == found("the") == []  # nothing but stop words: nothing found
    assert found("rea") == []  # a word, not a prefix: /^fs__rea/ is how to match the start of a name
    assert found("dir") == []
    assert found("directory") == ["fs__ls", "fs__cwd", "fs__mkdir"]


def _bench_search() -> Any:
    """benchmarks/bench_search.py: the labelled set of benchmarks/catalog (1,792 tools of 97 real MCP servers and
    plugins, 488 queries) and its measures."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bench_search
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return bench_search


def _catalog() -> tuple[list[dict[str, Any]], list[Any]]:
    return _bench_search().load()  # type: ignore[no-any-return]


def _quality(index: ToolIndex, queries: list[Any]) -> tuple[float, float]:
    """Recall@5 and MRR@10 as the benchmark measures them."""
    found = _bench_search().quality(lambda query: [tool["name"] for tool in index.search(query, 10)], queries)
    return found["r5"], found["mrr"]


def test_on_real_tool_definitions_the_held_out_queries_find_their_tools_by_bm25_alone() -> None:
    """benchmarks/catalog's held-out split (no weight was chosen on it), the catalog's own 1,792 tools: a right tool
    in the first five for 88% of the queries, a mean reciprocal rank of 0.73 (docs/benchmarks.md has the 10,000-tool
    numbers, beside plain BM25's)."""
    tools, queries = _catalog()
    held = [query for query in queries if query.split == "held"]
    assert (len(tools), len(queries), len(held)) == (1792, 488, 245)
    recall, mrr = _quality(ToolIndex(tools), held)
    assert recall >= 0.88 and mrr >= 0.73, (recall, mrr)


def test_with_word_vectors_the_held_out_queries_find_their_tools_more_often(with_vectors: None) -> None:
    """toolcrib-vectors installed: BM25 and meaning together find a right tool in the first five for 91% of the
    held-out queries (BM25 alone: 88%), a mean reciprocal rank of 0.80 (0.73)."""
    tools, queries = _catalog()
    held = [query for query in queries if query.split == "held"]
    recall, mrr = _quality(ToolIndex(tools), held)
    assert recall >= 0.90 and mrr >= 0.79, (recall, mrr)


def test_word_vectors_find_tools_that_share_no_word_with_the_query_and_nothing_for_a_query_of_no_known_word(
        with_vectors: None) -> None:
    tools, _ = _catalog()
    index = ToolIndex(tools)
    assert "shell__sleep" in [tool["name"] for tool in index.search("wait a few seconds", 3)]
    assert "everything__echo" in [tool["name"] for tool in index.search("repeat the string I give you", 5)]
    assert index.search("xyzzy plugh", 5) == [] and index.search("how do I", 5) == []  # no word of any tool's
    assert index.search("/^shell__sl/", 5) == [next(t for t in tools if t["name"] == "shell__sleep")]
    assert index.search("everything__echo", 1)[0]["name"] == "everything__echo"


def test_without_word_vectors_those_queries_miss() -> None:
    tools, _ = _catalog()
    index = ToolIndex(tools)
    assert "shell__sleep" not in [tool["name"] for tool in index.search("wait a few seconds", 5)]
    assert "everything__echo" not in [tool["name"] for tool in index.search("repeat the string I give you", 5)]


def test_a_served_name_finds_its_tool_first_and_a_regex_matches_served_names_in_list_order() -> None:
    assert found("fs__mkdir", k=1) == ["fs__mkdir"]
    assert found("fs__mkdir")[0] == "fs__mkdir"
    assert found("/^fs__(read|write)/", k=5) == ["fs__read_file", "fs__write_file"]
    assert found("/RM$/", k=5) == ["fs__rm"]  # case-insensitive
    assert found("/^fs__.*_file$/", k=5) == ["fs__read_file", "fs__write_file"]  # two repetitions are fine
    assert found("/^(?:fs__)(read|ls)(?=_|$)/", k=5) == ["fs__ls", "fs__read_file"]  # so are groups, lookaheads
    assert found("", k=5) == [] and found("   ") == [] and found("!!!") == []
    # a word in most names (the namespace) ranks nothing beside other words, and alone still finds
    assert found("fs glob") == found("glob") == ["fs__glob", "fs__find_text"]
    assert len(found("fs", k=13)) == 13


def test_a_hidden_tool_is_found_by_no_word_no_name_and_no_regex() -> None:
    assert found("remove a file", k=13, config=NO_REMOVING).count("fs__rm") == 0
    assert "fs__rm" not in found("fs__rm", k=13, config=NO_REMOVING)
    assert found("/rm/", k=13, config=NO_REMOVING) == []
    assert found("/.*/", k=13, config=NO_REMOVING) == [
        "fs__batch_edit", "fs__copy", "fs__cwd", "fs__edit", "fs__exist", "fs__find_text", "fs__glob", "fs__ls",
        "fs__mkdir", "fs__read_file", "fs__rename", "fs__write_file"]


def test_one_index_per_view_and_results_as_tools_list_has_them() -> None:
    view = make_host(EVERYTHING, {"fs": toolcrib_fs}).view("a")
    assert "_index" not in vars(view)  # building a view builds no index: the first search does
    first = view.search("copy", 1)
    index = vars(view)["_index"]
    assert first == [next(t for t in view.mcp_tools if t["name"] == "fs__copy")]
    view.search("glob", 1)
    assert vars(view)["_index"] is index  # and later searches use it


@pytest.mark.parametrize(("query", "k", "message"), [
    ("/[unclosed/", 3, "/[unclosed/ is not a regular expression: unterminated character set at position 9"),
    ("x" * 1001, 3, "the query is longer than 1000 characters"),
    ("copy", 0, "k must be a positive integer"),
    ("copy", True, "k must be a positive integer"),
    (None, 3, "the query must be a string"),
])
def test_a_query_that_cannot_be_run_says_why(query: object, k: object, message: str) -> None:
    view = make_host(EVERYTHING, {"fs": toolcrib_fs}).view("a")
    with pytest.raises(SearchError) as refused:
        view.search(query, k)  # type: ignore[arg-type]
    assert str(refused.value) == message


def test_names_split_into_words_at_separators_and_humps() -> None:
    assert words("fs__read_file") == ["fs", "read", "file"]
    assert words("getWeatherForecast") == ["get", "weather", "forecast"]
    assert words("github.create-issue v2") == ["github", "create", "issue", "v2"]
    assert words("Über straße, 3 Äpfel") == ["über", "straße", "3", "äpfel"]  # a query in any language
    assert words("math__tool_0042") == words("math  tool 0042") == ["math", "tool", "0042"]
    assert words("__a_") == ["a"] and words("_") == words("") == []


@given(st.text(alphabet="abzAZ09_-. éÉǅ", max_size=16) | st.text(max_size=16))
@settings(max_examples=examples(500))
def test_a_plain_name_split_without_the_regular_expression_splits_as_it_does(text: str) -> None:
    from toolcrib.search import _SEPARATORS, _SPLIT

    if text.islower() or not any(char.isupper() for char in text):
        expected = [w for w in _SEPARATORS.split(text.lower()) if w]
    else:
        expected = [w.lower() for w in _SPLIT.split(text) if w]
    assert words(text) == expected


# -- over MCP: [agents.<name>.tool_search] ----------------------------------------------------------------------------

SEARCHING = """
[agents.a]
tool_search = { listed = ["fs__read_file"], results = 3 }
[agents.a.permissions]
plugins = { allow = ["fs"] }
tools = { deny = ["fs__rm"] }
"""


def _serve(config: str) -> Any:
    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    return build_server(ServingState(make_host(config, {"fs": toolcrib_fs})), "a")


def test_a_served_agent_that_searches_has_its_index_built_with_the_host() -> None:
    """``serve`` builds each host with what its agents are served first (``build_lists``): for an agent that
    searches its tools, the index too, so that its first search does not build it on the event loop."""
    from toolcrib.mcp.state import build_lists

    plain = SEARCHING.replace('tool_search = { listed = ["fs__read_file"], results = 3 }\n', "")
    built = []
    for config in (SEARCHING, plain):
        host = make_host(config, {"fs": toolcrib_fs})
        build_lists(host, ["a", "nobody"])
        view = host.view("a")
        built.append(sorted(k for k in vars(view) if k in {"_index", "listed_tools", "mcp_tools", "mcp_prompts"}))
    assert built == [["_index", "listed_tools", "mcp_tools"], ["listed_tools", "mcp_tools"]]


def test_an_agent_with_tool_search_lists_a_few_tools_and_finds_the_rest_which_a_session_then_lists() -> None:
    changed: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.append("tools")

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with Client(_serve(SEARCHING), mode="legacy", cache=None, message_handler=on_message) as client:
            seen["first"] = [t.name for t in (await client.list_tools()).tools]
            found = await client.call_tool("toolcrib__search_tools", {"query": "move a file", "limit": 2})
            seen["found"] = [t["name"] for t in found.structured_content["tools"]]  # type: ignore[index]
            seen["definition"] = found.structured_content["tools"][0]  # type: ignore[index]
            with anyio.fail_after(10):  # a hang guard
                while not changed:
                    await anyio.sleep(0.01)
            seen["after"] = [t.name for t in (await client.list_tools()).tools]
            seen["removing"] = [t["name"] for t in (await client.call_tool(
                "toolcrib__search_tools", {"query": "remove delete rm"})).structured_content["tools"]]  # type: ignore[index]
            direct = await client.call_tool("fs__exist", {"path": "."})  # deferred, never listed: callable by name
            proxied = await client.call_tool("toolcrib__call_tool", {"name": "fs__exist", "arguments": {"path": "."}})
            seen["called"] = (direct.content[0].text, proxied.content[0].text)  # type: ignore[union-attr]
            hidden = await client.call_tool("toolcrib__call_tool", {"name": "fs__rm", "arguments": {"path": "x"}})
            missing = await client.call_tool("toolcrib__call_tool", {"name": "fs__zz", "arguments": {"path": "x"}})
            itself = await client.call_tool("toolcrib__call_tool", {"name": "toolcrib__call_tool", "arguments": {
                "name": "fs__exist", "arguments": {"path": "."}}})  # no proxy through the proxy
            seen["unknown"] = [(r.is_error, r.content[0].text)  # type: ignore[union-attr]
                               for r in (hidden, missing, itself)]
        return seen

    seen = anyio.run(main)
    assert seen["first"] == ["fs__read_file", "toolcrib__call_tool", "toolcrib__search_tools"]
    assert seen["found"] == ["fs__rename", "fs__read_file"]
    assert set(seen["definition"]) >= {"name", "description", "inputSchema"}
    assert seen["after"] == ["fs__read_file", "fs__rename", "toolcrib__call_tool", "toolcrib__search_tools"]
    assert changed == ["tools"]
    assert "fs__rm" not in seen["removing"]
    assert seen["called"] == ('{"path":".","exists":true,"type":"directory"}',) * 2
    assert seen["unknown"] == [(True, "Unknown tool: fs__rm"), (True, "Unknown tool: fs__zz"),
                               (True, "Unknown tool: toolcrib__call_tool")]


def test_a_search_is_audited_with_its_query_and_the_names_it_found_and_a_call_through_the_proxy_as_the_tool(
        tmp_path: Path) -> None:
    host = make_host('[host]\naudit_log = "audit.jsonl"\naudit_arguments = true\n' + SEARCHING, {"fs": toolcrib_fs},
                     base_dir=tmp_path)

    async def main() -> None:
        await host.call("a", "toolcrib__search_tools", {"query": "move a file", "limit": 2})
        await host.call("a", "toolcrib__call_tool", {"name": "fs__exist", "arguments": {"path": "."}})

    anyio.run(main)
    host.close()
    records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["tool"], r["decision"], r.get("arguments"), r.get("notes")) for r in records] == [
        ("toolcrib__search_tools", "allowed", {"query": "move a file", "limit": 2},
         {"found": ["fs__rename", "fs__read_file"]}),
        ("fs__exist", "allowed", {"path": "."}, None),  # the real tool's record, inside the proxy's call
        ("toolcrib__call_tool", "allowed", {"name": "fs__exist", "arguments": {"path": "."}}, None)]


def test_below_its_threshold_every_tool_is_listed_and_without_tool_search_no_search_tool_exists() -> None:
    async def names(config: str, mode: str = "legacy") -> list[str]:
        async with Client(_serve(config), mode=mode, cache=None) as client:
            return [t.name for t in (await client.list_tools()).tools]

    few = SEARCHING.replace("results = 3", "results = 3, when_more_than = 20")
    everything = ["fs__batch_edit", "fs__copy", "fs__cwd", "fs__edit", "fs__exist", "fs__find_text", "fs__glob",
                  "fs__ls", "fs__mkdir", "fs__read_file", "fs__rename", "fs__write_file"]
    assert anyio.run(names, few) == everything
    assert anyio.run(names, SEARCHING.replace("tool_search = { listed = [\"fs__read_file\"], results = 3 }\n", "")) \
        == everything
    # 2026-07-28 has no session to list found tools in: the listing stays, and found tools are called by name
    assert anyio.run(names, SEARCHING, "auto") == ["fs__read_file", "toolcrib__call_tool", "toolcrib__search_tools"]


def test_a_tool_search_pattern_that_cannot_be_used_is_a_config_error() -> None:
    from toolcrib.errors import ConfigError

    with pytest.raises(ConfigError) as bad:
        make_host('[agents.a]\ntool_search = { listed = ["fs__read(*)"], results = 99 }\n')
    assert [str(p) for p in bad.value.problems] == [
        "error: toolcrib.toml: agents.a.tool_search.results: Input should be less than or equal to 50, got an integer "
        "(99)"]
    with pytest.raises(ConfigError) as bad:
        make_host('[agents.a]\ntool_search = { listed = ["fs__read(*)"] }\n')
    assert [str(p) for p in bad.value.problems] == [
        "error: toolcrib.toml: agents.a.tool_search.listed[0]: 'fs__read(*)': a tool is listed up front by its name; "
        "a specifier applies to calls"]


FS_TOOLS = ["fs__batch_edit", "fs__copy", "fs__cwd", "fs__edit", "fs__exist", "fs__find_text", "fs__glob", "fs__ls",
            "fs__mkdir", "fs__read_file", "fs__rename", "fs__rm", "fs__write_file"]


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(denied=st.sets(st.sampled_from(FS_TOOLS)), mode=st.sampled_from(["default", "plan"]),
       listed=st.sets(st.sampled_from([*FS_TOOLS, "fs__*", "fs__r*"]), max_size=3))
def test_the_proxy_runs_only_what_the_agent_sees_and_answers_for_the_rest_as_for_no_tool(
        denied: set[str], mode: str, listed: set[str]) -> None:
    """Over generated deny lists, modes and up-front patterns: a search never finds a hidden tool, the up-front list
    holds only tools the agent sees, and through toolcrib__call_tool a hidden tool answers exactly as a tool that
    does not exist (and a visible one is not refused as unknown)."""
    config = (f'[agents.a]\nmode = "{mode}"\ntool_search = {{ listed = {sorted(listed)!r} }}\n'
              '[agents.a.permissions]\nplugins = { allow = ["fs"] }\n'
              f'tools = {{ deny = {sorted(denied)!r} }}\n').replace("'", '"')
    host = make_host(config, {"fs": toolcrib_fs})
    view = host.view("a")
    visible = set(view.names) - {"toolcrib__search_tools", "toolcrib__call_tool"}
    assert {t["name"] for t in view.listed_tools} - {"toolcrib__search_tools", "toolcrib__call_tool"} <= visible
    for query in ("file", "remove", "/.*/", "fs__rm", "write edit copy"):
        assert {t["name"] for t in view.search(query, 13)} <= visible | set(view.searching_names)
    exported = [t for t in view.export("openai-responses") if t["type"] != "tool_search"]
    names = [tool["name"] for t in exported for tool in (t["tools"] if t["type"] == "namespace" else [t])]
    assert sorted(names) == sorted(visible if view.deferring else view.names)  # each once, none hidden
    assert {t["name"] for t in view.export("anthropic")} - {"tool_search_tool_bm25"} <= set(view.names)

    async def proxy(name: str) -> tuple[bool, str]:
        result = await view.call("toolcrib__call_tool", {"name": name, "arguments": {}})
        return result.is_error, result.text

    if "toolcrib__call_tool" not in view.names:  # plan mode: the proxy is not read-only, so it is not offered
        assert mode == "plan"
        return
    for name in [*FS_TOOLS, "fs__never_installed"]:
        answer = anyio.run(proxy, name)
        if name in visible:
            assert answer != (True, f"Unknown tool: {name}")
        else:
            assert answer == (True, f"Unknown tool: {name}")


def _proxy(config: str) -> tuple[Any, dict[str, Any]]:
    host = make_host(config, {"fs": toolcrib_fs})
    wire = next(t for t in host.view("a").mcp_tools if t["name"] == "toolcrib__call_tool")
    return host, wire["annotations"]


def test_the_proxy_is_annotated_as_the_least_permissive_of_the_tools_it_reaches_and_plan_mode_keeps_it() -> None:
    _, writing = _proxy(SEARCHING)
    assert writing == {"readOnlyHint": False, "destructiveHint": True, "openWorldHint": False,
                       "idempotentHint": False}
    _, reading = _proxy(SEARCHING.replace('deny = ["fs__rm"]', 'allow = ["fs__read_file", "fs__ls", "toolcrib__*"]'))
    assert reading == {"readOnlyHint": True, "destructiveHint": False, "openWorldHint": False,
                       "idempotentHint": True}
    plan, planned = _proxy(SEARCHING.replace("[agents.a]\n", '[agents.a]\nmode = "plan"\n'))
    assert planned == reading  # plan mode keeps the agent's tools to read-only ones: so is the proxy
    assert plan.view("a").names == ["fs__cwd", "fs__exist", "fs__find_text", "fs__glob", "fs__ls", "fs__read_file",
                                    "toolcrib__call_tool", "toolcrib__search_tools"]
    mode = next(c for c in plan.explain("a", "toolcrib__call_tool").checks if c.name == "mode")
    assert (mode.passed, mode.detail) == (True, "plan mode, and the tool calls only the agent's own tools, which "
                                                "plan mode keeps to the read-only ones")

    async def through(name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        result = await plan.call("a", "toolcrib__call_tool", {"name": name, "arguments": arguments})
        return result.is_error, result.text

    assert anyio.run(through, "fs__exist", {"path": "."}) == (False, '{"path":".","exists":true,"type":"directory"}')
    assert anyio.run(through, "fs__write_file", {"path": "x", "content": "y"}) == (True, "Unknown tool: fs__write_file")


def test_an_ask_rule_by_annotation_asks_for_the_tool_the_proxy_calls_not_for_the_proxy() -> None:
    host = make_host(SEARCHING.replace('deny = ["fs__rm"] }', 'deny = ["fs__rm"] }\nask = ["@writes"]'),
                     {"fs": toolcrib_fs})

    async def through(name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        result = await host.call("a", "toolcrib__call_tool", {"name": name, "arguments": arguments})
        return result.is_error, result.text

    assert anyio.run(through, "fs__exist", {"path": "."}) == (False, '{"path":".","exists":true,"type":"directory"}')
    assert anyio.run(through, "fs__write_file", {"path": "x", "content": "y"}) == (
        True, "Permission denied: fs__write_file needs approval (ask rule '@writes'), and no approver could answer "
        "(the client does not support elicitation and no approval hook decided).")


def test_the_anthropic_export_defers_what_is_not_listed_up_front_and_adds_the_apis_own_tool_search() -> None:
    view = make_host(SEARCHING, {"fs": toolcrib_fs}).view("a")
    exported = view.export("anthropic")
    assert exported[0] == {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}
    assert [(t["name"], t.get("defer_loading")) for t in exported[1:]] == [
        ("fs__batch_edit", True), ("fs__copy", True), ("fs__cwd", True), ("fs__edit", True), ("fs__exist", True),
        ("fs__find_text", True), ("fs__glob", True), ("fs__ls", True), ("fs__mkdir", True), ("fs__read_file", None),
        ("fs__rename", True), ("fs__write_file", True)]  # toolcrib's own search tools are the API's here
    assert [t["function"]["name"] for t in view.export("openai")] == [
        "fs__read_file", "toolcrib__call_tool", "toolcrib__search_tools"]
    plain = make_host(EVERYTHING, {"fs": toolcrib_fs}).view("a").export("anthropic")
    assert len(plain) == 13 and not any("defer_loading" in t or "type" in t for t in plain)


def test_the_openai_responses_export_groups_deferred_tools_by_namespace_behind_the_apis_own_tool_search() -> None:
    view = make_host(SEARCHING, {"fs": toolcrib_fs}).view("a")
    exported = view.export("openai-responses")
    read_file = view.lookup("fs__read_file")
    assert read_file is not None
    wire = read_file.to_mcp()
    assert exported[:2] == [{"type": "tool_search"}, {
        "type": "function", "name": "fs__read_file", "description": wire["description"],
        "parameters": wire["inputSchema"], "strict": False}]  # not strict: the Responses API's default is strict
    namespace = exported[2]
    assert len(exported) == 3 and {k: v for k, v in namespace.items() if k != "tools"} == {
        "type": "namespace", "name": "fs", "description": "11 tools of the pack fs: batch_edit, copy, cwd, edit, "
        "exist, find_text, glob, ls, mkdir, rename, write_file"}
    assert [(t["type"], t["name"], t["defer_loading"], t["strict"]) for t in namespace["tools"]] == [
        ("function", name, True, False) for name in ("fs__batch_edit", "fs__copy", "fs__cwd", "fs__edit",
                                                     "fs__exist", "fs__find_text", "fs__glob", "fs__ls",
                                                     "fs__mkdir", "fs__rename", "fs__write_file")]
    plain = make_host(EVERYTHING, {"fs": toolcrib_fs}).view("a").export("openai-responses")
    assert [t["name"] for t in plain] == FS_TOOLS and {t["type"] for t in plain} == {"function"}
    assert not any("defer_loading" in t for t in plain)


def test_explain_says_whether_a_tool_is_listed_up_front_or_found_by_search(cli_config: Any) -> None:
    import json

    from conftest import cli

    path = cli_config(SEARCHING, "fs=toolcrib_fs")
    code, out, _ = cli("explain", "--config", path, "--agent", "a", "fs__cwd")
    assert code == 0
    assert out.splitlines()[-1] == ("  tool search deferred: not listed up front, found by toolcrib__search_tools "
                                    "(callable by name)")
    code, out, _ = cli("explain", "--config", path, "--agent", "a", "fs__read_file", "--json")
    assert (code, json.loads(out)["listed"]) == (0, True)
    code, out, _ = cli("explain", "--config", path, "--agent", "a", "fs__rm")  # hidden: nothing to say of listing
    assert code == 1 and "tool search" not in out


def test_tools_lists_what_tools_list_gives_then_what_is_found_by_searching_and_json_is_tools_list(
        cli_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import cli

    monkeypatch.setenv("COLUMNS", "200")
    path = cli_config(SEARCHING, "fs=toolcrib_fs")
    code, out, _ = cli("tools", "--config", path, "--agent", "a", "--json")
    listed = [tool["name"] for tool in json.loads(out)]
    assert (code, listed) == (0, ["fs__read_file", "toolcrib__call_tool", "toolcrib__search_tools"])
    code, out, _ = cli("tools", "--config", path, "--agent", "a")
    lines = out.splitlines()
    heading = lines.index("found by searching (11: not in tools/list until toolcrib__search_tools finds them; a call "
                          "by name works):")
    assert [line.split("(", 1)[0] for line in lines[:heading] if line and not line.startswith(" ")] == listed
    assert [line.split("(", 1)[0] for line in lines[heading + 1:] if not line.startswith(" ")] == [
        "fs__batch_edit", "fs__copy", "fs__cwd", "fs__edit", "fs__exist", "fs__find_text", "fs__glob", "fs__ls",
        "fs__mkdir", "fs__rename", "fs__write_file"]


def test_check_warns_of_a_tool_search_that_cannot_work_and_of_up_front_patterns_that_match_nothing() -> None:
    unsearchable = make_host(SEARCHING.replace('deny = ["fs__rm"]', 'deny = ["fs__rm", "toolcrib__search_*"]'),
                             {"fs": toolcrib_fs})
    assert [str(p) for p in unsearchable.problems() if "tool_search" in p.where] == [
        "warning: toolcrib.toml: agents.a.tool_search: the agent does not see toolcrib__search_tools, so every tool "
        "it sees is listed (`toolcrib explain --agent a toolcrib__search_tools` says why)"]
    assert unsearchable.view("a").deferring is False
    unmatched = make_host(SEARCHING.replace('["fs__read_file"]', '["fs__read_file", "fs__nothing*"]'),
                          {"fs": toolcrib_fs})
    assert [str(p) for p in unmatched.problems() if "tool_search" in p.where] == [
        "warning: toolcrib.toml: agents.a.tool_search.listed[1]: 'fs__nothing*' matches no tool the agent sees"]


@pytest.mark.parametrize(("thresholds", "deferring"), [
    ("", True),
    ("when_more_than = 11", True), ("when_more_than = 12", False),
    ("when_tokens_more_than = 100", True), ("when_tokens_more_than = 1000000", False),
    ("when_more_than = 20, when_tokens_more_than = 100", True),  # passing either turns it on
    ("when_more_than = 20, when_tokens_more_than = 1000000", False),
])
def test_search_turns_on_past_a_number_of_tools_or_of_tokens_of_their_definitions(thresholds: str,
                                                                                   deferring: bool) -> None:
    from toolcrib.view import estimated_tokens

    config = SEARCHING.replace("results = 3", f"results = 3{', ' if thresholds else ''}{thresholds}")
    view = make_host(config, {"fs": toolcrib_fs}).view("a")
    assert view.deferring is deferring
    others = [t for t in view.mcp_tools if not t["name"].startswith("toolcrib__")]
    assert len(others) == 12 and 100 < estimated_tokens(others) < 1000000
    assert len(view.listed_tools) == (3 if deferring else 12)


def test_keywords_from_the_pack_and_from_curation_make_a_tool_findable_by_words_it_does_not_use() -> None:
    import toolcrib
    from packs import Pack

    @toolcrib.tool(keywords=["delete", "erase"])
    def rm(path: str) -> str:
        """Remove a path."""
        return path

    @toolcrib.tool
    def mkdir(path: str) -> str:
        """Create a directory."""
        return path

    config = EVERYTHING + '[tools."files__mkdir"]\nkeywords = ["folder"]\n'
    host = make_host(config, {"files": Pack(rm, mkdir)})
    view = host.view("a")
    assert [t["name"] for t in view.search("delete the old file", 2)] == ["files__rm", "files__mkdir"]
    assert [t["name"] for t in view.search("erase", 2)] == ["files__rm"]
    assert [t["name"] for t in view.search("make a folder", 2)] == ["files__mkdir"]
    assert host.catalog.entries["files__mkdir"].curation.changes == ("search keywords added: folder",)  # type: ignore[union-attr]
    assert "keywords" not in view.search("folder", 1)[0]  # not MCP's: the definition served stays as it was


def test_a_regex_search_is_held_to_a_time_budget_over_all_the_names(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib import search

    tools = [{"name": f"ns__tool_{i:04}", "description": "A tool.", "inputSchema": {}} for i in range(600)]
    index = search.ToolIndex(tools)
    assert [t["name"] for t in index.search("/_05(9|1)/", 2)] == ["ns__tool_0510", "ns__tool_0511"]
    monkeypatch.setattr(search, "REGEX_SECONDS", 0.0)  # what a slow pattern on long names meets, without waiting
    with pytest.raises(SearchError) as slow:
        index.search("/_059/", 2)
    assert str(slow.value) == ("/_059/ took more than 0.0 s over the tool names; anchor it (^...) or make it more "
                               "specific")
    monkeypatch.undo()
    assert [t["name"] for t in index.search("/^ns__tool_000[12]/", 2)] == ["ns__tool_0001", "ns__tool_0002"]


@pytest.mark.parametrize("pattern", ["(a|aa)+$", "^x__(?:aa|a)+c", "(a|aa)*\\d"])
def test_a_regex_that_would_backtrack_for_years_is_stopped_by_the_engine(monkeypatch: pytest.MonkeyPatch,
                                                                       pattern: str) -> None:
    """Patterns the regex engine backtracks on for years over a 64-character name (``(a|aa)+$`` tries the ways to
    split the a's): the engine's own time limit stops them inside the match, so no search holds the host longer."""
    from toolcrib import search

    monkeypatch.setattr(search, "REGEX_SECONDS", 0.05)
    index = search.ToolIndex([{"name": "x__" + "a" * 60 + "b", "description": "A tool.", "inputSchema": {}}])
    with pytest.raises(SearchError) as slow:
        index.search(f"/{pattern}/", 1)
    assert str(slow.value) == (f"/{pattern}/ took more than 0.05 s over the tool names; anchor it (^...) or make it "
                               "more specific")
    assert [t["name"] for t in index.search("/^x__a+b$/", 1)] == ["x__" + "a" * 60 + "b"]  # one that ends at once


def _index(*tools: tuple[str, str] | tuple[str, str, dict[str, Any]]) -> ToolIndex:
    return ToolIndex([{"name": t[0], "description": t[1], "inputSchema": {"type": "object", "properties": (
        t[2] if len(t) > 2 else {})}} for t in tools])  # type: ignore[misc]


def test_the_index_details_that_ranking_rests_on() -> None:
    index = _index(("x__get", "Unrelated."), ("x__other", "get get get get, and more get"),
                   ("x__ray_tube", "Tubes."), ("x__tool", "", {"maxLength": {"type": "integer"}}),
                   ("x__six", "six"), ("x__seven", "six"))
    assert [t["name"] for t in index.search("x__get", 2)] == ["x__get", "x__other"]  # the exact name first
    assert [t["name"] for t in index.search("length")] == ["x__tool"]  # a camelCase argument is words
    assert [t["name"] for t in index.search("maxlength")] == []
    assert index.search("y") == []  # a one-letter word is left out ("ray" is no "y" either)
    assert index.search("//") == [] and index.search("x/") == [] and index.search("/x") == []  # not regexes
    assert [t["name"] for t in index.search("/e/", 9)] == ["x__get", "x__other", "x__ray_tube", "x__seven"]
    assert len(index.search("/x/")) == 5  # k is 5 unless given
    assert index.search("q" * 1000) == []  # the longest query taken


def test_a_word_in_half_of_the_names_still_ranks_beside_others() -> None:
    """A word in more than half of the names (a namespace) ranks nothing beside other words; one in half does."""
    index = _index(("ns__alpha_one", "First."), ("ns__alpha_two", "Second."), ("ns__beta_three", "Third."),
                   ("ns__beta_four", "Fourth."))
    assert [t["name"] for t in index.search("alpha three", 5)] == ["ns__beta_three", "ns__alpha_one",
                                                                    "ns__alpha_two"]
    assert [t["name"] for t in index.search("ns three", 5)] == ["ns__beta_three"]  # "ns" is in every name
    assert len(index.search("ns", 5)) == 4  # alone, it is the query


def test_the_ranking_is_fts5s_own_bm25_on_every_labelled_query() -> None:
    """The index adds up each word's scores, asked of FTS5 once a word (FTS5 computes ``bm25()`` for every tool a
    query of common words matches): the same tools, in the same order, with the same scores, as FTS5 ranks a query
    of all the words (a tie in list order, as FTS5 breaks it; a word twice counts twice). On the 262 labelled
    queries of benchmarks/catalog and some unusual ones, over the catalog and copies of it under other namespaces
    (ties), keywords, and text that is not ASCII; and where a word is in most tools (its idf floored)."""
    catalog = ROOT / "benchmarks" / "catalog"
    real = json.loads((catalog / "tools.json").read_text())["tools"]
    tools = [{**tool, "name": tool["name"].replace("__", f"{copy or ''}__", 1)} for copy in range(3) for tool in real]
    tools += [{"name": "x__getWeather", "description": "Résumé parsing — naïve façade; 東京 files, FILES, c++ x² v2.0",
               "inputSchema": {"properties": {"cityName": {"description": "Ünïcode city\u2019s name"}, "q": {}}}},
              {"name": "x__file_files", "description": "file files filed filing", "inputSchema": {}}]
    keywords = {"x__file_files": ["archive", "Zip-files"], tools[0]["name"]: ["weather forecast"]}
    queries = [line.split("\t")[0] for line in (catalog / "queries.tsv").read_text().splitlines()
               if line and not line.startswith("#")]
    queries += ["file files", "resume facade", "naïve", "東京", "x² v2", "city name", "zip archive", "weather", "c"]
    assert _compared_with_fts5(tools, keywords, queries) >= 260
    alike = [{"name": f"y__tool{i}", "description": "Common words." + " rare" * (i % 3 == 0), "inputSchema": {}}
             for i in range(9)]
    assert _compared_with_fts5(alike, {}, ["common", "common rare", "words rare rare"]) == 3


def _compared_with_fts5(tools: list[dict[str, Any]], keywords: dict[str, list[str]], queries: list[str]) -> int:
    """How many queries found something, each ranked by the index as by FTS5's ``bm25()`` over the same texts."""
    import sqlite3

    from toolcrib.search import STOP_WORDS, WEIGHTS

    reference = sqlite3.connect(":memory:")
    reference.execute("CREATE VIRTUAL TABLE tools USING fts5(name, keywords, description, arguments, "
                      "tokenize = 'porter unicode61')")
    reference.executemany("INSERT INTO tools VALUES (?, ?, ?, ?)", [(
        " ".join(words(tool["name"])), " ".join(keywords.get(tool["name"], ())), tool.get("description") or "",
        " ".join(" ".join([*words(name), schema.get("description", "")])
                 for name, schema in tool["inputSchema"].get("properties", {}).items()))
        for tool in tools])
    weights = ", ".join(map(str, WEIGHTS))
    index = ToolIndex(tools, keywords)
    compared = 0
    for query in queries:
        terms = [term for term in words(query) if len(term) > 1 and term not in STOP_WORDS]
        ours = index._ranked(terms, 10)
        theirs = reference.execute(f"SELECT rowid - 1, -bm25(tools, {weights}) FROM tools WHERE tools MATCH ? "
                                   f"ORDER BY bm25(tools, {weights}), rowid LIMIT 10",
                                   (" OR ".join(f'"{term}"' for term in terms),)).fetchall() if terms else []
        assert [row for row, _ in ours] == [row for row, _ in theirs], query
        assert [score for _, score in ours] == pytest.approx([score for _, score in theirs], rel=1e-12), query
        compared += bool(theirs)
    return compared


def test_the_scores_kept_of_the_words_asked_are_bounded_and_a_search_finds_the_same_after_they_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import toolcrib.search

    index = _index(*[(f"x__tool{i}", "Read a file." if i % 2 else "Write a file, or a page.") for i in range(10)])
    assert [t["name"] for t in index.search("write page", 3)] == ["x__tool0", "x__tool2", "x__tool4"]
    assert sorted(index._postings) == ["page", "write"] and index._kept == 10  # five tools each
    assert [t["name"] for t in index.search("page", 2)] == ["x__tool0", "x__tool2"]
    assert index._kept == 10  # its scores were kept: not asked of FTS5 again, not counted twice
    monkeypatch.setattr(toolcrib.search, "MAX_KEPT", 15)
    assert [t["name"] for t in index.search("read", 2)] == ["x__tool1", "x__tool3"]  # 10 + 5: just fits
    assert sorted(index._postings) == ["page", "read", "write"] and index._kept == 15
    assert [t["name"] for t in index.search("files", 1)] == ["x__tool1"]  # "files": 10 more would be 25: anew
    assert sorted(index._postings) == ["files"] and index._kept == 10
    monkeypatch.setattr(toolcrib.search, "MAX_KEPT", 1_000_000)
    monkeypatch.setattr(toolcrib.search, "MAX_WORDS", 3)
    assert index.search("nothing") == index.search("nowhere") == [] and len(index._postings) == 3  # none, kept
    assert [t["name"] for t in index.search("write", 1)] == ["x__tool0"]  # a fourth word: anew
    assert sorted(index._postings) == ["write"] and index._kept == 5


def test_an_index_built_in_one_thread_is_searched_from_another() -> None:
    """``serve`` builds each host's index off the event loop, in a worker thread, and searches on the loop."""
    import threading

    built: list[ToolIndex] = []
    builder = threading.Thread(target=lambda: built.append(_index(("x__read", "Read a file."), ("x__b", "Other."))))
    builder.start()
    builder.join()
    assert [t["name"] for t in built[0].search("read", 2)] == ["x__read"]


class _Chosen:
    """A vectors package whose similarities are chosen by the test: each tool's, by its row."""

    __version__ = "0"

    def __init__(self, similarity: list[float]) -> None:
        self.chosen = similarity

    def DenseIndex(self, texts: list[str]) -> Any:
        return self

    def similarity(self, query: str) -> Any:
        import numpy as np

        return np.array(self.chosen, dtype=np.float32)

    def best(self, similarity: Any, k: int) -> list[int]:
        return sorted(range(len(similarity)), key=lambda row: -similarity[row])[:k]


def test_bm25_s_and_the_vectors_candidates_are_ordered_by_bm25_over_the_best_plus_meaning_times_the_similarity(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tools = [("x__read", "Read a file."), ("x__other", "Other things."), ("x__near", "Nothing alike in words.")]
    monkeypatch.setattr(search, "_vectors", lambda: _Chosen([0.0, 0.0, 0.45]))
    index = _index(*tools)
    # x__read: 1 (the best BM25) + 0; x__near, found by meaning alone: 0 + 2.0 * 0.45 = 0.9; x__other: nothing
    assert [t["name"] for t in index.search("read", 3)] == ["x__read", "x__near", "x__other"]
    monkeypatch.setattr(search, "_vectors", lambda: _Chosen([0.0, 0.0, 0.55]))
    assert [t["name"] for t in _index(*tools).search("read", 2)] == ["x__near", "x__read"]  # 1.1 over 1
    assert _index(*tools).search("xyzzy", 3) == []  # no word in any tool: nothing, whatever is nearest


@pytest.mark.parametrize("at", ["index", "query"])
def test_what_toolcrib_never_contains_goes_through_the_vectors_package_as_it_goes_through_a_pack(
        at: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib.errors import Suspend

    monkeypatch.setattr(search, "_vectors", lambda: _Broken(at, Suspend()))
    with pytest.raises(Suspend):
        found("read a file")


def _check_says(ranked: str, folder: Path) -> None:
    path = folder / "toolcrib.toml"
    path.write_text(SEARCHING + "[agents.b.permissions]\nplugins = { allow = ['fs'] }\n")
    code, out, _ = cli("check", "--config", str(path))
    assert code == 0 and out.splitlines()[-1] == f"tool search (a): ranked by {ranked}"
    code, out, _ = cli("check", "--config", str(path), "--json")
    assert json.loads(out)["tool_search_ranking"] == ranked
    path.write_text("[agents.b.permissions]\nplugins = { allow = ['fs'] }\n")  # no agent searches: not said
    code, out, _ = cli("check", "--config", str(path))
    assert "tool search" not in out and "tool_search_ranking" not in cli("check", "--config", str(path), "--json")[1]


def test_check_says_that_an_agent_s_searches_are_ranked_by_bm25_alone_without_the_vectors(tmp_path: Path) -> None:
    _check_says("BM25 (install toolcrib-vectors to rank by meaning too)", tmp_path)


def test_check_says_that_an_agent_s_searches_are_ranked_by_bm25_and_the_vectors(with_vectors: None,
                                                                                tmp_path: Path) -> None:
    _check_says("BM25 and word vectors (toolcrib-vectors 0.2.0)", tmp_path)


@given(denied=st.sets(st.sampled_from(FS_TOOLS)), query=st.sampled_from(
    ["wait a few seconds", "list the files in a folder", "delete a file", "remove everything", "rename it",
     "make a folder", "copy", "xyzzy"]) | st.text(max_size=40))
@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_with_word_vectors_a_search_never_finds_a_hidden_tool(with_vectors: None, denied: set[str],
                                                              query: str) -> None:
    """Meaning widens what a query finds, never past the agent's view: the vectors index that view's tools only."""
    config = ('[agents.a.permissions]\nplugins = { allow = ["fs"] }\n'
              f'tools = {{ deny = {sorted(denied)!r} }}\n').replace("'", '"')
    view = make_host(config, {"fs": toolcrib_fs}).view("a")
    found = [tool["name"] for tool in view.search(query, 13)]
    assert not set(found) & denied and set(found) <= set(view.names)
    assert len(found) == len(set(found))


class _Broken:
    """A vectors package that fails: at indexing, or at a query (what a broken install or a bad table raises)."""

    __version__ = "0"

    def __init__(self, at: str, error: BaseException) -> None:
        self.at, self.error = at, error

    def DenseIndex(self, texts: list[str]) -> Any:  # the package's class, as search calls it
        if self.at == "index":
            raise self.error
        return self

    def similarity(self, query: str) -> Any:
        raise self.error


@pytest.mark.parametrize("at", ["index", "query"])
@pytest.mark.parametrize("error", [ValueError("bad table"), SystemExit(3), MemoryError()])
def test_a_broken_vectors_package_costs_searches_their_meaning_never_their_answers(
        at: str, error: BaseException, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    expected = found("read a file")  # BM25 alone
    monkeypatch.setattr(search, "_vectors", lambda: _Broken(at, error))
    with caplog.at_level("WARNING", logger="toolcrib.search"):
        assert found("read a file") == expected
    why = f"{type(error).__name__}: {error}"
    assert [r.getMessage() for r in caplog.records] == [
        f"toolcrib-vectors failed to index 13 tools ({why}): tool search ranks by BM25 alone" if at == "index" else
        f"toolcrib-vectors failed on a query ({why}): ranked by BM25 alone"]


def test_a_vectors_package_that_cannot_be_imported_is_reported_once_and_bm25_ranks(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import builtins

    real_import = builtins.__import__

    def importing(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "toolcrib_vectors":
            raise RuntimeError("numpy: illegal instruction")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(search, "_vectors", functools.cache(_IMPORTED_VECTORS.__wrapped__))  # not imported yet
    monkeypatch.setattr(builtins, "__import__", importing)
    with caplog.at_level("WARNING", logger="toolcrib.search"):
        assert search._vectors() is None and search._vectors() is None
    assert [r.getMessage() for r in caplog.records] == [
        "toolcrib-vectors cannot be imported (RuntimeError: numpy: illegal instruction): tool search ranks by BM25 "
        "alone"]
