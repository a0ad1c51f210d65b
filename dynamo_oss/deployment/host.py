"""A node's share of a deployment: every process it runs, with its command line, environment, ports and GPUs.

`dynamo check` prints this plan and `dynamo serve` runs it; both see the same problems
(port clashes inside the graph, missing binaries) before anything starts. Rendering a plan
writes nothing: the files its command lines name are listed in `HostPlan.files`, and
`dynamo serve` writes them before it starts a process.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from dynamo_oss.assets.cache import resolve_cache_root
from dynamo_oss.assets.encodings import ENCODINGS_ENV
from dynamo_oss.catalog.addresses import WILDCARDS, interface_of
from dynamo_oss.catalog.names import PROMETHEUS_ENV, EngineName, PoolRole
from dynamo_oss.deployment.access import EtcdAccess, InfrastructureTls
from dynamo_oss.deployment.commands import (
    FRONTEND_ENV,
    frontend_config,
    gateway_args,
    gateway_config,
    worker_context,
)
from dynamo_oss.deployment.embedded import etcd_process, nats_process, prometheus_process, trace_backend_process
from dynamo_oss.deployment.model import Deployment, Pool
from dynamo_oss.deployment.placement import Node
from dynamo_oss.deployment.processes import LOOPBACK, NodeProcesses, PortUse, ProcessPlan
from dynamo_oss.deployment.scrape import scrape_config, worker_targets
from dynamo_oss.deployment.tracing import (
    DYNAMO_LOGGING,
    DYNAMO_LOGGING_FILE,
    dynamo_env,
    gateway_tracing,
    otlp_endpoint,
    service_env,
    tracing_of,
)
from dynamo_oss.engines import PlannedFile, SimulatedTiming, engine_for
from dynamo_oss.graph.errors import GraphError, Problem
from dynamo_oss.graph.schema import EmbeddedTracing
from dynamo_oss.gateway.config import NatsConnection, NatsTlsFiles


class PoolPlan(BaseModel):
    """A pool as the launcher resizes it: the sizes it may take and what one worker needs."""

    role: PoolRole
    engine: EngineName
    component: str  # Dynamo component its workers register under
    gpus_per_worker: int
    min_workers: int
    max_workers: int  # its worker slots: the autoscale maximum, or a fixed pool's size
    autoscaled: bool


class NodeShare(BaseModel):
    """A node of the graph as any node's launcher knows it: where it is and which workers it starts."""

    name: str
    address: str
    workers: dict[str, int]  # Dynamo component -> workers it starts with (an autoscaled pool: its minimum)


class HostPlan(BaseModel):
    graph: str
    node: str  # the node this plan runs on ("local" on one host)
    infrastructure_node: str | None = None  # the node to wait for, when another one runs the infrastructure
    namespace: str
    served_name: str
    endpoint: str  # the OpenAI base URL clients use: this node's, where it runs a frontend
    endpoint_node: str | None = None  # the node serving `endpoint`, when it is another one
    etcd_endpoints: list[str]
    nats_url: str
    tls: InfrastructureTls | None = None  # this node's files, when etcd and NATS speak mutual TLS
    api_keys: bool = False  # the endpoint requires API keys
    run_dir: Path
    shared_env: dict[str, str]  # what every Dynamo process gets; ProcessPlan.env includes it
    files: list[PlannedFile]  # written by `dynamo serve` before any process starts
    processes: list[ProcessPlan]  # what starts with the graph
    spare_workers: list[ProcessPlan] = []  # worker slots a pool grows into; GPUs are given at start
    workers_elsewhere: list[ProcessPlan] = []  # other nodes' workers, for the ports this node's Prometheus scrapes
    endpoints_elsewhere: list[NodeProcesses] = []  # other frontend nodes' frontends and gateways, likewise
    nodes: list[NodeShare] = []  # every node of a graph over several nodes; empty on one host
    pools: list[PoolPlan] = []
    gpus: int = 0  # GPUs of the host
    gpu_budget: int = 0  # most GPUs the pools may hold together (the planner's max_gpus, else the host's)
    worker_targets: Path | None = None  # Prometheus's file of worker targets, which the launcher keeps current
    ready_timeout_s: float  # the slowest engine's time to register
    prometheus_url: str | None = None  # where the graph's metrics can be queried
    traces_url: str | None = None  # the embedded trace backend's UI and API, where the graph's traces can be read
    planner: str | None = None  # what the planner sizes, and on what, for the operator
    launcher_metrics: PortUse | None = None  # where the launcher serves its own /metrics
    nats_monitoring: str | None = None  # an embedded nats-server's monitoring URL, which the launcher exports

    @property
    def etcd(self) -> EtcdAccess:
        return EtcdAccess(endpoint=self.etcd_endpoints[0], tls=self.tls)

    def workers(self, role: PoolRole | None = None) -> list[ProcessPlan]:
        return [p for p in self.processes if p.kind == "worker" and (role is None or p.role == role)]

    def pool(self, role: PoolRole) -> PoolPlan | None:
        return next((pool for pool in self.pools if pool.role == role), None)

    def worker_slots(self, role: PoolRole) -> list[ProcessPlan]:
        """Every worker the pool may run, in index order: those that start with the graph, then the spare ones."""
        return self.workers(role) + [p for p in self.spare_workers if p.role == role]

    def gpus_needed(self, engine: EngineName) -> int:
        return sum(len(p.gpus) for p in self.workers() if p.engine == engine)

    def roles_of(self, engine: EngineName) -> frozenset[PoolRole]:
        return frozenset(p.role for p in self.workers() if p.engine == engine and p.role is not None)


