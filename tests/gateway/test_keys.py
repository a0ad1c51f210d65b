"""API keys and connection limits at the gateway: the graph's rules, the keys' sources, and a gateway
bound to a non-loopback address met by a client on another host (two network namespaces)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dynamo_oss.bench.netns import Nodes
from dynamo_oss.gateway.auth import ApiKeys, KeysUnusable
from dynamo_oss.gateway.errors import ApiError
from tests.support.commands import dynamo
from tests.support.graphs import observed, write_graph
from tests.support.ports import free_ports
from tests.support.served import FAST_MOCKER
from tests.support.waiting import wait_for

KEY = "sk-test-4f9c2a"


def graph_with(folder: Path, host: str, **sections: object) -> Path:
    """write_graph's graph on free ports with the endpoint on `host` and `sections` added."""
    path = write_graph(folder)
    graph = yaml.safe_load(path.read_text())
    graph["frontend"]["host"] = host
    graph.update(sections)
    path.write_text(yaml.safe_dump(graph))
    return path


def test_keys_come_from_a_file_of_names_or_one_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "keys"
    path.write_text("# team keys\nalice sk-a\n\nbob sk-b\n")
    keys = ApiKeys.from_file(path)
    assert keys.name_of(b"/v1/models", b"Bearer sk-b") == "bob"
    assert keys.name_of(b"/health", None) is None  # probes carry no key
    for shown in (None, b"Bearer ", b"Basic sk-a", b"Bearer sk-c", b"Bearer sk-a-longer"):
        with pytest.raises(ApiError) as refused:
            keys.name_of(b"/v1/models", shown)
        assert refused.value.status == 401 and refused.value.code == "invalid_api_key"
        assert "sk-" not in refused.value.message  # no key, shown or known, is ever echoed
    path.write_text("alice sk-a\nalice sk-b\n")
    with pytest.raises(KeysUnusable, match="line 2: the name alice is given twice"):
        ApiKeys.from_file(path)
    path.write_text("refused sk-a\n")
    with pytest.raises(KeysUnusable, match="line 1: the name refused is the metrics' label"):
        ApiKeys.from_file(path)
    path.write_text("just-a-key\n")
    with pytest.raises(KeysUnusable, match="line 1: expected `NAME KEY`"):
        ApiKeys.from_file(path)
    monkeypatch.setenv("TEAM_KEY", "sk-env")
    assert ApiKeys.from_env("TEAM_KEY").name_of(b"/v1/models", b"bearer sk-env") == "TEAM_KEY"
    with pytest.raises(KeysUnusable, match="NO_SUCH_KEY is not set"):
        ApiKeys.from_env("NO_SUCH_KEY")


def test_an_endpoint_past_loopback_needs_keys_unless_the_graph_says_none(tmp_path: Path) -> None:
    graph = graph_with(tmp_path, "0.0.0.0")
    code, _, err = dynamo("check", str(graph))
    assert code == 2 and "gateway.auth: the endpoint listens on 0.0.0.0, beyond this host, so it needs API keys" in err
    graph = graph_with(tmp_path, "0.0.0.0", gateway={"auth": "none"})
    code, _, err = dynamo("check", str(graph))
    assert code == 0 and "the endpoint is open to the network with no authentication" in err
    graph = graph_with(tmp_path, "0.0.0.0", gateway={"auth": {"keys_file": "missing-keys"}})
    code, out, err = dynamo("check", str(graph))
    assert code == 0 and f"api keys   from {tmp_path / 'missing-keys'}" in out, out
    assert "warning: gateway.auth.keys_file:" in err and "frontend.port listens" not in err  # keys, so not open
    graph = graph_with(tmp_path, "127.0.0.1", gateway={"enabled": False, "auth": {"keys_env": "KEY"}})
    code, _, err = dynamo("check", str(graph))
    assert code == 2 and "Got max_in_flight, auth or processes with enabled false" in err


