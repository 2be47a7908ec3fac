"""Packs in a process of their own (``[packs.<namespace>] isolate = true``): real packs with real entry points,
served by a real ``toolcrib serve`` child, confined, through the host's pool; what they try to reach, each with an
exact answer."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from conftest import config_from
from toolcrib import sandbox
from toolcrib.host import Host
from toolcrib.supply import supply
from toolcrib.supply.mcp.confinement import pids_root
from toolcrib.supply.mcp.isolated import PROCESSES

# slow: every test starts confined processes (the marker's meaning: it starts subprocesses); CI runs them all
pytestmark = [pytest.mark.skipif(sandbox.landlock_abi() < 4, reason="needs Landlock ABI 4 (Linux 6.7)"),
              pytest.mark.slow]

PROBE = '''
import os, socket
import toolcrib

print("a pack that prints at import")  # to stdout: it must not reach the wire

@toolcrib.tool(annotations={"readOnlyHint": True})
def where() -> str:
    """Say which process runs this."""
    return f"pid {os.getpid()}"

@toolcrib.tool
def attempt(what: str, target: str = "") -> str:
    """Try one thing and say what happened."""
    try:
        if what == "read":
            with open(target) as f:
                return f"read {len(f.read())} characters"
        if what == "environ":
            with open(f"/proc/{target}/environ", "rb") as f:
                return f"read {len(f.read())} bytes"
        if what == "connect":
            host, port = target.rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=5).close()
            return "connected"
        if what == "allocate":
            return f"allocated {len(bytearray(int(target) * 1024 * 1024)) // (1024 * 1024)} MiB"
        if what == "write":
            with open(target, "w") as f:
                f.write("from the pack")
            return "wrote it"
        if what == "print":
            print("junk on stdout")
            return "printed"
        if what in ("udp32", "unix32", "x32"):  # another system-call gate than the machine's own
            import probing_server
            return probing_server.attempt(what, target)
        if what == "fork":
            import probing_server
            return probing_server.fork_bomb()
        if what == "tmpdir":
            return os.environ["TMPDIR"]
    except (OSError, MemoryError) as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
    return "unknown"

@toolcrib.hookimpl
def toolcrib_tools():
    return [where, attempt]
'''


def config(extra: str = "") -> str:
    return f"""
[host]
workspace = "ws"
audit_log = "audit.jsonl"

[packs.probe]
isolate = true
{extra}

[agents.a.permissions]
plugins = {{ allow = ["probe"] }}
tools = {{ allow = ["*"] }}

