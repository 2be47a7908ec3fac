"""toolcrib.pipes on real pipes: write_all (a write larger than the pipe holds arrives whole and in order while the
reader drains it, and a reader gone is the caller's BrokenPipeError), and read_answer (an answer another process is
about to write is looked for awake, briefly, between turns of the event loop, every other task going on; then
waited for asleep)."""

from __future__ import annotations

import contextlib
import os
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


def test_an_answer_is_read_whether_it_is_there_at_once_or_comes_while_the_reader_waits(
        pipe: tuple[int, int]) -> None:
    read_fd, write_fd = pipe

    async def main() -> list[bytes]:
        got: list[bytes] = []
        with anyio.fail_after(10):
            return await read_three(got)

    async def read_three(got: list[bytes]) -> list[bytes]:
        async with anyio.create_task_group() as tg:
            os.write(write_fd, b"there\n")  # already in the pipe
            got.append(await pipes.read_answer(read_fd, 100))

            async def answer(after: float, data: bytes) -> None:
                await anyio.sleep(after)
                os.write(write_fd, data)

            tg.start_soon(answer, 0.05, b"late\n")  # later: the reader waits asleep, and is woken
            got.append(await pipes.read_answer(read_fd, 100))
        os.close(write_fd)
        got.append(await pipes.read_answer(read_fd, 100))  # end of input
        return got

    assert anyio.run(main) == [b"there\n", b"late\n", b""]


def test_a_reader_waits_asleep_while_every_other_task_runs(pipe: tuple[int, int],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """One read before it waits and one when the answer is in, however many turns the loop makes meanwhile: the
    reader neither holds the loop nor looks for the answer between the other task's turns."""
    read_fd, write_fd = pipe
    turns: list[int] = []
    seen: list[int] = []
    read = os.read

    def counted(fd: int, size: int) -> bytes:
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
            return await pipes.read_answer(read_fd, 100)

    monkeypatch.setattr(os, "read", counted)
    got = anyio.run(main)
    monkeypatch.undo()
    assert (got, turns, seen) == (b"done\n", list(range(200)), [0, 200])


def test_a_deadline_ends_the_wait_for_an_answer_or_for_room_with_timeout_error(pipe: tuple[int, int]) -> None:
    """Nothing to read, and a pipe with no room: each wait gives up at its deadline (``time.monotonic()``'s), not
    before it; what could be written before the pipe filled was written."""
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
