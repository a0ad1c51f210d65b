"""Which node runs what: every worker slot on its node(s) and GPUs, and each node's address.

Placement is one step of the deployment model, so every renderer uses the same one: the host plan
of a node (deployment.host) starts that node's share, `dynamo deploy` renders workers wider than a
node as multinode components, and `dynamo check` prints it.

- One host (`hardware.gpus`) is one node, `local`, on loopback. Several nodes are the graph's
  `hardware.nodes`: a count (node-0, node-1, ...; a cluster picks the hosts) or named hosts with
  addresses. One of them (`infrastructure.node`, default the first) runs etcd, NATS, Prometheus
  and the planner; the frontends and the gateway run there too, or on the nodes `frontend.nodes` names.
- The pools' starting workers take GPUs in pool order, each on the first node it may use
  (`pools.ROLE.nodes`) with room. A worker wider than a node takes whole free nodes of one NVLink
  domain (GB200 NVL72: 18 trays of 4 GPUs), never more than the domain holds.
- The spare slots an autoscaled pool grows into are placed, on the GPUs the starting workers
  leave, as if that pool alone grew to its maximum (the planner's GPU budget keeps the pools from
  growing at once past what is there). The launcher hands a spare slot its node's free GPUs when
  it starts it.
What cannot be placed is refused, field by field, with what would fit.
"""

from __future__ import annotations

from pydantic import Field

from dynamo_oss.catalog.hardware import HARDWARE
from dynamo_oss.catalog.names import PoolRole
from dynamo_oss.deployment.frozen import Frozen
from dynamo_oss.deployment.processes import LOOPBACK
from dynamo_oss.graph.errors import Problem
from dynamo_oss.graph.schema import GraphSpec

Free = dict[str, list[int]]  # each node's free GPUs


class Node(Frozen):
    name: str
    address: str | None = Field(
        description="what its processes bind and the other nodes reach; None on a "
        "cluster, where Kubernetes picks the host"
    )
    gpus: int = Field(description="GPUs the node gives the graph")
    nvlink_domain: int = Field(description="which NVLink domain it belongs to: nodes of one domain share NVLink")


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
    infrastructure_node: str = Field(description="runs etcd, NATS, Prometheus and the planner")
    frontend_nodes: list[str] = Field(description="run the frontends and the gateway: each a way in")
    slots: list[WorkerSlot] = Field(description="in pool order, then index order")

    @property
    def on_cluster(self) -> bool:
        """Nodes without addresses: Kubernetes picks the hosts, and only `dynamo deploy` renders them."""
        return any(node.address is None for node in self.nodes)

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
            roles = ["infrastructure"] if node.name == self.infrastructure_node else []
            roles += ["frontend"] if node.name in self.frontend_nodes else []
            role = f" ({', '.join(roles)})" if roles else ""
            text = f"{node.name}{f' {node.address}' if node.address else ''}, {node.gpus} GPUs{role}: "
            text += "; ".join(held) or "no workers"
            lines.append(text + (f"; spare slots {', '.join(spare)}" if spare else ""))
        return lines


def place(spec: GraphSpec) -> tuple[Placement | None, list[Problem]]:
    """The graph's placement, or None and every reason it cannot be placed."""
    problems = _gpu_budget(spec) + _too_wide(spec)
    if problems:
        return None, problems
    nodes = _nodes(spec)
    free: Free = {node.name: list(range(node.gpus)) for node in nodes}
    slots: list[WorkerSlot] = []
    for role, pool in spec.pools.items():
        allowed = [node for node in nodes if not pool.nodes or node.name in pool.nodes]
        for index in range(pool.initial_workers):
            taken = _take(pool.gpus_per_worker, allowed, free)
            if taken is None:
                problems.append(
                    Problem(
                        path=f"pools.{role}",
                        message=f"worker {index} needs {pool.gpus_per_worker} "
                        f"GPUs {_where(pool.gpus_per_worker, allowed)}; {_free_text(allowed, free)}. "
                        "Let the pool use more nodes (nodes), start fewer workers, or give the nodes "
                        "more GPUs",
                    )
                )
                break
            slots.append(WorkerSlot(role=role, index=index, nodes=taken[0], gpus=taken[1], spare=False))
    for role, pool in spec.pools.items():
        allowed = [node for node in nodes if not pool.nodes or node.name in pool.nodes]
        room = {name: list(gpus) for name, gpus in free.items()}  # this pool growing alone
        for index in range(pool.initial_workers, pool.most_workers):
            taken = _take(pool.gpus_per_worker, allowed, room)
            if taken is None:
                problems.append(
                    Problem(
                        path=f"pools.{role}.autoscale.max",
                        message=f"worker {index} would need "
                        f"{pool.gpus_per_worker} GPUs {_where(pool.gpus_per_worker, allowed)} beside "
                        f"the other pools' starting workers; {_free_text(allowed, room)}; lower max "
                        f"to at most {index}",
                    )
                )
                break
            slots.append(WorkerSlot(role=role, index=index, nodes=taken[0], gpus=[], spare=True))
    if problems:
        return None, problems
    order = [role for role, _ in spec.pools.items()]
    slots.sort(key=lambda slot: (order.index(slot.role), slot.index))
    frontends = spec.frontend.nodes or [spec.infrastructure_node]
    return Placement(
        nodes=nodes, infrastructure_node=spec.infrastructure_node, frontend_nodes=frontends, slots=slots
    ), []


