"""Glob patterns: the component-by-component matcher against a regex reference, and patterns that made a regex
backtrack without end."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from toolcrib_fs.walk import compile_glob

from toolcrib.workspace import PathError


def reference(pattern: str, dot: bool) -> re.Pattern[str]:
    """The same language as one regex (what the pack used before; right, but exponential on some patterns)."""
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    out = []
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            name = r"[^/]+" if dot else r"[^/.][^/]*"
            out.append(rf"(?:{name}(?:/{name})*)?" if last else rf"(?:{name}/)*")
            continue
        regex = "" if dot or segment.startswith(".") else r"(?!\.)"
        j = 0
        while j < len(segment):
            c = segment[j]
            end = segment.find("]", j + 2 if segment[j + 1:j + 2] in ("!", "^") else j + 1) if c == "[" else -1
            if c == "*":
                regex += "[^/]*"
            elif c == "?":
                regex += "[^/]"
            elif end != -1:
                body = segment[j + 1:end]
                negate = body[:1] in ("!", "^")
                regex += "[" + ("^/" if negate else "") + (body[1:] if negate else body) + "]"
                j = end
            else:
                regex += re.escape(c)
            j += 1
        out.append(regex + ("" if last else "/"))
    return re.compile("".join(out))


names = st.text(alphabet="ab.", min_size=1, max_size=6).filter(lambda s: s not in (".", ".."))
segments = st.one_of(st.just("**"), st.lists(st.sampled_from(["a", "b", ".", "*", "?", "[ab]", "[!a]", "[a-b]"]),
                                             min_size=1, max_size=5).map("".join))


@settings(max_examples=1500, deadline=None)
@given(pattern=st.lists(segments, min_size=1, max_size=4).map("/".join).filter(lambda p: ".." not in p.split("/")),
       path=st.lists(names, min_size=1, max_size=4), dot=st.booleans())
@example(pattern="**", path=[".git", "x"], dot=False)
@example(pattern="**/a", path=["a"], dot=False)
@example(pattern="a/**", path=["a", "b", "c"], dot=False)
@example(pattern="*a*b*", path=["xaxbx"], dot=False)
@example(pattern=".*", path=[".a"], dot=False)
def test_the_matcher_agrees_with_the_regex_reference(pattern: str, path: list[str], dot: bool) -> None:
    try:
        glob = compile_glob(pattern, dot)
    except PathError:
        return  # patterns that reduce to nothing ('.', '/') are refused, the same for both
    assert glob.matches(path) == (reference(pattern, dot).fullmatch("/".join(path)) is not None)


@pytest.mark.parametrize(("pattern", "name"), [
    ("*a" * 12 + "*b", "a" * 250),
    ("*" + "?*" * 20 + "b", "a" * 250),
    ("a*a*a*a*a*a*a*a*a*a*", "a" * 250),
])
def test_patterns_that_made_a_regex_backtrack_are_answered(pattern: str, name: str) -> None:
    # With the regex, the first of these took hours; here each is a few thousand steps. No time is asserted: a
    # regression shows as a test that never ends.
    assert compile_glob(pattern).matches([name]) is pattern.endswith("*")


def test_many_double_stars_stay_linear_across_components() -> None:
    assert compile_glob("**/" * 30 + "b").matches(["a"] * 60) is False
    assert compile_glob("**/" * 30 + "b").matches(["a"] * 60 + ["b"]) is True


def test_a_set_that_is_not_a_set_is_a_clear_error() -> None:
    with pytest.raises(PathError) as info:
        compile_glob("[z-a].txt")
    assert str(info.value) == "'[z-a].txt': the set [z-a] is not valid: bad character range z-a at position 1"
