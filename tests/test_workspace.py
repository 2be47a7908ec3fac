"""``toolcrib.workspace.Root``, the public confinement every pack that touches files uses, through its own API:
exact answers for every refusal, and protected paths (what mutation testing of workspace.py showed untested)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from toolcrib import workspace
from toolcrib.workspace import PathError, Root, parts_of, read_at


@pytest.fixture
def root(tmp_path: Path) -> Root:
    (tmp_path / "ws" / "dir" / "sub").mkdir(parents=True)
    (tmp_path / "ws" / "dir" / "a.txt").write_text("A")
    (tmp_path / "ws" / "b.txt").write_text("B")
    (tmp_path / "outside.txt").write_text("OUT")
    (tmp_path / "ws" / "link").symlink_to(tmp_path / "outside.txt")
    return Root(tmp_path / "ws")


def refused(call: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(PathError) as info:
        call(*args, **kwargs)  # type: ignore[operator]
    return str(info.value)


def test_remove(root: Root, tmp_path: Path) -> None:
    assert refused(root.remove, ()) == "the workspace root itself cannot be removed"
    assert refused(root.remove, ("dir",)) == "dir: is a directory"
    assert refused(root.remove, ("nope",)) == "nope: not found"
    assert root.remove(("link",)) == "file"  # the link itself, never its target
    assert (tmp_path / "outside.txt").read_text() == "OUT"
    assert root.remove(("dir", "a.txt")) == "file"
    assert root.remove(("dir",), recursive=True) == "directory"
    assert sorted(p.name for p in (tmp_path / "ws").iterdir()) == ["b.txt"]


def test_rename(root: Root, tmp_path: Path) -> None:
    assert refused(root.rename, (), ("x",)) == "the workspace root itself cannot be moved or replaced"
    assert refused(root.rename, ("b.txt",), ()) == "the workspace root itself cannot be moved or replaced"
    assert refused(root.rename, ("dir",), ("dir", "sub", "x")) == "dir/sub/x: cannot move dir into itself"
    assert refused(root.rename, ("nope",), ("x",)) == "nope: not found"
    assert refused(root.rename, ("b.txt",), ("dir", "a.txt")) == "dir/a.txt: already exists"
    assert refused(root.rename, ("b.txt",), ("dir",), overwrite=True) == "dir: already exists"  # never a folder
    root.rename(("link",), ("moved-link",))  # the link moves, not its target
    assert (tmp_path / "ws" / "moved-link").is_symlink() and (tmp_path / "outside.txt").read_text() == "OUT"
    root.rename(("b.txt",), ("dir", "a.txt"), overwrite=True)
    assert (tmp_path / "ws" / "dir" / "a.txt").read_text() == "B" and not (tmp_path / "ws" / "b.txt").exists()


def test_writes_and_stats(root: Root, tmp_path: Path) -> None:
    assert refused(root.write_bytes, ("new", "x.txt"), b"x") == "new: not found"  # no parents unless asked
    assert root.write_bytes(("new", "x.txt"), b"x", create_parents=True) is False
    assert refused(root.write_bytes, ("new", "x.txt"), b"y", overwrite=False) == "new/x.txt: already exists"
    assert root.write_bytes(("new", "x.txt"), b"y") is True
    assert (tmp_path / "ws" / "new" / "x.txt").read_text() == "y"
    link = root.lstat(("link",))
    assert link is not None and os.path.islink(tmp_path / "ws" / "link") and link.st_size != 3  # the link's own
    assert root.lstat(("nope",)) is None
    assert refused(root.lstat, ("link", "x")) == "link: goes through a symbolic link, which file tools do not follow"
    assert refused(root.read_bytes, ("x" * 300,), 10).endswith("...: the path is too long")
    assert refused(root.read_bytes, ("x" * 300,), 10).startswith("x" * 80 + "...")


def test_reading_stops_at_the_size_seen_when_opened(root: Root, tmp_path: Path) -> None:
    # the size read_bytes answers and the bytes it gives agree, however the file changes meanwhile
    with root._opened(("b.txt",)) as (fd, size):
        (tmp_path / "ws" / "b.txt").write_text("BCD")  # grows after it was opened
        assert (size, workspace._read_fd(fd, 100, size)) == (1, b"B")
    assert root.read_bytes(("b.txt",), 100) == (b"BCD", 3)
    assert root.read_bytes(("b.txt",), 2) == (b"BC", 3)
    # a file whose size says 0 but has bytes (as those in /proc) is read to its end
    proc = Root(f"/proc/{os.getpid()}")
    data, size = proc.read_bytes(("status",), 1 << 20)
    assert size == 0 and data.startswith(b"Name:\t") and f"\nPid:\t{os.getpid()}\n".encode() in data
    assert proc.read_bytes(("status",), 5) == (b"Name:", 0)
    fd = os.open(f"/proc/{os.getpid()}", os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = read_at(fd, "status", 1 << 20)
    finally:
        os.close(fd)
    assert found is not None and found[1] == 0 and found[0].startswith(b"Name:\t")


def test_a_file_is_read_in_reads_of_a_mebibyte_and_none_past_its_size(root: Root, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Each read asks for at most 1 MiB, and none is made past the size the file had when it was opened (no read
    that would only find its end), through ``Root.read_bytes`` and ``read_at`` alike."""
    data = os.urandom(3 * 1024 * 1024 + 7)
    (tmp_path / "ws" / "big.bin").write_bytes(data)
    asked: list[int] = []
    read = os.read

    def counted(fd: int, n: int) -> bytes:
        asked.append(n)
        return read(fd, n)

    fd = os.open(tmp_path / "ws", os.O_RDONLY | os.O_DIRECTORY)
    try:
        monkeypatch.setattr(os, "read", counted)
        got = root.read_bytes(("big.bin",), 8 << 20), read_at(fd, "big.bin", 8 << 20)
        monkeypatch.undo()
    finally:
        os.close(fd)
    assert got == ((data, len(data)), (data, len(data)))
    assert asked == [1 << 20, 1 << 20, 1 << 20, 7] * 2


