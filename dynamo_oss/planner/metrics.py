"""The SLA planner's gauges, beside Dynamo's own planner metrics in the process's registry.

On one host the planner process serves that registry on loopback (`serve_on`, the graph's
`planner.metrics_port`), for the graph's Prometheus; on Kubernetes Dynamo's own metrics port does.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, start_http_server

from dynamo_oss.catalog.names import PoolRole

METRICS_ADDRESS_ENV = "DYNAMO_OSS_PLANNER_METRICS"  # HOST:PORT to serve /metrics on; unset on Kubernetes

WANTED = Gauge("dynamo_oss_planner_wanted_workers", "Workers the SLA planner proposed for the pool", ["pool"])
CURRENT = Gauge("dynamo_oss_planner_current_workers", "Workers the pool had when the planner looked", ["pool"])
PREDICTED = Gauge(
    "dynamo_oss_planner_predicted_latency_ms",
    "Latency the performance model predicts at the proposed sizes (ttft: at the planner's percentile; itl: mean)",
    ["metric"],
)
TARGET = Gauge("dynamo_oss_planner_target_latency_ms", "The graph's latency targets", ["metric"])
LOAD = Gauge(
    "dynamo_oss_planner_load",
    "Load per look: requests_per_s, isl, osl; observed over the last interval, or predicted for the next",
    ["source", "quantity"],
)
LOOKS = Counter(
    "dynamo_oss_planner_looks_total", "The SLA planner's looks at the load, by what it proposed", ["proposal"]
)


def serve_on(address: str) -> None:
    """Serve this process's metrics at HOST:PORT."""
    host, _, port = address.rpartition(":")
    start_http_server(int(port), addr=host)


def set_targets(ttft_ms: float, itl_ms: float) -> None:
    TARGET.labels("ttft").set(ttft_ms)
    TARGET.labels("itl").set(itl_ms)


def set_load(observed_per_s: float, predicted_per_s: float | None, isl: float, osl: float) -> None:
    LOAD.labels("observed", "requests_per_s").set(observed_per_s)
    LOAD.labels("observed", "isl").set(isl)
    LOAD.labels("observed", "osl").set(osl)
    if predicted_per_s is not None:
        LOAD.labels("predicted", "requests_per_s").set(predicted_per_s)


def set_look(current: dict[PoolRole, int], wanted: dict[PoolRole, int], predicted: tuple[float, float] | None) -> None:
    for role, count in current.items():
        CURRENT.labels(role).set(count)
        WANTED.labels(role).set(wanted[role])
    if predicted is not None:
        PREDICTED.labels("ttft").set(predicted[0])
        PREDICTED.labels("itl").set(predicted[1])
    grows = any(wanted[role] > count for role, count in current.items())
    shrinks = any(wanted[role] < count for role, count in current.items())
    LOOKS.labels("grow" if grows else "shrink" if shrinks else "hold").inc()
