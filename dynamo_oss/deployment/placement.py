"""Which node runs what: every worker slot on its node and GPUs, and each node's address.

Placement is one step of the deployment model, so every renderer uses the same one: the host plan
of a node (deployment.host) starts that node's share, and `dynamo check` prints it. A graph today
describes one host: one node, `local`, on loopback, running the infrastructure and every worker.
The pools' starting workers take its GPUs in pool order; the spare slots an autoscaled pool grows
into wait for the launcher to hand them free GPUs when it starts them. What cannot be placed is
refused, field by field, with what would fit.
"""

from __future__ import annotations

from pydantic import Field

from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.deployment.frozen import Frozen
from dynamo_oss.deployment.processes import LOOPBACK
from dynamo_oss.graph.errors import Problem
from dynamo_oss.graph.schema import GraphSpec

LOCAL_NODE = "local"  # the one node of a single-host graph


class Node(Frozen):
    name: str
    address: str = Field(description="what its processes bind and the other nodes reach")
    gpus: int = Field(description="GPUs the node gives the graph")


class WorkerSlot(Frozen):
    """One worker a pool may run: started with the graph (its GPUs given here) or spare (GPUs at start)."""

    role: PoolRole
    index: int = Field(description="the worker's number in its pool")
    nodes: list[str] = Field(description="the node it runs on, or the whole nodes it spans (the first leads)")
    gpus: list[int] = Field(description="its GPUs on each of its nodes; empty for a spare slot")
    spare: bool = Field(description="started only when the planner or `dynamo scale` grows the pool")

    @property
    def node(self) -> str:
        return self.nodes[0]

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


class Placement(Frozen):
    nodes: list[Node]
    infrastructure_node: str = Field(description="runs etcd, NATS, Prometheus, the frontend and the planner")
    slots: list[WorkerSlot] = Field(description="in pool order, then index order")

    def node(self, name: str) -> Node:
        return next(node for node in self.nodes if node.name == name)

    def slots_on(self, node: str, role: PoolRole | None = None) -> list[WorkerSlot]:
        """The slots a node launches (the workers it leads)."""
        return [slot for slot in self.slots if slot.node == node and (role is None or slot.role == role)]

    def describe(self) -> list[str]:
        """One line per node: its address and which workers hold which of its GPUs."""
        lines = []
        for node in self.nodes:
            held, spare = [], []
            for slot in self.slots:
                if node.name not in slot.nodes:
                    continue
                across = f" (across {', '.join(slot.nodes)})" if len(slot.nodes) > 1 else ""
                if slot.spare:
                    spare.append(slot.name + across)
                else:
                    held.append(f"{slot.name} GPU {','.join(map(str, slot.gpus))}{across}")
            role = " (infrastructure, frontend)" if node.name == self.infrastructure_node else ""
            text = f"{node.name} {node.address}, {node.gpus} GPUs{role}: "
            text += "; ".join(held) or "no workers"
            lines.append(text + (f"; spare slots {', '.join(spare)}" if spare else ""))
        return lines


def place(spec: GraphSpec) -> tuple[Placement | None, list[Problem]]:
    """The graph's placement, or None and every reason it cannot be placed."""
    problems = _gpu_budget(spec)
    if problems:
        return None, problems
    node = Node(name=LOCAL_NODE, address=LOOPBACK, gpus=spec.hardware.gpus)
    slots, next_gpu = [], 0
    for role, pool in spec.pools.items():
        for index in range(pool.most_workers):
            spare = index >= pool.initial_workers
            gpus = [] if spare else list(range(next_gpu, next_gpu + pool.gpus_per_worker))
            next_gpu += len(gpus)
            slots.append(WorkerSlot(role=role, index=index, nodes=[node.name], gpus=gpus, spare=spare))
    return Placement(nodes=[node], infrastructure_node=node.name, slots=slots), []


def _gpu_budget(spec: GraphSpec) -> list[Problem]:
    """The pools' starting workers must fit the host's GPUs, and each autoscaled pool's largest size
    beside the others' starting sizes."""
    pools = spec.pools.items()
    needed = sum(pool.initial_workers * pool.gpus_per_worker for _, pool in pools)
    if needed > spec.hardware.gpus:
        demand = ", ".join(f"{role} {pool.initial_workers} x {pool.gpus_per_worker}" for role, pool in pools)
        return [Problem(path="hardware.gpus", message=f"the pools need {needed} GPUs ({demand}) but the host has "
                        f"{spec.hardware.gpus}")]  # fmt: skip
    return [
        Problem(
            path=f"pools.{role}.autoscale.max",
            message=f"{pool.most_workers} workers of {pool.gpus_per_worker} GPUs beside the other pools' "
            f"{needed - pool.initial_workers * pool.gpus_per_worker} need "
            f"{needed + (pool.most_workers - pool.initial_workers) * pool.gpus_per_worker} GPUs, but the host has "
            f"{spec.hardware.gpus}; lower max to at most "
            f"{pool.initial_workers + (spec.hardware.gpus - needed) // pool.gpus_per_worker}",
        )
        for role, pool in pools
        if needed + (pool.most_workers - pool.initial_workers) * pool.gpus_per_worker > spec.hardware.gpus
    ]
