"""One graph over three nodes, each a network namespace of this machine running `dynamo serve
GRAPH --node NAME` on the mocker: the infrastructure (Prometheus included) and a frontend on `head`,
prefill on `prefill`, decode and a second frontend on `decode`, etcd, NATS and Dynamo's request plane
under mutual TLS. Traffic goes only to the namespaces' own addresses."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dynamo_oss.bench.certificates import write_certificates
from dynamo_oss.bench.multinode import METRICS_PORT_FIELDS, PORT_FIELDS, ServedNodes, node_graph
from dynamo_oss.bench.netns import Nodes
from dynamo_oss.bench.streams import Outcome, read_outcomes
from tests.support.ports import free_ports
from tests.support.waiting import wait_for

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.graph,
    pytest.mark.long,
]

NODES = ["head", "prefill", "decode"]
FRONTENDS = ["head", "decode"]  # each its own way in
REGISTRY_POLL_S = 2  # each look at the registrations starts a Python process in the head node
LEASE_S = 30  # the etcd lease Dynamo 1.6 grants a worker (etcdctl lease timetolive): a worker cut off leaves discovery within it
MODEL = "openai/gpt-oss-20b"


def three_node_graph(folder: Path, nodes: Nodes) -> Path:
    fields = PORT_FIELDS + METRICS_PORT_FIELDS
    ports = dict(zip(fields, free_ports(len(fields))))  # as every test's graph, though the nodes are private
    tls = write_certificates(folder / "certs", nodes.addresses)
    key = folder / "graph.key"  # one graph key for both frontend nodes (on real machines, a copy on each)
    key.write_bytes(secrets.token_bytes(32))
    key.chmod(0o600)
    pools = {"prefill": ["prefill"], "decode": ["decode"]}
    graph = node_graph("three-nodes", nodes, "head", pools, ports, tls, frontends=FRONTENDS, key_file=str(key))
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[ServedNodes]:
    with Nodes(NODES) as nodes:
        served = ServedNodes(nodes, three_node_graph(tmp_path, nodes), tmp_path, center="head")
        try:
            yield served
        finally:
            served.stop()
    assert nodes.left_behind() == []


def decode_registered(served: ServedNodes) -> bool:
    return served.instances("three-nodes", "backend") == 1


# From the prefill node, with the graph's authority trusted but no certificate shown: what each of
# etcd, NATS and the decode worker's request plane says (they must all refuse).
WITHOUT_A_CERTIFICATE = """
import asyncio, json, ssl, sys
ca, targets = sys.argv[1], json.loads(sys.argv[2])
async def attempt(host, port, greeting):
    reader, writer = await asyncio.open_connection(host, port)
    try:
        if greeting:
            await reader.readline()  # NATS's INFO, sent before TLS starts
        await writer.start_tls(ssl.create_default_context(cafile=ca), server_hostname=host)
        writer.write(b"PING\\r\\n")
        await writer.drain()
        return "answered" if await asyncio.wait_for(reader.read(100), 5) else "closed"
    except (ssl.SSLError, ConnectionError) as error:
        return type(error).__name__
    finally:
        writer.close()
