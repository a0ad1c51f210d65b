"""Mutual TLS for etcd, NATS and Dynamo's request plane once other nodes reach them: what a graph must
say, what each node's plan runs with, and what `check` and `serve` make of files they cannot read.
tests/launch/test_multinode.py serves such a graph over three network namespaces."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dynamo_oss.bench.certificates import write_certificates
from dynamo_oss.deployment.host import plan_host
from dynamo_oss.deployment.model import build_deployment
from dynamo_oss.graph.loader import load_graph
from tests.support.commands import dynamo, run_dynamo
from tests.support.graphs import write_graph


def two_nodes(folder: Path, tls: object) -> Path:
    graph = {
        "name": "two-nodes",
        "model": "gpt-oss-20b",
        "hardware": {
            "gpu": "h200",
            "nodes": [
                {"name": "head", "address": "10.9.0.1", "gpus": 0},
                {"name": "gpu-a", "address": "10.9.0.2", "gpus": 2},
            ],
        },
        "infrastructure": {} if tls is None else {"tls": tls},
        "pools": {"agg": {"workers": 2, "engine": "mocker"}},
        "observability": {"prometheus": "embedded"},
    }
    path = folder / "graph.yaml"
    path.write_text(yaml.safe_dump(graph))
    return path


def test_open_infrastructure_on_a_network_is_refused_unless_the_graph_says_so(tmp_path: Path) -> None:
    code, out, err = dynamo("check", str(two_nodes(tmp_path, None)))
    assert (
        code == 2
        and "infrastructure.tls: embedded etcd and NATS listen on 10.9.0.1, where the other nodes "
        "reach them, so they need mutual TLS"
        in err
    ), out + err
    code, out, err = dynamo("check", str(two_nodes(tmp_path, "none")))
    assert code == 0 and "warning: infrastructure.etcd.client_port listens on 10.9.0.1:2379" in err, out + err


@pytest.mark.parametrize(
    ("infrastructure", "named"),
    [
        ({"etcd": {"mode": "external", "endpoints": ["http://etcd:2379"]}}, "etcd.endpoints as https:// URLs"),
        ({"nats": {"mode": "external", "url": "nats://nats:4222"}}, "nats.url as a tls:// URL"),
    ],
    ids=["etcd over http", "nats without tls"],
)
def test_external_services_are_reached_over_tls_when_the_graph_asks_for_it(
    tmp_path: Path, infrastructure: dict, named: str
) -> None:
    files = write_certificates(tmp_path / "certs", {"local": "127.0.0.1"})
    code, _, err = dynamo("check", str(write_graph(tmp_path, infrastructure={**infrastructure, "tls": files})))
    assert code == 2 and named in err, err


def test_each_node_serves_and_reaches_the_infrastructure_with_its_own_certificate(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    deployment = build_deployment(
        load_graph(two_nodes(tmp_path, write_certificates(certs, {"head": "10.9.0.1", "gpu-a": "10.9.0.2"})))
    )
    head, gpus = (
        plan_host(deployment, node, run_dir=tmp_path, model_folder=tmp_path, encodings_dir=tmp_path)
        for node in ("head", "gpu-a")
    )
    assert head.etcd_endpoints == gpus.etcd_endpoints == ["https://10.9.0.1:2379"]
    assert head.nats_url == gpus.nats_url == "tls://10.9.0.1:4222"
    etcd, nats = (next(p for p in head.processes if p.name == name).argv for name in ("etcd", "nats"))
    assert etcd[etcd.index("--cert-file") + 1] == str(certs / "head.pem") and "--client-cert-auth" in etcd
    assert "--peer-client-cert-auth" in etcd and "--listen-peer-urls" in etcd
    assert nats[nats.index("--tlscacert") + 1] == str(certs / "ca.pem") and "--tlsverify" in nats
    for node, plan in (("head", head), ("gpu-a", gpus)):
        assert plan.tls is not None and plan.tls.cert == certs / f"{node}.pem" and plan.tls.problems() == []
        env = plan.shared_env
        assert env["NATS_TLS_CLIENT_CERT_PATH"] == env["DYN_TCP_TLS_CERT_PATH"] == str(certs / f"{node}.pem")
        assert env["DYN_TCP_TLS_CLIENT_CA_CERT_PATH"] == env["DYN_TCP_TLS_CA_CERT_PATH"] == str(certs / "ca.pem")
        for process in plan.processes + plan.spare_workers:
            expected = {
                "ETCD_AUTH_CA": certs / "ca.pem",
                "ETCD_AUTH_CLIENT_CERT": certs / f"{node}.pem",
                "ETCD_AUTH_CLIENT_KEY": certs / f"{node}-key.pem",
            }
            dynamo_process = process.kind in ("frontend", "worker", "planner")
            assert process.env_from_files == (expected if dynamo_process else {}), process.name
            assert ("ETCD_AUTH_PASSWORD" in process.env_unset) == dynamo_process  # it would turn TLS off
        assert "PRIVATE KEY" not in plan.model_dump_json()  # the key's text is read as a process starts
    scrape = yaml.safe_load(next(f for f in head.files if f.path.name == "prometheus.yml").content)
    (etcd_job,) = [job for job in scrape["scrape_configs"] if job["job_name"] == "etcd"]
    assert etcd_job["scheme"] == "https" and etcd_job["tls_config"]["cert_file"] == str(certs / "head.pem")


def test_check_warns_and_serve_refuses_when_a_file_cannot_be_read(tmp_path: Path) -> None:
    files = write_certificates(tmp_path / "certs", {"local": "127.0.0.1"})
    graph = write_graph(
        tmp_path, infrastructure={**yaml.safe_load(write_graph(tmp_path).read_text())["infrastructure"], "tls": files}
    )
    code, out, err = dynamo("check", str(graph))
    assert code == 0 and f"  tls        mutual, trusting {tmp_path / 'certs' / 'ca.pem'}" in out and err == ""
    (tmp_path / "certs" / "local-key.pem").write_text("not a key")
    code, out, err = dynamo("check", str(graph))
    assert code == 0 and "warning: infrastructure.tls: " in err and "`dynamo serve` on node local refuses" in err
    (tmp_path / "certs" / "local-key.pem").unlink()
    served = run_dynamo("serve", str(graph), "--run-dir", str(tmp_path / "run"))
    assert served.returncode == 2, served.stdout + served.stderr
    assert (
        f"infrastructure.tls.key: {tmp_path / 'certs' / 'local-key.pem'} does not exist on this node" in served.stderr
    )
    assert "nothing was started" in served.stderr and not (tmp_path / "run" / "logs").exists()
