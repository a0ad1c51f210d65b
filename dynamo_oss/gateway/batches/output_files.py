"""A batch's output and error files, written from the answers its store keeps: each line's first answer, in the
input file's order, spooled to disk past SPOOL_BYTES. A batch of many long answers is then never held whole in
a gateway process's memory, nor are its files."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from typing import BinaryIO

from dynamo_oss.gateway.batches.store import Answer

SPOOL_BYTES = 8 * 2**20  # a file or the answers read back is kept in memory up to this, then on disk


class OutputFile:
    """One of a batch's files as it is written: its bytes (spooled), their count, and its lines."""

    def __init__(self) -> None:
        self.data: BinaryIO = tempfile.SpooledTemporaryFile(SPOOL_BYTES)  # noqa: SIM115 - closed by close()
        self.size = 0
        self.lines = 0

    def add(self, line: bytes) -> None:
        self.data.write(line + b"\n")
        self.size += len(line) + 1
        self.lines += 1

    def close(self) -> None:
        self.data.close()


async def output_files(answers: AsyncIterator[Answer]) -> tuple[OutputFile, OutputFile]:
    """The output and error files of a batch whose kept answers are `answers` (in the order they came, a line
    answered twice: both), each file read back from its start."""
    arrived = tempfile.SpooledTemporaryFile(SPOOL_BYTES)  # noqa: SIM115 - closed in _in_line_order
    places: dict[int, tuple[int, int, bool]] = {}  # line: where its first answer is in `arrived`, its size, failed
    async for answer in answers:
        if answer.line not in places:
            places[answer.line] = (arrived.tell(), len(answer.data), answer.failed)
            arrived.write(answer.data)
    return await asyncio.to_thread(_in_line_order, arrived, places)


def _in_line_order(arrived: BinaryIO, places: dict[int, tuple[int, int, bool]]) -> tuple[OutputFile, OutputFile]:
    output, errors = OutputFile(), OutputFile()
    try:
        for line in sorted(places):
            offset, size, failed = places[line]
            arrived.seek(offset)
            (errors if failed else output).add(arrived.read(size))
    finally:
        arrived.close()
    for written in (output, errors):
        written.data.seek(0)
    return output, errors
