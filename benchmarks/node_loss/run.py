"""What losing a node costs a graph served over several nodes, on one machine.

Each scenario serves a gpt-oss-20b mocker graph over network namespaces (one per node, joined
through a bridge; dynamo_oss.bench.netns), each node running `dynamo serve GRAPH --node NAME`, with
the infrastructure and frontend on `head`. Closed-loop streaming users (4, 32 output tokens each)
run inside `head` throughout. Once requests flow, a decode node is lost:

- cut, one decode node: the only decode node's cable is pulled (its bridge port down), and put
  back once its worker has left discovery;
- cut, one of two decode nodes: the same, with a second decode node serving beside it;
- killed, one of two decode nodes: every process on it SIGKILLed, launcher included, and its
  launcher started again once its worker has left discovery (as systemd would restart it);
- killed, the infrastructure node: `head`'s launcher SIGKILLed (its etcd, NATS, gateway and
  frontend die with it; the load's users, in the same namespace, go on) and started again at once.

Run as root from the repository root (about 7 minutes); writes results.md and results.json here:

    uv run python benchmarks/node_loss/run.py
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from dynamo_oss.bench.certificates import write_certificates
from dynamo_oss.bench.multinode import PORT_FIELDS, ServedNodes, node_graph
from dynamo_oss.bench.netns import Nodes
from dynamo_oss.bench.streams import read_outcomes

HERE = Path(__file__).parent
MODEL = "openai/gpt-oss-20b"
USERS, TOKENS = 4, 32
PORTS = dict(zip(PORT_FIELDS, (2379, 2380, 4222, 8222, 8000, 8001, 8100, 8200)))  # private to the namespaces
SCENARIOS = {  # nodes, the node lost, how
    "cut, one decode node": (["head", "prefill", "decode"], "decode", "cut"),
    "cut, one of two decode nodes": (["head", "prefill", "decode", "decode-b"], "decode", "cut"),
    "killed, one of two decode nodes": (["head", "prefill", "decode", "decode-b"], "decode", "kill"),
    "killed, the infrastructure node": (["head", "prefill", "decode"], "head", "kill"),
}


def wait(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds until `condition` held; RuntimeError at the deadline."""
    start = time.time()
    while not condition():
        if time.time() - start > timeout_s:
            raise RuntimeError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.2)
    return time.time() - start


def scenario(name: str, names: list[str], lost: str, loss: str, folder: Path) -> dict:
    folder.mkdir(parents=True)
    with Nodes(names) as nodes:
        decode_nodes = [node for node in names if node.startswith("decode")]
        tls = write_certificates(folder / "certs", nodes.addresses)
        graph = node_graph("node-loss", nodes, "head", {"prefill": ["prefill"], "decode": decode_nodes}, PORTS, tls)
        (folder / "graph.yaml").write_text(yaml.safe_dump(graph))
        served = ServedNodes(nodes, folder / "graph.yaml", folder, center="head")
        try:
            for node in names:
                served.start(node)
            wait(lambda: all(served.ready(node) for node in names), 240, "every node ready")
            outcomes, until = folder / "outcomes.jsonl", folder / "stop-load"
            endpoint = f"http://{nodes.addresses['head']}:{PORTS['frontend']}/v1"
            load = nodes.start(
                "head",
                [
                    sys.executable,
                    "-m",
                    "dynamo_oss.bench.streams",
                    endpoint,
                    MODEL,
                    "--out",
                    str(outcomes),
                    "--until",
                    str(until),
                    "--users",
                    str(USERS),
                    "--tokens",
                    str(TOKENS),
                    "--timeout-s",
                    "30",
                ],
                folder / "load.out",
            )
            try:
                wait(lambda: sum(o.error is None for o in read_outcomes(outcomes)) >= 20, 120, "requests served")
                decoding = len(decode_nodes)
                event = time.time()
                if lost == "head":  # its launcher: the rest of what runs on head dies with it, but for the load
                    os.kill(served.launchers["head"].pid, signal.SIGKILL)
                elif loss == "cut":
                    nodes.cut(lost)
                else:
                    for pid in nodes.pids(lost):
                        os.kill(pid, signal.SIGKILL)
                leave_s = None
                if lost != "head":  # with head, discovery itself is gone
                    leave_s = wait(
                        lambda: served.instances("node-loss", "backend") == decoding - 1,
                        90,
                        "the lost worker to leave discovery",
                    )
                recovery = time.time()
                if loss == "cut":
                    nodes.reconnect(lost)
                else:
                    served.start(lost)
                if lost == "head":  # etcd keeps the old registrations until their leases expire: count served requests
                    rejoin_s = wait(
                        lambda: any(o.error is None and o.started > recovery for o in read_outcomes(outcomes)),
                        240,
                        "a request served by the restarted head node",
                    )
                else:
                    rejoin_s = wait(
                        lambda: served.instances("node-loss", "backend") == decoding,
                        180,
                        "the worker to register again",
                    )
                wait(
                    lambda: sum(o.error is None and o.started > recovery + rejoin_s for o in read_outcomes(outcomes))
                    >= 8,
                    120,
                    "requests served after the rejoin",
                )
            finally:
                until.touch()
                load.wait(90)
            results = read_outcomes(outcomes)
            failed = [o for o in results if o.error]
            others = {node: sum(served.restarts(node).values()) for node in names if node != lost}
        finally:
            served.stop()
    assert nodes.left_behind() == [], nodes.left_behind()
    return {
        "scenario": name,
        "nodes": names,
        "requests": len(results),
        "failed": len(failed),
        "failed_in_flight": sum(o.started < event for o in failed),
        "failed_after": sum(o.started >= event for o in failed),
        "lost": lost,
        "leave_s": None if leave_s is None else round(leave_s, 1),
        "rejoin_s": round(rejoin_s, 1),
        "disrupted_s": round(max((o.ended for o in failed), default=event) - event, 1),
        "other_nodes_restarts": sum(others.values()),
        "errors": sorted({o.error.split("(")[0] for o in failed if o.error}),
    }


