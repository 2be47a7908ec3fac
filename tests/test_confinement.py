"""Upstream stdio servers run confined (``[mcps.<name>] confine = true``): a real server that tries to reach what
it should not, through a real host, confined and not (so each refusal is the confinement's, not the machine's)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from confining import alive, forked, gate_tries
from conftest import config_from
from toolcrib import sandbox
from toolcrib.host import Host
from toolcrib.supply import supply
from toolcrib.supply.mcp.confinement import pids_root

SERVER = str(Path(__file__).parent / "probing_server.py")
# slow: every test starts confined processes (the marker's meaning: it starts subprocesses); CI runs them all
pytestmark = [pytest.mark.skipif(sandbox.landlock_abi() < 4, reason="needs Landlock ABI 4 (Linux 6.7)"),
              pytest.mark.slow]


def config(confined: bool, extra: str = "") -> str:
    return f"""
[mcps.probe]
command = {json.dumps(sys.executable)}
args = [{json.dumps(SERVER)}]
confine = {str(confined).lower()}
memory_mb = 1024
{extra}

[agents.a.permissions]
mcps = {{ allow = ["probe"] }}
tools = {{ allow = ["*"] }}
"""


def attempts(tmp_path: Path, confined: bool, tries: list[tuple[str, str]], extra: str = "") -> list[str]:
    """What the server said to each (what, target), and the failure of its record if it did not start."""
    (tmp_path / "toolcrib.toml").write_text(config(confined, extra))
    loaded = config_from(config(confined, extra), tmp_path)

    async def main() -> list[str]:
        async with supply() as supplied:
            sources = await supplied.sync(loaded)
            record = sources[0].offer().record
            if record.state != "loaded":
                return [f"{record.state}: {record.error}"]
            host = Host(loaded, sources=sources, plugins={}, autoload=False, env={})
            said = []
            for what, target in tries:
                result = await host.call("a", "probe__try", {"what": what, "target": target})
                said.append(result.content[0]["text"])
            return said

    return anyio.run(main)


@pytest.fixture
def listener() -> Any:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_a_confined_server_cannot_read_the_config_or_the_host_s_environment_nor_use_the_network(
        tmp_path: Path, listener: str) -> None:
    (tmp_path / "audit.log").write_text("the audit log\n")
    outside = tmp_path / "elsewhere.txt"
    unix = socket.socket(socket.AF_UNIX)  # a local service's socket, outside what the server may read
    unix.bind(str(tmp_path / "service.sock"))
    unix.listen()
    tries = [("read", str(tmp_path / "toolcrib.toml")), ("read", str(tmp_path / "audit.log")),
             ("environ", str(os.getpid())), ("connect", listener), ("udp", ""), ("write", str(outside)),
             ("allocate", "2048"), ("spawn", ""), ("read", "/etc/hostname"), ("unix", str(tmp_path / "service.sock")),
             ("uring", "")]
    free = attempts(tmp_path, False, tries)  # the same server, unconfined, reaches all of it
    assert free[:6] == [f"read {len(config(False))} characters", "read 14 characters",
                        free[2], "connected", "made a UDP socket", "wrote it"]
    assert free[2].startswith("read ") and free[6] == "allocated 2048 MiB" and free[7] == "child ran"
    assert free[9] == "connected" and free[10] == "made a ring"
    outside.unlink()
    boxed = attempts(tmp_path, True, tries)
    unix.close()
    assert boxed[:7] == ["PermissionError: Permission denied", "PermissionError: Permission denied",
                         "PermissionError: Permission denied", "PermissionError: Permission denied",
                         "PermissionError: Permission denied", "PermissionError: Permission denied",
                         "MemoryError: "]  # 2 GiB past its 1 GiB of address space
    assert boxed[7] == "child ran"  # what it runs is confined as it is (and may read its own code)
    assert boxed[8].startswith("read ")  # the system's files stay readable
    assert boxed[9] == "PermissionError: Permission denied"  # Landlock does not govern it; the filter does
    assert boxed[10] == "PermissionError: Operation not permitted"  # io_uring would make sockets past the filter
    assert not outside.exists()


def test_a_folder_given_to_read_is_read_and_listed_not_written_and_no_other_is_listed(tmp_path: Path) -> None:
    """Each of Landlock's rights in its place: a ``read`` folder lists and reads, but a file in it takes no write;
    a folder outside lists nothing (each was a surviving mutant of benchmarks/mutation_confined.py)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "notes.txt").write_text("notes\n")
    tries = [("list", str(tmp_path / "data")), ("read", str(tmp_path / "data" / "notes.txt")),
             ("append", str(tmp_path / "data" / "notes.txt")), ("list", str(tmp_path))]
    boxed = attempts(tmp_path, True, tries, 'read = ["data"]')
    assert boxed == ["listed 1 names", "read 6 characters", "PermissionError: Permission denied",
                     "PermissionError: Permission denied"]
    assert (tmp_path / "data" / "notes.txt").read_text() == "notes\n"
    assert attempts(tmp_path, False, tries)[2:] == ["appended", "listed 2 names"]  # unconfined, it may


