"""A real ``redis-server`` (Debian's package, installed by ``.ci/run``) on a free loopback port, with no persistence
and a temporary folder of its own, for the tests of the shared store (``toolcrib.cluster``)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

HANG_GUARD = 30.0  # seconds: only a broken machine takes this long to start a Redis


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server``; ``stop`` and ``start`` again keep its port (a store that went away and came back)."""

    def __init__(self, folder: Path, password: str | None = None) -> None:
        program = shutil.which("redis-server") or next(
            (p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server") if Path(p).exists()), None)
        if program is None:
            pytest.skip("redis-server is not installed (.ci/run installs Debian's redis-server)")
        self.program = program
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        args = [self.program, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.folder), "--daemonize", "no", "--logfile", str(self.folder / "redis.log")]
        if self.password:
            args += ["--requirepass", self.password]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + HANG_GUARD
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(self.folder / 'redis.log').read_text()[-500:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(64):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=HANG_GUARD)
        self.proc = None

    def flush(self) -> None:
        """Forget every key (between tests that share the server)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            if self.password:
                s.sendall(f"AUTH {self.password}\r\n".encode())
                s.recv(64)
            s.sendall(b"FLUSHALL\r\n")
            s.recv(64)
