"""toolcrib.pipes.write_all on real pipes: a write larger than the pipe holds arrives whole and in order while the
reader drains it, and a reader gone is the caller's BrokenPipeError."""

from __future__ import annotations

import os

import anyio
import pytest

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
