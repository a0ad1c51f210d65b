"""Free ports for a graph a benchmark serves, so it never takes the shipped ones (8000, 2379, ...)."""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path
from typing import Any


from dynamo_oss.bench.served import measured_copy
from dynamo_oss.graph.schema import PlannerSection

PLANNER_PORTS = [field for field in PlannerSection.model_fields if field.endswith("port")]


def free_block(count: int) -> int:
    """The first of `count` consecutive ports free right now, below 32768 (Dynamo's limit for worker
    system ports, and below the kernel's ephemeral range)."""
    while True:
        first = random.randrange(10_000, 32_000 - count)
        for port in range(first, first + count):
            with socket.socket() as probe:
                try:
                    probe.bind(("0.0.0.0", port))
                except OSError:
                    break
        else:
            return first


def on_free_ports(graph: dict[str, Any]) -> dict[str, Any]:
    """`graph` (a graph file's contents) with every port it listens on moved into one free block:
    embedded etcd and NATS, the endpoint and Dynamo's frontend, Prometheus, the launcher's and the
    gateway's metrics, an embedded trace backend's two, the planner's, and each pool's run of worker
    ports (its autoscale maximum)."""
    slots = {
        role: (pool.get("autoscale") or {}).get("max") or pool.get("workers", 1)
        for role, pool in graph["pools"].items()
    }
    frontend = graph.setdefault("frontend", {})
    # Dynamo's frontends take dynamo_port + i; left to the sizing, at most this host's cores of them.
    frontends = frontend.get("replicas") or (frontend.get("autoscale") or {}).get("min") or os.cpu_count() or 1
    port = iter(range(free_block(10 + frontends + len(PLANNER_PORTS) + sum(slots.values())), 10**6))
    graph["infrastructure"] = {
        **graph.get("infrastructure", {}),
        "etcd": {"mode": "embedded", "client_port": next(port), "peer_port": next(port)},
        "nats": {"mode": "embedded", "port": next(port), "monitoring_port": next(port)},
    }
    frontend.update(port=next(port), dynamo_port=next(port))
    for _ in range(frontends - 1):
        next(port)
    if "observability" in graph:
        observability = graph["observability"]
        prometheus = observability.get("prometheus")
        observability["prometheus"] = {
            **(prometheus if isinstance(prometheus, dict) else {}),
            "mode": "embedded",
            "port": next(port),
        }
        observability.update(launcher_port=next(port), gateway_port=next(port))
        tracing = observability.get("tracing")
        if tracing == "embedded" or (isinstance(tracing, dict) and tracing.get("mode") == "embedded"):
            observability["tracing"] = {
                **(tracing if isinstance(tracing, dict) else {"mode": "embedded"}),
                "port": next(port),
                "otlp_port": next(port),
            }
    if "planner" in graph:
        graph["planner"].update({field: next(port) for field in PLANNER_PORTS})
    for role, pool in graph["pools"].items():
        pool["system_port"] = next(port)  # worker i takes system_port + i
        for _ in range(slots[role] - 1):
            next(port)
    return graph


def shipped_on_free_ports(graph_file: Path, contents: dict[str, Any] | None = None) -> dict[str, Any]:
    """A shipped graph file's contents (or `contents`, changed from them) as a benchmark serves them
    (served.measured_copy), on free ports."""
    return on_free_ports(measured_copy(graph_file, contents=contents))