def plan_host(
    deployment: Deployment,
    node: str | None = None,
    *,
    run_dir: Path,
    model_folder: Path,
    encodings_dir: Path,
    timings: dict[PoolRole, SimulatedTiming] | None = None,
    mocker_responses: Path | None = None,
    planner: dict[str, Any] | None = None,
) -> HostPlan:
    """The share of `deployment` that `node` runs (default: the node holding the infrastructure, the
    only one of a single-host graph); GraphError if it cannot run here. `planner` is Dynamo's planner
    configuration for its autoscaled pools (dynamo_oss.planner.settings), None without one."""
    here, center = _nodes(deployment, node)
    on_center = here.name == center.name
    problems: list[Problem] = []
    infra: list[ProcessPlan] = []

    wanted = deployment.infrastructure
    tls = wanted.tls.for_node(here.name) if wanted.tls else None
    etcd_endpoints, nats_url = wanted.etcd_endpoints, wanted.nats_url or ""
    etcd, nats = wanted.embedded_etcd, wanted.embedded_nats  # where embedded ones listen
    if etcd is not None:
        etcd_endpoints = [f"{'https' if tls else 'http'}://{center.address}:{etcd.client_port}"]
        if on_center:
            infra.append(etcd_process(etcd, deployment.name, center.address, tls, run_dir, problems))
    if nats is not None:
        nats_url = f"{'tls' if tls else 'nats'}://{center.address}:{nats.port}"
        if on_center:
            infra.append(nats_process(nats, center.address, tls, run_dir, problems))

    shared_env = {
        "DYN_NAMESPACE": deployment.namespace,
        "DYN_DISCOVERY_BACKEND": "etcd",
        "ETCD_ENDPOINTS": ",".join(etcd_endpoints),
        "DYN_EVENT_PLANE": "nats",
        "NATS_SERVER": nats_url,
        # Dynamo's harmony parsers load the o200k ranks from here; without it tool calls come back empty.
        ENCODINGS_ENV: str(encodings_dir),
        "DYN_SDK_DISABLE_ANSI_LOGGING": "1",  # plain log lines: the supervisor prefixes them
        # Dynamo's own listeners bind the node's address (loopback on one host) whatever frontend.host
        # says, and advertise it to the other nodes; without these they bind the host's default-route
        # address (request plane, response streams) or 0.0.0.0 (system ports). The request plane's TCP
        # server on each worker; the response-stream server of the frontend, workers and planner; each
        # worker's system port. The event plane stays NATS: ZMQ publishers would bind 0.0.0.0.
        "DYN_REQUEST_PLANE": "tcp",
        "DYN_TCP_RPC_HOST": here.address,
        "DYN_TCP_RESPONSE_STREAM_HOST": here.address,
        "DYN_SYSTEM_HOST": here.address,
        **(tls.client_env() if tls else {}),
    }
    tracing, traced_files = tracing_of(deployment), []
    if tracing is not None:
        logging = PlannedFile(
            path=run_dir / DYNAMO_LOGGING_FILE, purpose="Dynamo's log filters", content=DYNAMO_LOGGING.encode()
        )
        shared_env.update(dynamo_env(tracing, otlp_endpoint(tracing, center.address or LOOPBACK), logging.path))
        traced_files.append(logging)
    workers, spare, files = _worker_processes(
        deployment, here, model_folder, shared_env, timings or {}, mocker_responses, problems
    )
    files += traced_files
    frontend_nodes = deployment.placement.frontend_nodes
    frontends = []
    if here.name in frontend_nodes:
        frontends = _frontend_processes(deployment, here, shared_env, model_folder, nats_url, tls, run_dir, files)
        problems += _cores_problems(deployment) + _key_file_problems(deployment)
    elsewhere: list[ProcessPlan] = []
    endpoints: list[NodeProcesses] = []
    if not on_center:  # its frontends and workers only; the infrastructure node scrapes them
        processes = [*frontends, *workers]
        launcher_metrics, prometheus_url, worker_targets = None, _prometheus_url(deployment), None
    else:
        processes = [*infra, *frontends, *workers]
        processes += _planner_processes(deployment, planner, shared_env, run_dir, _prometheus_url(deployment), files)
        for other in deployment.placement.nodes:
            if other.name != here.name:
                share = _share_elsewhere(deployment, other, shared_env, model_folder, nats_url, run_dir, problems)
                elsewhere += [process for process in share.processes if process.kind == "worker"]
                endpoint = [process for process in share.processes if process.kind in ("frontend", "gateway")]
                endpoints += [share.model_copy(update={"processes": endpoint})] if endpoint else []
        launcher_metrics, prometheus_url, worker_targets = _observe(
            deployment, here, processes, elsewhere, endpoints, files, run_dir, tls, problems
        )
    if tls:  # Dynamo's processes reach etcd and NATS; the gateway and the services themselves do not
        processes, spare = ([_with_tls(p, tls) for p in group] for group in (processes, spare))
    spare_ports = [use for process in spare for use in process.ports]
    problems += _port_clashes(processes, [launcher_metrics] if launcher_metrics else [], spare_ports)
    if problems:
        raise GraphError(str(deployment.source), problems)
    serves = here.name in frontend_nodes  # else clients use the first frontend node's endpoint
    serving = here if serves else deployment.placement.node(frontend_nodes[0])
    client_host = _endpoint_host(deployment, serving)
    if client_host in WILDCARDS:
        client_host = LOOPBACK if serves else serving.address or LOOPBACK
    return HostPlan(
        graph=deployment.name,
        node=here.name,
        infrastructure_node=None if on_center else center.name,
        namespace=deployment.namespace,
        served_name=deployment.model.served_name,
        endpoint=f"http://{client_host}:{deployment.frontend.port}/v1",
        endpoint_node=None if serves else serving.name,
        etcd_endpoints=etcd_endpoints,
        nats_url=nats_url,
        tls=tls,
        api_keys=serves and deployment.gateway is not None and deployment.gateway.requires_keys,
        run_dir=run_dir,
        shared_env=shared_env,
        files=files,
        processes=processes,
        spare_workers=spare,
        workers_elsewhere=elsewhere,
        endpoints_elsewhere=endpoints,
        nodes=_node_shares(deployment) if deployment.placement.nodes[1:] else [],
        pools=[_pool_plan(pool) for pool in deployment.pools if deployment.placement.slots_on(here.name, pool.role)],
        gpus=here.gpus,
        gpu_budget=deployment.planner.max_gpus if deployment.planner else deployment.gpus,
        worker_targets=worker_targets,
        ready_timeout_s=max(engine_for(name).ready_timeout_s for name in deployment.engines),
        prometheus_url=prometheus_url,
        traces_url=_traces_url(deployment),
        planner=_planner_summary(deployment) if planner else None,
        launcher_metrics=launcher_metrics,
        nats_monitoring=f"http://{center.address}:{nats.monitoring_port}" if on_center and nats is not None else None,
    )


