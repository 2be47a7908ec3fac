"""An upstream MCP server on stdio that tries to reach what it should not: one tool, ``try``, that attempts one
thing (``what``: read, write, append, list, remove, rmdir, mkdir, truncate, rename, ioctl, signal, limits, environ,
connect, udp, unix, udp32, unix32, x32, uring, allocate, spawn, fork) and says what happened, exactly.
For the confinement tests: the same server confined and not."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

TOOLS = [types.Tool(name="try", description="Try one thing.", input_schema={"type": "object", "properties": {
    "what": {"type": "string"}, "target": {"type": "string"}}})]


def attempt(what: str, target: str) -> str:
    try:
        if what == "read":
            with open(target) as f:
                return f"read {len(f.read())} characters"
        if what == "write":  # ($TMPDIR in the target is the server's own)
            with open(os.path.expandvars(target), "w") as f:
                f.write("written by the server")
            return "wrote it"
        if what == "append":  # to a file that exists
            with open(target, "a") as f:
                f.write("appended by the server")
            return "appended"
        if what == "list":
            return f"listed {len(os.listdir(target))} names"
        if what == "remove":
            os.unlink(target)
            return "removed"
        if what == "rmdir":
            os.rmdir(target)
            return "removed"
        if what == "mkdir":
            os.mkdir(target)
            return "made"
        if what == "truncate":  # by path, no open for writing
            os.truncate(target, 0)
            return "truncated"
        if what == "rename":  # "from>to"
            os.rename(*target.split(">"))
            return "renamed"
        if what == "ioctl":  # a terminal's question, asked of a device
            import fcntl
            import termios

            with open(target, "rb") as device:
                fcntl.ioctl(device, termios.TCGETS, bytes(64))
            return "answered"
        if what == "signal":  # SIGCONT, which a running process ignores
            os.kill(int(target), signal.SIGCONT)
            return "signalled"
        if what == "environ":
            with open(f"/proc/{target}/environ", "rb") as f:
                return f"read {len(f.read())} bytes of its environment"
        if what == "connect":
            host, port = target.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=5):
                return "connected"
        if what == "unix":  # a listening Unix socket's path (a container runtime's, say)
            with socket.socket(socket.AF_UNIX) as unix:
                unix.connect(target)
                return "connected"
        if what == "udp":
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
            return "made a UDP socket"
        if what in ("udp32", "unix32"):  # the socket made through the i386 gate, then used natively
            family = socket.AF_INET if what == "udp32" else socket.AF_UNIX
            kind = socket.SOCK_DGRAM if what == "udp32" else socket.SOCK_STREAM
            with socket.socket(fileno=gate32(I386_SOCKET, family, kind, 0)) as made:
                if what == "udp32":
                    made.sendto(b"out", ("127.0.0.1", int(target)))
                    return "sent a UDP datagram"
                made.connect(target)
                return "connected"
        if what == "x32":  # x86-64's x32 calls: the native gate, with the x32 bit in the number
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            made = libc.syscall(ctypes.c_long(X32 | 41), 2, 2, 0)
            if made < 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            os.close(made)
            return "made a UDP socket"
        if what == "uring":  # io_uring, whose operations make sockets and open files without those calls
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.syscall.restype = ctypes.c_long
            params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
            ring = libc.syscall(ctypes.c_long(425), ctypes.c_uint(1), params)
            if ring < 0:
                raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
            os.close(ring)
            return "made a ring"
        if what == "allocate":
            return f"allocated {len(bytearray(int(target) * 1024 * 1024)) // (1024 * 1024)} MiB"
        if what == "spawn":
            done = subprocess.run([sys.executable, "-c", "print('child ran')"], capture_output=True, text=True,
                                  timeout=30)
            return done.stdout.strip() or done.stderr.strip()[-200:]
        if what == "fork":  # a fork bomb: children that leave the process group, and sleep
            return fork_bomb()
        if what == "limits":  # what it is held to: CPU seconds, open files, address space
            import resource

            held = [resource.getrlimit(which)[0] for which in (resource.RLIMIT_CPU, resource.RLIMIT_NOFILE,
                                                                resource.RLIMIT_AS)]
            return "cpu {} files {} memory {}".format(*held)
        if what == "privileges":  # whether it may gain privileges (a setuid program), and its system-call filter
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            return f"no_new_privs {libc.prctl(39, 0, 0, 0, 0)} seccomp {libc.prctl(21, 0, 0, 0, 0)}"
        if what == "tmpdir":
            return os.environ.get("TMPDIR", "")
    except (OSError, MemoryError) as exc:
        return f"{type(exc).__name__}: {getattr(exc, 'strerror', None) or exc}"
    return f"unknown: {what}"


I386_SOCKET, X32 = 359, 0x40000000  # i386's own socket() number; x86-64's x32 bit


def gate32(number: int, *arguments: int) -> int:
    """Make system call ``number`` of i386 through its gate (``int 0x80``), as an attacker's few bytes of machine
    code would from a 64-bit process (x86-64 only): its result, or ``OSError``."""
    import ctypes
    import mmap

    registers = [b"\xbb", b"\xb9", b"\xba"]  # ebx, ecx, edx: the first three arguments
    code = b"\x53\xb8" + number.to_bytes(4, "little")  # push rbx (the caller's); mov eax, number
    for register, value in zip(registers, arguments, strict=False):
        code += register + value.to_bytes(4, "little")
    code += b"\xcd\x80\x5b\xc3"  # int 0x80; pop rbx; ret
    page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    answer = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))()
    if answer < 0:
        raise OSError(-answer, os.strerror(-answer))
    return int(answer)


def fork_bomb() -> str:
    """Fork until refused (at most 1000); the children leave the server's process group and sleep. Says how many
    were made, their pids, and what stopped it."""
    import time

    made: list[str] = []
    try:
        while len(made) < 1000:
            pid = os.fork()
            if pid == 0:
                os.setsid()
                time.sleep(3600)
                os._exit(0)
            made.append(str(pid))
    except OSError as exc:
        return f"forked {len(made)} ({' '.join(made)}), then {type(exc).__name__}: {exc.strerror}"
    return f"forked {len(made)} ({' '.join(made)})"


async def list_tools(ctx, params):  # type: ignore[no-untyped-def]
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params):  # type: ignore[no-untyped-def]
    args = params.arguments or {}
    text = attempt(str(args.get("what")), str(args.get("target", "")))
    return types.CallToolResult(content=[types.TextContent(text=text)])


async def main() -> None:
    server = Server("probing", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
