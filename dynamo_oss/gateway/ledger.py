"""The counts every gateway process of an endpoint shares, so its limits stay graph-wide however many
processes serve the port: requests in flight (in all, and per API key) and each key's minute buckets.

A file of float64s mapped into every process, changed only under an exclusive flock (a few
microseconds a request, never per token). Each process counts what it has in flight in a row of its
own, which it zeroes when it starts: a process that was killed leaves no requests counted behind it
once it is restarted. The buckets are shared by all, as a key's minute is. Without a file (one
process, or a test) the same counts live in anonymous memory.

When the graph's gateway runs in several places (pods, nodes), each place has a ledger of its own, and
the endpoint's first process keeps it in step with the others (cluster_share.py): it writes what the
other places have in flight into a row of its own, which in_flight adds, takes their charges off the
buckets, and reads what this place has charged each key (requests and tokens, only ever growing), which
it tells the others.
"""

from __future__ import annotations

import fcntl
import mmap
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

BUCKET_FIELDS = 4  # requests' level and time, tokens' level and time
# The column batch requests are counted in, as a key's are (a name no key has: keys' names have no spaces), so
# their share of the graph is counted over every process and place (batches/pacing.py).
BATCH_LINES = "batch lines"
CHARGE_FIELDS = 2  # requests and tokens charged by this place since it started


class Ledger:
    """The shared counts of `processes` processes over `keys` (the keys' names, in one order for all) and the
    graph's batch requests (BATCH_LINES).
    `process` is the serving process that opens it, or None for the endpoint's first process, which
    serves no client and so has no row (it keeps the ledger in step with the graph's other places)."""

    def __init__(self, keys: Sequence[str], processes: int, process: int | None, path: Path | None) -> None:
        if process is not None and not 0 <= process < processes:
            raise ValueError(f"process {process} is not one of {processes}")
        self.keys = [*keys, BATCH_LINES]
        self.slots = {name: slot for slot, name in enumerate(self.keys)}
        self.processes, self.process = processes, process
        self.width = 1 + len(self.keys)  # a row: in flight in all, then per key
        self._elsewhere = processes * self.width  # the row of what other places have in flight
        self._buckets = self._elsewhere + self.width
        self._charges = self._buckets + BUCKET_FIELDS * len(self.keys)
        size = 8 * (self._charges + CHARGE_FIELDS * len(self.keys))
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
        if process is not None:
            with self.locked():
                row = process * self.width
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
        """Requests in flight over every process and every other place: in all, or of the key in `slot`.
        Call it locked."""
        column = 0 if slot is None else 1 + slot
        return self.in_flight_here(slot) + int(self._values[self._elsewhere + column])

    def in_flight_here(self, slot: int | None = None) -> int:
        """Requests in flight over this place's processes: in all, or of the key in `slot`. Call it locked."""
        column = 0 if slot is None else 1 + slot
        return int(sum(self._values[row * self.width + column] for row in range(self.processes)))

    def here_by_slot(self) -> list[tuple[int, float, float]]:
        """Each key's requests in flight over this place's processes and its charges here (requests,
        tokens), by slot: read at once, for every key. Call it locked."""
        rows = [self._values[row * self.width + 1 : (row + 1) * self.width].tolist() for row in range(self.processes)]
        charges = self._values[self._charges : self._charges + CHARGE_FIELDS * len(self.keys)].tolist()
        return [
            (int(sum(counts)), charges[CHARGE_FIELDS * slot], charges[CHARGE_FIELDS * slot + 1])
            for slot, counts in enumerate(zip(*rows, strict=True))
        ]

    def set_elsewhere(self, total: int, by_slot: Mapping[int, int]) -> None:
        """What the graph's other places have in flight: `total`, and each key's by its slot (a key left
        out has none). Call it locked."""
        row = self._elsewhere
        self._values[row : row + self.width] = memoryview(bytes(8 * self.width)).cast("d")
        self._values[row] = total
        for slot, count in by_slot.items():
            self._values[row + 1 + slot] = count

    def count_in(self, slot: int | None) -> None:
        """One more request in flight in this process's row (and its key's). Call it locked."""
        self._add(slot, 1.0)

    def count_out(self, slot: int | None) -> None:
        """One request fewer in flight. Call it locked: an flock taken again on the same file is released
        whole on the inner exit, which would leave the caller's later writes unlocked."""
        self._add(slot, -1.0)

    def _add(self, slot: int | None, amount: float) -> None:
        assert self.process is not None, "the endpoint's first process serves no request"
        row = self.process * self.width
        self._values[row] += amount
        if slot is not None:
            self._values[row + 1 + slot] += amount

    def bucket(self, slot: int, which: int) -> tuple[float, float]:
        """A key's bucket (0: requests, 1: tokens) as (level, monotonic time). A fresh ledger's zeros
        read as a bucket last seen empty at boot, which its refill makes full."""
        at = self._buckets + slot * BUCKET_FIELDS + 2 * which
        return self._values[at], self._values[at + 1]

    def set_bucket(self, slot: int, which: int, level: float, when: float) -> None:
        at = self._buckets + slot * BUCKET_FIELDS + 2 * which
        self._values[at], self._values[at + 1] = level, when

    def charged(self, slot: int) -> tuple[float, float]:
        """The requests and tokens this place has charged the key in `slot` since it started: they only
        grow, so another place reads what is new since it last looked. Call it locked."""
        at = self._charges + slot * CHARGE_FIELDS
        return self._values[at], self._values[at + 1]

    def charge(self, slot: int, requests: float, tokens: float) -> None:
        """Requests and tokens charged to the key in `slot` here, counted for the other places. Call it locked."""
        at = self._charges + slot * CHARGE_FIELDS
        self._values[at] += requests
        self._values[at + 1] += tokens

    def close(self) -> None:
        self._values.release()
        self._map.close()
        if self._fd is not None:
            os.close(self._fd)