def _node_shares(deployment: Deployment) -> list[NodeShare]:
    placement, components = deployment.placement, {pool.role: pool.component for pool in deployment.pools}
    shares = []
    for node in placement.nodes:
        workers: dict[str, int] = {}
        for slot in placement.slots_on(node.name):
            if not slot.spare:
                workers[components[slot.role]] = workers.get(components[slot.role], 0) + 1
        shares.append(NodeShare(name=node.name, address=node.address or "", workers=workers))
    return shares


def _nodes(deployment: Deployment, name: str | None) -> tuple[Node, Node]:
    """The node to plan (default: the one running the infrastructure) and the one running the infrastructure."""
    placement = deployment.placement
    names = [node.name for node in placement.nodes]
    if name is not None and name not in names:
        raise GraphError(
            str(deployment.source),
            [Problem(path="--node", message=f"{name!r} is not one of the graph's nodes: {', '.join(names)}")],
        )
    here = placement.node(name or placement.infrastructure_node)
    center = placement.node(placement.infrastructure_node)
    if here.address is None or center.address is None:
        raise GraphError(
            str(deployment.source),
            [
                Problem(
                    path="hardware.nodes",
                    message="is a count: a cluster "
                    "whose hosts Kubernetes picks, which `dynamo deploy` renders. To serve on bare metal, "
                    "list the nodes with their addresses: nodes: [{name, address, gpus}, ...]",
                )
            ],
        )
    problems = []
    for pool in deployment.pools:
        slots = [slot for slot in placement.slots if slot.role == pool.role]
        elsewhere = next((slot for slot in slots if slot.node != center.name), None)
        if pool.autoscale and elsewhere:
            problems.append(
                Problem(
                    path=f"pools.{pool.role}.autoscale",
                    message=f"slot {elsewhere.name} is on node "
                    f"{elsewhere.node}, but on bare metal the planner resizes pools only on its own "
                    f"node ({center.name}): pin the pool there (nodes: [{center.name}]) or give it "
                    "fixed workers",
                )
            )
    if problems:
        raise GraphError(str(deployment.source), problems)
    return here, center