@pytest.mark.graph
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_a_client_on_another_host_needs_a_key_and_slow_or_idle_connections_are_closed(tmp_path: Path) -> None:
    keys = tmp_path / "api-keys"
    keys.write_text(f"alice {KEY}\n")
    prometheus, launcher = free_ports(2)
    limits = {
        "header_timeout_s": 2,
        "body_timeout_s": 2,
        "keep_alive_timeout_s": 3,
        "write_timeout_s": 2,
        "max_connections": 8,
        "max_body_mib": 1,
        "max_buffered_mib": 1,
    }
    with Nodes(["server", "client"]) as nodes:
        address = nodes.addresses["server"]
        gateway = {"auth": {"keys_file": str(keys)}, "limits": limits, "max_in_flight": 1}
        graph = graph_with(tmp_path, address, gateway=gateway, observability=observed(prometheus, launcher))
        spec = yaml.safe_load(graph.read_text())
        port, metrics_url = (
            spec["frontend"]["port"],
            f"http://127.0.0.1:{spec['observability']['gateway_port']}/metrics",
        )
        argv = [
            sys.executable,
            "-m",
            "dynamo_oss.cli",
            "serve",
            str(graph),
            "--run-dir",
            str(tmp_path / "run"),
            *FAST_MOCKER,
        ]
        server = nodes.start("server", argv, tmp_path / "serve.out")
        try:
            wait_for(
                lambda: "ready in" in (tmp_path / "serve.out").read_text() or server.poll() is not None,
                120,
                "the graph to serve",
            )
            assert server.poll() is None, (tmp_path / "serve.out").read_text()
            probe = [sys.executable, str(Path(__file__).with_name("edge_probe.py")), address, str(port), KEY]
            result = subprocess.run(nodes.command("client", probe), capture_output=True, text=True, timeout=120)
            assert result.returncode == 0, result.stderr
            seen = json.loads(result.stdout)
            read = f"import urllib.request; print(urllib.request.urlopen({metrics_url!r}).read().decode())"
            metrics = subprocess.run(
                nodes.command("server", [sys.executable, "-c", read]), capture_output=True, text=True, timeout=30
            ).stdout
        finally:
            server.terminate()
            server.wait(60)
    assert seen["no key"] == seen["empty bearer"] == seen["wrong key"] == [401, "invalid_api_key"], seen
    assert seen["metrics without a key"] == 401 and seen["health without a key"] == 200, seen
    assert seen["with the key"][0] == 200 and seen["with the key"][1] > 0, seen
    status, named, took = seen["declared too large"]
    assert status == "HTTP/1.1 413 Request Entity Too Large" and named and took < 1.5, seen
    for case in ("slow headers", "slow body"):
        assert seen[case][0] == "HTTP/1.1 408 Request Timeout" and 1.5 < seen[case][1] < 4, seen
    assert seen["idle keep-alive"][0] == "HTTP/1.1 200 OK" and 2.5 < seen["idle keep-alive"][1] < 5, seen
    assert seen["second body past the budget"] == "HTTP/1.1 503 Service Unavailable", seen
    assert seen["body once the budget is free"] == "HTTP/1.1 400 Bad Request", seen  # read whole: spaces are no JSON
    assert seen["while a stream is unread"] == [503, "overloaded"], seen
    assert seen["once the unread stream is dropped"][0] == 200, seen
    assert seen["past the cap"][0] == "" and seen["after the cap"] == 200, seen
    log = (tmp_path / "run" / "logs" / "gateway.log").read_text()
    assert "client connections open, the most gateway.limits.max_connections allows" in log
    assert KEY not in log and all(
        KEY not in path.read_text(errors="replace") for path in (tmp_path / "run" / "logs").iterdir()
    )
    assert re.search(r'dynamo_oss_gateway_requests_total\{api="chat",key="alice",status="200"\} [1-9]', metrics)
    assert 'dynamo_oss_gateway_tokens_total{key="alice",kind="output"}' in metrics, metrics
    assert 'key="refused",status="401"' in metrics, metrics
