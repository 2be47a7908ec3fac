"""Permission patterns: globs over names (``*`` matches any run of characters), exact and case-sensitive.

In the ``tools`` dimension and in ``ask``, a pattern may carry a specifier that matches the arguments a tool
acts on, Claude Code style: ``shell__exec(git status*)``, ``fs__write_file(docs/*)``. In a specifier
too, ``*`` matches any run of characters, ``/`` included. ``ask`` also takes selectors, which choose tools by
what they are: ``@writes``, ``@destructive``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from toolcrib import uris

DIMENSIONS = ("plugins", "mcps", "tools", "resources", "prompts", "skills", "subagents")

_NAME_CHARS = {
    "plugins": (r"A-Za-z0-9_.\-", "namespaces, or the names of the plugins a pack serves tools of (such as "
                                  "llm-tools-simpleeval): letters, digits, '_', '-' and '.'"),
    "mcps": ("a-z0-9_", "namespaces: lower-case letters, digits and '_'"),
    "tools": ("A-Za-z0-9_", "full tool names: letters, digits and '_'"),
    "resources": (r"!-'+-~", "resource names or URIs: printable characters but spaces, '(' and ')'"),
    "prompts": ("A-Za-z0-9_", "full prompt names: letters, digits and '_'"),
    "skills": (r"A-Za-z0-9_\-", "skill names: letters, digits, '_' and '-'"),
    "subagents": ("A-Za-z0-9_", "agent names: letters, digits and '_'"),
}
_NAME_PATTERNS = {dim: re.compile(rf"[{chars}*]+") for dim, (chars, _) in _NAME_CHARS.items()}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class PatternError(ValueError):
    """A pattern that cannot be used; the message says what a pattern of that kind may hold."""


@dataclass(frozen=True, slots=True)
class Pattern:
    """One compiled pattern. ``specifier`` is the text in parentheses, if any; ``name`` and ``specifier`` hold a URI
    in its normal form (``text`` is the pattern as written)."""

    text: str
    name: str
    specifier: str | None
    _name_glob: Glob | None
    _spec_glob: Glob | None

    def matches(self, name: str) -> bool:
        if self._name_glob is None:
            return name == self.name
        return self._name_glob.matches(name)

    def matches_subject(self, subject: str) -> bool:
        if self._spec_glob is None:
            return subject == self.specifier
        return self._spec_glob.matches(subject)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, slots=True)
class Glob:
    """A glob whose only wildcard is ``*``, matched in linear time: the pieces between stars are found in order,
    each at its leftmost place, which is right for ``*`` alone and never backtracks. (A regex of ``.*`` pieces
    backtracked: ``*rm*-rf*`` against a model-written argument of "rm" x 250,000 held the event loop for
    seconds.)"""

    first: str
    middle: tuple[str, ...]
    last: str

    @classmethod
    def of(cls, text: str) -> Glob | None:
        """The glob of ``text``, or None when it has no ``*`` (compared as a plain string, faster)."""
        if "*" not in text:
            return None
        first, *middle, last = text.split("*")
        return cls(first, tuple(piece for piece in middle if piece), last)

    def matches(self, text: str) -> bool:
        first, last = self.first, self.last
        if len(text) < len(first) + len(last) or not text.startswith(first) or not text.endswith(last):
            return False
        position, end = len(first), len(text) - len(last)
        for piece in self.middle:
            found = text.find(piece, position, end)
            if found < 0:
                return False
            position = found + len(piece)
        return True


class Specifiers:
    """The specifiers of several patterns compiled together: ``first(subject)`` is the index of the first pattern
    (in order) whose specifier matches ``subject``, or None. Exact specifiers are one dict look-up, prefixes
    (``docs/*``) and suffixes (``*.md``) one per distinct length, so the cost grows with those lengths rather than
    with the number of patterns; the other globs (``*rm -rf*``) are tried one by one (each in linear time), none
    after a pattern already found, and only when the subject holds the longest piece of one of them."""

    __slots__ = ("_exact", "_general", "_prefixes", "_screen", "_suffixes")

    def __init__(self, patterns: tuple[Pattern, ...]) -> None:
        exact: dict[str, int] = {}
        prefixes: dict[int, dict[str, list[tuple[int, Glob]]]] = {}
        suffixes: dict[int, dict[str, int]] = {}
        general: list[tuple[int, Glob]] = []
        for index, pattern in enumerate(patterns):
            glob = pattern._spec_glob
            if pattern.specifier is None:
                continue  # (no specifier: nothing to match a subject against)
            if glob is None:
                exact.setdefault(pattern.specifier, index)
            elif glob.first:  # a prefix, then maybe more: the prefix finds it, the glob confirms
                prefixes.setdefault(len(glob.first), {}).setdefault(glob.first, []).append((index, glob))
            elif glob.last and not glob.middle:
                suffixes.setdefault(len(glob.last), {}).setdefault(glob.last, index)
            else:
                general.append((index, glob))
        self._exact = exact
        self._prefixes = tuple(sorted(prefixes.items()))
        self._suffixes = tuple(sorted(suffixes.items()))
        self._general = tuple(general)
        # The others match only where their longest piece is found: one search for any of those pieces (literals,
        # so it never backtracks; in any order, as only whether one is found counts) spares trying them one by one
        # on a subject that holds none. A glob of stars alone has an empty piece, which lets every subject through.
        pieces = {max((glob.first, *glob.middle, glob.last), key=len) for _, glob in general}
        self._screen = re.compile("|".join(map(re.escape, pieces)))

    def first(self, subject: str) -> int | None:
        best = self._exact.get(subject)
        size = len(subject)
        for length, table in self._prefixes:
            if length > size:
                break
            found = table.get(subject[:length])
            if found is not None:
                for index, glob in found:
                    if best is not None and index >= best:
                        break
                    if glob.matches(subject):
                        best = index
                        break
        for length, ends in self._suffixes:
            if length > size:
                break
            ending = ends.get(subject[size - length:])
            if ending is not None and (best is None or ending < best):
                best = ending
        if self._general and self._screen.search(subject) is not None:
            for index, glob in self._general:
                if best is not None and index >= best:
                    break
                if glob.matches(subject):
                    return index
        return best


SELECTORS = {
    "@writes": "every tool not annotated read-only (readOnlyHint), as the host trusts its annotations",
    "@destructive": "every tool that may destroy (not read-only, and not destructiveHint = false)",
}
"""``ask`` entries that choose tools by what they are rather than by name."""


def parse(dimension: str, text: object) -> Pattern:
    """Compile ``text`` as a pattern of ``dimension`` (one of DIMENSIONS, or "ask"). Patterns are immutable, so
    each is compiled once: validating the config and compiling its rules share the work."""
    if not isinstance(text, str):
        raise PatternError(f"a pattern must be a string, not {type(text).__name__}")
    return _parse(dimension, text)


@functools.lru_cache(maxsize=8192)
def _parse(dimension: str, text: str) -> Pattern:
    if dimension == "ask" and text.startswith("@"):
        if text not in SELECTORS:
            raise PatternError(f"{text!r} is not a selector; ask takes tool patterns and "
                               f"{', '.join(repr(k) for k in SELECTORS)}")
        return Pattern(text=text, name=text, specifier=None, _name_glob=None, _spec_glob=None)
    kind = "tools" if dimension == "ask" else dimension
    chars_rule = _NAME_CHARS[kind][1]
    name, specifier = text, None
    if kind == "tools" and "(" in text:
        name, _, rest = text.partition("(")
        if not rest.endswith(")"):
            raise PatternError(f"{text!r}: a specifier ends with ')': tool(specifier)")
        specifier = rest[:-1]
        if not specifier:
            raise PatternError(f"{text!r}: the specifier in parentheses is empty; write the tool name alone")
        if _CONTROL.search(specifier):
            raise PatternError(f"{text!r}: the specifier holds a control character")
    if not name:
        raise PatternError("an empty pattern matches nothing; remove it (use '*' to match everything)")
    if _NAME_PATTERNS[kind].fullmatch(name) is None:
        hint = " and '*', optionally followed by '(specifier)'" if kind == "tools" else " and '*'"
        raise PatternError(f"{text!r} is not a valid pattern: {chars_rule}{hint}")
    # A URI in a pattern (a resource's, or a URL an argument rule names) is matched in its normal form, as every URI
    # it meets is (toolcrib.uris), whether the pattern is a glob or exact: its text stays as written, for the messages
    # that quote it.
    if kind == "resources":
        name = uris.normalize(name)
    if specifier is not None:
        specifier = uris.normalize(specifier)
    return Pattern(
        text=text,
        name=name,
        specifier=specifier,
        _name_glob=Glob.of(name),
        _spec_glob=Glob.of(specifier) if specifier is not None else None,
    )