def folders(tmp_path: Path) -> list[tuple[str, str]]:
    """A ``read`` folder and a ``write`` folder with files in them, and what a server might try on each."""
    for folder in ("data", "data/empty", "out", "out/sub"):
        (tmp_path / folder).mkdir(exist_ok=True)
    for name in ("data/a.txt", "data/b.txt", "data/c.txt", "out/sub/d.txt", "out/e.txt"):
        (tmp_path / name).write_text("text\n")
    data, out = tmp_path / "data", tmp_path / "out"
    return [("remove", f"{data}/a.txt"), ("rmdir", f"{data}/empty"), ("mkdir", f"{data}/new"),
            ("truncate", f"{data}/b.txt"),
            ("rename", f"{data}/c.txt>{data}/c2.txt"), ("truncate", f"{out}/e.txt"),
            ("rename", f"{out}/sub/d.txt>{out}/d.txt"), ("mkdir", f"{out}/new"), ("remove", f"{out}/e.txt"),
            ("write", "/dev/null"), ("ioctl", "/dev/null"), ("signal", str(os.getpid())), ("write", "/dev/zero"),
            ("write", "/dev/full"), ("privileges", ""), ("limits", "")]


def test_a_read_folder_takes_no_removal_making_truncation_or_renaming_a_write_folder_takes_each(
        tmp_path: Path) -> None:
    """Landlock's directory rights, truncation, moving a file to another folder, the devices, device ioctls,
    signals and the limits each in its place (each was a surviving mutant of benchmarks/mutation_confined.py)."""
    reach = 'read = ["data"]\nwrite = ["out"]\ncpu_seconds = 30\nopen_files = 64'
    free = attempts(tmp_path, False, folders(tmp_path), reach)
    full, held = "OSError: No space left on device", "cpu 30 files 64 memory 1073741824"
    assert free[:-2] == ["removed", "removed", "made", "truncated", "renamed", "truncated", "renamed", "made",
                         "removed", "wrote it", "OSError: Inappropriate ioctl for device", "signalled", "wrote it",
                         full]
    assert free[-1] != held and free[-2].startswith("no_new_privs ")  # each is the confinement's doing
    shutil.rmtree(tmp_path / "data")
    shutil.rmtree(tmp_path / "out")
    boxed = attempts(tmp_path, True, folders(tmp_path), reach)
    denied = "PermissionError: Permission denied"
    assert boxed == [denied, denied, denied, denied, denied, "truncated", "renamed", "made", "removed", "wrote it",
                     denied, "PermissionError: Operation not permitted", "wrote it", full,
                     "no_new_privs 1 seccomp 2", held]  # (root may filter without no_new_privs: it is set all the same)
    assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["a.txt", "b.txt", "c.txt", "empty"]
    assert (tmp_path / "data" / "b.txt").read_text() == "text\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["d.txt", "new", "sub"]


LAYER = """
import socket, sys
from toolcrib.supply.mcp import confined
print(confined.abi(confined._libc()))
confined.landlock(confined._libc(), [], [], network=sys.argv[3] == "network")
tries = [(socket.AF_INET, "bind", ("127.0.0.1", 0)), (socket.AF_INET, "connect", ("127.0.0.1", int(sys.argv[1]))),
         (socket.AF_UNIX, "connect", "\\0" + sys.argv[2])]
for family, verb, address in tries:
    try:
        with socket.socket(family) as made:
            getattr(made, verb)(address)
            print(verb)
    except OSError as exc:
        print(type(exc).__name__, exc.strerror)
"""


