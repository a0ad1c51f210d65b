"""A graph over several nodes served on one machine: `dynamo serve GRAPH --node NAME` in each
node's network namespace (bench.netns), as the multi-node test and the node-loss benchmark run it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import yaml

from dynamo_oss.bench.netns import Nodes
from dynamo_oss.deployment.access import EtcdAccess, InfrastructureTls
from dynamo_oss.deployment.embedded import find_binary
from dynamo_oss.launch import probes

STOP_TIMEOUT_S = 60.0
PORT_FIELDS = ("etcd", "etcd_peer", "nats", "nats_monitoring", "frontend", "dynamo", "prefill", "decode")
METRICS_PORT_FIELDS = ("prometheus", "launcher", "gateway_metrics")  # with these, the graph has Prometheus
SCRAPE_INTERVAL_S = 1.0

# Each PromQL query of argv[2:] to the Prometheus at argv[1], its result as JSON, one line for all: the
# standard library only, so a look costs a bare interpreter's start.
QUERY = """
import json, sys, urllib.parse, urllib.request
def result(query):
    with urllib.request.urlopen(f"{sys.argv[1]}/api/v1/query?" + urllib.parse.urlencode({"query": query}), timeout=10) as reply:
        return json.load(reply)["data"]["result"]
print(json.dumps([result(query) for query in sys.argv[2:]]))
"""


def node_graph(
    name: str,
    nodes: Nodes,
    center: str,
    pools: dict[str, list[str]],
    ports: dict[str, int],
    tls: dict[str, str],
    frontends: list[str] | None = None,
    key_file: str | None = None,
) -> dict:
    """A gpt-oss-20b mocker graph over `nodes`: the infrastructure on `center`, a frontend on each of
    `frontends` (default: `center`) on its own address, and for each pool one one-GPU worker on each node
    it lists; `ports` by PORT_FIELDS, and METRICS_PORT_FIELDS for an embedded Prometheus on `center`;
    etcd and NATS speak mutual TLS with the files `tls` names (bench.certificates); `key_file` is the graph
    key every frontend node's gateway reads (several frontend nodes need one)."""
    workers = {node: sum(node in on for on in pools.values()) for node in nodes.names}
    listed = [{"name": node, "address": nodes.addresses[node], "gpus": workers[node]} for node in nodes.names]
    etcd = {"mode": "embedded", "client_port": ports["etcd"], "peer_port": ports["etcd_peer"]}
    nats = {"mode": "embedded", "port": ports["nats"], "monitoring_port": ports["nats_monitoring"]}
    # A node's address stands for each frontend node's own.
    frontend = {"host": nodes.addresses[center], "port": ports["frontend"], "dynamo_port": ports["dynamo"]}
    graph = {
        "name": name,
        "model": "gpt-oss-20b",
        "hardware": {"gpu": "h200", "nodes": listed},
        "infrastructure": {"node": center, "etcd": etcd, "nats": nats, "tls": tls},
        "frontend": {**frontend, **({"nodes": frontends} if frontends else {})},
        # The namespaces are private; tests/gateway/test_keys.py tries the keys.
        "gateway": {"auth": "none", **({"key_file": key_file} if key_file else {})},
        "pools": {
            role: {"workers": len(on), "engine": "mocker", "nodes": on, "system_port": ports[role]}
            for role, on in pools.items()
        },
    }
    if all(field in ports for field in METRICS_PORT_FIELDS):
        prometheus = {"mode": "embedded", "port": ports["prometheus"], "scrape_interval_s": SCRAPE_INTERVAL_S}
        graph["observability"] = {
            "prometheus": prometheus,
            "launcher_port": ports["launcher"],
            "gateway_port": ports["gateway_metrics"],
        }
    return graph


