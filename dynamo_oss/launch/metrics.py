"""The launcher's own Prometheus metrics: what only the process that supervises the graph knows.

Restarts by process, each pool's target, live and draining workers, scaling actions (the
planner's, once it runs on one host), whether the graph is ready, and NATS's health: nats-server
reports only JSON, so the launcher reads its monitoring endpoint at each scrape and exports it.
Served on loopback from a registry of its own, so nothing of the launcher's Python runtime leaks in.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dynamo_oss.deployment.processes import PortUse
from dynamo_oss.launch.probes import trust_store


class LauncherMetrics:
    def __init__(self, namespace: str) -> None:
        self.registry = CollectorRegistry()
        labels = {"namespace": namespace}
        self.restarts = Counter(
            "dynamo_oss_process_restarts",
            "Times the launcher restarted a process after it exited.",
            ["namespace", "process", "kind"],
            registry=self.registry,
        )
        self.pool_workers = Gauge(
            "dynamo_oss_pool_workers",
            "Workers of a pool: target (wanted), live (running), draining (stopping).",
            ["namespace", "pool", "state"],
            registry=self.registry,
        )
        self.scaling_actions = Counter(
            "dynamo_oss_scaling_actions",
            "Workers added (up) or removed (down) by a scaling decision.",
            ["namespace", "pool", "direction"],
            registry=self.registry,
        )
        self.ready = Gauge(
            "dynamo_oss_graph_ready",
            "1 once every worker registered and the model was served.",
            ["namespace"],
            registry=self.registry,
        ).labels(**labels)
        self._namespace = namespace

    def watch_nats(self, monitoring_url: str) -> None:
        """Export nats-server's /varz at each scrape of the launcher."""
        self.registry.register(NatsCollector(monitoring_url, self._namespace))

    def serve(self, where: PortUse) -> None:
        """Serve /metrics on `where` from a daemon thread, for the launcher's lifetime."""
        start_http_server(where.port, addr=where.host, registry=self.registry)

    def watch(self, process: str, kind: str) -> None:
        """Export a process's restart count from the start, at 0, so a quiet graph still has the series."""
        self.restarts.labels(self._namespace, process, kind)

    def restarted(self, process: str, kind: str) -> None:
        self.restarts.labels(self._namespace, process, kind).inc()

    def scaled(self, pool: str, direction: str) -> None:
        """A worker added to (up) or removed from (down) a pool by a resize."""
        self.scaling_actions.labels(self._namespace, pool, direction).inc()

    def pool(self, pool: str, target: int, live: int, draining: int = 0) -> None:
        for state, count in (("target", target), ("live", live), ("draining", draining)):
            self.pool_workers.labels(self._namespace, pool, state).set(count)
        for direction in ("up", "down"):
            self.scaling_actions.labels(self._namespace, pool, direction)  # present at 0 from the start


class NatsCollector:
    """nats-server's /varz as Prometheus metrics, read when Prometheus scrapes the launcher."""

    def __init__(self, monitoring_url: str, namespace: str) -> None:
        self.url = f"{monitoring_url}/varz"
        self.namespace = namespace

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "dynamo_oss_nats_up", "1 when nats-server answers its monitoring endpoint.", labels=["namespace"]
        )
        try:
            varz = httpx.get(self.url, timeout=1.0, verify=trust_store()).json()
        except (httpx.HTTPError, ValueError):
            up.add_metric([self.namespace], 0)
            yield up
            return
        up.add_metric([self.namespace], 1)
        yield up
        connections = GaugeMetricFamily(
            "dynamo_oss_nats_connections", "Clients connected to nats-server.", labels=["namespace"]
        )
        connections.add_metric([self.namespace], varz.get("connections", 0))
        yield connections
        for name, key, help_text in (
            ("dynamo_oss_nats_in_msgs", "in_msgs", "Messages nats-server received."),
            ("dynamo_oss_nats_out_msgs", "out_msgs", "Messages nats-server delivered."),
            ("dynamo_oss_nats_slow_consumers", "slow_consumers", "Clients nats-server dropped as too slow."),
        ):
            counter = CounterMetricFamily(name, help_text, labels=["namespace"])
            counter.add_metric([self.namespace], varz.get(key, 0))
            yield counter
