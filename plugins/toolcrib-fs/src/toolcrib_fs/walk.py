"""Walking a directory tree by descriptor (never following symlinks), with caps, and glob patterns."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache

from toolcrib.workspace import DIR_FLAGS, PathError

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
                child = os.open(entry.name, DIR_FLAGS, dir_fd=dirfd)
            except OSError:
                continue  # swapped for a symlink, or vanished: not followed
            try:
                yield from walk(child, parts, budget, hidden=hidden, depth=depth + 1)
            finally:
                os.close(child)
            if budget.stopped is not None:
                return


@lru_cache(maxsize=256)
def compile_glob(pattern: str, dot: bool = False) -> re.Pattern[str]:
    """A glob over workspace-relative paths: ``*`` and ``?`` stay within one component, ``**`` spans any number
    of them, ``[abc]`` is a set. Unless ``dot``, wildcards do not match a leading ``.`` (as in a shell)."""
    if pattern.startswith(("/", "~")) or "\\" in pattern or "\x00" in pattern:
        raise PathError(f"{pattern!r}: a pattern is relative to the workspace and uses '/' as the separator")
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    if ".." in segments:
        raise PathError(f"{pattern!r}: '..' is not allowed; patterns stay inside the workspace")
    if not segments:
        raise PathError(f"{pattern!r}: an empty pattern matches nothing")
    out = []
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == "**":
            name = r"[^/]+" if dot else r"[^/.][^/]*"
            out.append(rf"(?:{name}(?:/{name})*)?" if last else rf"(?:{name}/)*")
            continue
        out.append(_segment(segment, dot) + ("" if last else "/"))
    return re.compile("".join(out))


def _segment(segment: str, dot: bool) -> str:
    regex = "" if dot or segment.startswith(".") else "(?!\\.)"
    i = 0
    while i < len(segment):
        c = segment[i]
        if c == "*":
            regex += "[^/]*"
        elif c == "?":
            regex += "[^/]"
        elif c == "[":
            end = segment.find("]", i + 2 if segment[i + 1:i + 2] in ("!", "^") else i + 1)
            if end == -1:
                regex += re.escape(c)
            else:
                body = segment[i + 1:end]
                negate = body[:1] in ("!", "^")
                body = body[1:] if negate else body
                regex += "[" + ("^/" if negate else "") + body.replace("\\", "\\\\") + "]"
                i = end
        else:
            regex += re.escape(c)
        i += 1
    return regex
