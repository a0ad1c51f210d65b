"""Ports free right now, so tests never take the shipped ones and can run side by side.

A port found free is not bound until its graph starts, so two calls could find the same one: each
test process hands a port out once only, and each pytest-xdist worker takes its ports from its own
share of the range, so no two graphs of the suite are ever given the same port.
"""

from __future__ import annotations

import os
import random
import socket

# Below 32768: Dynamo's limit for worker system ports, and below the kernel's ephemeral range, so no
# outgoing connection takes one meanwhile.
LOWEST, HIGHEST = 10_000, 30_000
_handed_out: set[int] = set()


def free_ports(count: int) -> list[int]:
    """Distinct ports free right now, never handed out before by this process."""
    return [free_port_run(1) for _ in range(count)]


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports free right now (a pool's workers take system_port + i)."""
    share = _worker_share()
    candidate = random.randrange(share.start, share.stop)
    for _ in range(len(share)):
        run = range(candidate, candidate + count)
        if run.stop <= share.stop and not _handed_out.intersection(run) and all(map(_bindable, run)):
            _handed_out.update(run)
            return candidate
        candidate = candidate + 1 if candidate + 1 < share.stop else share.start
    raise RuntimeError(f"no {count} consecutive free ports left in {share.start}-{share.stop - 1}")


def _worker_share() -> range:
    """This test process's part of LOWEST-HIGHEST: pytest-xdist worker gwN of M takes the N-th of M parts."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    width = (HIGHEST - LOWEST) // workers
    start = LOWEST + int(worker.removeprefix("gw")) * width
    return range(start, start + width)


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True