def _observe(
    deployment: Deployment,
    here: Node,
    processes: list[ProcessPlan],
    elsewhere: list[ProcessPlan],
    endpoints: list[NodeProcesses],
    files: list[PlannedFile],
    run_dir: Path,
    tls: InfrastructureTls | None,
    problems: list[Problem],
) -> tuple[PortUse | None, str | None, Path | None]:
    """The launcher's metrics port, the graph's Prometheus URL and its file of worker targets (this
    node's and those `elsewhere`, on other nodes); an embedded Prometheus joins `processes`, its scrape
    config and worker targets join `files`. It scrapes the other frontend nodes' `endpoints` too."""
    observability = deployment.observability
    if observability is None:
        return None, None, None
    launcher = PortUse(field="observability.launcher_port", host=_center(deployment), port=observability.launcher_port)
    if isinstance(observability.tracing, EmbeddedTracing):
        processes.append(trace_backend_process(observability.tracing, _center(deployment), run_dir, problems))
    prometheus = observability.embedded_prometheus  # where an embedded one listens
    if prometheus is None:
        return launcher, _prometheus_url(deployment), None
    targets = PlannedFile(
        path=run_dir / "prometheus-workers.json",
        purpose="Prometheus's worker targets, rewritten as pools are resized",
        content=worker_targets([p for p in processes if p.kind == "worker"] + elsewhere, deployment.namespace).encode(),
    )
    scrape = scrape_config(
        processes,
        launcher,
        deployment.namespace,
        prometheus.scrape_interval_s,
        targets.path,
        _planner_namespace(deployment),
        tls,
        alert_rules_file(run_dir),
        node=here.name if deployment.placement.nodes[1:] else None,
        elsewhere=endpoints,
    )
    config = PlannedFile(path=run_dir / "prometheus.yml", purpose="Prometheus scrape config", content=scrape.encode())
    files += [config, targets]
    traced = observability.tracing is not None
    processes.append(prometheus_process(prometheus, config.path, _center(deployment), run_dir, problems, traced))
    return launcher, _prometheus_url(deployment), targets.path


