"""Ports free right now, so tests never take the shipped ones and can run side by side."""

from __future__ import annotations

import random
import socket


def free_ports(count: int) -> list[int]:
    """Distinct ports free right now, below 32768 (Dynamo's limit for worker system ports, and
    below the kernel's ephemeral range, so no outgoing connection takes one meanwhile)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port_run(1)
        if port not in ports:
            ports.append(port)
    return ports


def free_port_run(count: int) -> int:
    """The first of `count` consecutive ports free right now (a pool's workers take system_port + i)."""
    candidate = random.randrange(10_000, 30_000)
    while True:
        candidate += 1
        if all(_bindable(port) for port in range(candidate, candidate + count)):
            return candidate


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True