def test_reading_large_files_in_chunks(root: Root, tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)
    (tmp_path / "ws" / "big.bin").write_bytes(data)
    assert root.read_bytes(("big.bin",), len(data) + 10) == (data, len(data))
    assert root.read_bytes(("big.bin",), 1024 * 1024 + 3) == (data[: 1024 * 1024 + 3], len(data))
    fd = os.open(tmp_path / "ws", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_at(fd, "big.bin", len(data)) == (data, len(data))
        assert read_at(fd, "dir", 10) is None
        assert read_at(fd, "missing", 10) is None
    finally:
        os.close(fd)


def test_paths_that_are_refused_before_any_io() -> None:
    for path, message in [("\\\\server\\share", "'\\\\\\\\server\\\\share': absolute paths are not allowed; give a "
                                                  "path relative to the workspace"),
                          ("C:x", "'C:x': absolute paths are not allowed; give a path relative to the workspace"),
                          ("a\\b", "'a\\\\b': use '/' to separate path components")]:
        assert refused(parts_of, path) == message


@pytest.mark.parametrize(("code", "message"), [
    (errno.EEXIST, "p/q: already exists"),
    (errno.EACCES, "p/q: permission denied"),
    (errno.EPERM, "p/q: permission denied"),
    (errno.EISDIR, "p/q: is a directory"),
    (errno.ENOTEMPTY, "p/q: the directory is not empty"),
    (errno.ENOTDIR, "p/q: a component of the path is not a directory (or is a symbolic link)"),
    (errno.EIO, "p/q: Input/output error"),
])
def test_os_errors_become_messages_a_model_can_act_on(code: int, message: str) -> None:
    from toolcrib.workspace import _error

    assert str(_error(OSError(code, os.strerror(code)), ("p", "q"))) == message


def test_protected_paths_are_related_by_whole_components(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    workspace.protect({tmp_path / "ws" / "conf" / "toolcrib.toml": "the config file"})
    root = Root(tmp_path / "ws")
    root.write_bytes(("conf-backup", "toolcrib.toml"), b"x", create_parents=True)  # a sibling, not the folder
    root.write_bytes(("conf", "toolcrib.toml.bak"), b"x", create_parents=True)  # a sibling, in a new folder
    assert refused(root.write_bytes, ("conf", "toolcrib.toml"), b"x") == (
        "conf/toolcrib.toml: is protected: changing it would change how the host governs its agents (the config "
        "file is there); no tool may change it")
    assert refused(root.remove, ("conf",), recursive=True) == (
        "conf: is protected: changing it would change how the host governs its agents (the config file is in the "
        "way); no tool may change it")
    assert workspace.protected_within(tmp_path / "ws" / "conf-backup") == []
    assert workspace.protected_within(tmp_path / "ws") == [(str(tmp_path / "ws" / "conf" / "toolcrib.toml"),
                                                            "the config file")]
    assert workspace.protected_within(tmp_path / "ws" / "conf" / "toolcrib.toml" / "x") == [
        (str(tmp_path / "ws" / "conf" / "toolcrib.toml"), "the config file")]  # inside it: reached too


def test_dangling_links_are_files_of_their_own(root: Root, tmp_path: Path) -> None:
    (tmp_path / "ws" / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "ws" / "dangling2").symlink_to(tmp_path / "nowhere")
    # a destination that is a dangling link exists: it is not replaced unasked
    assert refused(root.rename, ("b.txt",), ("dangling",)) == "dangling: already exists"
    root.rename(("dangling2",), ("moved",))  # a dangling link moves like any file
    assert os.readlink(tmp_path / "ws" / "moved") == str(tmp_path / "nowhere")
    assert root.remove(("moved",)) == "file"
    assert not os.path.lexists(tmp_path / "ws" / "moved")


def test_what_exists_is_not_missing(root: Root) -> None:
    for call, args in ((root.rename, (("b.txt",), ("dir", "a.txt"))), (root.rename, (("dir",), ("b.txt",)))):
        with pytest.raises(PathError) as info:
            call(*args, overwrite=args[1] == ("b.txt",))  # type: ignore[operator]
        assert info.value.missing is False
    with pytest.raises(PathError) as info:
        root.rename(("nope",), ("x",))
    assert info.value.missing is True


def test_errors_name_the_path_they_are_about(root: Root) -> None:
    assert refused(root.rename, ("b.txt",), ("nope", "x")) == "nope: not found"
    assert refused(root.rename, ("b.txt",), ("dir", "a.txt", "x")) == (
        "dir/a.txt: a component of the path is not a directory (or is a symbolic link)")
    assert refused(root.rename, ("dir",), ("b.txt",), overwrite=True) == (
        "b.txt: is a file, which a directory cannot replace")
    assert refused(root.remove, ("b.txt", "x")) == (
        "b.txt: a component of the path is not a directory (or is a symbolic link)")
    assert refused(root.remove, ("nope", "x")) == "nope: not found"


def test_a_name_too_long_is_said_so_wherever_it_is_met(root: Root) -> None:
    long = "x" * 300
    assert refused(root.lstat, (long,)) == f"{long[:80]}...: the path is too long"
    assert refused(root.rename, ("b.txt",), (long,)) == f"{long[:80]}...: the path is too long"
    assert refused(root.remove, (long,)) == f"{long[:80]}...: the path is too long"


@pytest.mark.parametrize("step", ["unlink", "rmtree", "rename"])
def test_an_os_refusal_in_the_last_step_is_told_about_its_path(root: Root, step: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user without the rights meets (a read-only folder). The tests run as root, whom the kernel never
    refuses, so the one OS call is replaced by one that refuses as the kernel would."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    refuse.avoids_symlink_attacks = True  # type: ignore[attr-defined]  # as shutil.rmtree's is on Linux
    monkeypatch.setattr(workspace.shutil if step == "rmtree" else workspace.os, step, refuse)
    if step == "unlink":
        assert refused(root.remove, ("dir", "a.txt")) == "dir/a.txt: permission denied"
    elif step == "rmtree":
        assert refused(root.remove, ("dir",), recursive=True) == "dir: permission denied"
    else:
        assert refused(root.rename, ("b.txt",), ("dir", "c.txt")) == "dir/c.txt: permission denied"


def test_a_protected_root_of_everything_refuses_every_change(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace, "_PROTECTED", {})  # protection lasts for the process: this one only for the test
    (tmp_path / "ws").mkdir()
    workspace.protect({Path("/"): "the machine itself"})
    root = Root(tmp_path / "ws")
    assert refused(root.write_bytes, ("x",), b"x").startswith("x: is protected: ")


def test_protection_holds_by_whole_components_whatever_the_names_end_with(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Names ending in the same letter, a workspace inside a protected folder, and a workspace at ``/``."""
    monkeypatch.setattr(workspace, "_PROTECTED", {})
    (tmp_path / "wsX" / "hooksX").mkdir(parents=True)
    (tmp_path / "wsX" / "keepX").mkdir()
    (tmp_path / "wsX" / "keepX" / "conf.toml").write_text("governs")
    (tmp_path / "governX" / "ws").mkdir(parents=True)
    workspace.protect({tmp_path / "wsX" / "hooksX": "the hook programs",
                       tmp_path / "wsX" / "keepX" / "conf.toml": "the config",
                       tmp_path / "governX": "the skills folder"})
    root = Root(tmp_path / "wsX")
    assert refused(root.write_bytes, ("hooksX", "a"), b"x") == (
        "hooksX/a: is protected: changing it would change how the host governs its agents (the hook programs is in "
        "the way); no tool may change it")
    assert refused(root.remove, ("keepX",), recursive=True).startswith("keepX: is protected: ")
    assert refused(Root(tmp_path / "governX" / "ws").write_bytes, ("a",), b"x").startswith("a: is protected: ")
    whole = Root(Path("/"))
    config = parts_of(str(tmp_path / "wsX" / "keepX" / "conf.toml").lstrip("/"))
    assert refused(whole.write_bytes, config, b"x").startswith(f"{'/'.join(config)}: is protected: ")
    assert (tmp_path / "wsX" / "keepX" / "conf.toml").read_text() == "governs"
    assert sorted(os.listdir(tmp_path / "wsX" / "hooksX")) == []


def test_reading_a_fifo_never_blocks(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")  # open() of a FIFO without O_NONBLOCK would wait for a writer forever
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_at(fd, "pipe", 10) is None
    finally:
        os.close(fd)


def test_every_name_that_reaches_a_path_is_found(tmp_path: Path) -> None:
    """As written, each link on the way (a folder link in the middle, a relative one, a chain), and where it
    really is; a loop ends; a name not there yet is kept as written."""
    (tmp_path / "dot" / "cfg").mkdir(parents=True)
    (tmp_path / "dot" / "cfg" / "toolcrib.toml").write_text("")
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "cfg").symlink_to("../dot/cfg")
    (tmp_path / "ws" / "first").symlink_to("second")
    (tmp_path / "ws" / "second").symlink_to(tmp_path / "dot" / "cfg" / "toolcrib.toml")
    (tmp_path / "ws" / "loop").symlink_to("loop")

    def names(path: str) -> list[str]:
        return sorted(os.path.relpath(n, tmp_path) for n in workspace.names_of(tmp_path / path))

    assert names("ws/cfg/toolcrib.toml") == ["dot/cfg/toolcrib.toml", "ws/cfg"]
    assert names("ws/first") == ["dot/cfg/toolcrib.toml", "ws/first", "ws/second"]
    assert names("ws/loop") == ["ws/loop"]
    assert names("ws/new/later.py") == ["ws/new/later.py"]
    assert names("ws/./cfg/../cfg/toolcrib.toml") == ["dot/cfg/toolcrib.toml", "ws/cfg"]


def test_a_chain_of_as_many_links_as_the_kernel_follows_is_named_whole(tmp_path: Path) -> None:
    """Forty links, one to the next (the kernel follows that many in one lookup, and no more): every one of them
    reaches the file, so every one is a name of it."""
    from toolcrib.workspace import _MAX_LINKS, names_of

    (tmp_path / "real.toml").write_text("")
    previous = tmp_path / "real.toml"
    for i in range(_MAX_LINKS):
        link = tmp_path / f"link{i}"
        link.symlink_to(previous.name)
        previous = link
    assert (tmp_path / f"link{_MAX_LINKS - 1}").read_text() == ""  # the kernel does follow them all
    assert names_of(previous) == {str(tmp_path / "real.toml"), *(str(tmp_path / f"link{i}") for i in range(_MAX_LINKS))}


def test_root_of_keeps_one_root_a_workspace_until_something_more_is_protected(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workspace, "_PROTECTED", {})
    monkeypatch.setattr(workspace, "_CODE", {})
    monkeypatch.setattr(workspace, "_ROOTS", {})
    (tmp_path / "ws").mkdir()
    first = workspace.root_of(tmp_path / "ws")
    assert workspace.root_of(tmp_path / "ws") is first
    (tmp_path / "ws2").mkdir()
    second = workspace.root_of(tmp_path / "ws2")  # each workspace its own root, never another's
    assert second is not first and second.write_bytes(("only.txt",), b"2") is False
    assert (tmp_path / "ws2" / "only.txt").read_bytes() == b"2" and not (tmp_path / "ws" / "only.txt").exists()
    assert first.write_bytes(("keep.toml",), b"x") is False
    workspace.protect({tmp_path / "ws" / "keep.toml": "a config file"})  # a Root made before knows nothing of it
    again = workspace.root_of(tmp_path / "ws")
    assert again is not first
    assert refused(again.write_bytes, ("keep.toml",), b"y") == (
        "keep.toml: is protected: changing it would change how the host governs its agents (a config file is there); "
        "no tool may change it")
    workspace.protect_code({tmp_path / "ws" / "hooks": "hook 'h'"})
    assert refused(workspace.root_of(tmp_path / "ws").write_bytes, ("hooks", "json.py"), b"").startswith(
        "hooks/json.py: ")
    others = [tmp_path / f"w{i}" for i in range(workspace.MAX_ROOTS)]
    for folder in others:
        folder.mkdir()
        workspace.root_of(folder)
    assert len(workspace._ROOTS) <= workspace.MAX_ROOTS  # a bounded cache: the oldest go
