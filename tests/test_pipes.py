"""toolcrib.pipes on real pipes: write_all (a write larger than the pipe holds arrives whole and in order while the
reader drains it, and a reader gone is the caller's BrokenPipeError), and read_answer (an answer another process is
about to write is looked for awake, briefly, between turns of the event loop, every other task going on; then
waited for asleep)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

from toolcrib import pipes
from toolcrib.pipes import write_all


def _pipe() -> tuple[int, int]:
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    return read_fd, write_fd


def test_a_write_larger_than_the_pipe_waits_for_room_and_arrives_whole() -> None:
    data = bytes(range(256)) * 4096  # 1 MiB: sixteen times what a Linux pipe holds
    read_fd, write_fd = _pipe()
    got = bytearray()

    async def drain() -> None:  # to the end of input: what write_all wrote before it returned, and no more
        while True:
            try:
                chunk = os.read(read_fd, 1 << 16)
            except BlockingIOError:
                await anyio.wait_readable(read_fd)
                continue
            if not chunk:
                return
            got.extend(chunk)

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            await write_all(write_fd, data)
            os.close(write_fd)

    try:
        anyio.run(main)
    finally:
        os.close(read_fd)
    assert len(got) == len(data) and bytes(got) == data


def test_a_reader_gone_is_the_callers_broken_pipe() -> None:
    read_fd, write_fd = _pipe()
    os.close(read_fd)
    try:
        with pytest.raises(BrokenPipeError):
            anyio.run(write_all, write_fd, b"a line\n")
    finally:
        os.close(write_fd)


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_fd, write_fd = _pipe()
    yield read_fd, write_fd
    for fd in (read_fd, write_fd):
        with contextlib.suppress(OSError):  # (closed by the test already)
            os.close(fd)


@pytest.mark.parametrize("spins", [True, False])
def test_an_answer_is_read_whether_it_comes_while_looked_for_or_after_the_reader_slept(
        pipe: tuple[int, int], spins: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipes, "SPINS", spins)
    read_fd, write_fd = pipe

    async def main() -> list[bytes]:
        got: list[bytes] = []
        with anyio.fail_after(10):
            return await read_three(got)

    async def read_three(got: list[bytes]) -> list[bytes]:
        async with anyio.create_task_group() as tg:
            async def answer(after: float, data: bytes) -> None:
                await anyio.sleep(after)
                os.write(write_fd, data)

            tg.start_soon(answer, 0, b"soon\n")  # within the spin
            got.append(await pipes.read_answer(read_fd, 100))
            tg.start_soon(answer, 0.05, b"late\n")  # long after it: the reader sleeps, and is woken
            got.append(await pipes.read_answer(read_fd, 100))
        os.close(write_fd)
        got.append(await pipes.read_answer(read_fd, 100))  # end of input
        return got

    assert anyio.run(main) == [b"soon\n", b"late\n", b""]


def _looks_while_another_task_turns(pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch,
                                    look: bool) -> tuple[bytes, list[int], list[int]]:
    """Another task writes the answer after 200 turns of the event loop while ``read_answer`` (its spin made a
    minute long) waits for it: (what it read, the other task's turns, how many of them it had made at each read)."""
    monkeypatch.setattr(pipes, "SPINS", True)
    monkeypatch.setattr(pipes, "SPIN_SECONDS", 60.0)
    read_fd, write_fd = pipe
    turns: list[int] = []
    seen: list[int] = []
    read = os.read

    def looking(fd: int, size: int) -> bytes:
        seen.append(len(turns))
        return read(fd, size)

    async def main() -> bytes:
        async with anyio.create_task_group() as tg:
            async def busy() -> None:
                for turn in range(200):
                    turns.append(turn)
                    await anyio.lowlevel.checkpoint()
                os.write(write_fd, b"done\n")

            tg.start_soon(busy)
            return await pipes.read_answer(read_fd, 100, look=look)

    monkeypatch.setattr(os, "read", looking)
    got = anyio.run(main)
    monkeypatch.undo()
    return got, turns, seen


def test_looking_for_an_answer_lets_every_other_task_run(pipe: tuple[int, int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader looks for the answer between the other task's turns, not before them all (a reader that held
    the loop would see none of them until its spin ended)."""
    got, turns, seen = _looks_while_another_task_turns(pipe, monkeypatch, look=True)
    assert got == b"done\n"
    assert turns == list(range(200))
    assert seen == sorted(seen) and len(set(seen)) > 100, seen


def test_a_reader_not_looking_waits_asleep_at_once(pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch) -> None:
    """``look=False`` (an answer from a process woken on this thread's CPU, which runs there as this one sleeps):
    one read before it sleeps and one when the answer is in, however many turns the loop makes meanwhile."""
    got, turns, seen = _looks_while_another_task_turns(pipe, monkeypatch, look=False)
    assert got == b"done\n"
    assert turns == list(range(200))
    assert seen == [0, 200]


def test_a_reader_that_waits_long_sleeps_after_its_spin(pipe: tuple[int, int],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting half a second for a slow answer costs the process a spin's CPU (200 us), not half a second's."""
    monkeypatch.setattr(pipes, "SPINS", True)
    read_fd, write_fd = pipe

    async def main() -> tuple[bytes, float]:
        async with anyio.create_task_group() as tg:
            async def answer() -> None:
                await anyio.to_thread.run_sync(time.sleep, 0.5)
                os.write(write_fd, b"slow\n")

            tg.start_soon(answer)
            cpu = time.process_time()
            got = await pipes.read_answer(read_fd, 100)
            cpu = time.process_time() - cpu
        return got, cpu

    got, cpu = anyio.run(main)
    assert got == b"slow\n"
    assert cpu < 0.25, f"the reader spent {cpu:.3f} s of CPU waiting 0.5 s"


@pytest.mark.skipif(shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2,
                    reason="needs taskset and two CPUs")
def test_a_process_with_one_cpu_never_spins() -> None:
    """The other process needs the one CPU there is: looking for its answer would only delay it."""
    code = "import toolcrib.pipes as p; print(p.SPINS)"
    one = subprocess.run(["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    both = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert (one.stdout, both.stdout) == ("False\n", "True\n")


@pytest.mark.parametrize("spins", [True, False])
def test_a_deadline_ends_the_wait_for_an_answer_or_for_room_with_timeout_error(
        pipe: tuple[int, int], spins: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing to read, and a pipe with no room: each wait gives up at its deadline (``time.monotonic()``'s), not
    before it; what could be written before the pipe filled was written."""
    monkeypatch.setattr(pipes, "SPINS", spins)
    read_fd, write_fd = pipe

    async def waited(wait: Any) -> float:
        begun = time.monotonic()
        with anyio.fail_after(10), pytest.raises(TimeoutError):  # (a hang guard, and a timeout of its own)
            await wait(begun + 0.2)
        return time.monotonic() - begun

    async def main() -> tuple[float, float, int]:
        reading = await waited(lambda deadline: pipes.read_answer(read_fd, 100, deadline))
        writing = await waited(lambda deadline: write_all(write_fd, b"x" * (1 << 20), deadline))
        held = 0
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(read_fd, 1 << 16):
                held += len(chunk)
        return reading, writing, held

    reading, writing, held = anyio.run(main)
    assert 0.2 <= reading < 5 and 0.2 <= writing < 5, (reading, writing)
    assert 0 < held < 1 << 20
