"""The Prometheus scrape config of a host plan: one job per kind of target, labelled by pool and process.

Targets are what the graph starts: Dynamo's frontend, every worker's system port, embedded etcd,
the gateway's /metrics (usage per API key) and the launcher's own. Workers come and go as pools are resized, so their targets live
in a file of their own (Prometheus file discovery) that the launcher rewrites; Prometheus
notices each change without a reload. NATS serves no Prometheus format without an exporter, so it is
left out (a nats-prometheus-exporter target would be the next job).

On a graph of several nodes the infrastructure node's Prometheus scrapes them all: the other nodes'
workers on their system ports (in the workers' file), and each other frontend node's gateway on its
metrics port, which binds the node's address, with that node's Dynamo frontends through it
(/metrics/frontend/I), since they listen on their node's loopback. Those are static, as the frontends
are; frontend and gateway targets carry a `node` label, as their process names repeat on every node.
Like the workers' system ports, they are plain HTTP: only etcd's scrape uses the node's certificate.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from dynamo_oss.catalog.addresses import WILDCARDS, is_loopback
from dynamo_oss.catalog.names import frontend_metrics_path
from dynamo_oss.deployment.access import InfrastructureTls
from dynamo_oss.deployment.processes import LOOPBACK, NodeProcesses, PortUse, ProcessPlan

Entry = tuple[PortUse, dict[str, str]]  # a target and its labels


def scrape_config(
    processes: list[ProcessPlan],
    launcher: PortUse,
    namespace: str,
    interval_s: float,
    worker_targets: Path,
    planner_namespace: str,
    etcd_tls: InfrastructureTls | None = None,
    alert_rules: Path | None = None,
    *,
    node: str | None = None,
    elsewhere: list[NodeProcesses] | None = None,
) -> str:
    """prometheus.yml for `processes` and the launcher's metrics port; workers are read from `worker_targets`.
    The frontend's series are labelled `dynamo_namespace` with `planner_namespace`, as Dynamo's planner
    selects the traffic it plans for (Dynamo's frontend does not label them itself). An etcd that
    speaks mutual TLS is scraped with `etcd_tls`, the node's own files. `alert_rules` is the graph's
    rule file (dynamo_oss.observe.alerts), written beside it by the launcher. On a graph of several
    nodes, `node` is this one's name and `elsewhere` the frontends and gateways of the other nodes."""

    def static(name: str, entries: list[Entry]) -> dict[str, Any]:
        return {"job_name": name, "static_configs": _targets(entries, namespace)}

    def of_kind(kind: str) -> list[Entry]:
        return [(p.ports[0], {"process": p.name}) for p in processes if p.kind == kind and p.ports]

    here = {"node": node} if node else {}
    frontend = [(use, {**labels, **here}) for use, labels in of_kind("frontend")]
    gateway = [(use, {"process": p.name, **here}) for p in processes if p.kind == "gateway" for use in p.ports[1:]]
    for other in elsewhere or []:
        frontends, gateways = _endpoint_targets(other)
        frontend, gateway = frontend + frontends, gateway + gateways
    frontend = [(use, {**labels, "dynamo_namespace": planner_namespace}) for use, labels in frontend]

    jobs = [
        static("dynamo-frontend", frontend),
        {"job_name": "dynamo-workers", "file_sd_configs": [{"files": [str(worker_targets)]}]},
        *(
            [{**static("etcd", of_kind("etcd")), **_tls(etcd_tls)}] if of_kind("etcd") else []
        ),  # an external etcd is not ours
        *([static("dynamo-planner", of_kind("planner"))] if of_kind("planner") else []),
        *([static("dynamo-oss-gateway", gateway)] if gateway else []),
        static("dynamo-oss-launcher", [(launcher, {"process": "launcher"})]),
    ]
    config = {
        "global": {"scrape_interval": f"{interval_s:g}s", "evaluation_interval": f"{interval_s:g}s"},
        "scrape_configs": jobs,
        **({"rule_files": [str(alert_rules)]} if alert_rules else {}),
    }
    return yaml.safe_dump(config, sort_keys=False)


def _endpoint_targets(other: NodeProcesses) -> tuple[list[Entry], list[Entry]]:
    """Another frontend node's Dynamo frontends and gateway, as this node reaches them: the gateway on its
    metrics port, the frontends behind it through that port; without a gateway, the frontends on their
    own port, unless they listen on their node's loopback."""
    labels = {"node": other.node}
    frontends = [p for p in other.processes if p.kind == "frontend" and p.ports]
    gateway = next((p for p in other.processes if p.kind == "gateway"), None)
    if gateway is None:
        reached = [(_reached(p.ports[0], other.address), {"process": p.name, **labels}) for p in frontends]
        return [(use, entry) for use, entry in reached if use is not None], []
    metrics = _reached(gateway.ports[1], other.address) if gateway.ports[1:] else None
    if metrics is None:
        return [], []
    through = [
        (metrics, {"process": p.name, **labels, "__metrics_path__": frontend_metrics_path(index)})
        for index, p in enumerate(frontends)
    ]
    return through, [(metrics, {"process": gateway.name, **labels})]


def _reached(use: PortUse, address: str) -> PortUse | None:
    """Where another node's listener is reached: its own address, the node's for a wildcard, none on loopback."""
    if is_loopback(use.host):
        return None
    return use.model_copy(update={"host": address}) if use.host in WILDCARDS else use


def _tls(tls: InfrastructureTls | None) -> dict[str, Any]:
    if tls is None:
        return {}
    return {
        "scheme": "https",
        "tls_config": {"ca_file": str(tls.ca), "cert_file": str(tls.cert), "key_file": str(tls.key)},
    }


def worker_targets(workers: list[ProcessPlan], namespace: str) -> str:
    """The file-discovery targets of the workers running now, labelled by process and pool."""
    entries = [(p.ports[0], {"process": p.name, "pool": p.role or ""}) for p in workers]
    return json.dumps(_targets(entries, namespace), indent=1)


def _targets(entries: list[Entry], namespace: str) -> list[dict[str, Any]]:
    def target(use: PortUse) -> str:
        host = LOOPBACK if use.host in WILDCARDS else use.host
        return f"{host}:{use.port}"

    return [{"targets": [target(use)], "labels": {"namespace": namespace, **labels}} for use, labels in entries]
