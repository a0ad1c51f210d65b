"""The launcher's live facts about a running graph, kept in RUN_DIR/state.json.

The supervisor rewrites the file (atomically) whenever something changes; `dynamo status`,
tests and operators read it through `RunState.read`.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field

from dynamo_oss.catalog.errors import read_json_file
from dynamo_oss.catalog.names import EngineName, PoolRole
from dynamo_oss.deployment.access import EtcdAccess
from dynamo_oss.deployment.host import NodeShare
from dynamo_oss.deployment.processes import ProcessKind

STATE_FILE = "state.json"


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never half of one."""
    temporary = path.with_suffix(".tmp")
    temporary.write_text(text)
    temporary.replace(path)


class ProcessState(BaseModel):
    name: str
    kind: ProcessKind
    role: PoolRole | None = None
    pid: int | None = Field(description="the process's pid while it runs, else None")
    restarts: int
    ports: list[int]
    gpus: list[int]
    log: Path


class PoolState(BaseModel):
    role: PoolRole
    engine: EngineName
    target: int = Field(description="workers the pool should have")
    live: int = Field(description="workers running and taking requests now")
    draining: int = Field(default=0, description="workers out of discovery, finishing their streams")
    restarts: int = Field(default=0, description="restarts of the pool's workers after they exited")
    min: int = Field(default=1, description="fewest workers the pool may run")
    max: int = Field(default=1, description="most workers the pool may run")
    autoscaled: bool = Field(default=False, description="the planner sizes it")


class DecisionRecord(BaseModel):
    """A planner decision and what the launcher did with it."""

    decision_id: int
    workers: dict[PoolRole, int] = Field(description="the size the decision set for each pool")
    at: datetime = Field(description="when it reached the launcher")
    outcome: str = Field(default="in progress", description="carried out, or refused and why")
    seconds: float | None = Field(default=None, description="how long carrying it out took")
    why: str | None = Field(default=None, description="the planner's reason, where it gives one (sla mode)")


class RunState(BaseModel):
    graph: str
    endpoint: str
    served_name: str = Field(description="the model clients ask for")
    prometheus_url: str | None = Field(default=None, description="the Prometheus that scrapes the graph")
    traces_url: str | None = Field(default=None, description="the embedded trace backend the graph exports to")
    supervisor_pid: int
    ready: bool = Field(description="every worker registered and the model served, at least once")
    stopped: bool = Field(default=False, description="the supervisor has stopped every process")
    pools: list[PoolState]
    processes: list[ProcessState]
    control_url: str | None = Field(default=None, description="the launcher's control API (loopback)")
    control_token_file: Path | None = Field(default=None, description="the bearer token the control API wants")
    last_decision: DecisionRecord | None = Field(default=None, description="the planner's latest decision")
    node: str = Field(default="local", description="the node this launcher runs")
    namespace: str = Field(default="", description="the graph's Dynamo namespace, where its workers register")
    etcd: EtcdAccess | None = Field(default=None, description="the graph's etcd, which holds discovery")
    nodes: list[NodeShare] = Field(default_factory=list, description="every node of a graph over several nodes")

    def write(self, run_dir: Path) -> None:
        write_atomically(run_dir / STATE_FILE, self.model_dump_json(indent=2))

    @classmethod
    def read(cls, run_dir: Path) -> RunState:
        return read_json_file(
            cls,
            run_dir / STATE_FILE,
            missing=f"is {run_dir} a run folder `dynamo serve` printed?",
            kind="a dynamo-oss state file",
        )

    @property
    def supervisor_alive(self) -> bool:
        try:
            os.kill(self.supervisor_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