def test_landlock_alone_holds_tcp_and_abstract_unix_sockets_without_the_socket_filter(
        tmp_path: Path, listener: str) -> None:
    """The socket filter would hide a hole in Landlock's network rules, so Landlock is tried alone: no TCP
    without ``network`` (no port bound, none reached), and no abstract Unix socket (a local service's, outside the
    server's domain) at all."""
    name = f"toolcrib-test-{os.getpid()}"
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0" + name)
    abstract.listen()
    port = listener.rsplit(":", 1)[1]
    try:
        said = [subprocess.run([sys.executable, "-c", LAYER, port, name, network], capture_output=True, text=True,
                               check=True).stdout.splitlines() for network in ("", "network")]
    finally:
        abstract.close()
    denied, scoped = "PermissionError Permission denied", "PermissionError Operation not permitted"
    abi = str(sandbox.landlock_abi())  # the launcher's reading of the kernel, as the host's
    assert said == [[abi, denied, denied, scoped], [abi, "bind", "connect", scoped]]




@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the i386 gate and x32 are x86-64's")
def test_a_confined_server_makes_no_socket_through_another_system_call_gate(tmp_path: Path) -> None:
    tries, udp, unix = gate_tries(tmp_path)
    try:
        free = attempts(tmp_path, False, tries)
        boxed = attempts(tmp_path, True, tries)
    finally:
        udp.close()
        unix.close()
    if free[0] == "OSError: Function not implemented":
        pytest.skip("this kernel runs no 32-bit calls (no IA32 emulation): nothing to walk past")
    assert free[:2] == ["sent a UDP datagram", "connected"]  # the gate is open here, unconfined
    unsupported = "OSError: Function not implemented"
    assert boxed == [unsupported, unsupported, unsupported]  # as on a kernel without the emulation


def test_a_confined_server_writes_only_its_own_temporary_folder_and_what_write_names(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    earlier = attempts(tmp_path, True, [("tmpdir", "")], 'write = ["out"]')[0]
    said = attempts(tmp_path, True, [("tmpdir", ""), ("write", str(tmp_path / "out" / "a.txt")),
                                     ("write", "$TMPDIR/b.txt"), ("write", str(tmp_path / "c.txt")),
                                     ("write", earlier + "/d.txt")], 'write = ["out"]')
    assert Path(said[0]).name.startswith("toolcrib-mcp-") and said[0] != earlier  # a folder of each launch's own
    assert said[1:] == ["wrote it", "wrote it", "PermissionError: Permission denied",
                        "FileNotFoundError: No such file or directory"]  # the last launch's folder went with it
    assert not Path(earlier).exists() and not Path(said[0]).exists()
    assert (tmp_path / "out" / "a.txt").read_text() == "written by the server"
    assert not (tmp_path / "c.txt").exists()


def test_a_server_whose_reach_would_hold_what_governs_the_host_is_not_started(tmp_path: Path) -> None:
    said = attempts(tmp_path, True, [], f'read = ["{tmp_path}"]')
    assert said == [f"failed: cannot connect: a confined server may read beneath {tmp_path}, and "
                    f"{tmp_path / 'toolcrib.lock'} (the lock file toolcrib.lock) is there: toolcrib keeps what "
                    "governs the host out of its servers' reach; move it, or narrow read and write"]


def test_network_true_lets_a_confined_server_connect(tmp_path: Path, listener: str) -> None:
    assert attempts(tmp_path, True, [("connect", listener)], "network = true") == ["connected"]


def test_confine_is_for_stdio_servers() -> None:
    from toolcrib.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        config_from('[mcps.x]\nurl = "https://mcp.example/mcp"\nconfine = true\n')
    assert [p.message for p in raised.value.problems] == [
        "confine applies to a stdio server (command), not to a url: toolcrib runs only the former"]


def test_a_spec_that_cannot_be_applied_runs_nothing(tmp_path: Path) -> None:
    """The launcher never runs a program less confined than asked: a spec it cannot apply ends it, saying why."""
    import subprocess

    from toolcrib.supply.mcp.confinement import LAUNCHER

    marker = tmp_path / "ran"
    done = subprocess.run([sys.executable, "-I", "-S", str(LAUNCHER), '{"read": [], "write": [], "limits": '
                           '{"memory": "lots"}}', "--", "touch", str(marker)], capture_output=True, text=True)
    assert done.returncode == 126
    assert done.stderr.strip() == ("toolcrib: the program was not started, as it could not be confined: invalid "
                                   "literal for int() with base 10: 'lots'")
    assert not marker.exists()
    gone = subprocess.run([sys.executable, "-I", "-S", str(LAUNCHER), '{"read": [], "write": [], "parent": 1}', "--",
                           "touch", str(marker)], capture_output=True, text=True)  # started by a host that ended
    assert (gone.returncode, gone.stderr.strip()) == (126, "toolcrib: the program was not started, as it could "
                                                           "not be confined: the host that started it (process 1) "
                                                           "has ended")
    assert not marker.exists()


@pytest.mark.parametrize("allowed", [False, True])
def test_a_kernel_that_cannot_confine_says_so_and_starts_nothing_unless_allowed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, allowed: bool) -> None:
    """Landlock taken away (as on an older kernel): check says so at once, and the server is not started unless the
    operator allows it unconfined."""
    from toolcrib.supply.mcp import confinement

    monkeypatch.setattr(sandbox, "landlock_abi", lambda: 3)
    extra = "[host]\nallow_unconfined = true\n" if allowed else ""
    text = extra + config(True)
    (tmp_path / "toolcrib.toml").write_text(text)
    loaded = config_from(text, tmp_path)
    host = Host(loaded, plugins={}, autoload=False, env={})
    why = ("this kernel cannot confine programs (Landlock ABI 3, 4 needed: Linux 6.7 or later with Landlock "
           "enabled)")
    assert confinement.unconfinable() == why
    then = "they run unconfined ([host] allow_unconfined)" if allowed else "they are not started"
    assert [str(p) for p in host.problems() if "confine" in p.message] == [
        f"warning: toolcrib.toml: mcps.probe: {why}: mcps.probe ask to be confined, and {then}"]

    async def main() -> Any:
        async with supply() as supplied:
            return (await supplied.sync(loaded))[0].offer().record

    record = anyio.run(main)
    if allowed:
        assert record.state == "loaded"  # unconfined, as the operator allowed
    else:
        assert (record.state, record.error) == ("failed", f"cannot connect: {why}; it is not started (set [host] "
                                                          "allow_unconfined = true to run it unconfined)")


