"""The small graphs tests serve, on free ports: the two-worker mocker graph, its keyed, sla-autoscaled
and load-autoscaled variants, and the shipped graphs moved off the shipped ports."""

from __future__ import annotations

from pathlib import Path

import yaml

from dynamo_oss.bench.served import measured_copy
from dynamo_oss.deployment.commands import gateway_config
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.gateway.config import GatewayConfig
from dynamo_oss.graph.loader import load_graph
from tests.support.commands import REPO
from tests.support.ports import free_port_run, free_ports


def exact_stream(content: str, tokens: int) -> dict:
    """A streaming chat request to a gpt-oss-20b graph that generates exactly `tokens` tokens,
    counted in the usage of its last chunk."""
    return {
        "model": "openai/gpt-oss-20b",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_body": {"ignore_eos": True, "min_tokens": tokens},
    }


def observed(prometheus_port: int, launcher_port: int) -> dict:
    """A graph's observability section: an embedded Prometheus scraping every second, the launcher's
    metrics, and the gateway's on a free port."""
    return {
        "prometheus": {"mode": "embedded", "port": prometheus_port, "scrape_interval_s": 1},
        "launcher_port": launcher_port,
        "gateway_port": free_ports(1)[0],
    }


def write_graph(folder: Path, **sections: object) -> Path:
    """A small disaggregated mocker graph on free ports, with `sections` replacing top-level keys. Its
    endpoint is one gateway process and one frontend unless `sections` say otherwise: the sizing of
    the endpoint (perf/endpoint.py) would give this host's cores, which a test of something else
    only pays for."""
    etcd_client, etcd_peer, nats, nats_monitoring, frontend, dynamo, prefill, decode = free_ports(8)
    graph = {
        "name": "test-graph",
        "model": "gpt-oss-20b",
        "hardware": {"gpu": "h200", "gpus": 2},
        "infrastructure": {
            "etcd": {"mode": "embedded", "client_port": etcd_client, "peer_port": etcd_peer},
            "nats": {"mode": "embedded", "port": nats, "monitoring_port": nats_monitoring},
        },
        "frontend": {"port": frontend, "dynamo_port": dynamo, "replicas": 1},
        "pools": {
            "prefill": {"workers": 1, "engine": "mocker", "system_port": prefill},
            "decode": {"workers": 1, "engine": "mocker", "system_port": decode},
        },
    }
    graph.update(sections)
    gateway = graph.setdefault("gateway", {})
    if isinstance(gateway, dict) and gateway.get("enabled", True):
        gateway.setdefault("processes", 1)
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


def two_trays(name: str, model: str, agg: dict) -> dict:
    """A graph of one aggregated pool (`agg`, its section) over two GB200 trays of 4 GPUs at 10.9.0.1 and
    10.9.0.2, without TLS: a worker of 8 GPUs spans both."""
    return {
        "name": name,
        "model": model,
        "hardware": {
            "gpu": "gb200",
            "nodes": [{"name": f"tray-{i}", "address": f"10.9.0.{i + 1}", "gpus": 4} for i in range(2)],
        },
        "infrastructure": {"tls": "none"},
        "pools": {"agg": agg},
    }


# The API keys of write_keyed_graph's graph: alice and carol are one tenant, every other key one each.
KEYS = {
    "alice": "sk-alice-7f3a",
    "carol": "sk-carol-91d2",
    "bob": "sk-bob-c41e",
    "dave": "sk-dave-0b77",
    "erin": "sk-erin-5e18",
    "frank": "sk-frank-3a90",
    "grace": "sk-grace-62c1",
    "heidi": "sk-heidi-d09e",
    "ivan": "sk-ivan-7b35",
    "judy": "sk-judy-4e2a",
    "ken": "sk-ken-8d51",
}
# Their own shares of the graph, as their lines in the keys file say (tests/gateway/test_fair_share.py);
# ken's is the batch tests' alone (tests/gateway/test_batches.py), so no other test's minute moves it.
KEY_LIMITS = {
    "grace": "requests_per_minute=3",
    "heidi": "concurrent_requests=1",
    "ivan": "tokens_per_minute=60",
    "ken": "tokens_per_minute=60",
}


# A Responses request's fields for an answer far longer than a test waits for (the fast mocker makes a few thousand
# tokens a second, all of them reasoning with ignore_eos): only a cancel, or its gateway process's death, ends it.
ENDLESS = {"max_output_tokens": 100_000, "extra_body": {"ignore_eos": True, "min_tokens": 100_000}}

# How long the keyed graph keeps a stored response (`gateway.responses.retention_s`), and how many background
# responses one of its keys may have queued or running (`gateway.responses.max_background_per_key`).
RETENTION_S, BACKGROUND_PER_KEY = 3600, 2
# Its largest batch file (`gateway.batches.max_file_mib`) and most lines in one (`max_lines`): small, so a test
# passes them cheaply.
BATCH_FILE_MIB, BATCH_LINES = 1, 500


def write_keyed_graph(folder: Path) -> Path:
    """write_graph's graph with the gateway asking for KEYS, keeping stored responses RETENTION_S (and
    BACKGROUND_PER_KEY background ones a key at once), batch files of at most BATCH_FILE_MIB and BATCH_LINES,
    and its usage metrics on a free loopback port
    (`observability.gateway_port`) that no Prometheus scrapes: a test reads them itself."""
    keys = folder / "api-keys"
    keys.write_text(
        "".join(
            f"{name} {key}{' alice' if name == 'carol' else ''} {KEY_LIMITS.get(name, '')}\n"
            for name, key in KEYS.items()
        )
    )
    launcher, gateway_metrics = free_ports(2)
    observability = {
        "prometheus": {"mode": "external", "url": "http://127.0.0.1:1"},
        "launcher_port": launcher,
        "gateway_port": gateway_metrics,
    }
    responses = {"retention_s": RETENTION_S, "max_background_per_key": BACKGROUND_PER_KEY}
    batches = {"max_file_mib": BATCH_FILE_MIB, "max_lines": BATCH_LINES}
    gateway = {"auth": {"keys_file": str(keys)}, "responses": responses, "batches": batches}
    return write_graph(folder, gateway=gateway, observability=observability)


