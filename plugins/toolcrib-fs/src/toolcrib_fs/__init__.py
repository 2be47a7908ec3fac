"""toolcrib pack ``fs``: file tools confined to the workspace. See README.md for the tools and the settings."""

from __future__ import annotations

import os
import re
import stat
import time
from typing import Annotated, Any

import regex as regex_module
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

import toolcrib
from toolcrib import Context, ToolError
from toolcrib.workspace import PathError, Root, display, parts_of, read_at, root_of
from toolcrib_fs.walk import Budget, compile_glob, walk

__all__ = ["Settings", "toolcrib_settings_model", "toolcrib_tools"]

RELATIVE = "relative to the workspace root, '/' between components"


def _canonical(path: str) -> str:
    """One spelling per path ('./a//b/' -> 'a/b'), so argument rules (fs__write_file(secrets/*)) see what is used;
    a path that is refused anyway is left as given, for the refusal to quote."""
    try:
        return display(parts_of(path))
    except PathError:
        return path


Path_ = Annotated[str, Field(description=f"Path {RELATIVE}", max_length=4096), AfterValidator(_canonical)]
Dir_ = Annotated[str, Field(max_length=4096, description=f"Directory {RELATIVE}"), AfterValidator(_canonical)]
BINARY_SNIFF = 8192


class Settings(BaseModel):
    """``[packs.fs]``."""

    model_config = ConfigDict(extra="forbid")

    max_read_bytes: int = Field(256 * 1024, gt=0, description="most bytes read_file returns")
    max_write_bytes: int = Field(10 * 1024 * 1024, gt=0, description="largest file write_file/edit produce")
    max_entries: int = Field(1000, gt=0, description="most entries ls/glob return")
    max_matches: int = Field(200, gt=0, description="most lines find_text returns")
    max_seconds: float = Field(10.0, gt=0, description="time budget of glob/find_text/copy")
    max_search_file_bytes: int = Field(2 * 1024 * 1024, gt=0, description="larger files are skipped by find_text")


def _root(ctx: Context) -> Root:
    return root_of(ctx.workspace)


def _settings(ctx: Context) -> Settings:
    return ctx.settings if isinstance(ctx.settings, Settings) else Settings()


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _is_binary(data: bytes) -> bool:
    if b"\x00" in data[:BINARY_SNIFF]:
        return True
    try:
        data[:BINARY_SNIFF].decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start < len(data[:BINARY_SNIFF]) - 4  # a character cut at the sniff boundary is fine
    return False


READ_ONLY = {"readOnlyHint": True, "idempotentHint": True, "openWorldHint": False}
WRITES = {"destructiveHint": True, "openWorldHint": False}
# Run on the host's event loop rather than in a worker thread (inline): each does a few system calls on one regular
# file or none (never a FIFO or device: toolcrib.workspace opens without blocking), and read_file reads at most
# max_read_bytes. A write (synced to disk), a listing or a search can take long, and keeps its worker thread.
QUICK = True


@toolcrib.tool(annotations=READ_ONLY, inline=QUICK)
def cwd(ctx: Context) -> str:
    """Return the workspace root: the directory every path of the fs tools is relative to."""
    return str(ctx.workspace)


@toolcrib.tool(annotations=READ_ONLY, rule_subject="path", inline=QUICK)
def read_file(
    path: Path_,
    ctx: Context,
    start_line: Annotated[int, Field(ge=1, description="First line to return (1-based)")] = 1,
    max_lines: Annotated[int | None, Field(ge=1, description="How many lines to return (default: all)")] = None,
) -> str:
    """Read a text file in the workspace. Long files are cut at the size limit with a note saying how to read
    on; binary files are reported, not dumped."""
    settings = _settings(ctx)
    parts = parts_of(path, allow_root=False)
    root = _root(ctx)
    data, size = root.read_bytes(parts, settings.max_read_bytes + 1)
    if _is_binary(data):
        return f"[{display(parts)} is a binary file of {size} bytes; it is not shown as text]"
    truncated = len(data) > settings.max_read_bytes
    text = data[: settings.max_read_bytes].decode("utf-8", errors="replace")
    if start_line == 1 and max_lines is None and not truncated:
        return text  # the whole file (its lines, joined again, are the text): no need to split it
    lines = text.splitlines(keepends=True)
    end = len(lines) if max_lines is None else min(len(lines), start_line - 1 + max_lines)
    chosen = "".join(lines[start_line - 1:end])
    if truncated:
        chosen += (f"\n[... truncated by fs__read_file: the file has {size} bytes and at most "
                   f"{settings.max_read_bytes} are read; use start_line={end + 1} to read on]")
    elif max_lines is not None and end < len(lines):
        left = len(lines) - end
        chosen += f"\n[... {left} more line{'' if left == 1 else 's'}; use start_line={end + 1} to read on]"
    return chosen