def test_a_program_s_code_is_read_up_to_its_package_s_root(tmp_path: Path) -> None:
    from toolcrib.supply.mcp.confinement import code_root

    outer = tmp_path / "app" / "node_modules"
    script = outer / "@scope" / "server" / "node_modules" / "dep" / "dist" / "index.js"
    script.parent.mkdir(parents=True)
    script.write_text("")
    assert code_root(script) == outer  # node resolves up the tree: the outermost node_modules
    venv = tmp_path / "venv"
    module = venv / "lib" / "python3.11" / "site-packages" / "server.py"
    module.parent.mkdir(parents=True)
    module.write_text("")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert code_root(module) == venv
    tool = tmp_path / "opt" / "tool" / "bin" / "tool"
    tool.parent.mkdir(parents=True)
    tool.write_text("")
    assert code_root(tool) == tmp_path / "opt" / "tool"  # a program in bin/: its installation
    assert code_root(tmp_path / "opt" / "tool" / "bin") == tmp_path / "opt" / "tool"
    lone = tmp_path / "scripts" / "serve.py"
    lone.parent.mkdir()
    lone.write_text("")
    assert code_root(lone) == tmp_path / "scripts"
    assert code_root(tmp_path / "scripts") == tmp_path / "scripts"  # a folder is its own