# The sla mode on prompts long enough that prefill queues, the mocker 10x slower than modelled: at
# SLA_LOW requests/s the model predicts one worker of each pool keeps TTFT p90 <= 1.5 s and ITL <=
# 40 ms (in the slowed time), at SLA_HIGH it takes two of each (tests/test_planner_sizing.py).
SLA_PROMPT_WORDS, SLA_TOKENS, SLA_LOW, SLA_HIGH, SLA_SLOW = 3000, 100, 0.2, 2.5, 10.0


def write_sla_graph(folder: Path) -> Path:
    """write_graph's graph with both pools autoscaled 1-2 by the sla planner, on free ports."""
    path = write_graph(folder)
    graph = yaml.safe_load(path.read_text())
    prometheus, launcher, metrics = free_ports(3)
    graph["hardware"]["gpus"] = 4
    graph["pools"] = {
        role: {"autoscale": {"min": 1, "max": 2}, "engine": "mocker", "system_port": free_port_run(2)}
        for role in ("prefill", "decode")
    }
    graph["planner"] = {
        "ttft_ms": 1500,
        "itl_ms": 40,
        "interval_s": 2,
        "scale_down_after_s": 10,
        "metrics_port": metrics,
    }  # mode sla: the default, with 20% headroom
    graph["observability"] = observed(prometheus, launcher)
    path.write_text(yaml.safe_dump(graph))
    return path


# The load-autoscaled graph (write_autoscaled_graph): the mocker runs AUTOSCALE_SLOW times slower than
# modelled, so streams last seconds and load builds up; its endpoint asks for AUTOSCALE_KEY. The
# mocker's KV cache (modelled on an H200) holds about 4.3M tokens, which 24 streams on this machine
# never come near: the planner's KV thresholds are set where they do.
AUTOSCALE_SLOW, AUTOSCALE_KEY, AUTOSCALE_KV_PERCENT = 10, "sk-autoscaled-5d2b", [0.15, 0.03]


def write_autoscaled_graph(folder: Path, host: str) -> Path:
    """write_graph's graph with decode autoscaled 1-3 by Dynamo's planner in load mode (a GPU budget of
    3 caps it at 2), an embedded Prometheus, and the endpoint on `host` behind AUTOSCALE_KEY."""
    path = write_graph(folder)
    graph = yaml.safe_load(path.read_text())
    (folder / "api-keys").write_text(f"tests {AUTOSCALE_KEY}\n")
    decode_port, (prometheus, launcher, planner) = free_port_run(3), free_ports(3)  # decode worker i: decode_port + i
    graph["hardware"]["gpus"] = 4
    graph["frontend"]["host"] = host
    graph["gateway"] = {"auth": {"keys_file": str(folder / "api-keys")}}
    graph["pools"]["decode"] = {"autoscale": {"min": 1, "max": 3}, "engine": "mocker", "system_port": decode_port}
    graph["planner"] = {
        "mode": "load",
        "ttft_ms": 2000,
        "itl_ms": 100,
        "max_gpus": 3,
        "interval_s": 2,
        "decode_kv_percent": AUTOSCALE_KV_PERCENT,
        "metrics_port": planner,
    }
    graph["observability"] = observed(prometheus, launcher)
    path.write_text(yaml.safe_dump(graph))
    return path


def shipped_graph_on_free_ports(name: str, folder: Path) -> Path:
    """A copy of graphs/NAME in `folder` with every port it would listen on moved to a free one,
    so a test serves the shipped graph without taking 8000, 2379 or 4222 from anyone; as a benchmark
    serves it (measured_copy: on loopback, without its API keys; tests of keys serve keyed graphs of
    their own), its ports from the test's own share."""
    graph = measured_copy(REPO / "graphs" / name)
    etcd_client, etcd_peer, nats, monitoring, frontend, dynamo, prometheus, launcher, planner = free_ports(9)
    graph["infrastructure"] = {
        "etcd": {"mode": "embedded", "client_port": etcd_client, "peer_port": etcd_peer},
        "nats": {"mode": "embedded", "port": nats, "monitoring_port": monitoring},
    }
    if "observability" in graph:
        graph["observability"] = observed(prometheus, launcher)
    graph["frontend"].update(port=frontend, dynamo_port=dynamo)
    if "planner" in graph:
        graph["planner"]["metrics_port"] = planner
    for pool in graph["pools"].values():
        pool["system_port"] = free_port_run(pool.get("workers") or pool["autoscale"]["max"])  # worker i: port + i
    path = folder / name
    path.write_text(yaml.safe_dump(graph))
    return path


def gateway_config_of(folder: Path, gateway: dict) -> GatewayConfig:
    """The gateway's configuration `dynamo serve` would write for write_graph's graph with `gateway` as
    its gateway section (on the mocker, the endpoint on 127.0.0.1:8000, its key made in `folder`)."""
    deployment = build_deployment(load_graph(write_graph(folder, gateway=gateway)), engine_override="mocker")
    return gateway_config(
        deployment,
        ("127.0.0.1", 8000),
        ["http://127.0.0.1:8001"],
        state_dir=folder,
        key_file=folder / "k",
        make_key=True,
        api_keys_file=None,
    )