@toolcrib.tool(annotations=WRITES, rule_subject="path")
def write_file(
    path: Path_,
    content: Annotated[str, Field(description="The whole new content of the file")],
    ctx: Context,
    create_parents: Annotated[bool, Field(description="Create missing parent directories")] = True,
) -> str:
    """Write a text file in the workspace, replacing it if it exists. The write is atomic: readers see the old
    file or the new one, never half of it."""
    data = content.encode("utf-8")
    limit = _settings(ctx).max_write_bytes
    if len(data) > limit:
        raise ToolError(f"{path}: the content is {len(data)} bytes, more than the limit of {limit}")
    parts = parts_of(path, allow_root=False)
    existed = _root(ctx).write_bytes(parts, data, create_parents=create_parents)
    return f"{'replaced' if existed else 'created'} {display(parts)} ({len(data)} bytes)"


class Replacement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    old_text: str = Field(min_length=1, description="Exact text to replace; it must occur exactly once")
    new_text: str = Field(description="Text to put in its place")


def _replace(parts: tuple[str, ...], text: str, edits: list[Replacement]) -> str:
    for i, edit in enumerate(edits):
        count = text.count(edit.old_text)
        where = f"edit {i + 1}: " if len(edits) > 1 else ""
        if count == 0:
            raise ToolError(f"{display(parts)}: {where}old_text was not found; read the file and copy the text "
                            "exactly (whitespace included)")
        if count > 1:
            raise ToolError(f"{display(parts)}: {where}old_text occurs {count} times; include more surrounding "
                            "text so it occurs exactly once")
        text = text.replace(edit.old_text, edit.new_text, 1)
    return text


def _edit(ctx: Context, path: str, edits: list[Replacement]) -> str:
    settings = _settings(ctx)
    parts = parts_of(path, allow_root=False)
    root = _root(ctx)
    root.guard(parts)  # before reading: a protected file is refused as such, whatever the edit
    data, size = root.read_bytes(parts, settings.max_write_bytes + 1)
    if size > settings.max_write_bytes:
        raise ToolError(f"{display(parts)}: the file is {size} bytes, more than the edit limit of "
                        f"{settings.max_write_bytes}")
    if _is_binary(data):
        raise ToolError(f"{display(parts)}: is a binary file; it cannot be edited as text")
    new = _replace(parts, data.decode("utf-8"), edits).encode("utf-8")
    if len(new) > settings.max_write_bytes:
        raise ToolError(f"{display(parts)}: the result would be {len(new)} bytes, more than the limit")
    root.write_bytes(parts, new)
    return f"edited {display(parts)} ({len(edits)} replacement{'s' if len(edits) != 1 else ''})"


@toolcrib.tool(annotations=WRITES, rule_subject="path")
def edit(
    path: Path_,
    old_text: Annotated[str, Field(min_length=1, description="Exact text to replace; it must occur exactly once")],
    new_text: Annotated[str, Field(description="Text to put in its place")],
    ctx: Context,
) -> str:
    """Replace one occurrence of a text in a file. Fails, changing nothing, when the text is absent or occurs
    more than once."""
    return _edit(ctx, path, [Replacement(old_text=old_text, new_text=new_text)])