def test_a_confined_server_s_reach_is_its_system_its_code_and_what_the_config_adds(tmp_path: Path) -> None:
    from toolcrib.supply.mcp.confinement import SYSTEM, spec

    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "main.js").write_text("")
    (tmp_path / "data").mkdir()
    text = """
[mcps.x]
command = "env"
args = ["main.js", "--flag"]
cwd = "srv"
confine = true
read = ["data"]
write = ["out"]
network = true
memory_mb = 64
cpu_seconds = 5
open_files = 32
processes = 7
"""
    loaded = config_from(text, tmp_path)
    made = spec(loaded, loaded.config.mcps["x"], tmp_path / "tmp")
    env_root = str(Path(shutil_which("env")).parent.parent)  # /usr/bin/env: its installation, /usr
    assert made["read"][:len(SYSTEM)] == list(SYSTEM)
    assert sorted(made["read"][len(SYSTEM):]) == sorted({env_root, str(tmp_path / "srv"), str(tmp_path / "data")})
    assert made["write"] == [str(tmp_path / "tmp"), str(tmp_path / "out")]
    assert made["network"] is True
    assert made["limits"] == {"memory": 64 * 1024 * 1024, "cpu": 5, "files": 32, "processes": 7}
    assert made["parent"] == os.getpid()  # the program ends with this host (test_isolation's host killed outright)
    python = config_from(f'[mcps.p]\ncommand = "{sys.executable}"\nconfine = true\n', tmp_path)
    made = spec(python, python.config.mcps["p"], tmp_path / "tmp")
    assert str(Path(sys.base_prefix).resolve()) in made["read"]  # a venv's interpreter lives in its base


def shutil_which(program: str) -> str:
    import shutil

    found = shutil.which(program)
    assert found is not None
    return os.path.realpath(found)




@pytest.mark.skipif(pids_root() is None, reason="counts processes per user (RLIMIT_NPROC) where no pids cgroup can be "
                    "made, and root is not held to that")
def test_a_confined_server_s_fork_bomb_is_stopped_at_its_processes_and_its_children_end_with_it(
        tmp_path: Path) -> None:
    said = attempts(tmp_path, True, [("tmpdir", ""), ("fork", "")], extra="processes = 8")
    count, pids, why = forked(said[1])
    # 8 tasks in all, the server's own threads among them: the fork that would make the ninth is refused
    assert (why, 0 < count < 8, len(pids)) == ("BlockingIOError: Resource temporarily unavailable", True, count)
    assert [pid for pid in pids if alive(pid)] == []  # they left its process group; its cgroup ended them
    assert (pids_root() / f"toolcrib-{Path(said[0]).name}").exists() is False  # type: ignore[operator]


def test_ending_a_group_that_was_never_made_is_quick_and_quiet(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    from toolcrib.supply.mcp.confinement import end_group, group_of

    temporary = tmp_path / "toolcrib-mcp-never"
    assert group_of(temporary) == (pids_root() / "toolcrib-toolcrib-mcp-never" if pids_root() else None)
    anyio.run(end_group, temporary)  # no such group: nothing to kill, nothing to remove, nothing said
    assert [r.getMessage() for r in caplog.records if "process group" in r.getMessage()] == []


@pytest.mark.parametrize("argv", [[], ["{}"], ["{}", "--"], ["{}", "-", "true"]], ids=["none", "spec", "no program",
                                                                                        "no separator"])
def test_the_launcher_run_wrongly_says_how_to_run_it_on_stderr_and_runs_nothing(argv: list[str]) -> None:
    """Its stdout is a confined stdio server's wire: a usage line there would be read as a message."""
    from toolcrib.supply.mcp.confinement import LAUNCHER

    ran = subprocess.run([sys.executable, "-I", "-S", str(LAUNCHER), *argv], capture_output=True, text=True,
                         timeout=60)
    assert (ran.returncode, ran.stdout, ran.stderr) == (
        2, "", "usage: confined.py SPEC -- PROGRAM [ARGUMENTS...]\n")


def test_a_program_that_cannot_be_run_is_named_on_stderr_once_confined(tmp_path: Path) -> None:
    """Confined, then nothing to run: exit 127 (as a shell says it), the program and why on stderr, stdout (a stdio
    server's wire) untouched."""
    from toolcrib.supply.mcp.confinement import LAUNCHER

    missing = str(tmp_path / "no-such-server")
    spec = json.dumps({"read": [], "write": [], "parent": os.getpid()})
    for arguments in (["--stdio"], []):  # a program with arguments, and one without (a server's usual command)
        ran = subprocess.run([sys.executable, "-I", "-S", str(LAUNCHER), spec, "--", missing, *arguments],
                             capture_output=True, text=True, timeout=60)
        assert (ran.returncode, ran.stdout, ran.stderr) == (
            127, "", f"toolcrib: cannot run {missing}: No such file or directory\n"), arguments