def main() -> None:
    if os.geteuid() != 0:
        sys.exit("run as root: it creates network namespaces")
    work = Path(tempfile.mkdtemp(prefix="node-loss-"))
    print(f"logs in {work}", flush=True)
    rows = []
    for index, (name, (names, lost, loss)) in enumerate(SCENARIOS.items()):
        print(f"[{name}] serving over {', '.join(names)}", flush=True)
        rows.append(scenario(name, names, lost, loss, work / f"scenario-{index}"))
        print(f"[{name}] {rows[-1]}", flush=True)
    (HERE / "results.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = [
        "# What losing a node costs a graph over several nodes",
        "",
        "Command (as root): `uv run python benchmarks/node_loss/run.py`. Each row serves a gpt-oss-20b graph on "
        "Dynamo's mocker over network namespaces of one machine (one per node, joined through a bridge), each node "
        "running `dynamo serve GRAPH --node NAME`; `head` runs etcd, NATS, the gateway and Dynamo's frontend, "
        f"`prefill` one prefill worker, each `decode*` node one decode worker. {USERS} closed-loop users stream "
        f"{TOKENS}-token answers from inside `head` (a request's limit 30 s; after a failure a user waits 0.5 s). "
        "Once requests flow, node `decode` is lost: its cable pulled (bridge port down) and put back once its worker "
        "has left discovery, or every process on it SIGKILLed and its launcher started again then. In the last row "
        "`head` is lost instead: its launcher SIGKILLed (etcd, NATS, the gateway and the frontend die with it) and "
        "started again at once, as systemd would. etcd, NATS and Dynamo's request plane speak mutual TLS "
        "(`infrastructure.tls`).",
        "",
        "| scenario | requests | failed (in flight / new) | worker out of discovery | rejoined after recovery | "
        "failures ended | restarts on other nodes |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {r['scenario']} | {r['requests']} | {r['failed']} ({r['failed_in_flight']} / {r['failed_after']}) | "
            f"{'-' if r['leave_s'] is None else str(r['leave_s']) + ' s'} | {r['rejoin_s']} s | {r['disrupted_s']} s | {r['other_nodes_restarts']} |"
            for r in rows
        ],
        "",
        "- *failed*: requests that ended in an error (an HTTP error or a stream cut short), among all sent; *in flight*: "
        "started before the loss; *new*: started after it.",
        "- *worker out of discovery*: from the loss until etcd on `head` lists one decode worker fewer (the lost "
        "worker's lease expired, or was never renewed).",
        "- *rejoined after recovery*: from the cable put back (or the launcher restarted) until etcd lists the worker "
        "again; for `head`, until a request sent after its restart is served (etcd keeps the old registrations until "
        "their leases expire, so they say nothing).",
        "- *failures ended*: from the loss to the end of the last failed request.",
        "- Errors seen: " + "; ".join(f"{r['scenario']}: {', '.join(r['errors']) or 'none'}" for r in rows) + ".",
    ]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print(f"wrote {HERE / 'results.md'}", flush=True)


if __name__ == "__main__":
    main()