@toolcrib.tool(annotations=WRITES, rule_subject="path")
def batch_edit(
    path: Path_,
    edits: Annotated[list[Replacement], Field(min_length=1, max_length=100, description="Applied in order")],
    ctx: Context,
) -> str:
    """Make several replacements in one file, in order, each as fs__edit does. All or nothing: if one fails,
    the file is left unchanged."""
    return _edit(ctx, path, edits)


@toolcrib.tool(annotations={"destructiveHint": False, "idempotentHint": True, "openWorldHint": False},
               rule_subject="path")
def mkdir(path: Path_, ctx: Context) -> str:
    """Create a directory in the workspace, with any missing parents. Succeeds if it already exists."""
    parts = parts_of(path, allow_root=False)
    root = _root(ctx)
    existing = root.lstat(parts)
    if existing is not None and not stat.S_ISDIR(existing.st_mode):
        raise ToolError(f"{display(parts)}: already exists and is a {_kind(existing.st_mode)}")
    with root.directory(parts, create=True):
        pass
    return f"{'exists' if existing is not None else 'created'}: {display(parts)}/"


@toolcrib.tool(annotations=WRITES, rule_subject="path")
def rm(
    path: Path_,
    ctx: Context,
    recursive: Annotated[bool, Field(strict=True, description="Needed to remove a directory and all it holds")]
    = False,
) -> str:
    """Remove a file, a symbolic link (the link, never its target) or, with recursive=true, a directory and
    everything in it. The workspace root itself is never removed."""
    parts = parts_of(path, allow_root=False)
    try:
        kind = _root(ctx).remove(parts, recursive=recursive)
    except PathError as exc:
        if str(exc) == f"{display(parts)}: is a directory":
            raise ToolError(f"{display(parts)}: is a directory; pass recursive=true to remove it and everything in "
                            "it") from None
        raise
    return f"removed directory {display(parts)}/" if kind == "directory" else f"removed {display(parts)}"


@toolcrib.tool(annotations=READ_ONLY, rule_subject="pattern")
def glob(
    pattern: Annotated[str, Field(max_length=1024, description="Like '**/*.py' or 'docs/*.md' ('**': any depth)")],
    ctx: Context,
    hidden: Annotated[bool, Field(description="Also match names starting with '.'")] = False,
) -> dict[str, Any]:
    """Find paths in the workspace matching a glob pattern. Results are capped; 'truncated' says when."""
    settings = _settings(ctx)
    matcher = compile_glob(pattern, hidden)
    budget = Budget(entries=settings.max_entries * 50, seconds=settings.max_seconds)
    matches: list[str] = []
    truncated = None
    with _root(ctx).directory(()) as fd:
        for parts, entry, _ in walk(fd, (), budget, hidden=hidden or "/." in "/" + pattern):
            if matcher.matches(parts):
                matches.append("/".join(parts) + ("/" if entry.is_dir(follow_symlinks=False) else ""))
                if len(matches) >= settings.max_entries:
                    truncated = f"stopped at {settings.max_entries} matches"
                    break
    return {"pattern": pattern, "matches": matches, "truncated": truncated or budget.stopped}


@toolcrib.tool(annotations=READ_ONLY, rule_subject="path")
def ls(
    ctx: Context,
    path: Dir_ = ".",
) -> dict[str, Any]:
    """List a directory of the workspace: each entry's name, type (file, directory, symlink, other) and size."""
    settings = _settings(ctx)
    parts = parts_of(path)
    entries = []
    truncated = None
    with _root(ctx).directory(parts) as fd, os.scandir(fd) as it:
        for entry in sorted(it, key=lambda e: e.name):
            if len(entries) >= settings.max_entries:
                truncated = f"stopped at {settings.max_entries} entries"
                break
            st = entry.stat(follow_symlinks=False)
            item: dict[str, Any] = {"name": entry.name, "type": _kind(st.st_mode)}
            if stat.S_ISREG(st.st_mode):
                item["size"] = st.st_size
            elif stat.S_ISLNK(st.st_mode):
                item["target"] = os.readlink(entry.name, dir_fd=fd)
            entries.append(item)
    return {"path": display(parts), "entries": entries, "truncated": truncated}


