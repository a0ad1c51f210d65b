"""The literals the whole tree agrees on: pool roles, engines, routers, Dynamo components.

A new engine is its module under dynamo_oss/engines and its name here.
"""

from __future__ import annotations

from typing import Literal

PoolRole = Literal["prefill", "decode", "agg"]  # in start and GPU placement order

EngineName = Literal["trtllm", "mocker", "gptoss"]

RouterMode = Literal["kv", "round-robin", "random", "least-loaded", "power-of-two"]

# Where the gateway's metrics port serves Dynamo's frontend's series (the endpoint serves no /metrics):
# the first frontend's at this path, frontend i's at this path + /i (frontend_metrics_path).
FRONTEND_METRICS_PATH = "/metrics/frontend"

# Where Dynamo's planner reads the graph's Prometheus (and the sla mode the batch work in it).
PROMETHEUS_ENV = "PROMETHEUS_ENDPOINT"

# Dynamo parses DYN_SYSTEM_PORT as a signed 16-bit integer: a worker given a higher port exits at start.
MAX_SYSTEM_PORT = 32767


def frontend_metrics_path(index: int) -> str:
    """Where the gateway's metrics port serves the series of the frontend it lists `index`-th."""
    return f"{FRONTEND_METRICS_PATH}/{index}"


def component_for(role: PoolRole) -> str:
    """Dynamo's convention: prefill workers serve the `prefill` component, decode and aggregated
    workers `backend`; the frontend finds them as dyn://NAMESPACE.COMPONENT.generate."""
    return "prefill" if role == "prefill" else "backend"
