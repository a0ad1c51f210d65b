"""A graph over several nodes as discovery sees it: which node's workers are registered in etcd.

Every worker registers under `v1/instances/NAMESPACE/COMPONENT/...` with the address its request
plane advertises (DYN_TCP_RPC_HOST: its node's address in the graph), so the registrations map
back to nodes. Any node's launcher knows the whole placement and where etcd is, so `dynamo status`
on any node shows every node: what it should run, what is registered, and what is missing.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from dynamo_oss.deployment.access import EtcdAccess
from dynamo_oss.deployment.host import NodeShare
from dynamo_oss.launch import probes


class NodeSeen(BaseModel):
    name: str
    address: str
    expected: dict[str, int] = Field(description="workers by Dynamo component the placement puts there")
    registered: dict[str, int] = Field(description="workers by component registered from its address")

    @property
    def missing(self) -> dict[str, int]:
        return {
            component: count - self.registered.get(component, 0)
            for component, count in self.expected.items()
            if count > self.registered.get(component, 0)
        }


async def nodes_seen(etcd: EtcdAccess, namespace: str, nodes: list[NodeShare]) -> list[NodeSeen] | None:
    """Each node's workers as registered in etcd; None when etcd does not answer."""
    entries = await probes.etcd_entries(etcd, f"v1/instances/{namespace}/")
    if entries is None:
        return None
    seen = [NodeSeen(name=node.name, address=node.address, expected=node.workers, registered={}) for node in nodes]
    for key, value in entries.items():
        parts = key.split("/")  # v1, instances, namespace, component, endpoint, instance id
        if len(parts) < 6 or parts[4] != "generate":
            continue
        # the request plane's address, HOST:PORT, with HOST as the graph names the node (IP or host name)
        node = next((node for node in seen if f"{node.address}:" in value), None)
        if node is not None:
            node.registered[parts[3]] = node.registered.get(parts[3], 0) + 1
    return seen


def describe(seen: list[NodeSeen] | None, etcd: EtcdAccess) -> list[str]:
    """`dynamo status` lines: a node each, with what is registered and what is missing."""
    if seen is None:
        return [
            f"  nodes: etcd at {etcd.endpoint} does not answer, so discovery cannot be read; is the infrastructure "
            "node's `dynamo serve` running, and its address reachable from this node?"
        ]
    lines = [f"  nodes, from discovery ({etcd.endpoint}):"]
    for node in seen:
        registered = ", ".join(f"{component} {count}" for component, count in node.registered.items()) or "none"
        missing = ", ".join(f"{component} {count}" for component, count in node.missing.items())
        lines.append(
            f"    {node.name:<10} {node.address:<15} registered: {registered}"
            + (f"; MISSING: {missing}" if missing else "")
        )
    return lines