@toolcrib.tool(annotations=READ_ONLY, rule_subject="path", inline=QUICK)
def exist(path: Path_, ctx: Context) -> dict[str, Any]:
    """Say whether a path exists in the workspace, and what it is (file, directory, symlink, other)."""
    parts = parts_of(path)
    st = _root(ctx).lstat(parts)
    if st is None:
        return {"path": display(parts), "exists": False}
    result: dict[str, Any] = {"path": display(parts), "exists": True, "type": _kind(st.st_mode)}
    if stat.S_ISREG(st.st_mode):
        result["size"] = st.st_size
    return result


@toolcrib.tool(annotations=READ_ONLY, rule_subject="path")
def find_text(
    query: Annotated[str, Field(min_length=1, max_length=1000, description="Text (or regex) to look for")],
    ctx: Context,
    path: Annotated[str, Field(max_length=4096, description=f"Directory or file to search, {RELATIVE}"),
                    AfterValidator(_canonical)] = ".",
    glob: Annotated[str | None, Field(description="Only files whose path matches this glob, like '**/*.py'")]
    = None,
    regex: Annotated[bool, Field(description="Treat query as a Python regular expression")] = False,
    ignore_case: bool = False,
    hidden: Annotated[bool, Field(description="Also search names starting with '.'")] = False,
) -> dict[str, Any]:
    """Search the text of files in the workspace, line by line. Returns 'path:line: text' matches, capped in
    number, time and file size; 'truncated' says when the search stopped early. Binary files are skipped."""
    settings = _settings(ctx)
    if regex:
        # The `regex` module, not `re`: a model can write a pattern that backtracks for hours on one line, and
        # only `regex` can stop a match part-way (its timeout); `re` would hold the worker thread until it ends.
        try:
            pattern = regex_module.compile(query, regex_module.IGNORECASE if ignore_case else 0)
        except regex_module.error as exc:
            raise ToolError(f"query is not a valid regular expression: {exc}") from None
    else:
        pattern = re.compile(re.escape(query), re.IGNORECASE if ignore_case else 0)  # linear: no timeout needed
    only = compile_glob(glob, hidden) if glob else None
    parts = parts_of(path)
    root = _root(ctx)
    budget = Budget(entries=settings.max_entries * 50, seconds=settings.max_seconds)
    matches: list[str] = []
    skipped = 0
    truncated = None

    def search(file_parts: tuple[str, ...], dirfd: int, name: str) -> bool:
        nonlocal skipped, truncated
        found = read_at(dirfd, name, settings.max_search_file_bytes)
        if found is None:
            return True
        data, size = found
        if size > settings.max_search_file_bytes:
            skipped += 1
            return True
        if _is_binary(data):
            return True
        rel = "/".join(file_parts)
        for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
            try:
                if regex:  # what is left of the budget; never negative, which `regex` reads as "no limit"
                    left = max(0.0, budget.seconds - (time.monotonic() - budget.started))
                    found = pattern.search(line[:10_000], timeout=left)
                else:
                    found = pattern.search(line[:10_000])
            except TimeoutError:
                truncated = "ran out of time"
                return False
            if found:
                shown = line if len(line) <= 300 else line[:300] + "..."
                matches.append(f"{rel}:{number}: {shown}")
                if len(matches) >= settings.max_matches:
                    truncated = f"stopped at {settings.max_matches} matches"
                    return False
            if number % 1000 == 0 and time.monotonic() - budget.started > budget.seconds:
                truncated = "ran out of time"
                return False
        return True

    st = root.lstat(parts)
    if st is None:
        raise PathError(f"{display(parts)}: not found", missing=True)
    if stat.S_ISREG(st.st_mode):
        with root.parent(parts) as (dirfd, name):
            search(parts, dirfd, name)
    else:
        with root.directory(parts) as fd:
            for file_parts, entry, dirfd in walk(fd, parts, budget, hidden=hidden):
                if not entry.is_file(follow_symlinks=False):
                    continue
                if only is not None and not only.matches(file_parts):
                    continue
                if not search(file_parts, dirfd, entry.name):
                    break
    result: dict[str, Any] = {"query": query, "matches": matches, "truncated": truncated or budget.stopped}
    if skipped:
        result["skipped_large_files"] = skipped
    return result