class ServedNodes:
    """Each node's launcher, its output and run folder under `folder`."""

    def __init__(self, nodes: Nodes, graph: Path, folder: Path, center: str) -> None:
        self.nodes, self.graph, self.folder, self.center = nodes, graph, folder, center
        self.launchers: dict[str, subprocess.Popen] = {}

    def start(self, node: str) -> None:
        argv = [sys.executable, "-m", "dynamo_oss.cli", "serve", str(self.graph), "--node", node]
        argv += ["--engine", "mocker", "--run-dir", str(self.run_dir(node))]
        self.launchers[node] = self.nodes.start(node, argv, self.folder / f"{node}.out")

    def endpoint(self, node: str) -> str:
        """The OpenAI base URL of a frontend node: its own address (node_graph's frontend.host)."""
        return f"http://{self.nodes.addresses[node]}:{self.spec()['frontend']['port']}/v1"

    def spec(self) -> dict:
        return yaml.safe_load(self.graph.read_text())

    def query(self, *queries: str) -> list[list[dict]] | None:
        """Each PromQL query's result from the graph's Prometheus, asked inside the infrastructure node;
        None when it does not answer."""
        url = f"http://{self.nodes.addresses[self.center]}:{self.spec()['observability']['prometheus']['port']}"
        argv = self.nodes.command(self.center, [sys.executable, "-c", QUERY, url, *queries])
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        return json.loads(done.stdout) if done.returncode == 0 else None

    def etcd(self) -> EtcdAccess:
        """The graph's etcd as the infrastructure node reaches it, with that node's certificate."""
        infrastructure = self.spec()["infrastructure"]
        endpoint = f"https://{self.nodes.addresses[self.center]}:{infrastructure['etcd']['client_port']}"
        tls = {name: Path(path.replace("{node}", self.center)) for name, path in infrastructure["tls"].items()}
        return EtcdAccess(endpoint=endpoint, tls=InfrastructureTls(**tls))

    def run_dir(self, node: str) -> Path:
        return self.folder / f"run-{node}"

    def output(self, node: str) -> str:
        path = self.folder / f"{node}.out"
        return path.read_text() if path.exists() else ""

    def ready(self, node: str) -> bool:
        return ("ready in" if node == self.center else f"node {node} ready in") in self.output(node)

    def status(self, node: str) -> str:
        """`dynamo status` of the node's run, run on that node: the whole graph from discovery."""
        argv = self.nodes.command(node, [sys.executable, "-m", "dynamo_oss.cli", "status", str(self.run_dir(node))])
        return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout

    def registered(self, namespace: str, component: str) -> dict[str, str] | None:
        """The registrations of a component's workers in discovery, read on the infrastructure node
        with its certificate, by etcd's own client (a Python process per poll costs half a
        CPU-second); None when etcd does not answer."""
        etcd = self.etcd()
        assert etcd.tls is not None
        certificates = ["--cacert", str(etcd.tls.ca), "--cert", str(etcd.tls.cert), "--key", str(etcd.tls.key)]
        argv = [find_binary("etcdctl") or "etcdctl", "--endpoints", etcd.endpoint, *certificates]
        argv += ["--command-timeout", "10s", "-w", "json", "get", "--prefix"]
        argv.append(probes.instances_prefix(namespace, component))
        done = subprocess.run(self.nodes.command(self.center, argv), capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            return None
        kvs = json.loads(done.stdout).get("kvs", [])
        return {
            base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode(errors="replace")
            for kv in kvs
        }

    def instances(self, namespace: str, component: str) -> int:
        """Workers registered under a component (-1 when etcd does not answer)."""
        registered = self.registered(namespace, component)
        return -1 if registered is None else len(registered)

    def restarts(self, node: str) -> dict[str, int]:
        state = json.loads((self.run_dir(node) / "state.json").read_text())
        return {process["name"]: process["restarts"] for process in state["processes"]}

    def stop(self) -> None:
        """Stop every launcher (in order: each drains its own processes); kill one that hangs."""
        for launcher in self.launchers.values():
            if launcher.poll() is None:
                launcher.terminate()
        for launcher in self.launchers.values():
            try:
                launcher.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                launcher.kill()
                launcher.wait()