[agents.planner]
mode = "plan"
[agents.planner.permissions]
plugins = {{ allow = ["probe"] }}
tools = {{ allow = ["*"] }}
"""


def served(tmp_path: Path, calls: list[tuple[str, dict[str, Any]]], extra: str = "") -> dict[str, Any]:
    (tmp_path / "ws").mkdir(exist_ok=True)
    (tmp_path / "toolcrib.toml").write_text(config(extra))
    loaded = config_from(config(extra), tmp_path)

    async def main() -> dict[str, Any]:
        async with supply() as supplied:
            sources = await supplied.sync(loaded)
            host = Host(loaded, sources=sources, autoload=False, env={})
            record = next(r for r in host.records if r.name == "probe")
            seen: dict[str, Any] = {"record": (record.kind, record.state, record.tool_count, record.error),
                                    "tools": sorted(t.name for t in host.view("a").tools),
                                    "plan": sorted(t.name for t in host.view("planner").tools),
                                    "entry": (lambda e: (e.supplier.name, e.dimension, e.trusted))(
                                        host.catalog.entries["probe__where"]) if "probe__where" in
                                    host.catalog.entries else None, "said": []}
            for tool, arguments in calls:
                result = await host.call("a", tool, arguments)
                seen["said"].append(result.content[0]["text"])
            return seen

    return anyio.run(main)


@pytest.fixture
def probe_pack(dist_path: Callable[..., Path]) -> None:
    dist_path("acme-probe", "1.0", {"probe": "acme_probe"}, {"acme_probe": PROBE})


def test_an_isolated_pack_is_served_from_its_own_process_and_never_imported_here(tmp_path: Path,
                                                                                  probe_pack: None) -> None:
    seen = served(tmp_path, [("probe__where", {}), ("probe__attempt", {"what": "print"}), ("probe__where", {})])
    assert seen["record"] == ("pack", "loaded", 2, None)
    assert seen["tools"] == ["probe__attempt", "probe__where"]
    assert seen["plan"] == ["probe__where"]  # its annotations are the pack's, trusted: plan mode works
    assert seen["entry"] == ("pack", "plugins", True)
    pid = int(seen["said"][0].removeprefix("pid "))
    assert pid != os.getpid()
    assert seen["said"][1:] == ["printed", f"pid {pid}"]  # what it prints goes to stderr, not the wire
    assert "acme_probe" not in sys.modules  # the host never imported it
    audited = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(r["agent"], r["tool"]) for r in audited] == [("a", "probe__where"), ("a", "probe__attempt"),
                                                          ("a", "probe__where")]


def test_an_isolated_pack_cannot_reach_what_governs_the_host(tmp_path: Path, probe_pack: None) -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    (tmp_path / "audit.jsonl").write_text("")
    try:
        seen = served(tmp_path, [
            ("probe__attempt", {"what": "read", "target": str(tmp_path / "toolcrib.toml")}),
            ("probe__attempt", {"what": "read", "target": str(tmp_path / "audit.jsonl")}),
            ("probe__attempt", {"what": "environ", "target": str(os.getpid())}),
            ("probe__attempt", {"what": "connect", "target": f"127.0.0.1:{port}"}),
            ("probe__attempt", {"what": "allocate", "target": "10240"}),
            ("probe__attempt", {"what": "write", "target": str(tmp_path / "outside.txt")}),
            ("probe__attempt", {"what": "write", "target": str(tmp_path / "ws" / "inside.txt")}),
            ("probe__where", {}),
        ])
    finally:
        listener.close()
    denied = "PermissionError: Permission denied"
    assert seen["said"][:4] == [denied, denied, denied, denied]
    assert seen["said"][4] == "MemoryError: "  # 10 GiB past its address space
    assert seen["said"][5:7] == [denied, "wrote it"]  # the workspace is its to write, nothing else
    assert seen["said"][7].startswith("pid ")  # and it still serves
    assert not (tmp_path / "outside.txt").exists()
    assert (tmp_path / "ws" / "inside.txt").read_text() == "from the pack"


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the i386 gate and x32 are x86-64's")
def test_an_isolated_pack_makes_no_socket_through_another_system_call_gate(tmp_path: Path, probe_pack: None) -> None:
    from confining import gate_tries

    tries, udp, unix = gate_tries(tmp_path)
    try:
        seen = served(tmp_path, [("probe__attempt", {"what": what, "target": target}) for what, target in tries]
                      + [("probe__where", {})])
        udp.setblocking(False)
        with pytest.raises(BlockingIOError):
            udp.recv(10)  # nothing came
    finally:
        udp.close()
        unix.close()
    unsupported = "OSError: Function not implemented"
    assert seen["said"][:3] == [unsupported, unsupported, unsupported]
    assert seen["said"][3].startswith("pid ")  # refused, not killed: it still serves


@pytest.mark.skipif(pids_root() is None, reason="no pids cgroup can be made here: an isolated pack's processes are "
                    "not counted")
def test_an_isolated_pack_s_fork_bomb_is_stopped_and_its_children_end_with_its_process(
        tmp_path: Path, probe_pack: None) -> None:
    from confining import alive, forked

    said = served(tmp_path, [("probe__attempt", {"what": "tmpdir"}), ("probe__attempt", {"what": "fork"})])["said"]
    count, pids, why = forked(said[1])
    assert (why, 0 < count < PROCESSES, len(pids)) == ("BlockingIOError: Resource temporarily unavailable", True,
                                                       count)
    assert [pid for pid in pids if alive(pid)] == []
    assert (pids_root() / f"toolcrib-{Path(said[0]).name}").exists() is False  # type: ignore[operator]


def _processes_of(marker: str) -> list[int]:
    """The processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_a_pack_that_hangs_at_import_fails_alone_and_its_process_is_ended(
        tmp_path: Path, dist_path: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import toolcrib
    from conftest import until
    from toolcrib.supply.mcp import isolated as isolation

    monkeypatch.setattr(isolation, "START_SECONDS", 3.0)  # rather than 30: the test waits it out
    dist_path("acme-stuck", "1.0", {"stuck": "acme_stuck"}, {"acme_stuck": "import time\ntime.sleep(3600)\n"})

    @toolcrib.tool
    def here() -> str:
        """Answer from the host's process."""
        return "here"

    class InProcess:  # the host's own pack, beside the isolated one that hangs
        @toolcrib.hookimpl
        def toolcrib_tools(self) -> list[Any]:
            return [here]

    (tmp_path / "ws").mkdir()
    loaded = config_from('[host]\nworkspace = "ws"\n[packs.stuck]\nisolate = true\n[agents.a.permissions]\n'
                         'plugins = { allow = ["kit", "stuck"] }\ntools = { allow = ["*"] }\n', tmp_path)

    async def main() -> tuple[Any, ...]:
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), plugins={"kit": InProcess()}, autoload=False,
                        env={})
            stuck = next(r for r in host.records if r.name == "stuck")
            said = (await host.call("a", "kit__here", {})).content[0]["text"]

            async def ended() -> bool:
                return _processes_of("toolcrib-pack-stuck-") == []

            await until(ended, "the stuck pack's process is ended while the pool serves on")
            return (stuck.kind, stuck.state, stuck.error), said

    assert anyio.run(main) == (("pack", "failed", "cannot connect: did not answer within 3 seconds"), "here")


