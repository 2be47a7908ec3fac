"""toolcrib-fs through the full pipeline, in real temporary workspaces, against every escape route."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import toolcrib_fs

import toolcrib
from toolcrib.config import parse_config

CONFIG = """
[host]
workspace = "ws"

[packs.fs]
max_read_bytes = 64
max_entries = 5
max_matches = 3

[agents.dev]
[agents.dev.permissions]
plugins = { allow = ["fs"] }
tools = { allow = ["fs__*"] }

[agents.reader]
mode = "plan"
[agents.reader.permissions]
plugins = { allow = ["fs"] }
tools = { allow = ["fs__*"] }
"""


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws-secrets").mkdir()
    (tmp_path / "ws-secrets" / "key").write_text("SECRET")
    (tmp_path / "outside.txt").write_text("OUTSIDE")
    return tmp_path / "ws"


@pytest.fixture
def host(ws: Path) -> toolcrib.Host:
    return toolcrib.Host(parse_config(CONFIG, "toolcrib.toml", ws.parent), plugins={"fs": toolcrib_fs},
                         autoload=False, env={})


def call(host: toolcrib.Host, tool: str, agent: str = "dev", **args: Any) -> toolcrib.ToolResult:
    return anyio.run(lambda: host.call(agent, f"fs__{tool}", args))


def ok(host: toolcrib.Host, tool: str, **args: Any) -> Any:
    result = call(host, tool, **args)
    assert not result.is_error, result.text
    return result.structured_content if result.structured_content is not None else result.text


def error(host: toolcrib.Host, tool: str, **args: Any) -> str:
    result = call(host, tool, **args)
    assert result.is_error, result.text
    return result.text


def test_views_and_annotations(host: toolcrib.Host) -> None:
    assert host.view("dev").names == ["fs__batch_edit", "fs__copy", "fs__cwd", "fs__edit", "fs__exist",
                                      "fs__find_text", "fs__glob", "fs__ls", "fs__mkdir", "fs__read_file",
                                      "fs__rename", "fs__rm", "fs__write_file"]
    assert host.view("reader").names == ["fs__cwd", "fs__exist", "fs__find_text", "fs__glob", "fs__ls",
                                         "fs__read_file"]
    destructive = {vt.name for vt in host.view("dev").tools if vt.tool.annotations.get("destructiveHint")}
    assert {"fs__rm", "fs__write_file", "fs__edit"} <= destructive


def test_read_write_edit_round_trip(host: toolcrib.Host, ws: Path) -> None:
    assert ok(host, "write_file", path="docs/a.md", content="one\ntwo\nthree\n") == "created docs/a.md (14 bytes)"
    assert ok(host, "read_file", path="docs/a.md") == "one\ntwo\nthree\n"
    assert ok(host, "read_file", path="docs/a.md", start_line=2, max_lines=1) == (
        "two\n\n[... 1 more line; use start_line=3 to read on]")
    assert ok(host, "read_file", path="docs/a.md", max_lines=1) == (
        "one\n\n[... 2 more lines; use start_line=2 to read on]")
    assert ok(host, "edit", path="docs/a.md", old_text="two", new_text="2") == "edited docs/a.md (1 replacement)"
    assert (ws / "docs/a.md").read_text() == "one\n2\nthree\n"
    assert error(host, "edit", path="docs/a.md", old_text="four", new_text="4") == (
        "docs/a.md: old_text was not found; read the file and copy the text exactly (whitespace included)")
    ok(host, "write_file", path="dup.txt", content="x x")
    assert error(host, "edit", path="dup.txt", old_text="x", new_text="y") == (
        "dup.txt: old_text occurs 2 times; include more surrounding text so it occurs exactly once")
    assert error(host, "batch_edit", path="docs/a.md", edits=[
        {"old_text": "one", "new_text": "1"}, {"old_text": "nine", "new_text": "9"}]) == (
        "docs/a.md: edit 2: old_text was not found; read the file and copy the text exactly (whitespace included)")
    assert (ws / "docs/a.md").read_text() == "one\n2\nthree\n"  # all or nothing
    ok(host, "batch_edit", path="docs/a.md", edits=[{"old_text": "one", "new_text": "1"},
                                                    {"old_text": "three", "new_text": "3"}])
    assert (ws / "docs/a.md").read_text() == "1\n2\n3\n"


def test_caps_and_binary(host: toolcrib.Host, ws: Path) -> None:
    (ws / "big.txt").write_text("x" * 100)
    assert ok(host, "read_file", path="big.txt") == "x" * 64 + (
        "\n[... truncated by fs__read_file: the file has 100 bytes and at most 64 are read; use start_line=2 to "
        "read on]")
    (ws / "blob.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    assert ok(host, "read_file", path="blob.bin") == "[blob.bin is a binary file of 7 bytes; it is not shown as text]"
    for i in range(8):
        (ws / f"f{i}.txt").write_text("needle\n")
    listing = ok(host, "ls")
    assert [e["name"] for e in listing["entries"]] == ["big.txt", "blob.bin", "f0.txt", "f1.txt", "f2.txt"]
    assert listing["truncated"] == "stopped at 5 entries"
    found = ok(host, "find_text", query="needle")
    assert found["matches"] == ["f0.txt:1: needle", "f1.txt:1: needle", "f2.txt:1: needle"]
    assert found["truncated"] == "stopped at 3 matches"
    assert ok(host, "glob", pattern="f*.txt")["truncated"] == "stopped at 5 matches"


@pytest.mark.waits
def test_a_pathological_regex_stops_at_the_time_budget(ws: Path) -> None:
    """`(a|aa)+$` against 'aaa...ab' backtracks for hours under `re`; find_text stops it at max_seconds and says so,
    keeping what it found before."""
    config = CONFIG.replace("max_matches = 3", "max_matches = 3\nmax_seconds = 1.5")
    host = toolcrib.Host(parse_config(config, "toolcrib.toml", ws.parent), plugins={"fs": toolcrib_fs},
                         autoload=False, env={})
    (ws / "a.txt").write_text("aa\n" + "a" * 60 + "b\n")
    assert ok(host, "find_text", query="(a|aa)+$", regex=True) == {"query": "(a|aa)+$", "matches": ["a.txt:1: aa"],
                                                                   "truncated": "ran out of time"}
    # the budget is shared: with it spent, the next file is not searched at all
    (ws / "b.txt").write_text("aa\n")
    assert ok(host, "find_text", query="(a|aa)+$", regex=True)["matches"] == ["a.txt:1: aa"]


def test_glob_find_and_the_rest(host: toolcrib.Host, ws: Path) -> None:
    (ws / "src" / "pkg").mkdir(parents=True)
    (ws / "src" / "pkg" / "mod.py").write_text("def f():\n    return 42\n")
    (ws / "src" / "top.py").write_text("import pkg\n")
    (ws / ".hidden.py").write_text("secret = 1\n")
    assert ok(host, "glob", pattern="**/*.py")["matches"] == ["src/pkg/mod.py", "src/top.py"]
    assert ok(host, "glob", pattern="**/*.py", hidden=True)["matches"] == [".hidden.py", "src/pkg/mod.py",
                                                                          "src/top.py"]
    assert ok(host, "glob", pattern="src/*")["matches"] == ["src/pkg/", "src/top.py"]
    assert ok(host, "find_text", query=r"return \d+", regex=True)["matches"] == ["src/pkg/mod.py:2:     return 42"]
    assert ok(host, "find_text", query="IMPORT", ignore_case=True, glob="src/*.py")["matches"] == [
        "src/top.py:1: import pkg"]
    assert ok(host, "exist", path="src/top.py") == {"path": "src/top.py", "exists": True, "type": "file", "size": 11}
    assert ok(host, "exist", path="nope") == {"path": "nope", "exists": False}
    assert ok(host, "mkdir", path="a/b/c") == "created: a/b/c/"
    assert ok(host, "mkdir", path="a/b/c") == "exists: a/b/c/"
    assert ok(host, "copy", source="src", destination="copy") == "copied src/ to copy/ (2 files)"
    assert (ws / "copy/pkg/mod.py").read_text() == "def f():\n    return 42\n"
    assert ok(host, "rename", source="copy/top.py", destination="a/top.py") == "renamed copy/top.py to a/top.py"
    assert error(host, "rename", source="a/top.py", destination="src/top.py") == (
        "src/top.py: already exists; pass overwrite=true to replace it")
    assert ok(host, "cwd") == str(ws)


def test_rm_refuses_the_root_and_needs_a_flag_for_directories(host: toolcrib.Host, ws: Path) -> None:
    (ws / "d").mkdir()
    (ws / "d" / "f").write_text("x")
    assert error(host, "rm", path=".") == "'.' is the workspace root itself, which this tool does not take"
    assert error(host, "rm", path="") == "'.' is the workspace root itself, which this tool does not take"
    assert error(host, "rm", path="d") == "d: is a directory; pass recursive=true to remove it and everything in it"
    assert error(host, "rm", path="d", recursive="yes").startswith("Invalid arguments for fs__rm:\n- recursive: ")
    assert ok(host, "rm", path="d", recursive=True) == "removed directory d/"
    assert not (ws / "d").exists()
    assert ws.exists()


ESCAPES = {
    "../outside.txt": "'../outside.txt': '..' is not allowed; paths stay inside the workspace",
    "a/../../outside.txt": "'a/../../outside.txt': '..' is not allowed; paths stay inside the workspace",
    "/etc/passwd": "'/etc/passwd': absolute paths are not allowed; give a path relative to the workspace",
    "~/.ssh/id_rsa": "'~/.ssh/id_rsa': '~' is not expanded; give a path relative to the workspace",
    "../ws-secrets/key": "'../ws-secrets/key': '..' is not allowed; paths stay inside the workspace",
    "a\\..\\b": "'a\\\\..\\\\b': use '/' to separate path components",
    "C:/Windows": "'C:/Windows': absolute paths are not allowed; give a path relative to the workspace",
    "x\x00y": "'x\\x00y': a path cannot contain a NUL character",
}


@pytest.mark.parametrize("path", sorted(ESCAPES))
def test_lexical_escapes_are_refused_by_every_tool(host: toolcrib.Host, path: str) -> None:
    assert error(host, "read_file", path=path) == ESCAPES[path]
    assert error(host, "write_file", path=path, content="pwned") == ESCAPES[path]
    assert error(host, "exist", path=path) == ESCAPES[path]
    assert error(host, "rm", path=path) == ESCAPES[path]
    assert error(host, "ls", path=path) == ESCAPES[path]


def test_glob_patterns_cannot_escape(host: toolcrib.Host) -> None:
    assert error(host, "glob", pattern="../*") == "'../*': '..' is not allowed; patterns stay inside the workspace"
    assert error(host, "glob", pattern="/etc/*") == (
        "'/etc/*': a pattern is relative to the workspace and uses '/' as the separator")


def _outside_untouched(tmp: Path) -> None:
    assert (tmp / "outside.txt").read_text() == "OUTSIDE"
    assert (tmp / "ws-secrets" / "key").read_text() == "SECRET"
    assert sorted(p.name for p in (tmp / "ws-secrets").iterdir()) == ["key"]


def test_symlinks_in_any_component_are_never_followed(host: toolcrib.Host, ws: Path) -> None:
    tmp = ws.parent
    (ws / "to_outside_dir").symlink_to(tmp / "ws-secrets")
    (ws / "to_outside_file").symlink_to(tmp / "outside.txt")
    (ws / "relative").symlink_to("../outside.txt")
    (ws / "dangling").symlink_to(tmp / "does-not-exist-yet")
    (ws / "loop_a").symlink_to("loop_b")
    (ws / "loop_b").symlink_to("loop_a")
    (ws / "inner").mkdir()
    (ws / "inner" / "deep").symlink_to(tmp)
    link = "goes through a symbolic link, which file tools do not follow"
    assert error(host, "read_file", path="to_outside_file") == f"to_outside_file: {link}"
    assert error(host, "read_file", path="relative") == f"relative: {link}"
    assert error(host, "read_file", path="to_outside_dir/key") == f"to_outside_dir: {link}"
    assert error(host, "read_file", path="inner/deep/outside.txt") == f"inner/deep: {link}"
    assert error(host, "read_file", path="loop_a") == f"loop_a: {link}"
    assert error(host, "write_file", path="to_outside_dir/new", content="x") == f"to_outside_dir: {link}"
    assert error(host, "write_file", path="inner/deep/new.txt", content="x") == f"inner/deep: {link}"
    assert error(host, "ls", path="to_outside_dir") == f"to_outside_dir: {link}"
    assert error(host, "mkdir", path="to_outside_dir/sub") == f"to_outside_dir: {link}"
    assert error(host, "edit", path="to_outside_file", old_text="OUTSIDE", new_text="x") == (
        f"to_outside_file: {link}")
    assert error(host, "copy", source="to_outside_file", destination="stolen.txt").startswith("to_outside_file:")
    assert error(host, "find_text", query="SECRET", path="to_outside_dir") == f"to_outside_dir: {link}"
    assert ok(host, "find_text", query="SECRET")["matches"] == []
    assert ok(host, "find_text", query="OUTSIDE")["matches"] == []
    # exist reports the link itself: never the type or size of what it points to
    assert ok(host, "exist", path="to_outside_file") == {"path": "to_outside_file", "exists": True, "type": "symlink"}
    assert ok(host, "exist", path="to_outside_dir") == {"path": "to_outside_dir", "exists": True, "type": "symlink"}
    assert error(host, "exist", path="to_outside_dir/key") == f"to_outside_dir: {link}"
    assert "to_outside_dir/key" not in ok(host, "glob", pattern="**")["matches"]
    # writing "through" a dangling link replaces the link, it never creates the target outside
    assert ok(host, "write_file", path="dangling", content="x") == "replaced dangling (1 bytes)"
    assert not (tmp / "does-not-exist-yet").exists()
    assert (ws / "dangling").read_text() == "x" and not (ws / "dangling").is_symlink()
    # rm removes the link itself, never its target
    assert ok(host, "rm", path="to_outside_dir") == "removed to_outside_dir"
    assert ok(host, "ls", path="inner")["entries"] == [{"name": "deep", "type": "symlink", "target": str(tmp)}]
    _outside_untouched(tmp)


def test_fifo_is_refused_without_blocking(host: toolcrib.Host, ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    assert error(host, "read_file", path="pipe") == "pipe: not a regular file (a FIFO, socket or device)"


def test_a_directory_swapped_for_a_symlink_never_lets_a_write_out(host: toolcrib.Host, ws: Path) -> None:
    """Race harness: one thread flips ws/d between a real directory and a symlink to an existing directory outside
    while writes go to d/x. Every write must land inside or fail; nothing may ever appear outside.

    The harness runs until it has seen writes land and writes refused (at least 150 writes, at most 20,000), so a
    busy machine cannot make it pass without racing. The flipper yields while d is real, which keeps that window
    open long enough for writes to land; it is a scheduling hint, not a time limit."""
    tmp = ws.parent
    target = tmp / "ws-secrets"
    (ws / "d").mkdir()
    stop = threading.Event()
    flips = 0

    def flip() -> None:
        nonlocal flips
        while not stop.is_set():
            try:
                os.rename(ws / "d", ws / "d_real")
                os.symlink(target, ws / "d")
                os.unlink(ws / "d")
                os.rename(ws / "d_real", ws / "d")
                flips += 1
            except OSError:
                pass
            time.sleep(0)

    landed = refused = 0
    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        for i in range(20_000):
            result = call(host, "write_file", path="d/x", content=f"{i}", create_parents=False)
            if result.is_error:
                refused += 1
            else:
                landed += 1
            if landed and refused and i >= 150:
                break
    finally:
        stop.set()
        flipper.join()
    assert not (target / "x").exists()
    _outside_untouched(tmp)
    assert landed and refused and flips, (landed, refused, flips)  # the harness really raced


def test_the_pack_as_a_real_distribution(host: toolcrib.Host) -> None:
    import importlib.metadata

    names = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="toolcrib")}
    assert names.get("fs") == "toolcrib_fs"
    assert json.loads(json.dumps(host.view("dev").mcp_tools))[0]["name"] == "fs__batch_edit"


def test_argument_rules_see_one_spelling_of_a_path(ws: Path) -> None:
    config = CONFIG.replace('tools = { allow = ["fs__*"] }\n\n[agents.reader]',
                            'tools = { deny = ["fs__write_file(secrets/*)"] }\n\n[agents.reader]')
    host = toolcrib.Host(parse_config(config, "toolcrib.toml", ws.parent), plugins={"fs": toolcrib_fs},
                         autoload=False, env={})
    for spelling in ("secrets/key", "./secrets/key", "secrets//key", "./secrets/./key"):
        result = call(host, "write_file", path=spelling, content="x")
        assert result.text == ("Permission denied: fs__write_file with path='secrets/key' is denied by the agent's "
                               "permissions (rule 'fs__write_file(secrets/*)')."), spelling
    assert not (ws / "secrets").exists()
    assert ok(host, "write_file", path="./notes//a.txt", content="x") == "created notes/a.txt (1 bytes)"


def test_an_unusable_workspace_root_refuses_everything_and_touches_nothing(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A workspace that does not exist is never replaced by the process's current folder."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "here.txt").write_text("CWD")
    monkeypatch.chdir(cwd)
    host = toolcrib.Host(parse_config(CONFIG.replace('workspace = "ws"', 'workspace = "gone"'), "toolcrib.toml",
                                      tmp_path), plugins={"fs": toolcrib_fs}, autoload=False, env={})
    unusable = "the workspace root is not usable (No such file or directory)"
    for tool, args in (("read_file", {"path": "here.txt"}), ("write_file", {"path": "new.txt", "content": "x"}),
                       ("ls", {}), ("exist", {"path": "here.txt"}), ("mkdir", {"path": "d"}),
                       ("rm", {"path": "here.txt"}), ("glob", {"pattern": "*"}), ("find_text", {"query": "CWD"}),
                       ("copy", {"source": "here.txt", "destination": "b.txt"}),
                       ("rename", {"source": "here.txt", "destination": "b.txt"})):
        assert error(host, tool, **args) == unusable, tool
    assert sorted(p.name for p in cwd.iterdir()) == ["here.txt"] and not (tmp_path / "gone").exists()


def test_copy_guards(host: toolcrib.Host, ws: Path) -> None:
    (ws / "tree" / "sub").mkdir(parents=True)
    (ws / "tree" / "sub" / "a.txt").write_text("A")
    (ws / "tree" / "link").symlink_to(ws.parent / "outside.txt")
    assert error(host, "copy", source="tree", destination="tree/sub/copy") == (
        "tree/sub/copy: cannot copy tree into itself")
    copied = ok(host, "copy", source="tree", destination="copy")
    assert copied == "copied tree/ to copy/ (1 files); skipped (not files or directories): tree/link"
    assert not (ws / "copy" / "link").exists()
    (ws / "big.bin").write_bytes(b"x" * (10 * 1024 * 1024 + 1))
    assert error(host, "copy", source="big.bin", destination="big2.bin") == (
        "big.bin: larger than the copy limit of 10485760 bytes")
    assert not (ws / "big2.bin").exists()


def test_reading_at_a_descriptor_never_follows_a_symlink(ws: Path) -> None:
    from toolcrib.workspace import read_at

    (ws / "real.txt").write_text("REAL")
    (ws / "link.txt").symlink_to(ws / "real.txt")
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_at(fd, "real.txt", 100) == (b"REAL", 4)
        assert read_at(fd, "link.txt", 100) is None
        assert read_at(fd, "real.txt", 2) == (b"", 4)  # larger than the limit: nothing is read
    finally:
        os.close(fd)