def alert_rules_file(run_dir: Path) -> Path:
    """Where the embedded Prometheus reads the graph's alert rules, which the launcher writes."""
    return run_dir / "alert-rules.yml"


def _planner_summary(deployment: Deployment) -> str:
    planner = deployment.planner
    assert planner is not None
    pools = " and ".join(f"{p.role} {p.autoscale.min}-{p.autoscale.max}" for p in deployment.pools if p.autoscale)
    on = {
        "sla": f"for TTFT p90 <= {planner.ttft_ms:g} ms and ITL <= {planner.itl_ms:g} ms",
        "load": "on load thresholds",
    }[planner.mode]
    return f"{planner.mode} mode: sizes {pools} {on}"


def _planner_namespace(deployment: Deployment) -> str:
    """Where Dynamo's planner counts the workers and reads their load, as their engine registers them;
    the frontend's metrics carry it too, as the planner's traffic queries look for it."""
    pools = [pool for pool in deployment.pools if pool.autoscale] or deployment.pools
    return engine_for(pools[0].engine).planner_namespace(deployment.namespace)


def _center(deployment: Deployment) -> str:
    """The address of the node running the infrastructure, the frontend and the planner."""
    address = deployment.placement.node(deployment.placement.infrastructure_node).address
    assert address is not None, "_nodes refuses a graph without addresses"
    return address


def _prometheus_url(deployment: Deployment) -> str | None:
    """The graph's Prometheus: the embedded one on loopback, an external one's URL, or none."""
    observability = deployment.observability
    if observability is None:
        return None
    if observability.embedded_prometheus is not None:
        return f"http://{_center(deployment)}:{observability.embedded_prometheus.port}"
    return observability.prometheus_url


def _traces_url(deployment: Deployment) -> str | None:
    """The embedded trace backend's UI and API (an external OTLP endpoint has neither), or none."""
    tracing = tracing_of(deployment)
    return f"http://{_center(deployment)}:{tracing.port}" if isinstance(tracing, EmbeddedTracing) else None


def _share_elsewhere(
    deployment: Deployment,
    node: Node,
    shared_env: dict[str, str],
    model_folder: Path,
    nats_url: str,
    run_dir: Path,
    problems: list[Problem],
) -> NodeProcesses:
    """Another node's frontends, gateway and workers, as this node's Prometheus scrapes them; their ports
    clashing on that node join `problems`, so `dynamo check` of the graph names them before any node starts."""
    frontends = []
    if node.name in deployment.placement.frontend_nodes:
        frontends = _frontend_processes(deployment, node, shared_env, model_folder, nats_url, None, run_dir, [])
    workers, spare, _ = _worker_processes(deployment, node, model_folder, shared_env, {}, None, [])
    spare_ports = [use for process in spare for use in process.ports]
    problems += _port_clashes([*frontends, *workers], [], spare_ports, node.name)
    return NodeProcesses(node=node.name, address=node.address or "", processes=[*frontends, *workers])


def _endpoint_host(deployment: Deployment, node: Node) -> str:
    """What the endpoint binds on a frontend node: frontend.host, where on a graph of several nodes a node's
    address stands for each frontend node's own (the schema refuses any other with several of them)."""
    host, placement = deployment.frontend.host, deployment.placement
    if placement.nodes[1:] and node.address and host in {other.address for other in placement.nodes}:
        return node.address
    return host