Overwrite = Annotated[bool, Field(strict=True, description="Replace an existing destination file")]


@toolcrib.tool(annotations=WRITES, rule_subject=("source", "destination"))
def rename(source: Path_, destination: Path_, ctx: Context, overwrite: Overwrite = False) -> str:
    """Rename or move a file or directory within the workspace."""
    src, dst = parts_of(source, allow_root=False), parts_of(destination, allow_root=False)
    try:
        _root(ctx).rename(src, dst, overwrite=overwrite)
    except PathError as exc:
        if str(exc) == f"{display(dst)}: already exists" and not overwrite:
            raise ToolError(f"{display(dst)}: already exists; pass overwrite=true to replace it") from None
        raise
    return f"renamed {display(src)} to {display(dst)}"


@toolcrib.tool(annotations=WRITES, rule_subject=("source", "destination"))
def copy(source: Path_, destination: Path_, ctx: Context, overwrite: Overwrite = False) -> str:
    """Copy a file, or a directory with everything in it, within the workspace. Symbolic links are not copied
    (they are listed as skipped)."""
    settings = _settings(ctx)
    src, dst = parts_of(source, allow_root=False), parts_of(destination, allow_root=False)
    if dst[: len(src)] == src:
        raise ToolError(f"{display(dst)}: cannot copy {display(src)} into itself")
    root = _root(ctx)
    root.guard(dst)
    st = root.lstat(src)
    if st is None:
        raise PathError(f"{display(src)}: not found", missing=True)
    if stat.S_ISREG(st.st_mode):
        data, _ = root.read_bytes(src, settings.max_write_bytes + 1)
        if len(data) > settings.max_write_bytes:
            raise ToolError(f"{display(src)}: larger than the copy limit of {settings.max_write_bytes} bytes")
        root.write_bytes(dst, data, overwrite=overwrite)
        return f"copied {display(src)} to {display(dst)}"
    if not stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{display(src)}: only files and directories are copied")
    if root.lstat(dst) is not None:
        raise ToolError(f"{display(dst)}: already exists; copy a directory only to a new path")
    budget = Budget(entries=settings.max_entries * 50, seconds=settings.max_seconds)
    copied, skipped, total = 0, [], 0
    with root.directory(src) as sfd:
        with root.directory(dst, create=True):
            pass
        for parts, entry, dirfd in walk(sfd, (), budget, hidden=True):
            target = dst + parts
            if entry.is_dir(follow_symlinks=False):
                with root.directory(target, create=True):
                    pass
            elif entry.is_file(follow_symlinks=False):
                found = read_at(dirfd, entry.name, settings.max_write_bytes)
                if found is None:  # swapped for something else since it was listed
                    skipped.append("/".join((*src, *parts)))
                    continue
                data, size = found
                total += size
                if size > settings.max_write_bytes or total > settings.max_write_bytes * 10:
                    raise ToolError(f"{display(src)}: more data than the copy limit; copied {copied} files so far")
                root.write_bytes(target, data, overwrite=False)
                copied += 1
            else:
                skipped.append("/".join((*src, *parts)))
    note = f"; skipped (not files or directories): {', '.join(skipped)}" if skipped else ""
    stopped = f"; stopped early: {budget.stopped}" if budget.stopped else ""
    return f"copied {display(src)}/ to {display(dst)}/ ({copied} files){note}{stopped}"


TOOLS = [cwd, read_file, write_file, edit, batch_edit, mkdir, rm, glob, ls, exist, find_text, rename, copy]


@toolcrib.hookimpl
def toolcrib_tools() -> list[Any]:
    return TOOLS


@toolcrib.hookimpl
def toolcrib_settings_model() -> type[BaseModel]:
    return Settings
