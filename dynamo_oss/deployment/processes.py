"""One process of a host plan: its command line, environment, ports and GPUs."""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel

from dynamo_oss.catalog.names import EngineName, PoolRole

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """True for an address only this host reaches: 127.0.0.0/8, ::1 or localhost (any other name may
    resolve to anything)."""
    try:
        return host == "localhost" or ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


ProcessKind = Literal["etcd", "nats", "prometheus", "frontend", "worker", "gateway", "planner"]


class PortUse(BaseModel):
    """A port a process listens on, and the graph field that chose it."""

    field: str
    host: str
    port: int


class ProcessPlan(BaseModel):
    name: str
    kind: ProcessKind
    role: PoolRole | None = None
    engine: EngineName | None = None
    argv: list[str]
    env: dict[str, str]  # set on top of the caller's environment
    ports: list[PortUse] = []
    gpus: list[int] = []