def _frontend_processes(
    deployment: Deployment,
    node: Node,
    shared_env: dict[str, str],
    model_folder: Path,
    nats_url: str,
    tls: InfrastructureTls | None,
    run_dir: Path,
    files: list[PlannedFile],
) -> list[ProcessPlan]:
    """`node`'s Dynamo frontends, on `port`, or on loopback behind the request gateway on `port` (the first
    on dynamo_port, the others on the ports after it): what they do
    comes from the deployment's frontend component, where they listen from the graph's frontend section.
    The gateway's /metrics binds loopback on the infrastructure node, beside the graph's Prometheus, and
    the node's address on any other, where that Prometheus reaches it (as a worker's system port).
    The gateway's configuration joins `files`; it stores responses in the graph's NATS at `nats_url`, and
    shares its limits' counts there with the other frontend nodes' gateways when there are any. It reads
    the URL from an owner-only file that joins `files` too (an external NATS's URL may hold a password,
    and a command line is anyone's to read)."""
    listen = deployment.frontend
    host = _endpoint_host(deployment, node)
    dynamo_host, dynamo_port = host, listen.port
    dynamo_field = "frontend.port"
    if deployment.gateway:
        dynamo_host, dynamo_port = LOOPBACK, listen.dynamo_port
        dynamo_field = "frontend.dynamo_port"
    replicas = deployment.frontend.replicas
    processes = []
    for index in range(replicas):
        port = dynamo_port + index
        frontend = frontend_config(deployment, (dynamo_host, port), deployment.namespace)
        processes.append(
            ProcessPlan(
                name="frontend" if replicas == 1 else f"frontend-{index}",
                kind="frontend",
                argv=[sys.executable, *frontend.args()],
                env={**shared_env, **FRONTEND_ENV, **service_env(deployment, "dynamo-frontend")},
                ports=[PortUse(field=dynamo_field + (f" + {index}" if index else ""), host=dynamo_host, port=port)],
            )
        )
    if deployment.gateway:
        ports = [PortUse(field="frontend.port", host=host, port=listen.port)]
        if deployment.observability:  # its /metrics, for the graph's Prometheus
            metrics_host = LOOPBACK if node.name == deployment.placement.infrastructure_node else node.address
            ports.append(
                PortUse(
                    field="observability.gateway_port",
                    host=metrics_host or LOOPBACK,
                    port=deployment.observability.gateway_port,
                )
            )
        config = gateway_config(
            deployment,
            (host, listen.port),
            [f"http://{LOOPBACK}:{dynamo_port + index}" for index in range(replicas)],
            state_dir=run_dir / "gateway",
            key_file=reasoning_key_file(deployment),
            make_key=deployment.gateway.key_file is None,  # the host's cache's own; one the graph names is copied
            api_keys_file=deployment.gateway.keys_file,
            model_folder=model_folder,
            metrics=(ports[1].host, ports[1].port) if ports[1:] else None,
            nats=_nats_connection(nats_url, tls, run_dir, files),
            several_places=len(deployment.placement.frontend_nodes) > 1,
            tracing=gateway_tracing(deployment, _center(deployment)),
        )
        config_file = PlannedFile(
            path=run_dir / "gateway.json",
            purpose="the gateway's configuration",
            content=config.model_dump_json(indent=1, exclude_none=True).encode(),
        )
        files.append(config_file)
        # The gateway renders harmony itself (the Responses API, prompt counts): the same o200k ranks,
        # or openai_harmony downloads them, and offline it fails the request.
        env = {ENCODINGS_ENV: shared_env[ENCODINGS_ENV]}
        argv = [sys.executable, *gateway_args(config_file.path)]
        processes.append(ProcessPlan(name="gateway", kind="gateway", argv=argv, env=env, ports=ports))
    return processes


def _cores_problems(deployment: Deployment) -> list[Problem]:
    """More gateway processes or frontends than this host's cores only take turns on them: refused when
    the graph asks for them (the endpoint's sizing caps what it picks at the cores)."""
    cores = os.cpu_count() or 1
    asked = [("frontend.replicas", deployment.frontend.replicas, deployment.frontend.replicas_sized)]
    if deployment.gateway:
        asked.append(("gateway.processes", deployment.gateway.processes, deployment.gateway.processes_sized))
    return [
        Problem(path=field, message=f"is {count}, more than this host's {cores} cores: give it at most {cores}")
        for field, count, sized in asked
        if count > cores and not sized
    ]


