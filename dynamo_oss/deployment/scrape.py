"""The Prometheus scrape config of a host plan: one job per kind of target, labelled by pool and process.

Targets are what the graph starts: Dynamo's frontend, every worker's system port, embedded etcd,
and the launcher's own /metrics. NATS serves no Prometheus format without an exporter, so it is
left out (a nats-prometheus-exporter target would be the next job).
"""

from __future__ import annotations

from typing import Any

import yaml

from dynamo_oss.deployment.processes import LOOPBACK, PortUse, ProcessPlan


def scrape_config(
    processes: list[ProcessPlan], launcher: PortUse, namespace: str, interval_s: float
) -> str:
    """prometheus.yml for `processes` and the launcher's metrics port."""

    def target(use: PortUse) -> str:
        host = LOOPBACK if use.host in ("0.0.0.0", "::") else use.host
        return f"{host}:{use.port}"

    def job(name: str, entries: list[tuple[PortUse, dict[str, str]]]) -> dict[str, Any]:
        static = [{"targets": [target(use)], "labels": {"namespace": namespace, **labels}} for use, labels in entries]
        return {"job_name": name, "static_configs": static}

    by_kind = {kind: [p for p in processes if p.kind == kind] for kind in ("frontend", "worker", "etcd")}
    jobs = [
        job("dynamo-frontend", [(p.ports[0], {"process": p.name}) for p in by_kind["frontend"]]),
        job("dynamo-workers", [(p.ports[0], {"process": p.name, "pool": p.role or ""}) for p in by_kind["worker"]]),
        job("etcd", [(p.ports[0], {"process": p.name}) for p in by_kind["etcd"]]),
        job("dynamo-oss-launcher", [(launcher, {"process": "launcher"})]),
    ]
    config = {
        "global": {"scrape_interval": f"{interval_s:g}s", "evaluation_interval": f"{interval_s:g}s"},
        "scrape_configs": [j for j in jobs if j["static_configs"]],
    }
    return yaml.safe_dump(config, sort_keys=False)
