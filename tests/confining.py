"""What the confinement and isolation tests try from inside a confined process: the other system-call gates, forks and
what outlives them."""

from __future__ import annotations

import socket
from pathlib import Path


def gate_tries(tmp_path: Path) -> tuple[list[tuple[str, str]], socket.socket, socket.socket]:
    """Sockets made through another system-call gate than the machine's own (the i386 ``int 0x80``, x86-64's x32
    bit), then used natively: a UDP datagram to a port here, a listening Unix socket outside what may be read."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(tmp_path / "runtime.sock"))
    unix.listen()
    return ([("udp32", str(udp.getsockname()[1])), ("unix32", str(tmp_path / "runtime.sock")), ("x32", "")],
            udp, unix)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for init to reap it does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def forked(said: str) -> tuple[int, list[int], str]:
    """How many a fork bomb made, their pids, and what stopped it."""
    head, _, why = said.partition("), then ")
    count, _, pids = head.partition(" (")
    return int(count.removeprefix("forked ")), [int(p) for p in pids.split()], why