def _nodes(spec: GraphSpec) -> list[Node]:
    """The graph's nodes, each with its NVLink domain: consecutive nodes fill a domain of the GPU's size."""
    hardware = spec.hardware
    addresses = {node.name: node.address for node in hardware.nodes} if isinstance(hardware.nodes, list) else {}
    domain_gpus = HARDWARE[hardware.gpu].nvlink_domain
    nodes, before = [], 0
    for name, gpus in hardware.node_gpus.items():
        address = LOOPBACK if not hardware.multinode else addresses.get(name)
        nodes.append(Node(name=name, address=address, gpus=gpus, nvlink_domain=before // domain_gpus))
        before += gpus
    return nodes


def _take(width: int, allowed: list[Node], free: Free) -> tuple[list[str], list[int]] | None:
    """GPUs for one worker, taken out of `free`: on the first allowed node with room, else across
    whole free nodes of one NVLink domain; None when neither fits."""
    for node in allowed:
        if len(free[node.name]) >= width:
            gpus, free[node.name] = free[node.name][:width], free[node.name][width:]
            return [node.name], gpus
    widths = {node.gpus for node in allowed if node.gpus}
    if len(widths) != 1 or width % (node_width := widths.pop()):
        return None
    for domain in sorted({node.nvlink_domain for node in allowed}):
        whole = [node.name for node in allowed if node.nvlink_domain == domain and len(free[node.name]) == node_width]
        if len(whole) >= width // node_width:
            spanned = whole[: width // node_width]
            for name in spanned:
                free[name] = []
            return spanned, list(range(node_width))
    return None


def _where(width: int, allowed: list[Node]) -> str:
    names = ", ".join(node.name for node in allowed)
    return f"on one of {names}" if all(width <= node.gpus for node in allowed) else f"on {names}"


def _free_text(allowed: list[Node], free: Free) -> str:
    return "free: " + ", ".join(f"{node.name} {len(free[node.name])}" for node in allowed)


def _too_wide(spec: GraphSpec) -> list[Problem]:
    """A worker's GPUs must share NVLink: one node, or whole nodes of one NVLink domain."""
    hardware = HARDWARE[spec.hardware.gpu]
    return [
        Problem(
            path=f"pools.{role}.gpus_per_worker",
            message=f"is {pool.gpus_per_worker}, wider than an NVLink domain "
            f"of {hardware.label} ({hardware.nvlink_domain} GPUs); a worker's GPUs must share NVLink: give it at "
            f"most {hardware.nvlink_domain} (and its engine config the parallelism to match)",
        )
        for role, pool in spec.pools.items()
        if pool.gpus_per_worker > hardware.nvlink_domain
    ]


def _gpu_budget(spec: GraphSpec) -> list[Problem]:
    """The pools' starting workers must fit the graph's GPUs, and each autoscaled pool's largest size
    beside the others' starting sizes."""
    pools = spec.pools.items()
    total = spec.hardware.total_gpus
    has = "the host has" if not spec.hardware.multinode else "the nodes have"
    needed = sum(pool.initial_workers * pool.gpus_per_worker for _, pool in pools)
    if needed > total:
        demand = ", ".join(f"{role} {pool.initial_workers} x {pool.gpus_per_worker}" for role, pool in pools)
        field = "hardware.gpus" if not spec.hardware.multinode else "hardware.nodes"
        return [Problem(path=field, message=f"the pools need {needed} GPUs ({demand}) but {has} {total}")]
    return [
        Problem(
            path=f"pools.{role}.autoscale.max",
            message=f"{pool.most_workers} workers of {pool.gpus_per_worker} GPUs beside the other pools' "
            f"{needed - pool.initial_workers * pool.gpus_per_worker} need "
            f"{needed + (pool.most_workers - pool.initial_workers) * pool.gpus_per_worker} GPUs, but {has} "
            f"{total}; lower max to at most {pool.initial_workers + (total - needed) // pool.gpus_per_worker}",
        )
        for role, pool in pools
        if needed + (pool.most_workers - pool.initial_workers) * pool.gpus_per_worker > total
    ]
