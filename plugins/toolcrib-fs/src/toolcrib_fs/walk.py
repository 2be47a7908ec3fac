"""Walking a directory tree by descriptor (never following symlinks), with caps, and glob patterns."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from toolcrib.workspace import PathError, open_dir_at

MAX_DEPTH = 64


@dataclass
class Budget:
    """How much a walk may do; ``stopped`` says why it stopped early, if it did."""

    entries: int
    seconds: float
    started: float = field(default_factory=time.monotonic)
    stopped: str | None = None

    def spend(self) -> bool:
        """Count one entry; False (and ``stopped`` set) when the walk must stop."""
        if self.stopped is not None:
            return False
        self.entries -= 1
        if self.entries < 0:
            self.stopped = "visited the maximum number of entries"
        elif time.monotonic() - self.started > self.seconds:
            self.stopped = "ran out of time"
        return self.stopped is None


def walk(dirfd: int, prefix: tuple[str, ...], budget: Budget, *, hidden: bool,
         depth: int = 0) -> Iterator[tuple[tuple[str, ...], os.DirEntry[str], int]]:
    """Yield (parts, entry, parent fd) for everything below ``dirfd``, depth first, in name order."""
    if depth > MAX_DEPTH:
        budget.stopped = budget.stopped or f"the tree is deeper than {MAX_DEPTH} levels"
        return
    try:
        with os.scandir(dirfd) as it:
            entries = sorted(it, key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if not hidden and entry.name.startswith("."):
            continue
        if not budget.spend():
            return
        parts = (*prefix, entry.name)
        yield parts, entry, dirfd
        if entry.is_dir(follow_symlinks=False):
            try:
                child = open_dir_at(dirfd, entry.name)
            except OSError:
                continue  # swapped for a symlink, or vanished: not followed
            try:
                yield from walk(child, parts, budget, hidden=hidden, depth=depth + 1)
            finally:
                os.close(child)
            if budget.stopped is not None:
                return


class Glob:
    """A compiled glob over workspace-relative paths, matched component by component in time linear in the path
    and the pattern (a regex would backtrack: ``*a*a*a*a*b`` against a long name took seconds, more stars hours).

    ``*`` and ``?`` stay within one component, ``**`` spans any number of them, ``[abc]`` / ``[a-z]`` / ``[!a]``
    are sets. Unless ``dot``, wildcards do not match a leading ``.`` (as in a shell).
    """

    def __init__(self, segments: tuple[_Segment | None, ...], dot: bool) -> None:
        self._segments = segments  # None stands for '**'
        self._dot = dot

    def matches(self, parts: tuple[str, ...] | list[str]) -> bool:
        """Whether the path with these components matches (an NFA walk: every pattern position reachable)."""
        segments, dot = self._segments, self._dot
        states = self._closure({0})
        for name in parts:
            following = set()
            for i in states:
                if i == len(segments):
                    continue
                segment = segments[i]
                if segment is None:
                    if dot or not name.startswith("."):
                        following.add(i)  # '**' takes this component and may take more
                        if i == len(segments) - 1:
                            following.add(i + 1)  # a trailing '**' is done once it took one
                elif segment.matches(name, dot):
                    following.add(i + 1)
            if not following:
                return False
            states = self._closure(following)
        return len(segments) in states

    def _closure(self, states: set[int]) -> set[int]:
        """Add the positions reachable by letting '**' match no component (one that ends the pattern must match
        at least one: ``docs/**`` is what is below docs, not docs itself)."""
        segments = self._segments
        todo = list(states)
        while todo:
            i = todo.pop()
            if i < len(segments) - 1 and segments[i] is None and i + 1 not in states:
                states.add(i + 1)
                todo.append(i + 1)
        return states


class _Segment:
    """One component of a pattern. With at most one ``*`` a regex matches it in linear time; with more, the
    classic greedy wildcard match (one remembered star) does, in time proportional to name x pattern."""

    def __init__(self, text: str, pattern: str) -> None:
        self.literal_dot = text.startswith(".")
        self.tokens: list[str | re.Pattern[str]] = []  # '*', '?', a literal character, or a set
        i = 0
        while i < len(text):
            c = text[i]
            if c == "[":
                end = text.find("]", i + 2 if text[i + 1:i + 2] in ("!", "^") else i + 1)
                if end != -1:
                    body = text[i + 1:end]
                    negate = body[:1] in ("!", "^")
                    body = body[1:] if negate else body
                    try:  # (a backslash never gets here: compile_glob refuses it)
                        self.tokens.append(re.compile("[" + ("^/" if negate else "") + body + "]"))
                    except re.error as exc:
                        raise PathError(f"{pattern!r}: the set [{text[i + 1:end]}] is not valid: {exc}") from None
                    i = end + 1
                    continue
            if not (c == "*" and self.tokens[-1:] == ["*"]):  # '**' inside a name is one '*'
                self.tokens.append(c)
            i += 1
        self.regex: re.Pattern[str] | None = None
        if self.tokens.count("*") <= 1:
            self.regex = re.compile("".join(
                "[^/]*" if t == "*" else "[^/]" if t == "?" else re.escape(t) if isinstance(t, str) else t.pattern
                for t in self.tokens))

    def matches(self, name: str, dot: bool) -> bool:
        if name.startswith(".") and not dot and not self.literal_dot:
            return False
        if self.regex is not None:
            return self.regex.fullmatch(name) is not None
        tokens = self.tokens
        t = n = 0
        star, resume = -1, 0
        while n < len(name):
            if t < len(tokens):
                token = tokens[t]
                if token == "*":
                    star, resume = t, n
                    t += 1
                    continue
                if _fits(token, name[n]):
                    t += 1
                    n += 1
                    continue
            if star < 0:
                return False
            resume += 1  # let the last star take one more character, and try again from there
            t, n = star + 1, resume
        return all(token == "*" for token in tokens[t:])


def _fits(token: str | re.Pattern[str], char: str) -> bool:
    if isinstance(token, str):
        return token == "?" or token == char
    return token.match(char) is not None


@lru_cache(maxsize=256)
def compile_glob(pattern: str, dot: bool = False) -> Glob:
    """Compile ``pattern`` (see ``Glob``); ``PathError`` for one that leaves the workspace or cannot be used."""
    if pattern.startswith(("/", "~")) or "\\" in pattern or "\x00" in pattern:
        raise PathError(f"{pattern!r}: a pattern is relative to the workspace and uses '/' as the separator")
    texts = [s for s in pattern.split("/") if s not in ("", ".")]
    if ".." in texts:
        raise PathError(f"{pattern!r}: '..' is not allowed; patterns stay inside the workspace")
    if not texts:
        raise PathError(f"{pattern!r}: an empty pattern matches nothing")
    segments = tuple(None if text == "**" else _Segment(text, pattern) for text in texts)
    return Glob(segments, dot)