def test_a_pack_stuck_at_its_import_ends_with_a_host_killed_outright(tmp_path: Path,
                                                                     dist_path: Callable[..., Path]) -> None:
    """A host killed outright (SIGKILL, the out-of-memory killer) never reaches its shutdown, and a pack stuck at
    its import never reads the end of its stdin: the kernel ends the pack's process with its host."""
    import signal
    import subprocess

    from conftest import until

    site = dist_path("acme-stuck", "1.0", {"stuck": "acme_stuck"}, {"acme_stuck": "import time\ntime.sleep(3600)\n"})
    (tmp_path / "ws").mkdir()
    config = tmp_path / "toolcrib.toml"
    config.write_text('[host]\nworkspace = "ws"\n[packs.stuck]\nisolate = true\n[agents.a.permissions]\n'
                      'plugins = { allow = ["stuck"] }\ntools = { allow = ["*"] }\n')
    host = subprocess.Popen([sys.executable, "-m", "toolcrib", "serve", "--agent", "a", "--config", str(config),
                             "--no-reload"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=tmp_path / "ws",
                            env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"})

    async def started() -> bool:
        assert host.poll() is None, "the host ended before it started the pack"
        return _processes_of("toolcrib-pack-stuck-") != []

    async def ended() -> bool:
        return _processes_of("toolcrib-pack-stuck-") == []

    try:
        anyio.run(until, started, "the host starts the isolated pack")
        stuck = _processes_of("toolcrib-pack-stuck-")
        host.kill()
        host.wait()
        anyio.run(until, ended, "the stuck pack's process ends with its host")
    finally:
        host.kill()
        for pid in _processes_of("toolcrib-pack-stuck-"):  # (a failure leaves none behind for the next test)
            os.kill(pid, signal.SIGKILL)
    assert len(stuck) == 1


def test_a_pack_whose_code_lies_beside_the_config_is_not_started_and_says_why_once(
        tmp_path: Path, dist_path: Callable[..., Path], caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Its process may read the folders it imports from, so a pack installed beside the config is not started: its
    record and one warning say why (and nothing about the calls lane the host made for it and closed)."""
    import logging

    dist_path("acme-near", "1.0", {"near": "acme_near"}, {"acme_near": "x = 1\n"}, where=tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "ws").mkdir()
    loaded = config_from('[host]\nworkspace = "ws"\n[packs.near]\nisolate = true\n[agents.a.permissions]\n'
                         'plugins = { allow = ["near"] }\ntools = { allow = ["*"] }\n', tmp_path)

    async def main() -> Any:
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), autoload=False, env={})
            return next((r.kind, r.state, r.error) for r in host.records if r.name == "near")

    with caplog.at_level(logging.WARNING):
        record = anyio.run(main)
    why = (f"a confined server may read beneath {tmp_path}, and {tmp_path / 'toolcrib.lock'} (the lock file "
           "toolcrib.lock) is there: toolcrib keeps what governs the host out of its servers' reach; move it, or "
           "narrow read and write")
    assert record == ("pack", "failed", f"cannot connect: {why}")
    assert [(r.name, r.getMessage()) for r in caplog.records] == [("toolcrib.upstream", f"isolated pack 'near': {why}")]


def test_network_true_lets_an_isolated_pack_connect(tmp_path: Path, probe_pack: None) -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        seen = served(tmp_path, [("probe__attempt", {"what": "connect",
                                                     "target": f"127.0.0.1:{listener.getsockname()[1]}"})],
                      "network = true")
    finally:
        listener.close()
    assert seen["said"] == ["connected"]


def test_a_pack_that_fails_at_import_fails_alone_and_says_why(tmp_path: Path,
                                                               dist_path: Callable[..., Path]) -> None:
    dist_path("acme-probe", "1.0", {"probe": "acme_probe"}, {"acme_probe": "raise RuntimeError('exploded')\n"})
    seen = served(tmp_path, [])
    kind, state, count, error = seen["record"]
    assert (kind, state, count) == ("pack", "failed", 0)
    assert error.startswith("cannot connect: it stopped, saying: ")
    assert error.endswith("toolcrib: the isolated pack 'probe' failed: import failed: RuntimeError: exploded")
    assert seen["tools"] == []


def test_an_isolated_pack_without_a_pool_is_reported_not_imported(tmp_path: Path, probe_pack: None) -> None:
    host = Host(config_from(config(), tmp_path), autoload=True, env={})
    record = next(r for r in host.records if r.name == "probe")
    assert (record.kind, record.state, record.error) == (
        "pack", "failed", "an isolated pack is served by toolcrib serve (and the CLI's commands), which start its "
        "process; this host was given no source for it")
    assert "acme_probe" not in sys.modules


ASKING = '''
import toolcrib

@toolcrib.tool
async def confirm(ctx: toolcrib.Context, what: str) -> str:
    """Open a ticket once, report progress, then ask the user to confirm."""
    async def open_ticket():
        with open(ctx.workspace / "tickets", "a") as f:
            f.write("opened\\n")
        return len((ctx.workspace / "tickets").read_text().splitlines())

    ticket = await ctx.remember("ticket", open_ticket)
    await ctx.report_progress(1, 2, "halfway")
    answer = await ctx.elicit(f"Really {what}?", {"type": "object", "properties": {"sure": {"type": "boolean"}},
                                                  "required": ["sure"]})
    return (f"{answer.action}: {answer.content}, ticket {ticket} for {ctx.agent}, time "
            f"{ctx.permits('mcps', 'time')}, other {ctx.permits('mcps', 'other')}")

@toolcrib.hookimpl
def toolcrib_tools():
    return [confirm]
'''


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_an_isolated_pack_s_progress_and_questions_reach_the_agent_s_client(
        tmp_path: Path, dist_path: Callable[..., Path], mode: str) -> None:
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    dist_path("acme-probe", "1.0", {"probe": "acme_probe"}, {"acme_probe": ASKING})
    (tmp_path / "ws").mkdir()
    loaded = config_from(config().replace('[agents.a.permissions]\n', '[agents.a.permissions]\n'
                                          'mcps = { allow = ["time"] }\n'), tmp_path)
    seen: dict[str, Any] = {"progress": [], "asked": []}

    async def on_elicit(context: Any, params: Any) -> Any:
        import mcp_types as types

        seen["asked"].append((params.message, params.requested_schema))
        return types.ElicitResult(action="accept", content={"sure": True})

    async def main() -> Any:
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), autoload=False, env={})
            async with Client(build_server(ServingState(host), "a"), mode=mode, cache=None,
                              elicitation_callback=on_elicit) as client:
                async def progressed(done: float, total: float | None, message: str | None) -> None:
                    seen["progress"].append((done, total, message))

                return await client.call_tool("probe__confirm", {"what": "deploy"}, progress_callback=progressed)

    result = anyio.run(main)
    # the handler's ctx is the calling agent's: its name, and what its rules permit (not the child's own agent's)
    assert (result.is_error, result.content[0].text) == (
        False, "accept: {'sure': True}, ticket 1 for a, time True, other False")
    assert [m for m, _ in seen["asked"]] == ["Really deploy?"]  # once: an answer is not asked for again
    # remembered across rounds: the ticket is opened once, however often the handler runs
    assert (tmp_path / "ws" / "tickets").read_text() == "opened\n"
    # the question crosses the lane in the middle of the call: on 2025-11-25 the handler goes on with the answer;
    # on 2026-07-28 the agent's client answers between rounds, so the handler runs again (as it would in process),
    # and says how far it is each time
    assert seen["progress"] == [(1.0, 2.0, "halfway")] * (1 if mode == "legacy" else 2)


DYING = '''
import os
import toolcrib

@toolcrib.tool
def alive() -> str:
    """Say so."""
    return f"alive in {os.getpid()}"

@toolcrib.tool
def die() -> str:
    """Crash this process: a real segfault (an abort or an out-of-memory kill look the same to the host)."""
    import ctypes
    ctypes.string_at(0)

@toolcrib.hookimpl
def toolcrib_tools():
    return [alive, die]
'''


def test_an_isolated_pack_that_dies_is_started_again_and_serves(tmp_path: Path,
                                                                 dist_path: Callable[..., Path]) -> None:
    from conftest import until
    from toolcrib.mcp.state import serving_state

    dist_path("acme-probe", "1.0", {"probe": "acme_probe"}, {"acme_probe": DYING})
    (tmp_path / "ws").mkdir()
    path = tmp_path / "toolcrib.toml"
    path.write_text(config())

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with serving_state(path) as state:
            seen["first"] = (await state.host.call("a", "probe__alive", {})).content[0]["text"]
            died = await state.host.call("a", "probe__die", {})
            seen["died"] = (died.is_error, died.content[0]["text"])

            async def serving_again() -> bool:
                record = next(r for r in state.host.records if r.name == "probe")
                if record.state != "loaded":
                    return False
                answer = await state.host.call("a", "probe__alive", {})
                seen["again"] = answer.content[0]["text"]
                return not answer.is_error

            await until(serving_again, "the pack serves again")
        return seen

    seen = anyio.run(main)
    first, again = int(seen["first"].split()[-1]), int(seen["again"].split()[-1])
    assert first != again and first != os.getpid()  # a new process
    assert seen["died"] == (True, "isolated pack 'probe' failed during the call: its process ended")


def test_readyz_names_a_failed_isolated_pack_and_stays_ready(tmp_path: Path, dist_path: Callable[..., Path]) -> None:
    import httpx2

    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    dist_path("acme-probe", "1.0", {"probe": "acme_probe"}, {"acme_probe": "raise RuntimeError('exploded')\n"})
    (tmp_path / "ws").mkdir()
    loaded = config_from(config(), tmp_path)

    async def main() -> tuple[int, Any]:
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), autoload=False, env={})
            app = HttpApp(ServingState(host), HttpOptions(), env={})
            async with app.app.router.lifespan_context(app.app), httpx2.AsyncClient(
                    transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8000") as http:
                ready = await http.get("/readyz")
                return ready.status_code, ready.json()

    assert anyio.run(main) == (200, {"status": "ready", "failed_sources": ["probe"]})


def test_isolate_packs_third_party_isolates_every_installed_pack_but_toolcrib_s_own(
        tmp_path: Path, probe_pack: None) -> None:
    import importlib.metadata

    installed = {p.name: p.dist.name for p in importlib.metadata.entry_points(group="toolcrib") if p.dist}
    policy = '[host]\nisolate_packs = "third-party"\n'
    loaded = config_from(policy, tmp_path)
    third = {name for name, dist in installed.items() if not dist.startswith("toolcrib-")} | (
        {"llm"} if "llm" in installed else set())
    assert loaded.isolated_packs() == frozenset(third) and "probe" in third
    kept = config_from(policy + '[packs.probe]\nisolate = false\n[packs.fs]\nisolate = true\n', tmp_path)
    assert kept.isolated_packs() == frozenset(third - {"probe"} | {"fs"})
    assert config_from('[host]\nisolate_packs = "all"\n', tmp_path).isolated_packs() == frozenset(installed)


@pytest.mark.parametrize("isolated", [False, True])
def test_the_pack_kit_runs_a_pack_s_tests_in_process_and_isolated(tmp_path: Path, probe_pack: None,
                                                                   isolated: bool) -> None:
    import importlib

    from toolcrib.testing import make_kit  # what the toolcrib_pack fixture makes (the plugin is off under mutmut)

    pack = "acme_probe" if isolated else importlib.import_module("acme_probe")  # isolated: imported only there
    (tmp_path / "workspace").mkdir()
    kit = make_kit(pack, namespace="probe", isolated=isolated, workspace=tmp_path / "workspace")
    request_close = kit.close
    try:
        check_kit(kit, isolated)
    finally:
        request_close()


def check_kit(kit: Any, isolated: bool) -> None:
    assert kit.names == ["probe__attempt", "probe__where"]
    where = kit.call("where").text
    assert (where == f"pid {os.getpid()}") is (not isolated)
    assert kit.call("attempt", what="write", target=str(kit.workspace / "a.txt")).text == "wrote it"
    assert kit.problems() == []
    assert ("acme_probe" in sys.modules) is (not isolated)


LANE = '''
import os
import anyio
import toolcrib

@toolcrib.tool
async def chat(ctx: toolcrib.Context, n: int) -> str:
    """Log a line, wait for the other call, and answer."""
    await ctx.info(f"working on {n}")
    return f"done {n}"

@toolcrib.tool
async def wait(ctx: toolcrib.Context) -> str:
    """Wait until stopped; say so in the workspace."""
    try:
        await anyio.sleep(3600)
    finally:
        (ctx.workspace / "stopped").write_text("cancelled")
    return "never"

@toolcrib.tool
def forge(what: str) -> str:
    """Write to the host's end of the calls lane behind the pipeline's back."""
    for fd in range(3, 256):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").endswith("answers"):
                os.write(fd, what.encode() + b"\\n")
                return "forged"
        except OSError:
            continue
    return "no lane"

@toolcrib.tool
async def flood(ctx: toolcrib.Context) -> str:
    """Report progress far faster than anyone reads it, then answer."""
    for step in range(3000):
        await ctx.report_progress(step, 3000)
    return "after the flood"

@toolcrib.hookimpl
def toolcrib_tools():
    return [chat, wait, forge, flood]
'''


def test_an_isolated_pack_s_calls_take_its_lane_with_their_log_messages_side_by_side(
        tmp_path: Path, dist_path: Callable[..., Path]) -> None:
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    dist_path("acme-probe", "1.0", {"probe": "acme_probe"}, {"acme_probe": LANE})
    (tmp_path / "ws").mkdir()
    loaded = config_from(config(), tmp_path)
    logged: list[tuple[str, Any]] = []

    async def on_log(params: Any) -> None:
        logged.append((params.level, params.data))

    async def main() -> list[str]:
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), autoload=False, env={})
            async with Client(build_server(ServingState(host), "a"), mode="legacy", cache=None,
                              logging_callback=on_log) as client:
                answers: dict[int, str] = {}

                async def one(n: int) -> None:
                    answers[n] = (await client.call_tool("probe__chat", {"n": n})).content[0].text

                async with anyio.create_task_group() as tg:
                    for n in range(5):
                        tg.start_soon(one, n)
                return [answers[n] for n in range(5)]

    assert anyio.run(main) == [f"done {n}" for n in range(5)]
    # a log message crosses only the lane (the MCP session between host and child does not carry it)
    assert sorted(logged) == sorted(("info", f"working on {n}") for n in range(5))


def test_a_cancelled_call_stops_in_the_isolated_pack_s_process(tmp_path: Path,
                                                                dist_path: Callable[..., Path]) -> None:
    from conftest import until

    dist_path("acme-probe", "1.0", {"probe": "acme_probe"}, {"acme_probe": LANE})
    (tmp_path / "ws").mkdir()
    loaded = config_from(config(), tmp_path)

    async def main() -> tuple[str, str]:
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), autoload=False, env={})
            with anyio.move_on_after(0.5):  # the agent's client gives up (any moment will do)
                await host.call("a", "probe__wait", {})

            async def stopped() -> bool:
                return (tmp_path / "ws" / "stopped").exists()

            await until(stopped, "the handler in the child is cancelled")
            after = await host.call("a", "probe__chat", {"n": 7})
            return (tmp_path / "ws" / "stopped").read_text(), after.content[0]["text"]

    assert anyio.run(main) == ("cancelled", "done 7")


def test_a_line_on_the_lane_that_is_not_the_lane_s_ends_it_and_calls_go_on_over_mcp(
        tmp_path: Path, dist_path: Callable[..., Path], caplog: pytest.LogCaptureFixture) -> None:
    dist_path("acme-probe", "1.0", {"probe": "acme_probe"}, {"acme_probe": LANE})
    seen = served(tmp_path, [("probe__forge", {"what": '{"result": 999, "content": []}'}),  # no such call: ignored
                             ("probe__flood", {}),  # progress may be dropped when it comes too fast; answers never
                             ("probe__chat", {"n": 1}),
                             ("probe__forge", {"what": "garbage"}),
                             ("probe__chat", {"n": 2})])
    assert seen["said"][:3] == ["forged", "after the flood", "done 1"]
    # the call in flight when the lane ended fails, saying why; the next takes the MCP session
    assert seen["said"][3:] == ["isolated pack 'probe' failed during the call: a line that is not JSON", "done 2"]
    assert "isolated pack 'probe': its calls lane ended: a line that is not JSON" in caplog.messages


STUCK = '''
import os, time
import toolcrib

@toolcrib.tool
def alive() -> str:
    """Say so."""
    return f"alive in {os.getpid()}"

@toolcrib.tool
def stuck() -> str:
    """Never return (a thread nothing can stop)."""
    while True:
        time.sleep(0.01)

@toolcrib.hookimpl
def toolcrib_tools():
    return [alive, stuck]
'''


def test_an_isolated_pack_s_call_that_outlives_its_time_ends_its_process(tmp_path: Path,
                                                                         dist_path: Callable[..., Path]) -> None:
    from conftest import until
    from toolcrib.mcp.state import serving_state

    dist_path("acme-probe", "1.0", {"probe": "acme_probe"}, {"acme_probe": STUCK})
    (tmp_path / "ws").mkdir()
    path = tmp_path / "toolcrib.toml"
    path.write_text(config().replace("[host]\n", "[host]\ncall_timeout = 1\n"))

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        async with serving_state(path) as state:
            seen["first"] = (await state.host.call("a", "probe__alive", {})).content[0]["text"]
            seen["stuck"] = (await state.host.call("a", "probe__stuck", {})).content[0]["text"]

            async def serving_again() -> bool:
                answer = await state.host.call("a", "probe__alive", {})
                seen["again"] = answer.content[0]["text"]
                return not answer.is_error and seen["again"] != seen["first"]

            await until(serving_again, "the pack serves again, from a new process")
        return seen

    seen = anyio.run(main)
    assert seen["stuck"] == "Tool probe__stuck timed out after 1 second and was stopped."
    first, again = int(seen["first"].split()[-1]), int(seen["again"].split()[-1])
    assert first != again and not os.path.exists(f"/proc/{first}")  # the process that held the thread is gone


def test_check_warns_where_an_isolated_pack_s_processes_cannot_be_counted(
        tmp_path: Path, probe_pack: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from toolcrib.supply.mcp import confinement

    def warnings() -> list[str]:
        host = Host(config_from(config(), tmp_path), plugins={}, autoload=False, env={})
        return [p.message for p in host.problems(env={}) if "cannot be counted" in p.message]

    if pids_root() is not None:  # here (root, with cgroup v1's pids hierarchy) they are counted
        assert warnings() == []
    # a host that cannot make a pids cgroup cannot be made here: its probe is made to say so
    monkeypatch.setattr(confinement, "pids_root", lambda: None)
    assert warnings() == ["probe: an isolated pack's processes cannot be counted here (no pids cgroup this host may "
                          "make: run it as root, or give it a cgroup v2 group with the pids controller delegated), so "
                          "a fork bomb in one is not stopped"]


CHECKED = '''
import pydantic
import toolcrib

READ = {"readOnlyHint": True}  # plan mode (the agent reader's) shows them

def sees(ctx):
    return "vision" in ctx.capabilities or f"{ctx.model} cannot see"

def written_for(ctx):
    return f"Look at an image, for {ctx.agent} on {ctx.model} in {ctx.mode} mode ({ctx.settings.greeting})"

@toolcrib.tool(is_available=sees, describe=written_for, annotations=READ)
def look(path: str) -> str:
    """Look at an image."""
    return "seen"

def raises(ctx):
    raise ValueError(f"nothing for {ctx.agent}")

@toolcrib.tool(is_available=raises, annotations=READ)
def broken() -> str:
    """Never available."""
    return "never"

def beside_other(ctx):
    return ctx.permits("plugins", "other") or "only beside the pack other"

@toolcrib.tool(is_available=beside_other, annotations=READ)
def combined() -> str:
    """Only for agents that also have other."""
    return "combined"

@toolcrib.tool(is_available=lambda ctx: 42, annotations=READ)
def odd() -> str:
    """Its check returns a number."""
    return "odd"

@toolcrib.tool(annotations=READ)
def plain() -> str:
    """Always there."""
    return "plain"

@toolcrib.resource("checked://pictures", is_available=sees)
def pictures() -> str:
    return "pictures"

@toolcrib.prompt(is_available=lambda ctx: ctx.mode != "plan" or "not in plan mode")
def review() -> str:
    """Review something."""
    return "review it"

class Settings(pydantic.BaseModel):
    greeting: str = "hello"

@toolcrib.hookimpl
def toolcrib_settings_model():
    return Settings

@toolcrib.hookimpl
def toolcrib_tools():
    return [look, broken, combined, odd, plain]

@toolcrib.hookimpl
def toolcrib_resources():
    return [pictures]

@toolcrib.hookimpl
def toolcrib_prompts():
    return [review]
'''


def checked_config(isolate: bool) -> str:
    rules = ('plugins = {{ allow = [{packs}] }}\ntools = {{ allow = ["*"] }}\nresources = {{ allow = ["*"] }}\n'
             'prompts = {{ allow = ["*"] }}\n')
    return (f'[host]\nworkspace = "ws"\n[models.qwen-vl]\nvision = true\n[models.text-model]\nvision = false\n'
            f'[packs.checked]\nisolate = {"true" if isolate else "false"}\ngreeting = "ahoy"\n'
            '[agents.seer]\nmodel = "qwen-vl"\n[agents.seer.permissions]\n' + rules.format(packs='"checked", "other"')
            + '[agents.reader]\nmodel = "text-model"\nmode = "plan"\n[agents.reader.permissions]\n'
            + rules.format(packs='"checked"'))


def checked_views(tmp_path: Path, isolate: bool) -> dict[str, Any]:
    (tmp_path / "ws").mkdir(parents=True)
    loaded = config_from(checked_config(isolate), tmp_path)

    async def main() -> dict[str, Any]:
        async with supply() as supplied:
            sources = await supplied.sync(loaded)
            # in process: the installed pack, found by its entry point
            host = Host(loaded, sources=sources, autoload=not isolate, env={})
            seen: dict[str, Any] = {}
            for agent in ("seer", "reader"):
                view = host.view(agent)
                seen[agent] = {
                    "tools": {t["name"]: t["description"] for t in view.mcp_tools},
                    "hidden": {name: host.explain(agent, name).reason  # type: ignore[union-attr]
                               for name in ("checked__look", "checked__broken", "checked__combined", "checked__odd")
                               if name not in {t["name"] for t in view.mcp_tools}},
                    "resources": [r["uri"] for r in view.mcp_resources],
                    "prompts": [p["name"] for p in view.mcp_prompts],
                }
            seen["call"] = (await host.call("seer", "checked__look", {"path": "a.png"})).content[0]["text"]
            return seen

    return anyio.run(main)


def test_an_isolated_pack_s_checks_and_descriptions_answer_for_the_calling_agent_as_in_process(
        tmp_path: Path, dist_path: Callable[..., Path]) -> None:
    """Its process serves one agent of its own; the host asks it, for each of its agents, what the pack's
    ``is_available`` and ``describe`` say (with that agent's model, capabilities, mode and rules), and gets what the
    same pack in process says, word for word."""
    dist_path("acme-checked", "1.0", {"checked": "acme_checked"}, {"acme_checked": CHECKED})
    isolated = checked_views(tmp_path / "isolated", True)
    assert isolated["seer"] == {
        "tools": {"checked__combined": "Only for agents that also have other.",
                  "checked__look": "Look at an image, for seer on qwen-vl in default mode (ahoy)",
                  "checked__plain": "Always there."},
        "hidden": {"checked__broken": "is_available raised ValueError: nothing for seer (hidden: fail closed)",
                   "checked__odd": "is_available returned 42; expected True, False or a reason (hidden: fail closed)"},
        "resources": ["checked://pictures"], "prompts": ["checked__review"]}
    assert isolated["reader"] == {
        "tools": {"checked__plain": "Always there."},
        "hidden": {"checked__look": "not available: text-model cannot see",
                   "checked__broken": "is_available raised ValueError: nothing for reader (hidden: fail closed)",
                   "checked__combined": "not available: only beside the pack other",
                   "checked__odd": "is_available returned 42; expected True, False or a reason (hidden: fail closed)"},
        "resources": [], "prompts": []}
    assert isolated["call"] == "seen"
    assert "acme_checked" not in sys.modules
    assert checked_views(tmp_path / "in-process", False) == isolated


HANGS = '''
import time
import toolcrib

@toolcrib.tool(is_available=lambda ctx: time.sleep(3600))
def a_stuck() -> str:
    """Its check never answers."""
    return "stuck"

@toolcrib.tool(is_available=lambda ctx: True)
def b_after() -> str:
    """Checked after the one that hangs (checks run in the order of their names)."""
    return "after"

@toolcrib.tool
def plain() -> str:
    """Not checked."""
    return "plain"

@toolcrib.hookimpl
def toolcrib_tools():
    return [a_stuck, b_after, plain]
'''


def test_an_isolated_pack_s_check_that_hangs_hides_its_tools_in_time_and_the_rest_is_served(
        tmp_path: Path, dist_path: Callable[..., Path]) -> None:
    """A check that never returns holds the isolated pack's checking thread: its tool, and the pack's checked tools
    after it, are hidden within ``[host] availability_timeout`` (fail closed), in the words a check in process gets;
    the pack's other tools and its calls are served."""
    dist_path("acme-hangs", "1.0", {"hangs": "acme_hangs"}, {"acme_hangs": HANGS})
    (tmp_path / "ws").mkdir()
    loaded = config_from('[host]\nworkspace = "ws"\navailability_timeout = 1\n[packs.hangs]\nisolate = true\n'
                         '[agents.a.permissions]\nplugins = { allow = ["hangs"] }\ntools = { allow = ["*"] }\n',
                         tmp_path)

    async def main() -> tuple[list[str], dict[str, str], str]:
        async with supply() as supplied:
            host = Host(loaded, sources=await supplied.sync(loaded), autoload=False, env={})
            names = sorted(t.name for t in host.view("a").tools)
            why = {n: host.explain("a", n).reason for n in ("hangs__a_stuck", "hangs__b_after")}  # type: ignore[union-attr]
            return names, why, (await host.call("a", "hangs__plain", {})).content[0]["text"]

    names, why, said = anyio.run(main)
    assert names == ["hangs__plain"]
    waited = "is_available gave no answer within 1 seconds (hidden: fail closed; [host] availability_timeout)"
    assert why == {"hangs__a_stuck": waited, "hangs__b_after": waited}
    assert said == "plain"