def _nats_connection(
    nats_url: str, tls: InfrastructureTls | None, run_dir: Path, files: list[PlannedFile]
) -> NatsConnection:
    """How the gateway reaches the graph's NATS: its URL in a file of the run folder, with the node's
    certificate when NATS asks for one."""
    url_file = PlannedFile(
        path=run_dir / "nats-url",
        purpose="the graph's NATS URL, for the gateway (owner-only: it may hold credentials)",
        content=nats_url.encode(),
        private=True,
    )
    files.append(url_file)
    certificates = NatsTlsFiles(ca=tls.ca, cert=tls.cert, key=tls.key) if tls else None
    return NatsConnection(url_file=url_file.path, tls=certificates)


def _key_file_problems(deployment: Deployment) -> list[Problem]:
    """A graph key the graph names must be on every node that runs its gateway: that gateway never makes
    one of its own, which no other node's would share."""
    gateway = deployment.gateway
    if gateway is None or gateway.key_file is None or gateway.key_file.is_file():
        return []
    return [
        Problem(
            path="gateway.key_file",
            message=f"{gateway.key_file} is not on this node: copy the graph's key file (the same one on every "
            "frontend node) here, owner-only",
        )
    ]


def reasoning_key_file(deployment: Deployment) -> Path:
    """The graph's key (gateway/graph_key.py): `gateway.key_file`, the one copied to every frontend node,
    or else one per graph name, kept in this host's cache across runs (the gateway makes it on first
    start), so what one run sealed the next opens."""
    gateway = deployment.gateway
    if gateway is not None and gateway.key_file is not None:
        return gateway.key_file
    return resolve_cache_root() / "keys" / f"{deployment.name}.reasoning.key"


def _worker_processes(
    deployment: Deployment,
    node: Node,
    model_folder: Path,
    shared_env: dict[str, str],
    timings: dict[PoolRole, SimulatedTiming],
    mocker_responses: Path | None,
    problems: list[Problem],
) -> tuple[list[ProcessPlan], list[ProcessPlan], list[PlannedFile]]:
    """The worker slots the node leads, as placed: those that start with the graph on their GPUs (a
    worker over several nodes launched as its engine spans them), and the spare slots an autoscaled
    pool grows into, GPUs left to the launcher; the files their command lines name."""
    model = deployment.model
    processes, spare, files = [], [], []
    for pool in deployment.pools:
        slots = deployment.placement.slots_on(node.name, pool.role)
        if not slots:
            continue
        engine = engine_for(pool.engine)
        context = worker_context(
            deployment,
            pool,
            model_path=str(model.checkout) if model.checkout else model.served_name,
            model_folder=model_folder,
            engine_args_file=pool.engine_args,
            namespace=deployment.namespace,
            response_trace=mocker_responses,
            timing=timings.get(pool.role),
            network_interface=interface_of(node.address or "") if deployment.placement.nodes[1:] else None,
        )
        files += engine.worker_files(context)
        for slot in slots:
            port = pool.system_port + slot.index
            env = {**shared_env, **engine.worker_env(context), "DYN_SYSTEM_PORT": str(port), **gpu_env(slot.gpus)}
            env.update(service_env(deployment, f"dynamo-{pool.role}"))
            argv = [sys.executable, *engine.worker_argv(context)]
            if len(slot.nodes) > 1:
                hosts = [(deployment.placement.node(name).address or "", len(slot.gpus)) for name in slot.nodes]
                across = engine.across_nodes(argv, hosts, sorted(env))
                if across is None:
                    problems.append(
                        Problem(
                            path=f"pools.{pool.role}.gpus_per_worker",
                            message=f"worker {slot.name} "
                            f"spans nodes {', '.join(slot.nodes)}, which engine {engine.name} cannot "
                            "do: give it at most one node's GPUs",
                        )
                    )
                    continue
                argv = across
            (spare if slot.spare else processes).append(
                ProcessPlan(
                    name=f"{pool.role}-{slot.index}",
                    kind="worker",
                    role=pool.role,
                    engine=engine.name,
                    argv=argv,
                    env=env,
                    ports=[
                        PortUse(
                            field=f"pools.{pool.role}.system_port (worker {slot.index})", host=node.address, port=port
                        )
                    ],
                    gpus=slot.gpus,
                )
            )
    return processes, spare, files


