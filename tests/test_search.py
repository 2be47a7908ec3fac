"""``AgentView.search`` (``toolcrib.search``): BM25 over the tools one agent sees, on the real fs pack's 13 tools."""

from __future__ import annotations

import pytest
import toolcrib_fs

from conftest import make_host
from toolcrib.search import SearchError, words

EVERYTHING = '[agents.a.permissions]\nplugins = { allow = ["*"] }\ntools = { allow = ["*"] }\n'
NO_REMOVING = '[agents.a.permissions]\nplugins = { allow = ["*"] }\ntools = { deny = ["fs__rm", "fs__mv*"] }\n'


def found(query: str, k: int = 3, config: str = EVERYTHING) -> list[str]:
    view = make_host(config, {"fs": toolcrib_fs}).view("a")
    return [tool["name"] for tool in view.search(query, k)]


@pytest.mark.parametrize(("query", "expected"), [
    ("read a file", ["fs__read_file", "fs__write_file", "fs__find_text"]),
    ("search text in files", ["fs__find_text", "fs__edit", "fs__write_file"]),
    ("move a file", ["fs__rename", "fs__read_file", "fs__find_text"]),
    ("list directory", ["fs__ls", "fs__copy", "fs__rm"]),
    ("replace text", ["fs__edit", "fs__find_text", "fs__write_file"]),
    ("glob", ["fs__glob", "fs__find_text"]),  # the name first, then an argument of that name
    ("readFile", ["fs__read_file", "fs__write_file", "fs__find_text"]),  # camelCase is two words
])
def test_tools_are_ranked_by_their_names_descriptions_and_arguments(query: str, expected: list[str]) -> None:
    assert found(query) == expected


def test_a_served_name_finds_its_tool_first_and_a_regex_matches_served_names_in_list_order() -> None:
    assert found("fs__mkdir", k=1) == ["fs__mkdir"]
    assert found("fs__mkdir")[0] == "fs__mkdir"
    assert found("/^fs__(read|write)/", k=5) == ["fs__read_file", "fs__write_file"]
    assert found("/RM$/", k=5) == ["fs__rm"]  # case-insensitive
    assert found("", k=5) == [] and found("   ") == [] and found("!!!") == []


def test_a_hidden_tool_is_found_by_no_word_no_name_and_no_regex() -> None:
    assert found("remove a file", k=13, config=NO_REMOVING).count("fs__rm") == 0
    assert "fs__rm" not in found("fs__rm", k=13, config=NO_REMOVING)
    assert found("/rm/", k=13, config=NO_REMOVING) == []
    assert found("/.*/", k=13, config=NO_REMOVING) == [
        "fs__batch_edit", "fs__copy", "fs__cwd", "fs__edit", "fs__exist", "fs__find_text", "fs__glob", "fs__ls",
        "fs__mkdir", "fs__read_file", "fs__rename", "fs__write_file"]


def test_one_index_per_view_and_results_as_tools_list_has_them() -> None:
    view = make_host(EVERYTHING, {"fs": toolcrib_fs}).view("a")
    first = view.search("copy", 1)
    assert first == [next(t for t in view.mcp_tools if t["name"] == "fs__copy")]
    assert view._index is view._index


@pytest.mark.parametrize(("query", "k", "message"), [
    ("/[unclosed/", 3, "/[unclosed/ is not a regular expression: unterminated character set at position 0"),
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
