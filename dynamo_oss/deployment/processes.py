"""One process of a host plan: its command line, environment, ports and GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from dynamo_oss.catalog.names import EngineName, PoolRole

LOOPBACK = "127.0.0.1"


ProcessKind = Literal["etcd", "nats", "prometheus", "traces", "frontend", "worker", "gateway", "planner"]


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
    env_from_files: dict[str, Path] = {}  # set to the files' text as it starts: secrets stay out of plans and state
    env_unset: list[str] = []  # taken out of the caller's environment
    ports: list[PortUse] = []
    gpus: list[int] = []
    terminal: bool = True  # its warnings and errors reach the terminal; False: its log file only (launch/terminal.py)


class NodeProcesses(BaseModel):
    """Processes of another node of the graph, and the address the other nodes reach them at."""

    node: str
    address: str
    processes: list[ProcessPlan]
