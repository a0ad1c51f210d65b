"""The counts every gateway process of an endpoint shares, so its limits stay graph-wide however many
processes serve the port: requests in flight (in all, and per API key) and each key's minute buckets.

A file of float64s mapped into every process, changed only under an exclusive flock (a few
microseconds a request, never per token). Each process counts what it has in flight in a row of its
own, which it zeroes when it starts: a process that was killed leaves no requests counted behind it
once it is restarted. The buckets are shared by all, as a key's minute is. Without a file (one
process, or a test) the same counts live in anonymous memory.
"""

from __future__ import annotations

import fcntl
import mmap
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

BUCKET_FIELDS = 4  # requests' level and time, tokens' level and time


class Ledger:
    """The shared counts of `processes` processes over `keys` (the keys' names, in one order for all)."""

    def __init__(self, keys: Sequence[str], processes: int, process: int, path: Path | None) -> None:
        if not 0 <= process < processes:
            raise ValueError(f"process {process} is not one of {processes}")
        self.slots = {name: slot for slot, name in enumerate(keys)}
        self.processes, self.process = processes, process
        self.width = 1 + len(keys)  # a row: in flight in all, then per key
        size = 8 * (processes * self.width + BUCKET_FIELDS * len(keys))
        self._fd: int | None = None
        if path is None:
            self._map = mmap.mmap(-1, size)
        else:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            with self.locked():
                if os.fstat(self._fd).st_size != size:  # new, or another endpoint's shape: start afresh
                    os.ftruncate(self._fd, 0)
                    os.ftruncate(self._fd, size)
            self._map = mmap.mmap(self._fd, size)
        self._values = memoryview(self._map).cast("d")
        with self.locked():
            row = self.process * self.width
            self._values[row : row + self.width] = memoryview(bytes(8 * self.width)).cast("d")

    @classmethod
    def create(cls, path: Path) -> None:
        """An empty ledger file for a new endpoint: the processes size it as they open it."""
        path.unlink(missing_ok=True)
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))

    @contextmanager
    def locked(self) -> Iterator[None]:
        if self._fd is None:
            yield
            return
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def slot(self, key: str | None) -> int | None:
        return None if key is None else self.slots.get(key)

    def in_flight(self, slot: int | None = None) -> int:
        """Requests in flight over every process: in all, or of the key in `slot`. Call it locked."""
        column = 0 if slot is None else 1 + slot
        return int(sum(self._values[row * self.width + column] for row in range(self.processes)))

    def count_in(self, slot: int | None) -> None:
        """One more request in flight in this process's row (and its key's). Call it locked."""
        self._add(slot, 1.0)

    def count_out(self, slot: int | None) -> None:
        with self.locked():
            self._add(slot, -1.0)

    def _add(self, slot: int | None, amount: float) -> None:
        row = self.process * self.width
        self._values[row] += amount
        if slot is not None:
            self._values[row + 1 + slot] += amount

    def bucket(self, slot: int, which: int) -> tuple[float, float]:
        """A key's bucket (0: requests, 1: tokens) as (level, monotonic time). A fresh ledger's zeros
        read as a bucket last seen empty at boot, which its refill makes full."""
        at = self.processes * self.width + slot * BUCKET_FIELDS + 2 * which
        return self._values[at], self._values[at + 1]

    def set_bucket(self, slot: int, which: int, level: float, when: float) -> None:
        at = self.processes * self.width + slot * BUCKET_FIELDS + 2 * which
        self._values[at], self._values[at + 1] = level, when

    def close(self) -> None:
        self._values.release()
        self._map.close()
        if self._fd is not None:
            os.close(self._fd)
