"""Exposure: every listener a graph starts binds loopback, except the OpenAI endpoint, which follows
`frontend.host`; an endpoint beyond loopback requires API keys, and `dynamo check` (and `serve`) warn
when a graph leaves it open on purpose (`gateway.auth: none`).

The live tests list the listening TCP sockets of the whole `dynamo serve` process tree (etcd, NATS,
Prometheus, the gateway, Dynamo's frontend, workers and planner, the launcher's control API and metrics),
on graphs where Dynamo's planner runs too: the README's, on loopback, and the load-autoscaled graph the
planner's tests share (tests/conftest.py), with its endpoint on 0.0.0.0 behind a key.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import psutil  # installed with aiperf
import pytest
import yaml

from tests.support.commands import dynamo
from tests.support.graphs import AUTOSCALE_KEY, write_autoscaled_graph, write_graph
from tests.support.served import ServedGraph
from tests.support.waiting import wait_for

WARNING = "the endpoint is open to the network with no authentication in front"
LOOPBACK = ("127.0.0.1", "::1")
# Processes of the graph that listen at all; the actuator and the engines' helpers do not.
LISTENING = {"launcher", "etcd", "nats", "prometheus", "gateway", "frontend", "prefill-0", "decode-0", "planner"}


def listeners(served: ServedGraph) -> list[tuple[str, str, int]]:
    """(process, address, port) for every TCP socket listening in `dynamo serve`'s process tree, each
    named by the graph process it belongs to (state.json's names; "launcher" for serve itself)."""
    launcher = psutil.Process(served.process.pid)
    names = {p["pid"]: p["name"] for p in served.state().get("processes", []) if p.get("pid")}
    names[launcher.pid] = "launcher"
    rows = []
    for process in [launcher, *launcher.children(recursive=True)]:
        try:
            sockets = process.net_connections(kind="tcp")
            owner = next((names[p.pid] for p in [process, *process.parents()] if p.pid in names), process.name())
        except psutil.NoSuchProcess:
            continue  # exited since the listing began
        rows += [(owner, s.laddr.ip, s.laddr.port) for s in sockets if s.status == psutil.CONN_LISTEN]
    return sorted(rows)


def test_every_listener_binds_loopback_but_the_endpoint(autoscaled: ServedGraph) -> None:
    assert_only_the_endpoint_leaves_loopback(autoscaled, "openai/gpt-oss-20b")


def test_the_readmes_graph_binds_every_listener_to_loopback(disagg: ServedGraph) -> None:
    assert_only_the_endpoint_leaves_loopback(disagg, "openai/gpt-oss-120b")


def assert_only_the_endpoint_leaves_loopback(served: ServedGraph, model: str) -> None:
    """Every process of the graph listens, the endpoint is the gateway's on `frontend.host`, and all
    else is on loopback."""
    graph = yaml.safe_load(served.graph.read_text())
    host, port = graph["frontend"].get("host", "127.0.0.1"), graph["frontend"]["port"]
    # A request first, so anything opened on the request path is open; the planner opens its listener
    # after the graph is ready.
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    key = {"authorization": f"Bearer {AUTOSCALE_KEY}"}  # the README's graph asks for none and ignores it
    reply = httpx.post(f"{served.endpoint}/chat/completions", json=body, headers=key, timeout=60)
    assert reply.status_code == 200, reply.text
    wait_for(lambda: any(name == "planner" for name, _, _ in listeners(served)), 60, "Dynamo's planner to listen")
    found = listeners(served)
    table = "\n".join(f"  {name:<10} {address}:{number}" for name, address, number in found)
    assert {name for name, _, _ in found} >= LISTENING, f"a process of the graph is missing:\n{table}"
    endpoint = [(name, address) for name, address, number in found if number == port]
    assert endpoint == [("gateway", host)], f"the endpoint should be the gateway's, on {host}:\n{table}"
    exposed = [row for row in found if row[2] != port and row[1] not in LOOPBACK]
    assert exposed == [], f"listeners off loopback:\n{table}"
    print(f"listeners of the graph (frontend.host {host}):\n{table}")


def test_serve_does_not_warn_of_an_endpoint_behind_keys(autoscaled: ServedGraph) -> None:
    assert "warning: frontend.port listens" not in autoscaled.output.read_text(), autoscaled.output.read_text()[-3000:]


def check(graph: Path, *args: str) -> tuple[str, str]:
    """`dynamo check GRAPH --engine mocker` in this process: (stdout, stderr)."""
    code, out, err = dynamo("check", str(graph), "--engine", "mocker", *args)
    assert code == 0, out + err
    return out, err


@pytest.mark.parametrize(
    ("host", "open_to_network"), [("0.0.0.0", True), ("::", True), ("127.0.0.1", False), ("::1", False)]
)
def test_check_warns_when_the_endpoint_is_open_to_the_network(tmp_path: Path, host: str, open_to_network: bool) -> None:
    graph = write_graph(tmp_path)
    spec = yaml.safe_load(graph.read_text())
    spec["frontend"]["host"] = host
    spec["gateway"] = {"auth": "none"}  # open on purpose
    graph.write_text(yaml.safe_dump(spec))
    out, err = check(graph)
    warnings = [line for line in (out + err).splitlines() if line.startswith("warning:")]
    if open_to_network:
        assert len(warnings) == 1 and WARNING in warnings[0], out + err
        assert warnings[0].startswith(f"warning: frontend.port listens on {host}:{spec['frontend']['port']}")
        assert "authenticating proxy or a firewall" in warnings[0]
    else:
        assert warnings == [], out + err


def test_check_plans_every_internal_listener_on_loopback(tmp_path: Path) -> None:
    """With the endpoint open to the network, the plan keeps all else on loopback, spare worker slots
    included, and gives every Dynamo process the loopback binds."""
    out, _ = check(write_autoscaled_graph(tmp_path, "0.0.0.0"), "--json")
    plan = json.loads(out)
    processes = plan["processes"] + plan["spare_workers"]
    assert [p["name"] for p in plan["spare_workers"]] == ["decode-1", "decode-2"]
    uses = [use for p in processes for use in p["ports"]] + [plan["launcher_metrics"]]
    assert [use["field"] for use in uses if use["host"] != "127.0.0.1"] == ["frontend.port"]
    dynamo = [p for p in processes if p["kind"] in ("frontend", "worker", "planner")]
    assert {p["name"] for p in dynamo} >= {
        "frontend",
        "prefill-0",
        "decode-0",
        "decode-1",
        "decode-2",
        "planner",
        "actuator",
    }
    for process in dynamo:
        env = process["env"]
        binds = [env.get(key) for key in ("DYN_TCP_RPC_HOST", "DYN_TCP_RESPONSE_STREAM_HOST", "DYN_SYSTEM_HOST")]
        assert binds == ["127.0.0.1"] * 3 and env["DYN_REQUEST_PLANE"] == "tcp", process["name"]
        assert env["DYN_EVENT_PLANE"] == "nats", process["name"]  # ZMQ publishers would bind 0.0.0.0
    etcd = next(p["argv"] for p in processes if p["name"] == "etcd")
    urls = [etcd[i + 1] for i, flag in enumerate(etcd) if flag.startswith("--listen-")]
    assert len(urls) == 2 and all(url.startswith("http://127.0.0.1:") for url in urls)