print(json.dumps({name: asyncio.run(attempt(*target)) for name, target in targets.items()}))
"""


def refused_without_a_certificate(served: ServedNodes) -> dict[str, str]:
    spec = yaml.safe_load(served.graph.read_text())
    head = served.nodes.addresses["head"]
    registration = " ".join((served.registered("three-nodes", "backend") or {}).values())
    decode = re.search(r'"tcp":"([\d.]+):(\d+)/', registration)
    assert decode, registration
    targets = {
        "etcd": [head, spec["infrastructure"]["etcd"]["client_port"], False],
        "nats": [head, spec["infrastructure"]["nats"]["port"], True],
        "decode request plane": [decode[1], int(decode[2]), False],
    }
    argv = [sys.executable, "-c", WITHOUT_A_CERTIFICATE, spec["infrastructure"]["tls"]["ca"], json.dumps(targets)]
    result = subprocess.run(served.nodes.command("prefill", argv), capture_output=True, text=True, timeout=60)
    return json.loads(result.stdout or "{}") if result.returncode == 0 else {"error": result.stderr}


# Sends argv[3] chat requests to the endpoint argv[1] for model argv[2], one after another, and prints
# the completion tokens of each answer (any status but 200 fails it): the standard library only.
CHATS = """
import json, sys, urllib.request
url, model, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
tokens = []
for index in range(count):
    body = {"model": model, "messages": [{"role": "user", "content": f"request {index}"}], "max_tokens": 8}
    request = urllib.request.Request(f"{url}/chat/completions", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        tokens.append(json.load(reply)["usage"]["completion_tokens"])
print(json.dumps(tokens))
"""


# Reasoning sealed by one frontend node's gateway, handed back statelessly to the other's: the status.
SEALED_ELSEWHERE = """
import json, sys, urllib.error, urllib.request
first, second, model = sys.argv[1:4]
def post(url, body):
    request = urllib.request.Request(f"{url}/responses", json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as error:
        return error.code, json.load(error)
ask = {"role": "user", "content": "Think, then say hi."}
status, sealed = post(first, {"model": model, "input": [ask], "store": False, "include": ["reasoning.encrypted_content"]})
carried = [item for item in sealed["output"] if item["type"] == "reasoning" and item.get("encrypted_content")]
carried = [{key: value for key, value in item.items() if key != "content"} for item in carried]
again = {"role": "user", "content": "Again."}
print(json.dumps([status, len(carried), *post(second, {"model": model, "input": [ask, *carried, again], "store": False})]))
"""


def sealed_elsewhere(served: ServedNodes, first: str, second: str) -> list:
    """Reasoning sealed through `first`'s endpoint, sent back through `second`'s: [status, sealed items,
    status, answer]."""
    argv = [sys.executable, "-c", SEALED_ELSEWHERE, served.endpoint(first), served.endpoint(second), MODEL]
    done = subprocess.run(served.nodes.command("prefill", argv), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def chat(served: ServedNodes, client: str, endpoint: str, count: int) -> list[int]:
    """`count` chat requests sent from the `client` node to `endpoint`: each answer's completion tokens."""
    argv = served.nodes.command(client, [sys.executable, "-c", CHATS, endpoint, MODEL, str(count)])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# What the head's Prometheus has of the frontend nodes: each target's health, and by node the gateway's
# usage of the key every client of this graph (`auth: none`) is counted under, and its frontend's requests.
UP = 'up{job=~"dynamo-frontend|dynamo-oss-gateway"}'
REQUESTS = 'sum by (node) (dynamo_oss_gateway_requests_total{key="none", api="chat", status="200"})'
TOKENS = 'sum by (node) (dynamo_oss_gateway_tokens_total{key="none", kind="output"})'
FRONTEND_REQUESTS = "sum by (node) (dynamo_frontend_requests_total)"


def by(rows: list[dict], *labels: str) -> dict:
    """A query's result keyed by the labels' values (a tuple of them for several)."""
    keys = [tuple(row["metric"].get(label, "") for label in labels) for row in rows]
    return {key if len(key) > 1 else key[0]: float(row["value"][1]) for key, row in zip(keys, rows, strict=True)}


def endpoints_scraped(served: ServedNodes, sent: dict[str, float]) -> dict[str, dict] | None:
    """The four queries above, once every frontend node's gateway and frontend is up and each node's
    gateway and frontend counted the chat requests `sent` to it; None until then."""
    looked = served.query(UP, REQUESTS, TOKENS, FRONTEND_REQUESTS)
    if looked is None:
        return None
    up, requests, tokens, frontend = looked
    scraped = {
        "up": by(up, "job", "node"),
        "requests": by(requests, "node"),
        "tokens": by(tokens, "node"),
        "frontend requests": by(frontend, "node"),
    }
    everything_up = {(job, node): 1.0 for job in ("dynamo-frontend", "dynamo-oss-gateway") for node in FRONTENDS}
    counted = scraped["requests"] == scraped["frontend requests"] == sent
    return scraped if scraped["up"] == everything_up and counted else None


def test_three_nodes_serve_one_graph_and_the_decode_node_rejoins_after_a_cut(served: ServedNodes) -> None:
    # A node started before the infrastructure node waits for it, and says so.
    served.start("decode")
    wait_for(
        lambda: "waiting for the infrastructure on node head" in served.output("decode"),
        60,
        "the decode node to wait for the head node",
    )
    served.start("head")
    served.start("prefill")
    for node in NODES:
        wait_for(lambda node=node: served.ready(node), 180, f"node {node} ready")
    # Every listener binds the node's address or loopback, never 0.0.0.0.
    for node in NODES:
        listening = subprocess.run(served.nodes.command(node, ["ss", "-Hltn"]), capture_output=True, text=True).stdout
        local = {line.split()[3].rsplit(":", 1)[0] for line in listening.splitlines()}
        assert local <= {served.nodes.addresses[node], "127.0.0.1"}, (node, listening)
    # Nothing answers a client the graph's authority did not certify, and no key is in a state file.
    refused = refused_without_a_certificate(served)
    assert set(refused) == {"etcd", "nats", "decode request plane"} and "answered" not in refused.values(), refused
    assert "PRIVATE KEY" not in (served.run_dir("head") / "state.json").read_text()

    # Each frontend node serves a client on its own address; the head's Prometheus scrapes both nodes'
    # gateways and frontends, and the per-key usage over both nodes is what was sent.
    sent = {"head": 3, "decode": 2}
    tokens = {node: chat(served, "prefill", served.endpoint(node), count) for node, count in sent.items()}
    scraped = wait_for(
        lambda: endpoints_scraped(served, {node: float(count) for node, count in sent.items()}),
        60,
        "the head's Prometheus to scrape both frontend nodes' gateways and frontends, with their requests",
        2,
    )
    assert sum(scraped["requests"].values()) == sum(sent.values())
    assert scraped["tokens"] == {node: float(sum(tokens[node])) for node in sent}, scraped
    # Both frontend nodes' gateways read the one graph key: what one sealed, the other opens.
    first_status, carried, second_status, answer = sealed_elsewhere(served, "head", "decode")
    assert first_status == 200 and carried >= 1 and second_status == 200, answer

    endpoint = served.endpoint("head")
    outcomes = served.folder / "outcomes.jsonl"
    until = served.folder / "stop-load"
    load_argv = [sys.executable, "-m", "dynamo_oss.bench.streams", endpoint, MODEL, "--out", str(outcomes)]
    load_argv += ["--until", str(until), "--users", "3", "--tokens", "32", "--timeout-s", "30"]
    load = served.nodes.start("head", load_argv, served.folder / "load.out")
    try:
        wait_for(lambda: sum(o.error is None for o in read_outcomes(outcomes)) >= 6, 60, "requests served")
        cut = time.time()
        served.nodes.cut("decode")
        wait_for(
            lambda: not decode_registered(served),
            LEASE_S + 15,
            "the cut decode worker to leave discovery",
            REGISTRY_POLL_S,
        )
        left = time.time() - cut
        # `dynamo status` on any node that still reaches etcd shows the whole graph, and what is missing.
        status = served.status("prefill")
        assert re.search(r"decode +10\.77\.0\.3 +registered: none; MISSING: backend 1", status), status
        assert re.search(r"prefill +10\.77\.0\.2 +registered: prefill 1\n", status), status
        served.nodes.reconnect("decode")
        back = time.time()
        wait_for(lambda: decode_registered(served), 120, "the decode worker to register again", REGISTRY_POLL_S)
        wait_for(
            lambda: any(o.error is None and o.started > back for o in read_outcomes(outcomes)),
            120,
            "a request served after the decode node came back",
        )
        assert "MISSING" not in served.status("decode")
        restarted = {node: served.restarts(node) for node in ("head", "prefill")}
        # The infrastructure node cut off briefly: the other nodes say so, and that it is back.
        served.nodes.cut("head")
        for node in ("prefill", "decode"):
            wait_for(
                lambda node=node: "lost the infrastructure on node head" in served.output(node),
                30,
                f"node {node} to report the head node lost",
            )
        served.nodes.reconnect("head")
        head_back = time.time()
        for node in ("prefill", "decode"):
            wait_for(
                lambda node=node: "the infrastructure on node head answers again" in served.output(node),
                30,
                f"node {node} to report the head node back",
            )
        wait_for(
            lambda: any(o.error is None and o.started > head_back for o in read_outcomes(outcomes)),
            120,
            "a request served after the head node came back",
        )
    finally:
        until.touch()
        load.wait(60)
    results: list[Outcome] = read_outcomes(outcomes)
    before = [o for o in results if o.ended < cut]
    assert before and all(o.error is None and o.tokens == 32 for o in before)
    failed = [o for o in results if o.error]
    assert all(o.ended >= cut for o in failed), failed  # only the cut failed requests
    assert left <= LEASE_S + 15
    # The other nodes carried on through the decode node's loss: nothing of theirs restarted.
    assert all(count == 0 for node in restarted.values() for count in node.values()), restarted