def _planner_processes(
    deployment: Deployment,
    settings: dict[str, Any] | None,
    shared_env: dict[str, str],
    run_dir: Path,
    prometheus_url: str | None,
    files: list[PlannedFile],
) -> list[ProcessPlan]:
    """Dynamo's planner with its virtual connector, and the actuator that hands its decisions to
    the launcher."""
    planner = deployment.planner
    if settings is None or planner is None:
        return []
    config = {
        "environment": "virtual",
        **settings,
        # No listeners of its own (control API; live dashboard and metrics, which bind 0.0.0.0), no HTML reports.
        "control_api_port": 0,
        "live_dashboard_port": 0,
        "metric_reporting_prometheus_port": 0,  # else PLANNER_PROMETHEUS_PORT from the caller's environment
        "report_interval_hours": None,
        "report_output_dir": str(run_dir / "planner-reports"),
    }
    config_file = PlannedFile(
        path=run_dir / "planner.json",
        purpose="Dynamo planner's configuration",
        content=json.dumps(config, indent=2).encode(),
    )
    files.append(config_file)
    # It counts workers and reads their load where the engine registers them.
    env = {**shared_env, "DYN_NAMESPACE": _planner_namespace(deployment), **service_env(deployment, "dynamo-planner")}
    planner_env = {
        **env,
        "DYN_LOG": "warn,base=info",  # one summary line per look at the load, not six
        **({PROMETHEUS_ENV: prometheus_url} if prometheus_url else {}),
    }
    metrics = PortUse(field="planner.metrics_port", host=_center(deployment), port=planner.metrics_port)
    argv = [
        sys.executable,
        "-m",
        "dynamo_oss.planner",
        "--config",
        str(config_file.path),
        "--metrics",
        f"{metrics.host}:{metrics.port}",
        "--look",
        str(run_dir / "planner-look.json"),
    ]
    return [
        ProcessPlan(name="planner", kind="planner", argv=argv, env=planner_env, ports=[metrics]),
        ProcessPlan(
            name="actuator",
            kind="planner",
            argv=[
                sys.executable,
                "-m",
                "dynamo_oss.planner.actuator",
                str(run_dir),
                "--pools",
                ",".join(planner.pools),
            ],
            env=env,
        ),
    ]


def _with_tls(process: ProcessPlan, tls: InfrastructureTls) -> ProcessPlan:
    """A Dynamo process (frontend, worker, planner) with the etcd client's TLS files, read as it starts."""
    if process.kind not in ("frontend", "worker", "planner"):
        return process
    return process.model_copy(
        update={"env_from_files": tls.client_env_from_files(), "env_unset": tls.client_env_unset()}
    )


def gpu_env(gpus: list[int]) -> dict[str, str]:
    """What tells a worker which GPUs are its own."""
    return {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))} if gpus else {}


def _pool_plan(pool: Pool) -> PoolPlan:
    return PoolPlan(
        role=pool.role,
        engine=pool.engine,
        component=pool.component,
        gpus_per_worker=pool.gpus_per_worker,
        min_workers=pool.autoscale.min if pool.autoscale else 1,
        max_workers=pool.autoscale.max if pool.autoscale else pool.workers,
        autoscaled=pool.autoscale is not None,
    )


def _port_clashes(
    processes: list[ProcessPlan], others: list[PortUse], spare: list[PortUse], node: str | None = None
) -> list[Problem]:
    """Two listeners of one node on one port; `node` names the node when it is not this one."""
    uses = [use for process in processes for use in process.ports] + others + spare
    counts = Counter(use.port for use in uses)
    problems = []
    on = f" on node {node}" if node else ""
    for port, count in counts.items():
        if count > 1:
            fields = [use.field for use in uses if use.port == port]
            problems.append(
                Problem(path=fields[-1], message=f"port {port} is also used by {', '.join(fields[:-1])}{on}")
            )
    return problems
